"""Which hot pipelines' next standby worker waits for the first batch of their new
assignment (``standby_round.awaiting_first_batch``): pure logic on built heartbeats."""

from __future__ import annotations

from stratus.api.records import Assignment, QueryProgress, WorkerHeartbeat, WorkerState
from stratus.nimbus.duties.standby_round import awaiting_first_batch
from stratus.nimbus.duties.worker_outcomes import Workers

NOW = 1_700_000_000.0
WAIT = 10.0


def assigned(secs_ago: float, *, epoch: int = 5) -> Assignment:
    return Assignment(
        pipeline="orders",
        supervisor="s2",
        epoch=epoch,
        generation=3,
        digest="d3",
        size_bytes=10,
        assigned=NOW - secs_ago,
    )


def beat(*, batch_id: int | None, epoch: int = 5, supervisor: str = "s2") -> Workers:
    queries = [] if batch_id is None else [QueryProgress(name="counts", batch_id=batch_id)]
    heartbeat = WorkerHeartbeat(
        pipeline="orders",
        supervisor=supervisor,
        epoch=epoch,
        generation=3,
        digest="d3",
        state=WorkerState.RUNNING,
        time=NOW,
        queries=queries,
    )
    return {"orders": {supervisor: heartbeat}}


def waiting(assignment: Assignment, workers: Workers) -> bool:
    found = awaiting_first_batch({"orders": assignment}, workers, now=NOW, wait_secs=WAIT)
    return "orders" in found


def test_a_young_assignment_waits_until_its_worker_reports_a_committed_batch():
    assert waiting(assigned(1.0), {})  # its worker not heard yet
    assert waiting(assigned(1.0), beat(batch_id=None))  # running, nothing committed
    assert not waiting(assigned(1.0), beat(batch_id=142))


def test_the_wait_is_bounded():
    assert not waiting(assigned(WAIT), {})
    assert not waiting(assigned(WAIT, epoch=5), beat(batch_id=None))


def test_an_assignment_dated_by_a_clock_far_ahead_waits_at_most_twice_the_bound():
    assert waiting(assigned(-1.0), {})  # its writer's clock a second ahead: still waits
    assert not waiting(assigned(-WAIT), {})  # ahead by the bound or more: placed now
    assert not waiting(assigned(-3600.0), {})


def test_a_beat_of_another_assignment_does_not_end_the_wait():
    assert waiting(assigned(1.0), beat(batch_id=142, epoch=4))  # an earlier term's worker
    assert waiting(assigned(1.0), beat(batch_id=142, supervisor="s1"))  # the old supervisor's


def test_with_no_wait_nothing_waits():
    found = awaiting_first_batch({"orders": assigned(0.0)}, {}, now=NOW, wait_secs=0.0)
    assert found == set()
