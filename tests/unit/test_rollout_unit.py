"""What ``update``, ``rollback`` and ``restart`` wait for: a pure judgement of the record
and the heartbeats the client reads (``stratus.client.rollout``)."""

from __future__ import annotations

from typing import Any

from stratus.api.records import (
    Assignment,
    AssignmentReason,
    PipelineRecord,
    PipelineStatus,
    PipelineWorkers,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.client.rollout import Rollout, judge_rollout

APPLIED = PipelineRecord(
    name="etl",
    status=PipelineStatus.ACTIVE,
    digest="b" * 64,
    size_bytes=10,
    submitted=1.0,
    updated=2.0,
    epoch=1,
    version=2,
    on_trial=True,
)


def workers(state: WorkerState | None, **beat: Any) -> PipelineWorkers:
    assignment = Assignment(
        pipeline="etl",
        supervisor="s1",
        epoch=1,
        generation=APPLIED.generation,
        digest=APPLIED.digest,
        size_bytes=10,
        assigned=2.0,
    )
    fields: dict[str, Any] = {
        "pipeline": "etl",
        "supervisor": "s1",
        "epoch": 1,
        "generation": APPLIED.generation,
        "digest": APPLIED.digest,
        "time": 3.0,
    }
    beats = [] if state is None else [WorkerHeartbeat(state=state, **{**fields, **beat})]
    return PipelineWorkers(pipeline="etl", assignment=assignment, workers=beats)


def test_the_new_generation_running_is_done() -> None:
    assert judge_rollout(APPLIED, APPLIED, workers(WorkerState.RUNNING)) == Rollout(done=True)


def test_the_old_worker_still_running_is_waited_for() -> None:
    old = workers(WorkerState.RUNNING, generation=APPLIED.generation - 1, digest="a" * 64)
    state = judge_rollout(APPLIED, APPLIED, old)
    assert not state.done and state.failure is None
    assert state.waiting == "pipeline etl version 2: waiting for its worker"


def test_a_starting_worker_is_waited_for() -> None:
    state = judge_rollout(APPLIED, APPLIED, workers(WorkerState.STARTING))
    assert state.waiting == "pipeline etl version 2: its worker is STARTING"


def test_a_rollback_fails_the_wait_with_its_reason() -> None:
    reason = "rolled back from version 2 to 1: its entry point failed to import: ValueError: x"
    seen = APPLIED.model_copy(
        update={
            "version": 1,
            "generation_offset": 2,  # one generation newer
            "reason": reason,
            "generation_cause": AssignmentReason.ROLLED_BACK.value,
        }
    )
    state = judge_rollout(APPLIED, seen, workers(None))
    assert state.failure == f"pipeline etl: {reason}"


def test_a_failed_pipeline_fails_the_wait() -> None:
    seen = APPLIED.model_copy(update={"status": PipelineStatus.FAILED, "reason": "boom"})
    assert judge_rollout(APPLIED, seen, workers(None)).failure == "pipeline etl is FAILED: boom"


def test_a_finished_batch_is_done() -> None:
    seen = APPLIED.model_copy(update={"status": PipelineStatus.FINISHED})
    assert judge_rollout(APPLIED, seen, workers(None)).done
