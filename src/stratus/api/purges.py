"""A purge: the deletion of a pipeline's checkpoints, recorded until whoever can write did it.

A kill with ``purge`` (or the end of ``pipeline.checkpoint.retention.secs``) does not delete
``<root>/<pipeline>`` in passing: the leader records a ``PurgeOrder`` in ZooKeeper (in the
fenced transaction that removes the pipeline's record, or its kept-checkpoints marker) and
the order stays until the deletion is acknowledged, as a Kubernetes finalizer keeps an
object until its owner cleaned up. The order names who is to do it (the leader itself, or a
live supervisor); that supervisor answers with a ``PurgeOutcome`` of its own::

    order = PurgeOrder(pipeline="etl", root="/ck", cause=PurgeCause.KILL, requested=now, epoch=7)
    order.failed[-1].by if order.failed else None   # who failed last, and why
    PurgeOutcome(pipeline="etl", order=order.id, attempt=1, supervisor="s1", done=True, time=now)

While an order exists a submit of the name is refused (``PurgePendingError``): the new
pipeline would otherwise resume from checkpoints that are being deleted.
"""

from __future__ import annotations

import uuid
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from stratus.api.names import PipelineName
from stratus.api.record_base import RewrittenRecord
from stratus.api.records import PipelineStatus

MAX_ATTEMPTS_KEPT = 8  # the newest failed attempts an order remembers


class PurgeCause(StrEnum):
    KILL = "kill"  # stratus kill --purge
    RETENTION = "retention"  # pipeline.checkpoint.retention.secs is over


class PurgeState(StrEnum):
    PENDING = "pending"  # someone is to delete them, or will be once one can
    FAILED = "failed"  # everyone who could try failed; tried again later (``retry_at``)


class FailedAttempt(RewrittenRecord):
    """One party's failed try: who, in which attempt, and why."""

    by: str  # "nimbus <host:port>" or "supervisor <id>"
    attempt: int
    error: str


class PurgeOrder(RewrittenRecord):
    """``<root>/purges/<pipeline>``: the checkpoints ``<root>/<pipeline>`` are to go.

    The leader reads it and writes it back at every step: what a newer release wrote into
    it is kept (``RewrittenRecord``)."""

    pipeline: PipelineName
    id: str = Field(
        default_factory=lambda: uuid.uuid4().hex,
        description="this order's own id: an answer to an earlier order of the name is not one",
    )
    root: str = Field(description="pipeline.checkpoint.root of the leader that recorded it")
    cause: PurgeCause
    requested: float = Field(description="when it was recorded (wall clock)")
    epoch: int = Field(description="the leader's term that wrote the order last")
    state: PurgeState = PurgeState.PENDING
    attempt: int = Field(default=0, description="grows at every hand-over; 0: none yet")
    supervisor: str | None = Field(
        default=None, description="the supervisor the current attempt is handed to"
    )
    handed: float | None = Field(default=None, description="when it was handed (wall clock)")
    failed: list[FailedAttempt] = Field(
        default=[], description="this round's failed attempts, the newest last"
    )
    reason: str | None = Field(default=None, description="why it is not done yet, or why it failed")
    retry_at: float | None = Field(
        default=None, description="when a FAILED order is tried again (wall clock)"
    )


class PurgeOutcome(BaseModel):
    """``<root>/purge-outcomes/<pipeline>.<order id>.<attempt>``: a supervisor's answer to an
    attempt."""

    model_config = ConfigDict(frozen=True)

    pipeline: PipelineName
    order: str  # the order's id
    attempt: int
    supervisor: str
    done: bool  # the directory is gone (or was never there)
    error: str | None = None  # why not, when not done
    time: float  # wall clock

    def node_name(self) -> str:
        """The name of its znode (a pipeline's name holds no dot, nor does an id)."""
        return f"{self.pipeline}.{self.order}.{self.attempt}"


def supervisor_party(supervisor: str) -> str:
    return f"supervisor {supervisor}"


def nimbus_party(address: str) -> str:
    return f"nimbus {address}"


class PurgeStatus(BaseModel):
    """Where a pipeline's removal and the purge of its checkpoints stand, read from ZooKeeper
    itself (the record first, then the order: a record seen gone means its purge, if one
    was asked, is seen recorded or done)."""

    model_config = ConfigDict(frozen=True)

    pipeline: PipelineName
    record: PipelineStatus | None = Field(
        description="the pipeline record's status; null once it is removed"
    )
    record_purge: bool = Field(
        default=False, description="the record is KILLED with purge: its removal records a purge"
    )
    purge: PurgeOrder | None = Field(
        description="the purge recorded for its checkpoints; null when none is (done, none asked)"
    )

    @property
    def done(self) -> bool:
        """The record is removed (or is another life's) and no purge is left."""
        return self.purge is None and self.record is not PipelineStatus.KILLED
