"""Hot pipelines whose active worker starts cold while their standby worker waits READY.

A hot pipeline's worker that stopped on its host (its beat lease lapsed for a stall shorter
than the failure detector's floor, its supervisor fenced itself for a moment) is started
again in place by its supervisor: a Spark driver's start, 20 to 45 s on a loaded host, while
the pipeline's standby worker is READY elsewhere and would run its next batch within about a
second. The round finds those pipelines here and hands them to the failover lane, which asks
their supervisor's pipeline fence (``pipeline_fences``: the starting worker is stopped and
held until a newer assignment); the answer hands them back to the round (``fence_held``),
which promotes the standby worker (``fenced``). Pure::

    cold = starting_cold(pipelines=..., assignments=current, placements=..., heartbeats=...,
                         workers=workers, registered=..., suspected=lane_suspected,
                         cordoned=..., epoch=term.epoch, now=time.time())
    cold                                            # {"orders": 11}: its assignment's version

A worker **starts cold** when the heartbeat of the assignment's worker on its supervisor
says ``STARTING`` and either no crash came since the assignment (``restarts`` 0: it stopped
itself) or its last crash came after its process had run a batch
(``last_crash.last_batch_id``: it was killed, by the kernel's OOM killer say, or failed on its
way, after it ran). A crash before a first batch (at its start, or on a batch that kills
every worker that runs it) is the restart policy's: its standby worker would crash too, and
promotions would move the pipeline from host to host without end, where the policy ends it
FAILED. It is handed only when its promotion would be allowed now: the rules of
``promotion_plan`` on a ``fenced`` verdict for this pipeline alone (its standby worker READY
for the pipeline's generation and code, on a registered supervisor neither suspected nor
cordoned), so that no fence stops a start that nothing faster would replace.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from stratus.api.records import Assignment, PipelineRecord, SupervisorHeartbeat, WorkerState
from stratus.api.standby_workers import StandbyWorkerPlacement
from stratus.nimbus.duties.worker_outcomes import Workers, current_beat
from stratus.nimbus.failover.promotion_plan import How, plan_promotions


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
    cold = {}
    for name, (assignment, version) in assignments.items():
        if not _starting_cold(assignment, workers) or name not in pipelines:
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
            cold[name] = version
    return cold


def _starting_cold(assignment: Assignment, workers: Workers) -> bool:
    """Whether the worker of ``assignment`` reports a start, after no crash or after a crash
    of a process that had run a batch (module docstring)."""
    beat = current_beat(assignment, workers)
    if beat is None or beat.epoch != assignment.epoch or beat.state is not WorkerState.STARTING:
        return False
    crash = beat.last_crash
    return beat.restarts == 0 or (crash is not None and crash.last_batch_id >= 0)
