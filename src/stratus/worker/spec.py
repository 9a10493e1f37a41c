"""What a supervisor tells a worker to run: the ``WorkerSpec`` file, and the heartbeat file back.

The supervisor writes ``spec.json`` into the worker's directory and starts
``python -m stratus.worker.main <dir>/spec.json``. The worker writes its
``WorkerHeartbeat`` to ``spec.heartbeat_path`` every ``heartbeat_interval_secs``, replacing
the file atomically; the supervisor reads it and publishes it to the cluster state store
(workers never talk to ZooKeeper: kazoo is not fork-safe, and PySpark forks)::

    spec = WorkerSpec.read(Path(sys.argv[1]))
    write_heartbeat(spec.heartbeat_path, heartbeat)
    read_heartbeat(spec.heartbeat_path)      # None until the first one
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stratus.api.records import ClusterIdentity, FencingToken, WorkerHeartbeat
from stratus.files import write_atomically
from stratus.logs import LogFormat, LogSettings

SPEC_FILE = "spec.json"
HEARTBEAT_FILE = "heartbeat.json"


WARM_READY_PREFIX = "ready-"


def warm_ready_file(pid: int) -> str:
    """The file a warm worker creates in its working directory (its supervisor's pool's)
    once its Spark is up and warmed: its supervisor hands pipelines only to warm workers
    that have one (one handed over earlier would write no heartbeat until then)."""
    return f"{WARM_READY_PREFIX}{pid}"


# The heartbeat: its worker writes it, its supervisor reads it, through the group of the
# worker's directory when the worker runs as another user (stratus.supervisor.worker_access)
HEARTBEAT_FILE_MODE = 0o640


class WorkerSpec(BaseModel):
    """Everything a worker needs to run one pipeline; written by its supervisor.

    Read by the worker and, once it runs, by a supervisor that adopts it, which may be of
    the next release or, after a rollback, of the previous one: fields the reader does not
    know are ignored (docs/upgrades.md), those it knows and that were not written take their
    defaults."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    pipeline: str
    supervisor: str
    epoch: int = Field(description="epoch of the assignment")
    generation: int
    token: FencingToken = Field(
        description="the assignment's fencing token: the worker claims its checkpoint "
        "location with it, and stops once a higher one claims it (checkpoint_owner)"
    )
    digest: str
    kind: Literal["app", "sdp"]
    entrypoint: str | None = Field(default=None, description="app: module:function")
    project: str | None = Field(default=None, description="sdp: project file in code_dir")
    code_dir: Path = Field(description="the unpacked package; put first on sys.path")
    work_dir: Path = Field(description="the worker's own scratch directory")
    conf: dict[str, Any] = Field(description="the pipeline's conf (spark.* and pipeline.*)")
    spark_master: str = Field(description="spark.master: the pipeline's, else the cluster's")
    deps_archive: Path | None = Field(
        default=None,
        description="the requirements' environment packed for a cluster master's executors "
        "(None: no requirements, or a local master, whose executors run the worker's Python)",
    )
    checkpoint_location: str = Field(description="<pipeline.checkpoint.root>/<pipeline>")
    cluster: ClusterIdentity | None = Field(
        default=None,
        description="the cluster of the assignment: the worker refuses a checkpoint location "
        "whose origin names another (checkpoint_origin; None: not checked, a worker run by "
        "hand or started by a supervisor of 0.2.0 or earlier)",
    )
    legacy_checkpoint_location: str | None = Field(
        default=None,
        description="the location under the default root of 0.2.0 and earlier, shared by "
        "every cluster of the machine, when the root is the default: the worker moves this "
        "cluster's checkpoints from there (checkpoint_origin.adopt_legacy)",
    )
    trigger_interval_secs: float | None = Field(
        default=None, description="sdp: run again every interval; app: passed to the function"
    )
    heartbeat_path: Path
    heartbeat_interval_secs: float
    stop_grace_secs: float = Field(
        gt=0,
        description="from a stop request to an exit without waiting for the run: the "
        "supervisor's supervisor.worker.stop.secs, so that a worker whose supervisor died is "
        "gone before the leader may move its pipeline",
    )
    log_level: str = Field(
        default="INFO", description="the supervisor's log.level: the lowest level logged"
    )
    log_format: LogFormat = Field(
        default=LogFormat.TEXT, description="the supervisor's log.format: text or JSON lines"
    )

    history_file: Path | None = Field(
        default=None,
        description="the supervisor's history.file: where the worker records its starts, "
        "stops and batches (None: nowhere)",
    )
    history_fd: int | None = Field(
        default=None,
        ge=3,
        description="a descriptor of the supervisor's history.file, open for appending only, "
        "that a worker of another user inherits in place of history_file, which it may not "
        "open (None: none)",
    )
    lease_path: Path | None = Field(
        default=None,
        description="the file where the supervisor records when its lease ends: the worker "
        "stops itself once that has passed (stratus.worker.lease_file; None: no lease, a "
        "worker run by hand)",
    )

    role: Literal["active", "standby"] = Field(
        default="active",
        description="active: runs the pipeline; standby: a standby worker, which imports the "
        "code, starts its session and waits for promote_path, claiming nothing before",
    )
    promote_path: Path | None = Field(
        default=None,
        description="standby: the file its supervisor writes, with the active worker's spec, "
        "to promote it (None: an active worker)",
    )
    warm_up_batches: int = Field(
        default=1,
        ge=1,
        description="standby: micro-batches of its warm-up query (stratus.worker.warm_up), the "
        "first before READY and the others while it waits (supervisor.standby.warmup.batches)",
    )
    beat_lease_path: Path | None = Field(
        default=None,
        description="the file where the supervisor's beat agent records when the fast beats' "
        "lease ends: a worker of a pipeline with a standby worker stops once that has passed "
        "(None: no beat lease)",
    )
    beat_poll_secs: float | None = Field(
        default=None, gt=0, description="how often the worker reads beat_lease_path"
    )
    beat_stop_secs: float | None = Field(
        default=None,
        ge=0,
        description="from the beat lease's end to the kill of the worker's processes",
    )

    def log_settings(self) -> LogSettings:
        """How the worker logs: as its supervisor does."""
        return LogSettings(logging.getLevelNamesMapping()[self.log_level], self.log_format)

    def write(self, path: Path) -> None:
        write_atomically(path, self.model_dump_json(indent=2).encode())

    @classmethod
    def read(cls, path: Path) -> WorkerSpec:
        return cls.model_validate_json(path.read_bytes())


def write_heartbeat(path: Path, heartbeat: WorkerHeartbeat) -> None:
    """Replace the heartbeat file atomically: a reader sees the old one or the new one."""
    write_atomically(path, heartbeat.encode(), mode=HEARTBEAT_FILE_MODE)


def read_heartbeat(path: Path) -> WorkerHeartbeat | None:
    """The worker's last heartbeat, or None if it wrote none yet (or an unreadable one)."""
    try:
        return WorkerHeartbeat.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None
