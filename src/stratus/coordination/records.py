"""Records and enums that the election library hands to its users."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from enum import Enum
from typing import Any


class RevokeReason(Enum):
    """Why a leader stopped leading."""

    SUSPENDED = "suspended"  # connection to ZooKeeper lost; may resume if the session survives
    SESSION_LOST = "session_lost"  # the ZooKeeper session expired; the term is over
    RESIGNED = "resigned"  # unnominate() or close()
    DEPOSED = "deposed"  # the slot was found held by someone else (e.g. after a resume)


class ErrorKind(Enum):
    """What ``subscribe_errors`` callbacks are told about."""

    CONNECTION_SUSPENDED = "connection_suspended"
    SESSION_EXPIRED = "session_expired"
    CONNECTION_RESTORED = "connection_restored"


@dataclass(frozen=True)
class FencedWrite:
    """A fenced transaction that ZooKeeper applied: the term's epoch and what it wrote.

    ``began_wall`` and ``began_mono`` (``time.time()``, ``time.monotonic()``) are taken just
    before the commit was sent: ZooKeeper applied it between then and the moment a listener
    hears of it, which is what a history needs to order it against other processes' events."""

    group: str
    member_id: str
    epoch: int
    ops: tuple[tuple[str, str], ...]  # (create | set_data | delete | check, path)
    began_wall: float
    began_mono: float


@dataclass(frozen=True)
class Leader:
    """One leader of a group: who, in which slot, since which epoch."""

    member_id: str
    slot: int
    epoch: int
    data: bytes = b""


@dataclass(frozen=True)
class LeaderChange:
    """One change of a group's leadership, as seen by ``subscribe_leader_changes``.

    ``member_id`` is the new leader of ``slot``, or ``None`` when the slot fell vacant.
    Every new term is reported, in the order the terms were won; ``epoch`` grows by one per term
    of a slot, so a gap would show.
    """

    group: str
    slot: int
    member_id: str | None
    epoch: int


@dataclass(frozen=True)
class CoordinationEvent:
    """A connection problem (or its end) affecting a group, for ``subscribe_errors``."""

    group: str
    kind: ErrorKind
    detail: str


@dataclass(frozen=True)
class SlotRecord:
    """What a leader writes into its slot node and its term entry."""

    member_id: str
    epoch: int
    slot: int
    candidate: str = ""
    data: bytes = b""

    def encode(self) -> bytes:
        return json.dumps(
            {
                "member": self.member_id,
                "epoch": self.epoch,
                "slot": self.slot,
                "candidate": self.candidate,
                "data": base64.b64encode(self.data).decode("ascii"),
            }
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> SlotRecord:
        doc: dict[str, Any] = json.loads(raw.decode())
        return cls(
            member_id=str(doc["member"]),
            epoch=int(doc["epoch"]),
            slot=int(doc["slot"]),
            candidate=str(doc.get("candidate", "")),
            data=base64.b64decode(doc.get("data", "")),
        )

    def as_leader(self) -> Leader:
        return Leader(self.member_id, self.slot, self.epoch, self.data)


@dataclass(frozen=True)
class CandidateRecord:
    """What a candidate writes into its queue node."""

    member_id: str
    data: bytes = b""

    def encode(self) -> bytes:
        return json.dumps(
            {"member": self.member_id, "data": base64.b64encode(self.data).decode("ascii")}
        ).encode()

    @classmethod
    def decode(cls, raw: bytes) -> CandidateRecord:
        doc: dict[str, Any] = json.loads(raw.decode())
        return cls(str(doc["member"]), base64.b64decode(doc.get("data", "")))
