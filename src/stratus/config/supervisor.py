"""The ``supervisor.*`` keys: a supervisor and the workers it runs."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from stratus.config.section import Section

SUPERVISOR_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"  # a znode name and a directory name


class SupervisorSection(Section):
    """A supervisor: its name and address, slots and directory, how it fences itself,
    and how it runs, restarts, warms, adopts and logs its workers."""

    prefix: ClassVar[str] = "supervisor"

    supervisor_worker_env: list[str] = Field(
        default=[],
        alias="supervisor.worker.env",
        description="names of the supervisor's environment variables its workers get, "
        "beyond the built-in allow-list (PATH, HOME, LANG, JAVA_HOME, SPARK_HOME, ...); "
        "a pipeline adds its own with pipeline.env.NAME",
    )
    supervisor_id: str | None = Field(
        default=None,
        pattern=SUPERVISOR_ID_PATTERN,
        alias="supervisor.id",
        description="name of a supervisor, unique in the cluster (default: the host name)",
    )
    supervisor_host: str | None = Field(
        default=None,
        alias="supervisor.host",
        description="address a supervisor advertises: registered in ZooKeeper, where the "
        "nimbuses find its endpoint (never 0.0.0.0 or ::; default: the host name); also "
        "the endpoint's bind address unless supervisor.http.bind.host is set",
    )
    supervisor_slots: int = Field(
        default=4,
        ge=1,
        le=1024,
        alias="supervisor.slots",
        description="how many pipelines a supervisor runs at once (one worker each)",
    )
    supervisor_local_dir: str | None = Field(
        default=None,
        alias="supervisor.local.dir",
        description="where a supervisor keeps code, worker directories and logs (default: "
        "stratus-supervisor-<id>.<cluster> under the system's temporary directory, <cluster> "
        "naming the cluster's ZooKeeper root)",
    )
    supervisor_fence_timeout_secs: float = Field(
        default=6.0,
        gt=0,
        alias="supervisor.fence.timeout.secs",
        description="a supervisor that has written no heartbeat for this long (ZooKeeper "
        "unreachable) stops its workers itself, unless it proves an outage of ZooKeeper "
        "(supervisor.zookeeper.outage); with supervisor.worker.stop.secs it must stay "
        "below nimbus.supervisor.timeout.secs, so a pipeline never runs twice",
    )
    supervisor_zookeeper_outage: Literal["fence", "ride"] = Field(
        default="ride",
        alias="supervisor.zookeeper.outage",
        description="what a supervisor that cannot write its heartbeats to ZooKeeper does at "
        "supervisor.fence.timeout.secs: `ride` keeps its workers while it can prove that no "
        "ZooKeeper quorum serves (a majority of the members of zookeeper.servers, asked at "
        "once, say they serve nothing or refuse the connection as "
        "zookeeper.outage.refusals trusts, and none that it serves), and fences otherwise, "
        "as it does when zookeeper.servers does not name every voting member once (each "
        "proof keeps the lease nimbus.supervisor.timeout.secs - supervisor.worker.stop.secs "
        "- 0.5 s from its start, at least supervisor.fence.timeout.secs, so that the session "
        "may reconnect); `fence` stops them on time whatever the cause; every nimbus must be "
        "given the same value",
    )
    supervisor_worker_stop_secs: float = Field(
        default=3.0,
        gt=0,
        alias="supervisor.worker.stop.secs",
        description="time a worker gets to stop its queries on SIGTERM before SIGKILL",
    )
    supervisor_worker_timeout_secs: float = Field(
        default=20.0,
        gt=0,
        alias="supervisor.worker.timeout.secs",
        description="a supervisor kills and restarts a worker silent for this long; it must "
        "stay below nimbus.task.timeout.secs",
    )
    supervisor_worker_max_restarts: int = Field(
        default=3,
        ge=0,
        alias="supervisor.worker.max.restarts",
        description="crashes in a row, each before the pipeline ran for "
        "supervisor.worker.restart.reset.secs, after which the supervisor gives up and the "
        "pipeline is FAILED with the worker's error",
    )
    supervisor_worker_restart_backoff_secs: float = Field(
        default=1.0,
        gt=0,
        alias="supervisor.worker.restart.backoff.secs",
        description="wait before restarting a crashed worker; doubles at every crash in a "
        "row, up to 30 times this",
    )
    supervisor_worker_restart_reset_secs: float = Field(
        default=60.0,
        gt=0,
        alias="supervisor.worker.restart.reset.secs",
        description="a worker that ran this long before crashing starts a new count of "
        "crashes in a row",
    )
    supervisor_worker_warm: bool = Field(
        default=True,
        alias="supervisor.worker.warm",
        description="keep a warm worker per free slot, within supervisor.worker.warm.memory.mb: "
        "a process whose SparkSession is already up with the cluster's default static conf, "
        "so that an assigned pipeline whose static conf matches starts in it in about a "
        "second; left unset, it is on only where workers run as the supervisor's user and "
        "pipeline.spark.master is local[...] (see docs/supervisor.md); false: none",
    )
    supervisor_worker_warm_memory_mb: int | None = Field(
        default=None,
        ge=0,
        alias="supervisor.worker.warm.memory.mb",
        description="memory, in MiB, the warm workers may use together (each counted at its "
        "measured resident memory, JVM included, once up); default: a quarter of the "
        "machine's memory or of the supervisor's cgroup limit, whichever is less; 0: no "
        "warm workers; and no warm worker starts while the machine's available memory is "
        "short (see docs/supervisor.md)",
    )
    supervisor_worker_adopt: bool = Field(
        default=True,
        alias="supervisor.worker.adopt",
        description="workers outlive their supervisor: a SIGTERM, a crash or an upgrade "
        "of the supervisor leaves them running on the lease they saw, and a supervisor "
        "started again on the same supervisor.local.dir adopts them; false: a supervisor "
        "that stops (or dies) stops its workers, and one that starts kills what it finds "
        "left (see docs/supervisor.md)",
    )
    supervisor_worker_run_as: Literal["supervisor", "pool", "shared"] = Field(
        default="supervisor",
        alias="supervisor.worker.run.as",
        description="which operating-system user runs the workers: `supervisor` (the "
        "supervisor's own, which lets a pipeline's code read the daemons' credentials), "
        "`pool` (one user of supervisor.worker.users per running pipeline, never two "
        "pipelines at once) or `shared` (the one user of supervisor.worker.users for every "
        "worker: walled off from the daemons, not from each other); see docs/security.md",
    )
    supervisor_worker_users: list[str] = Field(
        default=[],
        alias="supervisor.worker.users",
        description="the operating-system users workers run as (supervisor.worker.run.as "
        "`pool`: at least supervisor.slots of them; `shared`: exactly one); never root, "
        "none below supervisor.worker.min.uid",
    )
    supervisor_worker_min_uid: int = Field(
        default=1000,
        ge=1,
        alias="supervisor.worker.min.uid",
        description="the lowest uid a worker may run as: system accounts below it are "
        "refused (the worker launcher's own min.uid applies too)",
    )
    supervisor_worker_launcher: Literal["auto", "direct", "sudo"] = Field(
        default="auto",
        alias="supervisor.worker.launcher",
        description="how a supervisor runs workers as another user: `direct` (it runs as "
        "root and switches user itself), `sudo` (through supervisor.worker.launcher.command) "
        "or `auto` (direct when root, else sudo)",
    )
    supervisor_worker_launcher_command: list[str] = Field(
        default=["sudo", "-n", "/opt/stratus/venv/bin/stratus-worker-launcher"],
        min_length=1,
        alias="supervisor.worker.launcher.command",
        description="the privileged worker launcher a supervisor that is not root runs "
        "(deploy/stratus-worker-launcher.sudoers allows it)",
    )
    supervisor_deps_index_url: str | None = Field(
        default=None,
        min_length=1,
        alias="supervisor.deps.index.url",
        description="the package index a supervisor installs pipelines' requirements from "
        "(pip's --index-url); unset: pip's own default or its configuration",
    )
    supervisor_deps_find_links: list[str] = Field(
        default=[],
        alias="supervisor.deps.find.links",
        description="local wheelhouse directories (or URLs) searched for pipelines' "
        "requirements besides the index (pip's --find-links)",
    )
    supervisor_deps_offline: bool = Field(
        default=False,
        alias="supervisor.deps.offline",
        description="install pipelines' requirements from supervisor.deps.find.links only, "
        "never from an index (pip's --no-index)",
    )
    supervisor_deps_install_timeout_secs: float = Field(
        default=600.0,
        gt=0,
        alias="supervisor.deps.install.timeout.secs",
        description="longest time the installation of one pipeline environment may take; "
        "past it the install is killed and the pipeline is FAILED",
    )
    supervisor_update_preflight_timeout_secs: float = Field(
        default=120.0,
        ge=0,
        alias="supervisor.update.preflight.timeout.secs",
        description="longest time the import of an update's entry point, in the new code's "
        "environment, may take before the old worker is stopped; an import that fails or "
        "takes longer refuses the update and the old worker runs on. 0: no preflight",
    )
    supervisor_http_port: int = Field(
        default=6629,
        ge=-1,
        le=65535,
        alias="supervisor.http.port",
        description="port of a supervisor's endpoint (worker logs, health, metrics), "
        "authenticated and bounded as the nimbus's API (0 picks a free port, -1 serves none)",
    )
    supervisor_http_bind_host: str | None = Field(
        default=None,
        alias="supervisor.http.bind.host",
        description="address a supervisor's endpoint listens on, such as 0.0.0.0 (default: "
        "supervisor.host); without nimbus.auth.tokens.file (or nimbus.auth.insecure) it "
        "listens on loopback only",
    )
    supervisor_worker_log_max_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        alias="supervisor.worker.log.max.bytes",
        description="size at which a worker's log file is rotated (worker.log becomes "
        "worker.log.1, and so on)",
    )
    supervisor_worker_log_backups: int = Field(
        default=3,
        ge=0,
        le=100,
        alias="supervisor.worker.log.backups",
        description="rotated files kept of each worker run's log, besides the current one "
        "(the oldest is deleted)",
    )
    supervisor_worker_log_runs_keep: int = Field(
        default=10,
        ge=1,
        le=1000,
        alias="supervisor.worker.log.runs.keep",
        description="runs of a pipeline whose worker logs a supervisor keeps (workers/"
        "<pipeline>/runs/<run>/); a new run deletes the oldest beyond it",
    )
    supervisor_standby_warmup_batches: int = Field(
        default=40,
        ge=1,
        le=1000,
        alias="supervisor.standby.warmup.batches",
        description="micro-batches of the small streaming query a standby worker warms its "
        "SparkSession up with: the first before it is READY, the others while it waits, so "
        "that the JVM has compiled Spark's hot code before a promotion (docs/standby-workers.md)",
    )
    supervisor_beat_interval_ms: int = Field(
        default=100,
        ge=10,
        le=10_000,
        alias="supervisor.beat.interval.ms",
        description="with cluster.state.store pacemaker, how often a supervisor that runs the "
        "worker of a pipeline with pipeline.standby hot sends a fast beat to the pacemakers "
        "(its beat agent); three beats must fit in supervisor.beat.lease.secs",
    )
    supervisor_beat_lease_secs: float = Field(
        default=0.8,
        gt=0,
        alias="supervisor.beat.lease.secs",
        description="the beat lease: a worker of a pipeline with pipeline.standby hot stops "
        "once no beat a majority of pacemaker.servers stored has started within this long; "
        "with supervisor.beat.stop.secs it must stay below nimbus.supervisor.timeout.secs",
    )
    supervisor_beat_stop_secs: float = Field(
        default=0.1,
        ge=0,
        alias="supervisor.beat.stop.secs",
        description="time a worker whose beat lease ended gets to stop its queries before "
        "SIGKILL of its process group (its checkpoint tolerates the kill)",
    )
