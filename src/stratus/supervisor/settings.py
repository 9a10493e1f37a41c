"""The supervisor's settings: small frozen records built from the configuration in one place.

Each component of the supervisor takes the record it needs, never the whole ``StratusConfig``,
so a test builds a component from a few values and a reader sees what a component depends on.
Time is given to every component as a ``stratus.api.clock.Clock``: ``time.monotonic`` for
timeouts and periods, a wall clock (``time.time``) only for times written down for others to
read (start times)::

    settings = SupervisorSettings.from_config(conf)
    settings.loop.heartbeat_secs        # worker.heartbeat.frequency.secs
    settings.spec.checkpoint_root       # pipeline.checkpoint.root, or its default directory
"""

from __future__ import annotations

import re
import socket
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from stratus.api.locations import is_local_master
from stratus.api.records import ClusterIdentity, WarmHeld
from stratus.api.standby_workers import BeatLease
from stratus.client_settings import package_limits
from stratus.codedist.factory import DistributorSettings
from stratus.codedist.package_check import PackageLimits
from stratus.config import SUPERVISOR_ID_PATTERN, StratusConfig
from stratus.logs import LogSettings
from stratus.security.access import AccessPolicy
from stratus.security.loopback import is_loopback
from stratus.security.tls import TlsSettings
from stratus.settings import (
    access_policy,
    distributor_settings,
    history_settings,
    http_bounds,
    log_settings,
    server_tls,
    state_store_settings,
    zk_settings,
)
from stratus.state.factory import StateStoreSettings
from stratus.supervisor.adoption import owned_by
from stratus.supervisor.errors import SupervisorStartError
from stratus.supervisor.heartbeat_lease import ride_back_secs
from stratus.supervisor.worker_log import WorkerLogSettings
from stratus.trail import TrailSettings
from stratus.web.bounds import HttpBounds
from stratus.worker.lease_file import BEAT_LEASE_FILE, LEASE_FILE
from stratus.zk.session import ZkSettings

SUPERVISOR_ID = re.compile(SUPERVISOR_ID_PATTERN)  # as supervisor.id is checked at load
RECONCILE_PERIODS = 5  # a read every this many heartbeat periods, in case a watch is missed
MAX_TICK_SECS = 0.2
LEGACY_LOCAL_DIR_PREFIX = "stratus-supervisor-"  # <tmp>/<this><id>: the default up to 0.2.0
BEAT_POLL_SECS = 0.02  # how often a hot worker reads its beat lease (advertised with it)


@dataclass(frozen=True)
class RestartSettings:
    """The ``supervisor.worker.*`` settings of the restart policy."""

    backoff_secs: float  # supervisor.worker.restart.backoff.secs
    max_restarts: int  # supervisor.worker.max.restarts
    reset_secs: float  # supervisor.worker.restart.reset.secs


@dataclass(frozen=True)
class WorkerTimeouts:
    """How long a worker may take to stop, and to show a sign of life."""

    stop_secs: float  # supervisor.worker.stop.secs
    hang_secs: float  # supervisor.worker.timeout.secs


@dataclass(frozen=True)
class LoopSettings:
    """The control loop's periods, and the settings of the workers it owns."""

    heartbeat_secs: float  # worker.heartbeat.frequency.secs
    restart: RestartSettings
    timeouts: WorkerTimeouts

    @property
    def tick_secs(self) -> float:
        return min(MAX_TICK_SECS, self.heartbeat_secs / 2)

    @property
    def reconcile_secs(self) -> float:
        return RECONCILE_PERIODS * self.heartbeat_secs


@dataclass(frozen=True)
class BeatSettings:
    """The fast beats (``supervisor.beat.*``): sent by the beat agent of a supervisor with
    the pacemaker store while it holds a hot worker, which stops once the beat lease they
    renew has ended (``lease_path``, read every ``poll_secs``; SIGKILL ``stop_secs`` later)."""

    interval_secs: float  # supervisor.beat.interval.ms, in seconds
    lease_secs: float  # supervisor.beat.lease.secs
    stop_secs: float  # supervisor.beat.stop.secs
    lease_path: Path  # <local>/lease.beat: the beat agent writes the lease's end there
    poll_secs: float = BEAT_POLL_SECS

    def advertised(self) -> BeatLease:
        """What the registration tells the leader: the floor of silence it may act on."""
        return BeatLease(
            lease_secs=self.lease_secs, stop_secs=self.stop_secs, poll_secs=self.poll_secs
        )


def beat_settings(conf: StratusConfig, local_dir: Path) -> BeatSettings | None:
    """The fast beats with ``cluster.state.store`` pacemaker; None with ZooKeeper, where
    beats would load the ensemble (a hot pipeline's standby worker is then promoted on the
    ordinary timeout)."""
    if conf.cluster_state_store != "pacemaker":
        return None
    return BeatSettings(
        interval_secs=conf.supervisor_beat_interval_ms / 1000,
        lease_secs=conf.supervisor_beat_lease_secs,
        stop_secs=conf.supervisor_beat_stop_secs,
        lease_path=local_dir / BEAT_LEASE_FILE,
    )


@dataclass(frozen=True)
class SpecSettings:
    """What the cluster puts in every worker's spec, unless the pipeline's conf says otherwise."""

    spark_master: str  # pipeline.spark.master
    checkpoint_root: str  # pipeline.checkpoint.root, or its default directory
    heartbeat_secs: float  # worker.heartbeat.frequency.secs
    stop_grace_secs: float  # supervisor.worker.stop.secs
    env_names: frozenset[str] = frozenset()  # supervisor.worker.env: passed beyond the allow-list
    log: LogSettings = field(default_factory=LogSettings)  # log.*: workers log alike
    history: TrailSettings = field(default_factory=TrailSettings)  # history.file: alike
    lease_path: Path | None = None  # where the supervisor hands its lease to its workers
    cluster: ClusterIdentity | None = None  # the cluster: workers refuse others' checkpoints
    legacy_checkpoint_root: str | None = None  # the default root up to 0.2.0, if default
    preflight_timeout_secs: float = 120.0  # supervisor.update.preflight.timeout.secs
    beat: BeatSettings | None = None  # a hot pipeline's worker watches the beat lease
    standby_warm_up_batches: int = 1  # supervisor.standby.warmup.batches


@dataclass(frozen=True)
class WarmSettings:
    """The supervisor's warm workers (``supervisor.worker.warm``, ``.memory.mb``)."""

    enabled: bool = False  # supervisor.worker.warm, as resolved by ``warm_settings``
    backoff_secs: float = 1.0  # supervisor.worker.restart.backoff.secs: after a warm one died
    memory_mb: int | None = None  # supervisor.worker.warm.memory.mb; None: derived
    off: WarmHeld | None = None  # why they are off, when they are
    off_why: str | None = None  # the same, in words (logged at the start, shown in the view)


def warm_settings(conf: StratusConfig) -> WarmSettings:
    """Warm workers as the configuration asks. Left unset, ``supervisor.worker.warm`` is on
    only where a warm worker can serve and costs no more than memory: workers run as the
    supervisor's user (a warm worker starts before it knows its pipeline, hence its user)
    and ``pipeline.spark.master`` is ``local[...]`` (on a cluster, each warm worker would
    hold an application and its executors there). Set to true, it is on with a local or a
    cluster master (the configuration refuses it with other users)."""
    backoff = conf.supervisor_worker_restart_backoff_secs
    memory_mb = conf.supervisor_worker_warm_memory_mb
    asked = "supervisor_worker_warm" in conf.model_fields_set
    off: tuple[WarmHeld, str] | None = None
    if not conf.supervisor_worker_warm:
        off = (WarmHeld.OFF, "supervisor.worker.warm is false")
    elif memory_mb == 0:
        off = (WarmHeld.OFF, "supervisor.worker.warm.memory.mb is 0")
    elif not asked and conf.supervisor_worker_run_as != "supervisor":
        off = (
            WarmHeld.RUN_AS,
            f"supervisor.worker.run.as is {conf.supervisor_worker_run_as!r}: a warm worker "
            "starts before it knows its pipeline's user",
        )
    elif not asked and not is_local_master(conf.pipeline_spark_master):
        off = (
            WarmHeld.MASTER,
            "pipeline.spark.master is not local[...]: a warm worker would hold an application "
            "on the cluster; set supervisor.worker.warm to true to keep them there",
        )
    if off is not None:
        return WarmSettings(False, backoff, memory_mb, off[0], off[1])
    return WarmSettings(True, backoff, memory_mb)


@dataclass(frozen=True)
class UserSettings:
    """``supervisor.worker.run.as`` and its companions."""

    run_as: str = "supervisor"  # supervisor.worker.run.as: supervisor | pool | shared
    users: tuple[str, ...] = ()  # supervisor.worker.users
    min_uid: int = 1000  # supervisor.worker.min.uid
    launcher: str = "auto"  # supervisor.worker.launcher: auto | direct | sudo
    launcher_command: tuple[str, ...] = ()  # supervisor.worker.launcher.command

    @property
    def separate(self) -> bool:
        """Whether workers run as users of their own, not the supervisor's."""
        return self.run_as != "supervisor"


@dataclass(frozen=True)
class DepsSettings:
    """How a supervisor installs pipelines' requirements (``supervisor.deps.*``)."""

    index_url: str | None = None  # supervisor.deps.index.url
    find_links: tuple[str, ...] = ()  # supervisor.deps.find.links
    offline: bool = False  # supervisor.deps.offline
    install_timeout_secs: float = 600.0  # supervisor.deps.install.timeout.secs
    # pack each environment's requirements for executors: some master the cluster may run
    # pipelines on (pipeline.spark.master, pipeline.spark.masters) is not local[...]
    pack: bool = False


@dataclass(frozen=True)
class CodeSettings:
    """Where code comes from, what a fetched package must fit, and how long a failed fetch
    waits before the next."""

    distributor: DistributorSettings
    limits: PackageLimits
    max_package_bytes: int  # nimbus.max.upload.bytes: the local package store's bound
    retry_secs: float  # supervisor.worker.restart.backoff.secs


@dataclass(frozen=True)
class EndpointSettings:
    """The supervisor's endpoint (logs, health, metrics): where it listens and what it
    advertises, authenticated and bounded as the nimbus's API."""

    bind_host: str  # supervisor.http.bind.host, else supervisor.host (loopback if open)
    port: int  # supervisor.http.port; -1: no endpoint
    advertised_host: str  # supervisor.host: the address the nimbuses connect to
    bounds: HttpBounds  # nimbus.http.*
    policy: AccessPolicy  # nimbus.auth.tokens.file
    tls: TlsSettings | None  # nimbus.tls.*
    insecure: bool = False  # nimbus.auth.insecure: an open endpoint on a network, on purpose
    # the hosts its configuration names: supervisor.host (when set), zookeeper.servers,
    # nimbus.seeds, pacemaker.servers (with the pacemaker store); one not loopback means
    # other hosts take part in the cluster, and a loopback endpoint would reach none of them
    cluster_hosts: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.port >= 0

    def spans_hosts(self) -> bool:
        """Whether other hosts take part in the cluster (see ``cluster_hosts``)."""
        return any(not is_loopback(host) for host in self.cluster_hosts)


@dataclass(frozen=True)
class SupervisorSettings:
    """Every setting of one supervisor's components, built once from the configuration."""

    id: str  # supervisor.id, or the host name
    host: str  # supervisor.host, or the host name
    slots: int  # supervisor.slots
    local_dir: Path  # supervisor.local.dir, or default_local_dir
    fence_timeout_secs: float  # supervisor.fence.timeout.secs: the lease
    ride_outages: bool  # supervisor.zookeeper.outage is ride: a proven outage extends the lease
    ride_back_secs: float  # how long a proof's lease lasts (``fence.ride_back_secs``)
    zk: ZkSettings
    state_store: StateStoreSettings
    loop: LoopSettings
    spec: SpecSettings
    code: CodeSettings
    deps: DepsSettings
    log: WorkerLogSettings
    http: EndpointSettings
    warm: WarmSettings = WarmSettings()
    users: UserSettings = UserSettings()
    adopt: bool = True  # supervisor.worker.adopt: workers outlive the supervisor
    runs_keep: int = 50  # pipeline.runs.keep: run records kept per pipeline
    beat: BeatSettings | None = None  # supervisor.beat.*, with the pacemaker store only

    @classmethod
    def from_config(cls, conf: StratusConfig) -> SupervisorSettings:
        """The records; ``SupervisorStartError`` if the host name cannot be the default id."""
        supervisor_id = _checked_id(conf.supervisor_id or socket.gethostname())
        host = conf.supervisor_host or socket.gethostname()
        timeouts = WorkerTimeouts(
            stop_secs=conf.supervisor_worker_stop_secs,
            hang_secs=conf.supervisor_worker_timeout_secs,
        )
        local_dir = (
            Path(conf.supervisor_local_dir)
            if conf.supervisor_local_dir
            else default_local_dir(conf, supervisor_id)
        )
        beat = beat_settings(conf, local_dir)
        return cls(
            id=supervisor_id,
            host=host,
            slots=conf.supervisor_slots,
            local_dir=local_dir,
            fence_timeout_secs=conf.supervisor_fence_timeout_secs,
            ride_outages=conf.supervisor_zookeeper_outage == "ride",
            ride_back_secs=ride_back_secs(
                conf.supervisor_fence_timeout_secs,
                conf.nimbus_supervisor_timeout_secs,
                conf.supervisor_worker_stop_secs,
            ),
            zk=zk_settings(conf),
            state_store=state_store_settings(conf, principal=supervisor_id),
            loop=LoopSettings(
                heartbeat_secs=conf.worker_heartbeat_frequency_secs,
                restart=RestartSettings(
                    backoff_secs=conf.supervisor_worker_restart_backoff_secs,
                    max_restarts=conf.supervisor_worker_max_restarts,
                    reset_secs=conf.supervisor_worker_restart_reset_secs,
                ),
                timeouts=timeouts,
            ),
            spec=SpecSettings(
                spark_master=conf.pipeline_spark_master,
                checkpoint_root=conf.checkpoint_root(),
                heartbeat_secs=conf.worker_heartbeat_frequency_secs,
                stop_grace_secs=timeouts.stop_secs,
                env_names=frozenset(conf.supervisor_worker_env),
                log=log_settings(conf),
                history=history_settings(conf),
                lease_path=local_dir / LEASE_FILE,
                cluster=ClusterIdentity.of(conf.zookeeper_hosts(), conf.zookeeper_root),
                legacy_checkpoint_root=conf.legacy_checkpoint_root(),
                preflight_timeout_secs=conf.supervisor_update_preflight_timeout_secs,
                beat=beat,
                standby_warm_up_batches=conf.supervisor_standby_warmup_batches,
            ),
            code=CodeSettings(
                distributor=distributor_settings(conf),
                limits=package_limits(conf),
                max_package_bytes=conf.nimbus_max_upload_bytes,
                retry_secs=conf.supervisor_worker_restart_backoff_secs,
            ),
            deps=DepsSettings(
                index_url=conf.supervisor_deps_index_url,
                find_links=tuple(conf.supervisor_deps_find_links),
                offline=conf.supervisor_deps_offline,
                install_timeout_secs=conf.supervisor_deps_install_timeout_secs,
                pack=any(
                    not is_local_master(master)
                    for master in [conf.pipeline_spark_master, *conf.pipeline_spark_masters]
                ),
            ),
            log=WorkerLogSettings(
                max_bytes=conf.supervisor_worker_log_max_bytes,
                backups=conf.supervisor_worker_log_backups,
                runs_keep=conf.supervisor_worker_log_runs_keep,
            ),
            http=EndpointSettings(
                bind_host=conf.supervisor_http_bind_host or host,
                port=conf.supervisor_http_port,
                advertised_host=host,
                bounds=http_bounds(conf),
                policy=access_policy(conf),
                tls=server_tls(conf),
                insecure=conf.nimbus_auth_insecure,
                cluster_hosts=_cluster_hosts(conf),
            ),
            warm=warm_settings(conf),
            users=UserSettings(
                run_as=conf.supervisor_worker_run_as,
                users=tuple(conf.supervisor_worker_users),
                min_uid=conf.supervisor_worker_min_uid,
                launcher=conf.supervisor_worker_launcher,
                launcher_command=tuple(conf.supervisor_worker_launcher_command),
            ),
            adopt=conf.supervisor_worker_adopt,
            runs_keep=conf.pipeline_runs_keep,
            beat=beat,
        )


def default_local_dir(conf: StratusConfig, supervisor_id: str) -> Path:
    """``<tmp>/stratus-supervisor-<id>.<cluster>`` (``StratusConfig.cluster_default_dir``); but
    the default of 0.2.0 and earlier, ``<tmp>/stratus-supervisor-<id>``, shared by every
    cluster of the machine, while its ``owner.json`` names this supervisor of this cluster and
    the new directory does not exist yet: a supervisor upgraded in place keeps its workers,
    code and environments there."""
    directory = conf.cluster_default_dir(f"supervisor-{supervisor_id}")
    legacy = Path(tempfile.gettempdir()) / f"{LEGACY_LOCAL_DIR_PREFIX}{supervisor_id}"
    cluster = ClusterIdentity.of(conf.zookeeper_hosts(), conf.zookeeper_root)
    if not directory.exists() and owned_by(legacy, supervisor_id, cluster):
        return legacy
    return directory


def _checked_id(supervisor_id: str) -> str:
    """``supervisor_id``, if it can be one (the configuration checks ``supervisor.id``; the
    host name it defaults to is checked here)."""
    if not SUPERVISOR_ID.fullmatch(supervisor_id):
        raise SupervisorStartError(
            f"the host name {supervisor_id!r} cannot be a supervisor id (1-100 letters, "
            "digits, '_', '.' and '-', starting with a letter or digit); set supervisor.id"
        )
    return supervisor_id


def _cluster_hosts(conf: StratusConfig) -> tuple[str, ...]:
    """The hosts of ``EndpointSettings.cluster_hosts``: the supervisor's own when set (the
    host name it defaults to says nothing about the cluster), and those of the addresses
    it connects to."""
    addresses = [*conf.zookeeper_servers, *conf.nimbus_seeds]
    if conf.cluster_state_store == "pacemaker":
        addresses += conf.pacemaker_servers
    own = [conf.supervisor_host] if conf.supervisor_host else []
    return (*own, *(_host_of(address) for address in addresses))


def _host_of(address: str) -> str:
    """The host of ``host``, ``host:port`` or ``[v6]:port``."""
    try:
        host = httpx.URL(f"http://{address.strip()}").host
    except httpx.InvalidURL:
        return address
    return host or address
