"""Whether a pipeline's new generation (an update applied, a rollback, a restart) runs yet:
a pure judgement of what the client reads, polled by ``NimbusClient.wait_running``.

The generation runs once the worker on the assigned supervisor reports RUNNING (or, for a
batch, FINISHED) with that generation and its digest. It failed when the record moved on by
a rollback (the record's reason says why), when the pipeline is FAILED, or when its worker
FAILED; anything else is pending, with a word on what it waits for::

    state = judge_rollout(applied, seen, workers)
    state.done, state.failure, state.waiting
"""

from __future__ import annotations

from dataclasses import dataclass

from stratus.api.records import (
    AssignmentReason,
    PipelineRecord,
    PipelineStatus,
    PipelineWorkers,
    WorkerState,
)

_RAN = (WorkerState.RUNNING, WorkerState.FINISHED)


@dataclass(frozen=True)
class Rollout:
    """Where a new generation stands: done, failed (why), or waiting (for what)."""

    done: bool = False
    failure: str | None = None
    waiting: str = ""


def judge_rollout(
    applied: PipelineRecord, seen: PipelineRecord, workers: PipelineWorkers
) -> Rollout:
    """Where ``applied``'s generation stands, given the record ``seen`` now and its workers."""
    name, version = applied.name, applied.version
    if seen.generation != applied.generation:
        return _moved_on(applied, seen)
    if seen.status is not PipelineStatus.ACTIVE:
        if seen.status is PipelineStatus.FINISHED:
            return Rollout(done=True)
        why = f": {seen.reason}" if seen.reason else ""
        return Rollout(failure=f"pipeline {name} is {seen.status.value}{why}")
    beat = workers.on_assigned()
    if beat is None or beat.generation != applied.generation or beat.digest != applied.digest:
        return Rollout(waiting=f"pipeline {name} version {version}: waiting for its worker")
    if beat.state in _RAN:
        return Rollout(done=True)
    if beat.state is WorkerState.FAILED:
        return Rollout(
            failure=f"pipeline {name} version {version}: its worker failed: {beat.error}"
        )
    return Rollout(waiting=f"pipeline {name} version {version}: its worker is {beat.state.value}")


def _moved_on(applied: PipelineRecord, seen: PipelineRecord) -> Rollout:
    if seen.generation_cause == AssignmentReason.ROLLED_BACK.value:
        return Rollout(failure=f"pipeline {seen.name}: {seen.reason or 'rolled back'}")
    return Rollout(
        failure=f"pipeline {seen.name} changed again meanwhile (generation {seen.generation}, "
        f"version {seen.version}, by {seen.generation_cause or 'another change'}) before "
        f"generation {applied.generation} ran"
    )
