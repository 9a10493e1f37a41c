"""Following a pipeline's (re)start step by step from the records the nimbus API returns.

What is proved: the marks come from the records (the assignment's time, the worker's start,
the heartbeats' times), not from when they were seen; the old supervisor's heartbeats and
those of an earlier worker are ignored; the spawn time the supervisor reports wins over the
worker's own later start; only a batch above the last one before the failure counts; a FAILED
new worker and a start that takes too long end the wait with PipelineStartError.
"""

from __future__ import annotations

import pytest

from stratus.api.records import (
    Assignment,
    PipelineWorkers,
    QueryProgress,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.errors import PipelineStartError
from stratus.local.pipeline_start import POLL_SECS, StartTracker, follow_start

PIPELINE = "counts"
KILLED_AT = 1000.0


def assignment(supervisor: str, assigned: float) -> Assignment:
    return Assignment(
        pipeline=PIPELINE,
        supervisor=supervisor,
        epoch=1,
        generation=0,
        digest="0" * 64,
        size_bytes=1,
        assigned=assigned,
    )


def beat(
    supervisor: str,
    state: WorkerState,
    *,
    time: float,
    started: float,
    batch: int | None = None,
    app_id: str | None = None,
    error: str | None = None,
) -> WorkerHeartbeat:
    queries = [] if batch is None else [QueryProgress(name="q", id="q1", batch_id=batch)]
    return WorkerHeartbeat(
        pipeline=PIPELINE,
        supervisor=supervisor,
        epoch=1,
        generation=0,
        state=state,
        time=time,
        started=started,
        pid=4242,
        app_id=app_id,
        queries=queries,
        error=error,
    )


def seen(assigned_to: Assignment | None, *beats: WorkerHeartbeat) -> PipelineWorkers:
    return PipelineWorkers(pipeline=PIPELINE, assignment=assigned_to, workers=list(beats))


def tracker() -> StartTracker:
    return StartTracker(PIPELINE, began=KILLED_AT, away_from="s1", after_batch=7)


OLD = beat("s1", WorkerState.RUNNING, time=999.5, started=900.0, batch=7, app_id="app-old")
LEFT_OVER = beat("s2", WorkerState.RUNNING, time=800.0, started=700.0, batch=3, app_id="app-0")


def test_a_move_is_timed_from_the_records_not_from_when_it_was_seen():
    follow = tracker()
    moved = assignment("s2", assigned=1004.2)
    assert follow.observe(seen(assignment("s1", 900.0), OLD)) is None
    assert follow.observe(seen(moved, OLD, LEFT_OVER)) is None
    spawned = beat("s2", WorkerState.STARTING, time=1004.6, started=1004.5)
    assert follow.observe(seen(moved, OLD, spawned)) is None
    own = beat("s2", WorkerState.STARTING, time=1005.9, started=1005.8)  # after its imports
    assert follow.observe(seen(moved, OLD, own)) is None
    running = beat("s2", WorkerState.RUNNING, time=1019.0, started=1005.8, app_id="app-1")
    assert follow.observe(seen(moved, OLD, running)) is None
    replayed = beat("s2", WorkerState.RUNNING, time=1020.0, started=1005.8, batch=7, app_id="a")
    assert follow.observe(seen(moved, OLD, replayed)) is None  # not above the last batch
    batch = beat("s2", WorkerState.RUNNING, time=1021.5, started=1005.8, batch=8, app_id="a")
    start = follow.observe(seen(moved, OLD, batch))

    assert start is not None
    assert (start.supervisor, start.app_id, start.batch_id) == ("s2", "app-1", 8)
    assert start.phases() == pytest.approx(
        {"detection": 4.2, "scheduling": 0.3, "spark": 14.5, "first_batch": 2.5}
    )
    assert start.total == pytest.approx(21.5)
    assert start.from_assignment == pytest.approx(17.3)


def test_a_failed_new_worker_ends_the_wait():
    failed = beat("s2", WorkerState.FAILED, time=1010.0, started=1005.0, error="no such module")
    with pytest.raises(PipelineStartError, match="no such module"):
        tracker().observe(seen(assignment("s2", 1004.0), failed))


def test_a_start_that_takes_too_long_ends_the_wait():
    class Client:
        def workers(self, name: str) -> PipelineWorkers:
            return seen(assignment("s1", 900.0), OLD)  # never moves

    now = [0.0]

    def sleep(secs: float) -> None:
        now[0] += secs

    with pytest.raises(PipelineStartError, match="within 5s"):
        follow_start(
            Client(),  # type: ignore[arg-type]
            PIPELINE,
            began=KILLED_AT,
            away_from="s1",
            after_batch=7,
            timeout=5.0,
            clock=lambda: now[0],
            sleep=sleep,
        )
    assert now[0] == pytest.approx(5.0, abs=POLL_SECS)
