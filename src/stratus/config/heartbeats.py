"""The ``cluster.*`` and ``worker.*`` keys: where heartbeats go, how often they come, and
how often a worker's streaming state is written whole."""

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
    """How often workers and supervisors heartbeat; how often a worker's Spark session
    writes a snapshot of its streaming state."""

    prefix: ClassVar[str] = "worker"

    worker_heartbeat_frequency_secs: float = Field(
        default=1.0,
        gt=0,
        alias="worker.heartbeat.frequency.secs",
        description="how often workers (through their supervisor) and supervisors heartbeat",
    )
    worker_state_snapshot_min_deltas: int = Field(
        default=2,
        ge=1,
        alias="worker.state.snapshot.min.deltas",
        description="spark.sql.streaming.stateStore.minDeltasForSnapshot of every worker's "
        "Spark session (Spark's default: 10): the delta files after which the state store's "
        "maintenance writes a snapshot, so that a restarted or promoted worker's first batch "
        "replays fewer of them; a pipeline's conf that sets the Spark key keeps its own",
    )
    worker_state_maintenance_secs: float = Field(
        default=2.0,
        gt=0,
        alias="worker.state.maintenance.secs",
        description="spark.sql.streaming.stateStore.maintenanceInterval of every worker's "
        "Spark session (Spark's default: 60 s): how often the state store's maintenance "
        "looks for state to snapshot and old files to delete; a pipeline's conf that sets "
        "the Spark key keeps its own",
    )
