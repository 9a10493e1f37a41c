"""The messages the supervisor's control loop takes through ``post`` (``control_loop.py``):
what other threads tell its one owner of the workers. Reads of the assignments (and their
failures, ``assignment_reader``), heartbeat rounds written whole, an outage of ZooKeeper
proven, a leader's fence (of the supervisor, or of some of its pipelines) and the order to
shut down; and a worker found running at start::

    loop.post(HeartbeatWritten(started))
    order = FenceOrder(epoch=7)
    loop.post(order)
    order.wait(timeout=10.0)   # FenceVerdict.STOPPED once no worker process is left
    loop.post(PipelineFenceOrder(epoch=7, pipelines=frozenset({"etl"})))  # etl's worker only
    loop.post(SHUTDOWN)        # LEAVE: the workers run on, for a supervisor started again
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import StrEnum

from stratus.supervisor.adoption import ProcessRecord
from stratus.supervisor.assignment_reader import AssignmentsRead, ReadFailed
from stratus.supervisor.launch_protocols import RunningProcess


@dataclass(frozen=True)
class HeartbeatWritten:
    """A heartbeat round that started at ``started`` (monotonic) was written whole."""

    started: float


@dataclass(frozen=True)
class OutageProven:
    """A probe that started at ``started`` (monotonic) proved that no ZooKeeper quorum served."""

    started: float


@dataclass(frozen=True)
class Shutdown:
    """End the loop: stop every worker (``workers``), or leave them running on the lease
    they were handed, for a supervisor started again to adopt."""

    workers: bool = True


@dataclass(frozen=True)
class Adopted:
    """A worker a previous supervisor left running, proven (``adoption``): its record, and
    the handle that signals and polls it."""

    record: ProcessRecord
    process: RunningProcess
    run: int | None = None  # the run it is (``run_logs.read_run_number``)


class FenceVerdict(StrEnum):
    PENDING = "pending"  # not decided yet, or workers still stopping
    REFUSED = "refused"  # the order's epoch is older than one the supervisor has seen
    STOPPED = "stopped"  # no worker process of the supervisor is left


class LeaderOrder:
    """A leader's order in its term ``epoch``, that the control loop decides and another
    thread (the endpoint's) waits for: refused when its epoch is older than one the
    supervisor has seen, else done once the workers it stops are gone."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.verdict = FenceVerdict.PENDING
        self.newest_epoch = 0  # the newest epoch the supervisor had seen, when refused
        self.stopped: list[str] = []  # the pipelines whose workers the order stopped
        self._decided = threading.Event()

    def wait(self, timeout: float) -> FenceVerdict:
        """The verdict, once there is one or after ``timeout`` (then ``PENDING``)."""
        self._decided.wait(timeout)
        return self.verdict

    def refuse(self, newest_epoch: int) -> None:
        self.newest_epoch = newest_epoch
        self.verdict = FenceVerdict.REFUSED
        self._decided.set()

    def done(self) -> None:
        self.verdict = FenceVerdict.STOPPED
        self._decided.set()


class FenceOrder(LeaderOrder):
    """A leader's order to stop every worker (and take the lease away)."""


class PipelineFenceOrder(LeaderOrder):
    """A leader's order to stop the workers of ``pipelines`` only, each to start again only
    for an assignment with a newer fencing token; the lease and the other workers stay."""

    def __init__(self, epoch: int, pipelines: frozenset[str]) -> None:
        super().__init__(epoch)
        self.pipelines = pipelines


SHUTDOWN = Shutdown()
LEAVE = Shutdown(workers=False)
Message = (
    AssignmentsRead
    | ReadFailed
    | HeartbeatWritten
    | OutageProven
    | FenceOrder
    | PipelineFenceOrder
    | Shutdown
)
