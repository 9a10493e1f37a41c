"""One contender process of the randomized stress test (``test_stress.py``).

It runs a ``Coordinator``, nominates itself in every group it is given, and while it leads a
group it keeps making fenced writes through the term it was handed in ``on_elected``: each
write creates a sequential node ``<data>/<group>/<slot>/w-`` and sets ``.../owner``, both
carrying ``{member, group, slot, epoch, id}``, so every accepted write is in ZooKeeper with its
epoch and creation zxid. It also tries, now and then, to write with a term it no longer
believes it holds (a leader that did not notice its demotion): half of those attempts go through
the library as it is (refused before anything is sent), the other half through a forged copy of
the term whose local guard always passes, so that only ZooKeeper's epoch check stands between
the stale term and the data.

Everything it sees goes to its log file, one JSON object a line, flushed at once (a SIGKILL
loses at most the line being written). ``t`` is ``time.monotonic()``, a clock that every
process of the machine shares, so the test can line up the logs of all contenders::

    {"ev": "start", "member": "c3", "pid": 123, "t": ...}
    {"ev": "session", "id": 7205..., "pw": "9f..", "t": ...}      # at start and after expiry
    {"ev": "elected"|"revoked", "g": "duo", "slot": 1, "epoch": 4, "reason": "..", "t": ...}
    {"ev": "intent", "id": "c3-17", "g", "slot", "epoch", "believed": true, "t0", "t1",
     "mode": "leader"|"stale"|"forged"}
    {"ev": "outcome", "id": "c3-17", "result": "ok"|"fence"|"local"|"session"|"unknown"|..}
    {"ev": "exit", "t": ...}

``believed`` is what ``leadership.is_leader`` answered between ``t0`` and ``t1``: the test's
oracle checks those beliefs against every other contender's election.

Usage: ``python stress_contender.py HOSTS ROOT DATA MEMBER LOG SESSION_TIMEOUT GROUP:N...``;
SIGTERM resigns every candidacy, closes the session and exits.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from stratus.coordination import (
    CommitOutcomeUnknownError,
    Coordinator,
    Leadership,
    LeadershipLostError,
    RevokeReason,
    TransactionFailedError,
)

WRITE_PAUSE_SECS = (0.015, 0.05)  # between two writes of one group, drawn uniformly
STALE_WRITE_CHANCE = 0.2  # chance per round that a non-leader still tries its last term
SESSION_POLL_SECS = 0.05


class EventLog:
    """Append-only JSON-lines log shared by the threads of this process."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, ev: str, **fields: Any) -> None:
        fields.setdefault("t", time.monotonic())
        line = json.dumps({"ev": ev, **fields}, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()


def classify(exc: Exception) -> str:
    """The outcome name of a refused or failed commit."""
    if isinstance(exc, LeadershipLostError):
        text = str(exc)
        if "epoch has moved" in text:
            return "fence"  # refused by ZooKeeper itself: the epoch check failed
        if "session gone" in text:
            return "session"
        return "local"  # refused before anything was sent: is_leader was false
    if isinstance(exc, CommitOutcomeUnknownError):
        return "unknown"
    if isinstance(exc, TransactionFailedError):
        return "failed"
    return f"error:{type(exc).__name__}"


def forged(term: Leadership) -> Leadership:
    """A copy of ``term`` that always believes it leads: only the epoch check can refuse it."""
    return dataclasses.replace(term, _holds=lambda _term: True, _lease_end=lambda: math.inf)


class Contender:
    def __init__(self, coordinator: Coordinator, data: str, member: str, log: EventLog) -> None:
        self.coordinator = coordinator
        self.data = data
        self.member = member
        self.log = log
        self.stopping = threading.Event()
        self._terms: dict[str, Leadership] = {}
        self._writes = 0
        self._lock = threading.Lock()

    def elected(self, term: Leadership) -> None:
        self._terms[term.group] = term
        self.log.write("elected", g=term.group, slot=term.slot, epoch=term.epoch)

    def revoked(self, term: Leadership, reason: RevokeReason) -> None:
        self.log.write(
            "revoked", g=term.group, slot=term.slot, epoch=term.epoch, reason=reason.value
        )

    def _next_id(self) -> str:
        with self._lock:
            self._writes += 1
            return f"{self.member}-{self._writes}"

    def write_loop(self, group: str, rng: random.Random) -> None:
        """Write as long as this process runs, through the last term won in ``group``."""
        while not self.stopping.wait(rng.uniform(*WRITE_PAUSE_SECS)):
            term = self._terms.get(group)
            if term is None:
                continue
            t0 = time.monotonic()
            believed = term.is_leader
            t1 = time.monotonic()
            if believed:
                self._write(term, True, t0, t1, "leader")
            elif rng.random() < STALE_WRITE_CHANCE:
                if rng.random() < 0.5:
                    self._write(term, False, t0, t1, "stale")
                else:
                    self._write(forged(term), False, t0, t1, "forged")

    def _write(self, term: Leadership, believed: bool, t0: float, t1: float, mode: str) -> None:
        write_id = self._next_id()
        record = {
            "m": self.member,
            "g": term.group,
            "slot": term.slot,
            "epoch": term.epoch,
            "id": write_id,
        }
        value = json.dumps(record, separators=(",", ":")).encode()
        base = f"{self.data}/{term.group}/{term.slot}"
        self.log.write(
            "intent",
            id=write_id,
            g=term.group,
            slot=term.slot,
            epoch=term.epoch,
            believed=believed,
            t0=t0,
            t1=t1,
            mode=mode,
        )
        try:
            results = (
                term.transaction()
                .create(f"{base}/w-", value, sequence=True)
                .set_data(f"{base}/owner", value)
                .commit()
            )
        except Exception as exc:  # every outcome is data for the oracle
            self.log.write("outcome", id=write_id, result=classify(exc), error=str(exc)[:200])
        else:
            self.log.write("outcome", id=write_id, result="ok", path=results[0])

    def session_loop(self) -> None:
        """Log the session id and password whenever they change (the test expires sessions)."""
        last = None
        while not self.stopping.wait(SESSION_POLL_SECS):
            client_id = self.coordinator.session.client.client_id
            if client_id and client_id != last and client_id[0]:
                last = client_id
                self.log.write("session", id=int(client_id[0]), pw=bytes(client_id[1]).hex())


def main(argv: list[str]) -> None:
    hosts, root, data, member, log_path, session = argv[:6]
    groups = {name: int(n) for name, n in (spec.split(":") for spec in argv[6:])}
    log = EventLog(Path(log_path))
    log.write("start", member=member, pid=os.getpid())
    coordinator = Coordinator.standalone(hosts, root=root, session_timeout=float(session)).start()
    contender = Contender(coordinator, data, member, log)
    rng = random.Random(f"{member}-{os.getpid()}")
    signal.signal(signal.SIGTERM, lambda *_: contender.stopping.set())
    for group, leaders in groups.items():
        coordinator.nominate_async(
            group, member, contender.elected, leaders=leaders, on_revoked=contender.revoked
        )
        writer = random.Random(rng.random())
        threading.Thread(target=contender.write_loop, args=(group, writer), daemon=True).start()
    contender.session_loop()
    coordinator.close()
    log.write("exit")
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
