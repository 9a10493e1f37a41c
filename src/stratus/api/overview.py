"""The records of the API's overview reads, which the web UI polls: every supervisor with its
heartbeat, every pipeline's placement in one answer, this nimbus, and the caller's role.

Each is one cheap read for a page that refreshes every few seconds, where the per-pipeline
routes would cost a request (and a ZooKeeper read) per pipeline.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from stratus.api.records import PipelineWorkers, WarmMemory
from stratus.api.standby_workers import BeatLease


class SupervisorStatus(BaseModel):
    """One registered supervisor, with what its last heartbeat says."""

    id: str
    host: str
    slots: int
    used: int = Field(description="slots its registration says are in use")
    started: float = Field(description="wall-clock start time, seconds since the epoch")
    endpoint: str | None = Field(description="host:port of its endpoint (worker logs); null: none")
    heartbeat_age_secs: float | None = Field(
        description="seconds since its last heartbeat, by this nimbus's clock; null: none seen"
    )
    running: list[str] = Field(description="the pipelines its last heartbeat says it runs")
    stopping: bool = Field(description="its last heartbeat says it is shutting down")
    cordoned: bool = Field(default=False, description="it takes no new pipeline")
    draining: bool = Field(default=False, description="its pipelines are being moved away")
    warm_ready: int = Field(default=0, description="warm workers ready, as its heartbeat says")
    warm: WarmMemory | None = Field(
        default=None,
        description="its warm and standby workers and their memory, as its registration says",
    )
    beat_lease: BeatLease | None = Field(
        default=None,
        description="the fast beats' lease its hot workers run under, as its registration "
        "says; null: it sends no fast beats and hosts no standby worker",
    )


class SupervisorList(BaseModel):
    supervisors: list[SupervisorStatus]


class WorkersOverview(BaseModel):
    """Where every pipeline runs and what its workers last reported, secrets redacted."""

    pipelines: list[PipelineWorkers]


class NimbusSelf(BaseModel):
    """The nimbus that answers: its role, the leader it knows, its ZooKeeper session."""

    address: str
    is_leader: bool
    leader: str | None = Field(description="the leader's host:port; null while nobody leads")
    epoch: int | None
    zookeeper: str = Field(
        description="its ZooKeeper session: new, connected, suspended, expired or closed"
    )


class Caller(BaseModel):
    """Who the request's credentials say the caller is."""

    role: str = Field(description="read, submit or admin (admin on a cluster without auth)")
    principal: str | None = Field(
        default=None,
        description="the principal of the caller's token file entry (null without auth)",
    )
    auth_required: bool = Field(description="the nimbus requires a token or a certificate")
