"""A term of leadership, and the fenced transaction through which a leader writes.

A ``Leadership`` is handed to the winner of an election. It carries the epoch of the term
(the version of the slot's epoch znode after the winner bumped it) and builds fenced
transactions: ZooKeeper multi-ops that also check that epoch, so a deposed leader, even one
that was frozen and woke up believing it still leads, has every write refused atomically::

    leadership = coordinator.nominate("scheduler", "host-a:6627")
    with leadership.transaction() as tx:
        tx.create("/app/assignments/p1", b"supervisor-3")
        tx.set_data("/app/state", b"...")
    # raises LeadershipLostError, writing nothing, if another leader was elected since
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)

from stratus.api.clock import Clock
from stratus.coordination.errors import (
    CommitOutcomeUnknownError,
    LeadershipLostError,
    TransactionFailedError,
)
from stratus.coordination.records import FencedWrite

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Leadership:
    """One term of leadership of one slot of a group; ``epoch`` identifies the term."""

    group: str
    member_id: str
    slot: int
    epoch: int
    epoch_path: str
    slot_path: str
    _client: KazooClient = field(repr=False)
    _holds: Callable[[Leadership], bool] = field(repr=False)
    _lease_end: Callable[[], float] = field(repr=False)
    _clock: Clock = field(default=time.monotonic, repr=False)  # the lease end's clock
    _on_refused: Callable[[], None] = field(default=lambda: None, repr=False, compare=False)
    _on_committed: Callable[[FencedWrite], None] | None = field(
        default=None, repr=False, compare=False
    )
    found_free_at: float | None = field(default=None, compare=False)
    """When (the session's clock) this candidate saw the slot free, just before the claim
    that won the term: how long a failover took from there is measured from it. None for
    a term adopted or re-found after a lost reply."""

    @property
    def is_leader(self) -> bool:
        """True while this term holds.

        False at once on suspension, session loss or resignation, and also as soon as this
        process has not heard from ZooKeeper for two thirds of the session timeout (a paused
        process), before ZooKeeper itself can say that the session is gone.
        """
        return self._holds(self) and self._clock() < self._lease_end()

    def transaction(self) -> FencedTransaction:
        """A transaction that commits only if this term's epoch is still the current one."""
        return FencedTransaction(self)

    def valid_until(self) -> float:
        """The time (of the session's clock) until which this term is guaranteed to hold.

        ZooKeeper heard from this session no earlier than its last lease renewal, so nobody
        else can be elected for this slot before that renewal plus the session timeout; the
        lease ends well before that. Raises ``LeadershipLostError`` if the term is not held now.
        """
        self._ensure_held()
        return self._lease_end()

    def _ensure_held(self) -> None:
        if not self.is_leader:
            raise self._lost("this term is over or suspended")

    def _lost(self, why: str) -> LeadershipLostError:
        return LeadershipLostError(
            f"{self.member_id} no longer leads group {self.group!r} "
            f"(slot {self.slot}, epoch {self.epoch}): {why}"
        )


class FencedTransaction:
    """ZooKeeper writes committed as one transaction with a check of the leader's epoch."""

    def __init__(self, leadership: Leadership) -> None:
        self._leadership = leadership
        self._ops: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
    ) -> FencedTransaction:
        self._ops.append(("create", (path, value), {"ephemeral": ephemeral, "sequence": sequence}))
        return self

    def set_data(self, path: str, value: bytes, version: int = -1) -> FencedTransaction:
        self._ops.append(("set_data", (path, value, version), {}))
        return self

    def delete(self, path: str, version: int = -1) -> FencedTransaction:
        self._ops.append(("delete", (path, version), {}))
        return self

    def check(self, path: str, version: int) -> FencedTransaction:
        self._ops.append(("check", (path, version), {}))
        return self

    def commit(self) -> list[Any]:
        """Commit every operation, or none; returns each operation's result in order."""
        leadership = self._leadership
        leadership._ensure_held()
        began_wall, began_mono = time.time(), time.monotonic()
        tx = leadership._client.transaction()
        tx.check(leadership.epoch_path, leadership.epoch)
        for name, args, kwargs in self._ops:
            getattr(tx, name)(*args, **kwargs)
        try:
            results: list[Any] = tx.commit()
        except (SessionExpiredError, ConnectionClosedError) as exc:
            raise leadership._lost(f"session gone ({type(exc).__name__})") from None
        except (ConnectionLoss, OperationTimeoutError) as exc:
            raise CommitOutcomeUnknownError(
                f"connection lost while committing for group {leadership.group!r} "
                f"(epoch {leadership.epoch}): the transaction may or may not be applied; "
                f"read back before retrying ({type(exc).__name__})"
            ) from None
        fence, rest = results[0], results[1:]
        if isinstance(fence, (BadVersionError, NoNodeError)):
            leadership._on_refused()
            raise leadership._lost("the epoch has moved: another leader was elected since")
        for (name, args, _), result in zip(self._ops, rest, strict=True):
            if isinstance(result, Exception) and not isinstance(result, RolledBackError):
                raise TransactionFailedError(
                    f"fenced transaction refused: {name} {args[0]!r} failed with "
                    f"{type(result).__name__}; nothing was written"
                )
        if leadership._on_committed is not None:
            leadership._on_committed(
                FencedWrite(
                    group=leadership.group,
                    member_id=leadership.member_id,
                    epoch=leadership.epoch,
                    ops=tuple((name, str(args[0])) for name, args, _ in self._ops),
                    began_wall=began_wall,
                    began_mono=began_mono,
                )
            )
        return rest

    def __enter__(self) -> FencedTransaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
