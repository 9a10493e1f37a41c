"""The ``cluster.*`` and ``worker.*`` keys: where heartbeats go, and how often they come."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from stratus.config.section import Section


class ClusterSection(Section):
    """Where the workers' and supervisors' heartbeats are stored."""

    prefix: ClassVar[str] = "cluster"

    cluster_state_store: Literal["zookeeper", "pacemaker"] = Field(
        default="zookeeper",
        alias="cluster.state.store",
        description="where workers' and supervisors' heartbeats go: `zookeeper` "
        "(under <zookeeper.root>/heartbeats) or `pacemaker` (the servers of pacemaker.servers; "
        "everything else stays in ZooKeeper)",
    )


class WorkerSection(Section):
    """How often workers and supervisors heartbeat."""

    prefix: ClassVar[str] = "worker"

    worker_heartbeat_frequency_secs: float = Field(
        default=1.0,
        gt=0,
        alias="worker.heartbeat.frequency.secs",
        description="how often workers (through their supervisor) and supervisors heartbeat",
    )
