"""Which operations a pipeline's record refuses, with an error that says why and what to do
instead: only kill applies to a pipeline KILLED, FAILED, FINISHED or waiting for its code's
replication; neither restart nor rollback to one KILLED or PENDING; no rollback while an
update waits. Pure checks of the record, made inside ``PipelineOps``'s read-change-write::

    refuse_if_killed(record, "rebalance")    # InvalidTransitionError: "it is FAILED; ..."
    refuse_if_update_waits(record, "roll back")   # UpdateInProgressError
"""

from __future__ import annotations

from stratus.api.errors import InvalidTransitionError, UpdateInProgressError
from stratus.api.records import PipelineRecord, PipelineStatus


def refuse_if_killed(record: PipelineRecord, action: str) -> None:
    """Only kill applies to a pipeline that is KILLED, FAILED or waiting for replication."""
    why = _REFUSALS.get(record.status)
    if why is not None:
        raise InvalidTransitionError(f"cannot {action} pipeline {record.name!r}: {why}")


def refuse_if_not_rerunnable(record: PipelineRecord, action: str) -> None:
    """A KILLED pipeline, or one waiting for replication, neither restarts nor rolls back."""
    if record.status in (PipelineStatus.KILLED, PipelineStatus.PENDING):
        raise InvalidTransitionError(
            f"cannot {action} pipeline {record.name!r}: {_REFUSALS[record.status]}"
        )


_REFUSALS = {
    PipelineStatus.KILLED: "it is KILLED and will be removed",
    PipelineStatus.FAILED: "it is FAILED; restart it (stratus restart), or kill it",
    PipelineStatus.FINISHED: "it is FINISHED; restart it to run it again (stratus restart)",
    PipelineStatus.PENDING: "it is PENDING until its code reaches pipeline.min.replication.count "
    "nimbuses",
}


def refuse_if_update_waits(record: PipelineRecord, action: str) -> None:
    """UpdateInProgressError while an update of ``record`` waits for its replication."""
    waiting = record.update
    if waiting is not None:
        raise UpdateInProgressError(
            f"cannot {action} pipeline {record.name!r}: an update waits for its code to reach "
            f"{waiting.replication_required} nimbuses (request {waiting.request_id or '-'}); "
            "wait until it applies, then roll back"
        )
