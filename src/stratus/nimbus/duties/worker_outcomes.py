"""What the workers' heartbeats say of their pipelines, recorded by the leader's scheduling
duty in each round, fenced by its term: a version on trial proven or rolled back to the
previous kept version (``update_trial``), a hot pipeline's held update withdrawn when its
standby worker failed it (``update_withdrawal``), a batch that finished makes its pipeline
FINISHED, a worker its supervisor gave up on makes it FAILED with the worker's error::

    outcomes = WorkerOutcomes(ops, RollbackPolicy(enabled=True, crashes=3))
    changed = outcomes.record(term, pipelines, assignments, workers, standby)  # records written
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from stratus.api.errors import InvalidTransitionError, UnknownVersionError
from stratus.api.records import (
    Assignment,
    PipelineRecord,
    PipelineStatus,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.api.standby_workers import StandbyWorkerBeat
from stratus.coordination.leadership import Leadership
from stratus.nimbus.failover.update_withdrawal import Withdraw, withdrawal
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.records.update_trial import Proven, RollbackPolicy, judge

log = logging.getLogger(__name__)

Workers = Mapping[str, Mapping[str, WorkerHeartbeat]]  # pipeline -> supervisor -> heartbeat


class WorkerOutcomes:
    """Records the outcomes the current workers report (one scheduling round at a time)."""

    def __init__(self, ops: PipelineOps, rollback: RollbackPolicy) -> None:
        self._ops = ops
        self._rollback = rollback

    def record(
        self,
        term: Leadership,
        pipelines: Mapping[str, PipelineRecord],
        assignments: Mapping[str, Assignment],
        workers: Workers,
        standby: Mapping[str, StandbyWorkerBeat],
    ) -> dict[str, PipelineRecord]:
        """Versions on trial proven or rolled back, held updates withdrawn, FINISHED and
        FAILED pipelines, as their current workers report them. ``standby``: what the
        supervisor of each pipeline's standby worker reports of it."""
        changed = {}
        for name, assignment in assignments.items():
            record = pipelines.get(name)
            if record is None:
                continue
            tried = self._judge_trial(term, record, assignment, workers, standby.get(name))
            if tried is not None:
                changed[name] = record = tried
            beat = current_beat(assignment, workers)
            if record.status is not PipelineStatus.ACTIVE or beat is None:
                continue
            if beat.generation != record.generation:
                continue  # rolled back just now
            if beat.state is WorkerState.FINISHED:
                changed[name] = self._ops.finish(term, name)
            elif beat.state is WorkerState.FAILED:
                reason = (
                    f"its worker on supervisor {beat.supervisor} failed and is not restarted "
                    f"any more: {beat.error or 'no error reported'}"
                )
                changed[name] = self._ops.fail(term, name, reason)
        return changed

    def _judge_trial(
        self,
        term: Leadership,
        record: PipelineRecord,
        assignment: Assignment,
        workers: Workers,
        standby: StandbyWorkerBeat | None,
    ) -> PipelineRecord | None:
        """Prove or roll back ``record``'s version on trial (``update_trial``), or withdraw
        it while it is held (``update_withdrawal``); the record written, or None if nothing
        changed."""
        beat = workers.get(record.name, {}).get(assignment.supervisor)
        verdict = judge(record, beat, self._rollback) or withdrawal(record, assignment, standby)
        if isinstance(verdict, Proven):
            return self._ops.prove(term, record.name, verdict.generation)
        if verdict is None:
            return None
        runs_as = verdict.runs_as if isinstance(verdict, Withdraw) else None
        log.warning(
            "event=%s pipeline=%s epoch=%d version=%d generation=%d reason=%s",
            "update_rolled_back" if runs_as is None else "update_withdrawn",
            record.name,
            term.epoch,
            record.version,
            verdict.generation,
            verdict.why,
        )
        try:
            return self._ops.roll_back(
                term,
                record.name,
                to_version=None,
                why=verdict.why,
                generation=verdict.generation,
                as_generation=runs_as,
            )
        except (InvalidTransitionError, UnknownVersionError) as exc:
            log.warning(
                "event=rollback_impossible pipeline=%s epoch=%d error=%s",
                record.name,
                term.epoch,
                exc,
            )
        return None


def current_beat(assignment: Assignment, workers: Workers) -> WorkerHeartbeat | None:
    """The heartbeat of the worker running this assignment (same supervisor and generation)."""
    beat = workers.get(assignment.pipeline, {}).get(assignment.supervisor)
    if beat is None or beat.generation != assignment.generation:
        return None
    if beat.digest and beat.digest != assignment.digest:
        return None
    return beat
