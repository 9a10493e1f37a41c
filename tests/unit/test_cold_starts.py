"""Which hot pipelines' workers start cold while their standby worker is READY
(``cold_starts.starting_cold``): pure logic on built records and heartbeats."""

from __future__ import annotations

import pytest

from stratus.api.records import PipelineRecord, WorkerCrash, WorkerHeartbeat, WorkerState
from stratus.api.standby_workers import StandbyWorkerState
from stratus.nimbus.duties.cold_starts import ColdStartWatch, starting_cold
from stratus.nimbus.failover.lane import hot_snapshot
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


def test_a_worker_waiting_out_its_backoff_after_it_ran_starts_cold_already() -> None:
    """Its supervisor has decided the start in place: fenced before it, the standby worker
    takes over without the backoff's wait."""
    assert cold(worker(WorkerState.RESTARTING, restarts=1, crashed_after=67)) == {"orders": 11}
    assert cold(worker(WorkerState.RESTARTING, restarts=1, crashed_after=-1)) == {}
    assert cold(worker(WorkerState.RESTARTING, restarts=1)) == {}  # an older supervisor's
    assert cold(worker(WorkerState.FAILED, restarts=3, crashed_after=67)) == {}  # given up


def test_a_start_of_another_assignment_is_not_this_ones() -> None:
    assert cold(worker(WorkerState.STARTING, epoch=ACTIVE.epoch - 1)) == {}


def test_nothing_is_handed_that_its_standby_worker_could_not_take_now() -> None:
    assert cold(worker(WorkerState.STARTING), standby=StandbyWorkerState.STARTING) == {}
    assert cold(worker(WorkerState.STARTING), suspected=frozenset({"s2"})) == {}
    assert cold(worker(WorkerState.STARTING), pipeline_record=record("orders", standby=None)) == {}


class Reads:
    """One supervisor's worker heartbeats as the lane's watch reads them, counting reads."""

    def __init__(self, beat: WorkerHeartbeat | None) -> None:
        self.beat = beat
        self.read: list[str] = []

    def __call__(self, supervisor: str) -> dict[str, WorkerHeartbeat]:
        self.read.append(supervisor)
        on_it = self.beat is not None and self.beat.supervisor == supervisor
        return {"orders": self.beat} if self.beat is not None and on_it else {}


def watched(
    reads: Reads,
    *,
    standby: StandbyWorkerState = StandbyWorkerState.READY,
    cordoned: frozenset[str] = frozenset(),
) -> dict[str, int]:
    """What ``ColdStartWatch`` finds in the round's snapshot of "orders" (active on s1,
    standby worker on s2) and "web" (not hot, on s3)."""
    web = record("web", standby=None)
    snapshot = hot_snapshot(
        EPOCH,
        {"orders": ORDERS, "web": web},
        {"orders": (ACTIVE, 11), "web": (assignment(web, "s3"), 5)},
        {"orders": (PLACED, 4)},
        {"s2": heartbeat("s2", standby_beat(PLACED, standby))},
        cordoned=cordoned,
    )
    watch = ColdStartWatch(reads, wall=lambda: NOW)
    return watch(snapshot, registered={"s1", "s2", "s3"}, suspected=set())


def test_between_rounds_a_cold_start_is_found_from_its_supervisors_newest_heartbeats() -> None:
    reads = Reads(worker(WorkerState.STARTING))
    assert watched(reads) == {"orders": 11}
    assert reads.read == ["s1"]  # the hot pipeline's supervisor alone
    crashed = Reads(worker(WorkerState.RESTARTING, restarts=1, crashed_after=40))
    assert watched(crashed) == {"orders": 11}


def test_between_rounds_a_running_worker_or_one_the_policy_restarts_is_left_alone() -> None:
    assert watched(Reads(worker(WorkerState.RUNNING))) == {}
    assert watched(Reads(worker(WorkerState.RESTARTING, restarts=1, crashed_after=-1))) == {}
    assert watched(Reads(None)) == {}


def test_between_rounds_no_heartbeat_is_read_where_no_standby_worker_could_take_over() -> None:
    """A standby worker not READY, or on a cordoned supervisor: nothing to hand the
    pipeline to, so no read is spent on its supervisor."""
    starting = Reads(worker(WorkerState.STARTING))
    assert watched(starting, standby=StandbyWorkerState.STARTING) == {}
    assert watched(starting, cordoned=frozenset({"s2"})) == {}
    assert starting.read == []


def test_the_watch_reads_a_few_supervisors_a_call_in_turn() -> None:
    """Five supervisors each holding a hot pipeline, two reads a call: each is read once
    every three calls, and a cold start on any of them is found within three."""
    pipelines, assignments, placements, beats = {}, {}, {}, {}
    for n in range(5):
        name = f"p{n}"
        pipelines[name] = record(name)
        assignments[name] = (assignment(pipelines[name], f"a{n}"), 10 + n)
        placed = placement(pipelines[name], f"b{n}")
        placements[name] = (placed, 1)
        beats[f"b{n}"] = heartbeat(f"b{n}", standby_beat(placed, StandbyWorkerState.READY))
    snapshot = hot_snapshot(EPOCH, pipelines, assignments, placements, beats)
    read: list[str] = []

    def read_workers(supervisor: str) -> dict[str, WorkerHeartbeat]:
        read.append(supervisor)
        if supervisor != "a3":
            return {}
        start = worker(WorkerState.STARTING)
        return {"p3": start.model_copy(update={"pipeline": "p3", "supervisor": "a3"})}

    watch = ColdStartWatch(read_workers, reads=2, wall=lambda: NOW)
    registered = {f"a{n}" for n in range(5)} | {f"b{n}" for n in range(5)}
    found = [watch(snapshot, registered=registered, suspected=set()) for _ in range(3)]
    assert read == ["a0", "a1", "a2", "a3", "a4", "a0"]
    assert found == [{}, {"p3": 13}, {}]
    with pytest.raises(ValueError, match="at least 1 supervisor"):
        ColdStartWatch(read_workers, reads=0)
