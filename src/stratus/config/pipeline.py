"""The ``package.*`` and ``pipeline.*`` keys: what a package may hold, and how pipelines
are replicated, updated, checkpointed and run."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from stratus.config.section import Section

LEGACY_CHECKPOINT_DIR = "stratus-checkpoints"  # <tmp>/<this>: the default up to 0.2.0


class PackageSection(Section):
    """What a pipeline's package may hold once unpacked."""

    prefix: ClassVar[str] = "package"

    package_max_unpacked_bytes: int = Field(
        default=1024 * 1024 * 1024,
        gt=0,
        alias="package.max.unpacked.bytes",
        description="largest total size of a package's files once unpacked",
    )
    package_max_ratio: float = Field(
        default=200.0,
        gt=1,
        alias="package.max.ratio",
        description="largest ratio of unpacked to packed size, for the whole package and "
        "for each entry (a zip bomb's is in the thousands)",
    )
    package_max_entries: int = Field(
        default=10_000,
        gt=0,
        alias="package.max.entries",
        description="most files and directories a package may hold",
    )


class PipelineSection(Section):
    """Pipelines: code replication, versions and updates, checkpoints, Spark masters
    and run records."""

    prefix: ClassVar[str] = "pipeline"

    pipeline_min_replication_count: int = Field(
        default=1,
        ge=1,
        alias="pipeline.min.replication.count",
        description="nimbuses that must hold a pipeline's code before it is activated "
        "(the leader included); a pipeline's conf may set its own",
    )
    pipeline_max_replication_wait_time_sec: int = Field(
        default=60,
        ge=-1,
        alias="pipeline.max.replication.wait.time.sec",
        description="longest wait for pipeline.min.replication.count before the pipeline is "
        "activated anyway; -1 waits forever; a pipeline's conf may set its own",
    )
    pipeline_versions_keep: int = Field(
        default=3,
        ge=2,
        le=20,
        alias="pipeline.versions.keep",
        description="versions of each pipeline whose package and conf the nimbuses keep (the "
        "current one included), to roll back to (stratus rollback) and to restart a FAILED "
        "or FINISHED pipeline with",
    )
    pipeline_update_rollback: bool = Field(
        default=True,
        alias="pipeline.update.rollback",
        description="roll an updated pipeline back to its previous version when the new "
        "version's worker fails (FAILED, or pipeline.update.rollback.crashes crashes) before "
        "its first committed batch; a pipeline's conf may set its own. An update whose entry "
        "point does not import is refused whatever this says",
    )
    pipeline_update_rollback_crashes: int = Field(
        default=3,
        ge=1,
        le=1000,
        alias="pipeline.update.rollback.crashes",
        description="crashes of a new version's worker before its first committed batch "
        "that roll it back (a worker the supervisor gave up on rolls it back sooner)",
    )
    pipeline_kill_wait_secs: float = Field(
        default=30.0,
        ge=0,
        alias="pipeline.kill.wait.secs",
        description="time between `kill` and the removal of the pipeline's record, "
        "when the kill names no wait",
    )
    pipeline_checkpoint_root: str | None = Field(
        default=None,
        alias="pipeline.checkpoint.root",
        description="where each pipeline's checkpoints live, under <root>/<pipeline>: a "
        "directory or any Hadoop-compatible URL that every supervisor reaches (default: "
        "stratus-checkpoints.<cluster> under the system's temporary directory, <cluster> "
        "naming the cluster's ZooKeeper root, for one machine only); "
        "the operator's alone: a pipeline's conf may only add pipeline.checkpoint.subpath "
        "below its own directory",
    )
    pipeline_checkpoint_schemes: list[str] = Field(
        default=["file", "hdfs", "s3a", "s3", "gs", "abfs", "abfss"],
        min_length=1,
        alias="pipeline.checkpoint.schemes",
        description="the URL schemes pipeline.checkpoint.root may use (a plain path is "
        "`file`); checked when the configuration is loaded",
    )
    pipeline_checkpoint_retention_secs: float = Field(
        default=0.0,
        ge=0,
        alias="pipeline.checkpoint.retention.secs",
        description="how long the checkpoints a kill keeps (a kill without --purge) stay "
        "after the killed pipeline's record is removed; then the leader deletes them (only "
        "<root>/<pipeline>, never for a pipeline submitted again meanwhile). 0: kept until "
        "a kill --purge of a later submit, or the operator, removes them",
    )
    pipeline_checkpoint_purge_by: Literal["auto", "supervisor", "nimbus"] = Field(
        default="auto",
        alias="pipeline.checkpoint.purge.by",
        description="who deletes a pipeline's checkpoints for a kill --purge or at the end of "
        "their retention: `supervisor` (a live supervisor, which can write the root its "
        "workers write), `nimbus` (the leader itself: a root the nimbuses can write, such as "
        "a shared mount), or `auto` (the leader tries when <root>/<pipeline> is on a file "
        "system it reaches and exists there, and hands the purge to a supervisor when it "
        "cannot delete it)",
    )
    pipeline_spark_masters: list[str] = Field(
        default=[],
        alias="pipeline.spark.masters",
        description="the Spark masters a pipeline's conf may name in spark.master, "
        "pipeline.spark.master or spark.remote besides local[...] and the cluster's own "
        "pipeline.spark.master (e.g. `yarn`, `spark://m1:7077`); anything else is refused "
        "at submit and rebalance",
    )
    pipeline_spark_master: str = Field(
        default="local[*]",
        min_length=1,
        alias="pipeline.spark.master",
        description="spark.master of the workers when the pipeline's conf sets none "
        "(`local[*]`, `spark://...`, `yarn`, `k8s://...`)",
    )
    pipeline_runs_keep: int = Field(
        default=50,
        ge=1,
        le=10000,
        alias="pipeline.runs.keep",
        description="run records kept in ZooKeeper per pipeline (stratus runs); the "
        "supervisor that starts a run deletes the oldest ended ones beyond it",
    )

    def legacy_checkpoint_root(self) -> str | None:
        """The default root up to 0.2.0, shared by every cluster of the machine
        (``<tmp>/stratus-checkpoints``), when the root is the default; None when configured."""
        if self.pipeline_checkpoint_root:
            return None
        return str(Path(tempfile.gettempdir()) / LEGACY_CHECKPOINT_DIR)
