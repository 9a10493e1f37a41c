"""Hot pipelines whose active worker starts cold while their standby worker waits READY.

A hot pipeline's worker that stopped on its host (its beat lease lapsed for a stall shorter
than the failure detector's floor, its supervisor fenced itself for a moment) is started
again in place by its supervisor: a Spark driver's start, 20 to 45 s on a loaded host, while
the pipeline's standby worker is READY elsewhere and would run its next batch within about a
second. The round finds those pipelines here and hands them to the failover lane, which asks
their supervisor's pipeline fence (``pipeline_fences``: the starting worker is stopped and
held until a newer assignment); the answer hands them back to the round (``fence_held``),
which promotes the standby worker (``fenced``). ``starting_cold`` is pure::

    cold = starting_cold(pipelines=..., assignments=current, placements=..., heartbeats=...,
                         workers=workers, registered=..., suspected=lane_suspected,
                         cordoned=..., epoch=term.epoch, now=time.time())
    cold                                            # {"orders": 11}: its assignment's version

Between two rounds (``nimbus.monitor.freq.secs`` apart, 2 s by default) the lane looks too,
at each of its polls, through ``ColdStartWatch``: the hot pipelines of the round's last
snapshot whose standby worker could take over now, judged from the newest heartbeats of
their active workers' supervisors: one read of each such supervisor's heartbeats, at most
``READS_PER_POLL`` a poll, in turn (with more such supervisors, each is read less often, and
the round still looks every ``nimbus.monitor.freq.secs``). So a hot worker that crashed or
stopped itself is fenced within a poll or a few and a heartbeat of its supervisor, not at
the next round::

    watch = ColdStartWatch(board.workers_on)
    watch(snapshot, registered={"s1", "s2"}, suspected=set())   # {"orders": 11}

A worker **starts cold** when the heartbeat of the assignment's worker on its supervisor
says ``STARTING`` and either no crash came since the assignment (``restarts`` 0: it stopped
itself) or its last crash came after its process had run a batch
(``last_crash.last_batch_id``: it was killed, by the kernel's OOM killer say, or failed on its
way, after it ran). A worker whose heartbeat says ``RESTARTING`` after such a crash (its
supervisor waits out the restart's backoff) is counted too: its start in place is decided
already, and fencing it then spares the backoff and a heartbeat's wait. A crash before a
first batch (at its start, or on a batch that kills every worker that runs it) is the
restart policy's: its standby worker would crash too, and promotions would move the
pipeline from host to host without end, where the policy ends it FAILED. It is handed only
when its promotion would be allowed now (``promotable``): the rules of ``promotion_plan``
on a ``fenced`` verdict for this pipeline alone (its standby worker READY for the
pipeline's generation and code, on a registered supervisor neither suspected nor cordoned),
so that no fence stops a start that nothing faster would replace.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Set

from stratus.api.clock import Clock
from stratus.api.records import (
    Assignment,
    PipelineRecord,
    SupervisorHeartbeat,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.api.standby_workers import StandbyWorkerPlacement
from stratus.nimbus.duties.worker_outcomes import Workers, current_beat
from stratus.nimbus.failover.lane import HotSnapshot
from stratus.nimbus.failover.promotion_plan import How, plan_promotions

_STARTING = frozenset({WorkerState.STARTING, WorkerState.RESTARTING})  # a start decided
READS_PER_POLL = 4  # supervisors' heartbeats the lane reads at most per poll (10 polls a second)


def starting_cold(  # noqa: PLR0913 keyword-only: the round's read
    *,
    pipelines: Mapping[str, PipelineRecord],
    assignments: Mapping[str, tuple[Assignment, int]],
    placements: Mapping[str, tuple[StandbyWorkerPlacement | None, int]],
    heartbeats: Mapping[str, SupervisorHeartbeat],
    workers: Workers,
    registered: Set[str],
    suspected: Set[str],
    cordoned: Set[str],
    epoch: int,
    now: float,
) -> dict[str, int]:
    """The hot pipelines whose active worker starts cold while their standby worker could
    be promoted now (module docstring), each with the version of its assignment as read."""
    starting = {
        name: held for name, held in assignments.items() if _starting_cold(held[0], workers)
    }
    return promotable(
        pipelines=pipelines,
        assignments=starting,
        placements=placements,
        heartbeats=heartbeats,
        registered=registered,
        suspected=suspected,
        cordoned=cordoned,
        epoch=epoch,
        now=now,
    )


class ColdStartWatch:
    """The lane's look between two rounds (module docstring): called with the round's last
    snapshot of the hot pipelines, it reads the heartbeats of the supervisors whose hot
    pipeline's standby worker could take over now (``read_workers``: one supervisor's
    worker heartbeats by pipeline, ``HeartbeatBoard.workers_on``), and no other's, at most
    ``reads`` of them a call, in turn, and returns those of their pipelines whose worker
    starts cold, each with its assignment's version. A read that fails raises, as the
    store's calls do (``StateStoreUnavailableError``)."""

    def __init__(
        self,
        read_workers: Callable[[str], Mapping[str, WorkerHeartbeat]],
        *,
        reads: int = READS_PER_POLL,
        wall: Clock = time.time,
    ) -> None:
        if reads < 1:
            raise ValueError(f"the cold start watch must read at least 1 supervisor, not {reads}")
        self._read_workers = read_workers
        self._reads = reads
        self._turn = 0  # where the next call's reads begin, among more holders than reads
        self._wall = wall

    def __call__(
        self, snapshot: HotSnapshot, *, registered: Set[str], suspected: Set[str]
    ) -> dict[str, int]:
        now = self._wall()
        could = promotable(
            pipelines=snapshot.pipelines,
            assignments=snapshot.assignments,
            placements=snapshot.placements,
            heartbeats=snapshot.heartbeats,
            registered=registered,
            suspected=suspected,
            cordoned=snapshot.cordoned,
            epoch=snapshot.epoch,
            now=now,
        )
        holders = sorted({snapshot.assignments[name][0].supervisor for name in could})
        workers: dict[str, dict[str, WorkerHeartbeat]] = {}
        for supervisor in self._in_turn(holders):
            for pipeline, beat in self._read_workers(supervisor).items():
                workers.setdefault(pipeline, {})[supervisor] = beat
        return {
            name: version
            for name, version in could.items()
            if _starting_cold(snapshot.assignments[name][0], workers)
        }

    def _in_turn(self, holders: list[str]) -> list[str]:
        """All of ``holders`` if they are no more than the reads of a call; else the next
        ``reads`` of them, going round."""
        if len(holders) <= self._reads:
            return holders
        start = self._turn % len(holders)
        self._turn = start + self._reads
        return [holders[(start + k) % len(holders)] for k in range(self._reads)]


def promotable(  # noqa: PLR0913 keyword-only: the round's read
    *,
    pipelines: Mapping[str, PipelineRecord],
    assignments: Mapping[str, tuple[Assignment, int]],
    placements: Mapping[str, tuple[StandbyWorkerPlacement | None, int]],
    heartbeats: Mapping[str, SupervisorHeartbeat],
    registered: Set[str],
    suspected: Set[str],
    cordoned: Set[str],
    epoch: int,
    now: float,
) -> dict[str, int]:
    """The pipelines of ``assignments`` whose standby worker could be promoted now, on a
    ``fenced`` verdict for each alone, with their assignment's version."""
    could = {}
    for name, (assignment, version) in assignments.items():
        if name not in pipelines:
            continue
        plan = plan_promotions(
            verdicts={assignment.supervisor: How.FENCED},
            fenced={assignment.supervisor: {name}},
            pipelines={name: pipelines[name]},
            assignments={name: (assignment, version)},
            placements=placements,
            heartbeats=heartbeats,
            suspected=suspected,
            registered=registered,
            cordoned=cordoned,
            epoch=epoch,
            now=now,
        )
        if plan.promotions:
            could[name] = version
    return could


def _starting_cold(assignment: Assignment, workers: Workers) -> bool:
    """Whether the worker of ``assignment`` reports a start, after no crash or after a crash
    of a process that had run a batch, or waits for its restart after such a crash (module
    docstring)."""
    beat = current_beat(assignment, workers)
    if beat is None or beat.epoch != assignment.epoch or beat.state not in _STARTING:
        return False
    crash = beat.last_crash
    ran_before_its_crash = crash is not None and crash.last_batch_id >= 0
    if beat.state is WorkerState.RESTARTING:
        return ran_before_its_crash
    return beat.restarts == 0 or ran_before_its_crash
