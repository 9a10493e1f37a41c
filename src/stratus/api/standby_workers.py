"""The records of standby workers: where the leader places a pipeline's standby worker, what its
supervisor reports of it, and the beat lease a supervisor advertises (docs/standby-workers.md).

A pipeline with ``pipeline.standby: hot`` (or ``standby: hot`` in its manifest) gets a second
worker on another supervisor, started for that pipeline and waiting with its code imported
and its SparkSession up. The leader writes a ``StandbyWorkerPlacement`` to
``<root>/standby-workers/<pipeline>`` in its fenced transactions, only when it changes; the
supervisor it names runs the standby worker and reports a ``StandbyWorkerBeat`` in its own
heartbeat. Promoting the standby worker rewrites the pipeline's assignment (a higher fencing
token) and deletes the placement in one transaction, recorded as the assignment change
``standby_promoted``.

A placement is its own znode, not a field of the ``Assignment``: placing, moving or dropping a
standby worker never rewrites the assignment, so the active worker's fencing token stays still,
and supervisors of an older release never see it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from stratus.api.record_base import RewrittenRecord, StoredRecord

STANDBY_CONF_KEY = "pipeline.standby"
StandbyMode = Literal["none", "hot"]
STANDBY_MODES: tuple[StandbyMode, ...] = ("none", "hot")
MAX_REFUSALS = 5  # the newest refusals a placement keeps


def wants_standby_worker(conf: Mapping[str, Any]) -> bool:
    """Whether a pipeline's conf asks for a standby worker."""
    return bool(conf.get(STANDBY_CONF_KEY) == "hot")


class StandbyWorkerState(StrEnum):
    """Where a standby worker is, as its supervisor reports it."""

    FETCHING = "FETCHING"  # its supervisor gets the pipeline's code and environment
    STARTING = "STARTING"  # its process imports the code and starts its SparkSession
    READY = "READY"  # code imported, SparkSession up: it can be promoted
    REFUSED = "REFUSED"  # its supervisor will not run it (memory, kind): see the reason
    FAILED = "FAILED"  # it exited more often than its restarts allow: see the error


class StandbyWorkerRefusal(StoredRecord):
    """A supervisor's refusal of a standby worker, which the leader keeps in the placement."""

    supervisor: str
    reason: str = Field(max_length=1024)
    at: float = Field(description="wall-clock time the leader saw the refusal")


class StandbyWorkerPlacement(RewrittenRecord, StoredRecord):
    """Where a pipeline's standby worker runs: ``<root>/standby-workers/<pipeline>``.

    Written only in the leader's fenced transactions, and only on a change. ``epoch``,
    ``generation`` and the code fields are the pipeline's as the leader placed it: a supervisor
    keeps a standby worker ready for exactly that code and conf, and a new generation replaces
    it. ``supervisor`` is null while no supervisor can take it (``unplaced_because`` says why).
    """

    pipeline: str
    supervisor: str | None = Field(description="where it runs; null: nowhere now")
    epoch: int = Field(description="the term that wrote it")
    generation: int = Field(description="the pipeline record's generation it is ready for")
    digest: str = Field(description="sha256 of the code it imports, hex")
    size_bytes: int
    blake3: str | None = None
    conf: dict[str, Any] = Field(default_factory=dict, description="the conf it runs with")
    placed: float = Field(description="wall-clock time of the placement")
    refusals: list[StandbyWorkerRefusal] = Field(
        default_factory=list,
        max_length=MAX_REFUSALS,
        description="the newest refusals by supervisors, newest first",
    )
    unplaced_because: str | None = Field(
        default=None, description="why no supervisor runs it; null: it is placed"
    )


class StandbyWorkerBeat(StoredRecord):
    """One standby worker as its supervisor reports it in its heartbeat.

    Reported in the ``SupervisorHeartbeat``, never as a ``WorkerHeartbeat``: a standby worker
    runs no batch and is never taken for the pipeline's running worker.
    """

    pipeline: str
    generation: int
    digest: str
    state: StandbyWorkerState
    since: float = Field(description="wall-clock time it entered its state")
    pid: int | None = Field(default=None, description="its process; null: none (yet)")
    rss_mb: int | None = Field(
        default=None,
        description="resident memory of its processes (JVM included), MiB; null: unmeasured",
    )
    error: str | None = Field(
        default=None, max_length=4096, description="why REFUSED or FAILED; null otherwise"
    )


class BeatLease(StoredRecord):
    """The fast beats' lease a supervisor runs with, advertised in its registration.

    A supervisor's hot workers (active workers of pipelines with a standby worker) stop within
    ``lease_secs + stop_secs + poll_secs`` of its last beat a majority of pacemakers stored:
    the leader promotes a standby worker no earlier than that silence (``floor_secs``).
    """

    lease_secs: float = Field(gt=0, description="supervisor.beat.lease.secs")
    stop_secs: float = Field(ge=0, description="supervisor.beat.stop.secs")
    poll_secs: float = Field(ge=0, description="how often a hot worker reads its beat lease")

    def floor_secs(self, margin_secs: float) -> float:
        """The least silence after which this supervisor's hot workers are surely gone."""
        return self.lease_secs + self.stop_secs + self.poll_secs + margin_secs


class StandbyWorkerView(BaseModel):
    """A pipeline's standby worker as operators see it (``GET /api/v1/pipelines/NAME/workers``):
    the leader's placement joined with what the supervisor it names reports.

    Read by any nimbus from its watched view of ``standby-workers/`` and the heartbeat store.
    The state fields are null while that supervisor reports no standby worker of the
    placement's generation and code (not started yet, or an older release).
    """

    supervisor: str | None = Field(description="where it runs; null: nowhere now")
    host: str | None = Field(
        default=None, description="that supervisor's host, from its registration; null: unknown"
    )
    unplaced_because: str | None = Field(
        default=None, description="why none runs (supervisor null); null: it is placed"
    )
    generation: int | None = Field(
        default=None, description="the pipeline's generation it is ready for; null: not placed"
    )
    placed: float | None = Field(
        default=None, description="wall-clock time of the placement; null: not placed yet"
    )
    refusals: list[StandbyWorkerRefusal] = Field(
        default_factory=list, description="the newest refusals by supervisors, newest first"
    )
    state: StandbyWorkerState | None = Field(
        default=None, description="as its supervisor reports it; null: not reported"
    )
    since: float | None = Field(default=None, description="when it entered its state")
    pid: int | None = Field(default=None, description="its process")
    rss_mb: int | None = Field(
        default=None, description="resident memory of its processes (JVM included), MiB"
    )
    error: str | None = Field(
        default=None, description="why REFUSED or FAILED, secrets redacted; null otherwise"
    )
