"""Judges a pipeline's newest version from its worker's heartbeat: proven, rolled back, or
not yet known. A pure function of the record and the heartbeat; the scheduling duty acts on
the verdict in the leader's fenced writes.

An update's version is on trial (``PipelineRecord.on_trial``) from the moment the leader
applies it until its worker commits a first batch (a query's batch id >= 0), completes an
SDP run, or finishes a batch function: then it is proven. Before that, the version is rolled
back to the previous kept one when

- the supervisor refused to switch to it (``WorkerHeartbeat.refused``: its entry point did
  not import in the new environment; the old worker still runs), whatever the policy says;
- its worker FAILED (the supervisor gave up restarting it), or crashed
  ``pipeline.update.rollback.crashes`` times, and rollback is on (``pipeline.update.rollback``,
  the cluster's or the pipeline's conf)::

    verdict = judge(record, beat, RollbackPolicy(enabled=True, crashes=3))
    if isinstance(verdict, RollBack): ops.roll_back(term, name, to_version=None, why=verdict.why)
"""

from __future__ import annotations

from dataclasses import dataclass

from stratus.api.records import PipelineRecord, PipelineStatus, WorkerHeartbeat, WorkerState
from stratus.nimbus.records.kept_versions import previous_version

ROLLBACK_KEY = "pipeline.update.rollback"


@dataclass(frozen=True)
class RollbackPolicy:
    """``pipeline.update.rollback`` and ``pipeline.update.rollback.crashes``."""

    enabled: bool = True
    crashes: int = 3

    def of(self, record: PipelineRecord) -> bool:
        """Whether ``record``'s failures roll it back: its conf's say, else the cluster's."""
        value = record.conf.get(ROLLBACK_KEY, self.enabled)
        return value if isinstance(value, bool) else self.enabled


@dataclass(frozen=True)
class Proven:
    """The version committed its first batch (or finished): its trial is over."""

    generation: int


@dataclass(frozen=True)
class RollBack:
    """The version failed its trial, or was refused: back to the previous kept version."""

    generation: int
    why: str


Verdict = Proven | RollBack | None


def judge(record: PipelineRecord, beat: WorkerHeartbeat | None, policy: RollbackPolicy) -> Verdict:
    """The verdict on ``record``'s current version from the heartbeat of the worker on its
    assigned supervisor; None: nothing to do (not on trial, not known yet)."""
    if record.status is not PipelineStatus.ACTIVE or beat is None:
        return None
    refused = beat.refused
    if refused is not None and refused.generation == record.generation:
        if _has_previous(record):
            return RollBack(record.generation, f"its entry point failed to import: {refused.error}")
        return None
    if not record.on_trial or not _runs_current(record, beat):
        return None
    if _proven(beat):
        return Proven(record.generation)
    if not policy.of(record) or not _has_previous(record):
        return None
    failure = _failure(beat, policy.crashes)
    return None if failure is None else RollBack(record.generation, failure)


def _runs_current(record: PipelineRecord, beat: WorkerHeartbeat) -> bool:
    return beat.generation == record.generation and beat.digest in ("", record.digest)


def _has_previous(record: PipelineRecord) -> bool:
    return previous_version(record) is not None


def _proven(beat: WorkerHeartbeat) -> bool:
    return beat.last_batch_id >= 0 or beat.runs > 0 or beat.state is WorkerState.FINISHED


def _failure(beat: WorkerHeartbeat, crashes: int) -> str | None:
    """Why the worker failed its trial, or None while it has not."""
    error = beat.error or (beat.last_crash.error if beat.last_crash else "") or "no error reported"
    if beat.state is WorkerState.FAILED:
        return f"its worker failed before its first batch: {error}"
    if beat.restarts >= crashes:
        return f"its worker crashed {beat.restarts} times before its first batch: {error}"
    return None
