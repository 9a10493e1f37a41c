"""Whether a hot pipeline's held update is withdrawn because its standby worker failed it:
the pure verdict.

While a hot pipeline's new generation is held (``update_moves``), its old worker runs on
and its standby worker starts with the new code. When that standby worker is reported
FAILED for the record's generation and code (its requirements would not install, it exited
more often than its restarts allow, its checkpoint location is another's), the new version
failed where it could do no harm, as an update that its preflight refused: the leader
withdraws it, whatever ``pipeline.update.rollback`` says, for the old version is what runs.
The record goes back to the version that ran before, with the generation of the
assignment that runs it, so that the running worker is not touched: no restart, no Spark
start, and the assignment stays as it is::

    verdict = withdrawal(record, assignment, standby_beat)
    if verdict is not None:
        ops.roll_back(term, name, to_version=None, why=verdict.why,
                      generation=verdict.generation, as_generation=verdict.runs_as)

A withdrawal needs the update to be held still (the assignment is of another generation
than the record), the version before it kept, and the assignment to run that version's
code and conf. In every other case there is nothing to withdraw: the update's worker runs,
and its own trial judges it (``update_trial``).
"""

from __future__ import annotations

from dataclasses import dataclass

from stratus.api.records import Assignment, PipelineRecord, PipelineStatus
from stratus.api.standby_workers import StandbyWorkerBeat, StandbyWorkerState
from stratus.nimbus.records.kept_versions import previous_version, runs, unshifted_generation
from stratus.nimbus.scheduling.scheduler import assignment_conf


@dataclass(frozen=True)
class Withdraw:
    """The held update of generation ``generation`` goes: the record takes back the version
    before it, at the generation ``runs_as`` of the assignment that runs it."""

    generation: int
    runs_as: int
    why: str


def withdrawal(
    record: PipelineRecord, assignment: Assignment, beat: StandbyWorkerBeat | None
) -> Withdraw | None:
    """The verdict on ``record``'s held update from ``beat``, what the supervisor of its
    standby worker reports of it; None: nothing to withdraw."""
    if record.status is not PipelineStatus.ACTIVE or not record.on_trial or beat is None:
        return None
    if assignment.generation == record.generation:
        return None  # applied: its own worker's trial judges it
    if (beat.generation, beat.digest) != (record.generation, record.digest):
        return None
    if beat.state is not StandbyWorkerState.FAILED:
        return None
    previous = previous_version(record)
    if previous is None:
        return None
    before = record.model_copy(update=runs(previous))
    if (before.digest, assignment_conf(before)) != (assignment.digest, assignment.conf):
        return None  # the assignment runs another version: it would restart anyway
    if assignment.generation < unshifted_generation(record, previous.version):
        return None  # no offset gives the version before that generation
    error = beat.error or "no error reported"
    why = f"its standby worker failed for it, its running worker was not touched: {error}"
    return Withdraw(record.generation, assignment.generation, why)
