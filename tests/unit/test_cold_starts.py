"""Which hot pipelines' workers start cold while their standby worker is READY
(``cold_starts.starting_cold``): pure logic on built records and heartbeats."""

from __future__ import annotations

from stratus.api.records import PipelineRecord, WorkerCrash, WorkerHeartbeat, WorkerState
from stratus.api.standby_workers import StandbyWorkerState
from stratus.nimbus.duties.cold_starts import starting_cold
from tests.unit.test_promotion_plan import (
    EPOCH,
    NOW,
    assignment,
    heartbeat,
    placement,
    record,
    standby_beat,
)

ORDERS = record("orders")
ACTIVE = assignment(ORDERS, "s1")
PLACED = placement(ORDERS, "s2")


def worker(
    state: WorkerState,
    *,
    restarts: int = 0,
    epoch: int = ACTIVE.epoch,
    crashed_after: int | None = None,
) -> WorkerHeartbeat:
    """The active worker's heartbeat; ``crashed_after``: its last crash came after its
    process had reported that batch id (-1: none)."""
    crash = None
    if crashed_after is not None:
        crash = WorkerCrash(time=NOW - 1, signal="SIGKILL", error="-", last_batch_id=crashed_after)
    return WorkerHeartbeat(
        pipeline="orders",
        supervisor="s1",
        epoch=epoch,
        generation=ACTIVE.generation,
        digest=ACTIVE.digest,
        state=state,
        time=NOW,
        restarts=restarts,
        last_crash=crash,
    )


def cold(
    beat: WorkerHeartbeat | None,
    *,
    standby: StandbyWorkerState = StandbyWorkerState.READY,
    pipeline_record: PipelineRecord = ORDERS,
    suspected: frozenset[str] = frozenset(),
) -> dict[str, int]:
    return starting_cold(
        pipelines={"orders": pipeline_record},
        assignments={"orders": (ACTIVE, 11)},
        placements={"orders": (PLACED, 4)},
        heartbeats={"s2": heartbeat("s2", standby_beat(PLACED, standby))},
        workers={} if beat is None else {"orders": {"s1": beat}},
        registered={"s1", "s2"},
        suspected=suspected,
        cordoned=set(),
        epoch=EPOCH,
        now=NOW,
    )


def test_a_worker_starting_again_while_its_standby_worker_is_ready_starts_cold() -> None:
    assert cold(worker(WorkerState.STARTING)) == {"orders": 11}  # with its version


def test_a_running_worker_or_none_heard_is_left_alone() -> None:
    assert cold(worker(WorkerState.RUNNING)) == {}
    assert cold(None) == {}


def test_a_crash_before_a_first_batch_is_the_restart_policys() -> None:
    """At its start, or on a batch that kills every worker that runs it: promoted, its
    standby worker would crash too."""
    assert cold(worker(WorkerState.STARTING, restarts=1, crashed_after=-1)) == {}
    assert cold(worker(WorkerState.STARTING, restarts=1)) == {}  # an older supervisor's


def test_a_start_after_a_crash_of_a_worker_that_ran_starts_cold() -> None:
    """A worker killed (the OOM killer, say) after it had committed batches: its standby
    worker takes the next batch at once, as after a stop of its own."""
    assert cold(worker(WorkerState.STARTING, restarts=1, crashed_after=67)) == {"orders": 11}
    assert cold(worker(WorkerState.STARTING, restarts=3, crashed_after=0)) == {"orders": 11}
    assert cold(worker(WorkerState.RESTARTING, restarts=1, crashed_after=67)) == {}


def test_a_start_of_another_assignment_is_not_this_ones() -> None:
    assert cold(worker(WorkerState.STARTING, epoch=ACTIVE.epoch - 1)) == {}


def test_nothing_is_handed_that_its_standby_worker_could_not_take_now() -> None:
    assert cold(worker(WorkerState.STARTING), standby=StandbyWorkerState.STARTING) == {}
    assert cold(worker(WorkerState.STARTING), suspected=frozenset({"s2"})) == {}
    assert cold(worker(WorkerState.STARTING), pipeline_record=record("orders", standby=None)) == {}
