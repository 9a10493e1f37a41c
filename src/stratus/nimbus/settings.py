"""The nimbus's settings: small frozen records built from the configuration in one place.

Each component of the nimbus takes the record it needs, never the whole ``StratusConfig``,
so a test builds a component from a few values and a reader sees what a component depends
on. This module is the only one of the nimbus that reads the configuration: every key the
nimbus uses becomes a field here, and ``Nimbus(settings)`` takes the records. ``Clock``
(``stratus.api.clock``) is how every component is given time; the default is
``time.monotonic`` for timeouts and periods, and a wall clock (``time.time``) only where a
time is written down for other machines to read (kill times, start times)::

    settings = NimbusSettings.from_config(conf)
    settings.leadership.monitor_freq_secs      # nimbus.monitor.freq.secs
    nimbus = Nimbus(settings)
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from stratus.api.locations import LocationPolicy
from stratus.api.records import ClusterIdentity
from stratus.client_settings import client_auth, package_limits
from stratus.cluster_names import cluster_dir_name
from stratus.codedist.factory import DistributorSettings
from stratus.codedist.package_check import PackageLimits
from stratus.codedist.transfer.bounded_server import ConnectionBounds
from stratus.config import StratusConfig
from stratus.ha.errors import FencingConfigError
from stratus.ha.fencing import (
    REGISTRY,
    MethodSpec,
    parse_methods,
    split_entries,
    supervisor_method_names,
)
from stratus.nimbus.records.purge_plan import PurgeBy
from stratus.nimbus.records.replication_policy import ReplicationPolicy
from stratus.nimbus.records.update_trial import RollbackPolicy
from stratus.security.access import AccessPolicy
from stratus.security.client_auth import ClientAuth
from stratus.security.tls import TlsSettings
from stratus.security.tokens import Credentials
from stratus.settings import (
    access_policy,
    distributor_settings,
    history_settings,
    http_bounds,
    server_tls,
    state_store_settings,
    zk_settings,
)
from stratus.state.factory import StateStoreSettings
from stratus.trail import TrailSettings
from stratus.web.bounds import HttpBounds
from stratus.zk.session import ZkSettings


@dataclass(frozen=True)
class LeadershipSettings:
    """When the leadership controller checks again and runs the leader's duties."""

    lead_check_secs: float  # nimbus.lead.check.secs: out of the queue, check again this often
    monitor_freq_secs: float  # nimbus.monitor.freq.secs: a leader's duties at least this often


class HAMode(StrEnum):
    """Who makes a nimbus the leader (``nimbus.ha.mode``)."""

    SELF = "self"  # it campaigns in the nimbus group's election itself
    ZKFC = "zkfc"  # its failover controller campaigns, and hands it the term it won


@dataclass(frozen=True)
class HASettings:
    """The nimbus's side of the HA service protocol."""

    mode: HAMode  # nimbus.ha.mode
    transition_timeout_secs: float  # how long a transition waits for the controller's thread


@dataclass(frozen=True)
class FencingSettings:
    """How the leader fences a silent supervisor before it moves its pipelines."""

    after_secs: float  # nimbus.supervisor.fence.after.secs (default: half the timeout)
    methods: tuple[MethodSpec, ...]  # nimbus.supervisor.fencing.methods, after the graceful stop
    timeout_secs: float  # nimbus.supervisor.fencing.timeout.secs: the graceful stop, each method
    stop_secs: float  # supervisor.worker.stop.secs: how long workers outlive a killed supervisor


@dataclass(frozen=True)
class StandbySettings:
    """Where the leader may place standby workers (``docs/standby-workers.md``)."""

    max_workers: int = -1  # nimbus.standby.workers.max: in the whole cluster; -1: no bound
    # cluster.state.store is pacemaker: a standby worker goes only to a supervisor that sends
    # fast beats (it advertises a beat lease); with zookeeper none does, and none needs to
    needs_beat_lease: bool = True
    # nimbus.standby.update.hold.secs: how long a new generation waits for its standby
    # worker to be READY before it is applied in place; 0: always in place
    update_hold_secs: float = 120.0
    # nimbus.standby.place.wait.secs: how long a hot pipeline's next standby worker waits
    # for the first batch of the pipeline's new assignment before it is placed; 0: at once
    place_wait_secs: float = 10.0


@dataclass(frozen=True)
class SchedulingSettings:
    """When the scheduling duty judges a supervisor dead or a worker silent."""

    supervisor_timeout_secs: float  # nimbus.supervisor.timeout.secs
    task_timeout_secs: float  # nimbus.task.timeout.secs
    # supervisor.zookeeper.outage is ride: every silence restarts when the connection comes
    # back across a change of ZooKeeper's leader epoch, since a supervisor may have kept its
    # workers meanwhile
    blind_after_reconnect: bool = False
    # pipeline.update.rollback and pipeline.update.rollback.crashes
    rollback: RollbackPolicy = field(default_factory=RollbackPolicy)
    standby: StandbySettings = field(default_factory=StandbySettings)


@dataclass(frozen=True)
class DetectorSettings:
    """How the leader's failure detector judges the supervisors of pipelines with a standby
    worker (``nimbus.detector.*``; ``stratus.nimbus.failover.phi``)."""

    threshold: float  # nimbus.detector.threshold: phi at which a supervisor is suspected
    window: int  # nimbus.detector.window: intervals kept per supervisor
    pause_secs: float  # nimbus.detector.pause.ms: added to the mean interval
    min_std_secs: float  # nimbus.detector.min.std.ms: the least standard deviation
    poll_secs: float  # nimbus.detector.poll.ms: how often the beats are read


@dataclass(frozen=True)
class SubmitSettings:
    """What a submitted package must fit, and the replication a pipeline gets by default."""

    limits: PackageLimits
    replication: ReplicationPolicy  # pipeline.min.replication.count, ...wait.time.sec
    locations: LocationPolicy  # pipeline.spark.masters and the cluster's pipeline.spark.master


@dataclass(frozen=True)
class RequestLimits:
    """How large a request body may be, and how many uploads are read at once."""

    max_upload_bytes: int  # nimbus.max.upload.bytes: a submit's package
    max_request_bytes: int  # nimbus.max.request.bytes: any other request's body
    max_concurrent_uploads: int  # nimbus.max.concurrent.uploads


@dataclass(frozen=True)
class ServiceSettings:
    """The API layer's own values."""

    kill_wait_secs: float  # pipeline.kill.wait.secs, when a kill names no wait
    limits: RequestLimits  # how large a body may be, checked before it is read
    locations: LocationPolicy  # what a rebalance's conf may point at
    ui_refresh_secs: float = 2.0  # nimbus.ui.refresh.secs: the web UI's polling interval
    series_step_secs: float = 10.0  # nimbus.ui.series.step.secs: between two chart points
    series_points: int = 360  # nimbus.ui.series.points: points kept per pipeline


@dataclass(frozen=True)
class ApiSettings:
    """Where the nimbus listens, what it advertises, and who may call it."""

    host: str  # nimbus.host: the address it registers
    bind: str  # nimbus.bind.host, else nimbus.host: where it listens
    port: int  # nimbus.port; 0: a free port, picked when it listens
    policy: AccessPolicy  # nimbus.auth.tokens.file (with a supervised nimbus's controller)
    tls: TlsSettings | None  # nimbus.tls.*
    insecure: bool  # nimbus.auth.insecure: an open API on a network, on purpose
    insecure_warn_secs: float  # nimbus.auth.insecure.warn.secs: how often it says so
    client: ClientAuth  # client.auth.*, client.tls.*: its calls to supervisors


@dataclass(frozen=True)
class LocalDirSettings:
    """Where the nimbus keeps its packages (``nimbus.local.dir``)."""

    configured: Path | None  # nimbus.local.dir; None: the default directory of this cluster
    cluster: ClusterIdentity  # zookeeper.servers and zookeeper.root: the cluster it serves

    def default(self, host: str, port: int) -> Path:
        """``<tmp>/stratus-nimbus-<host>-<port>.<cluster>``, as every default directory of a
        cluster is named (``StratusConfig.cluster_default_dir``)."""
        name = cluster_dir_name(self.cluster.root)
        return Path(tempfile.gettempdir()) / f"stratus-nimbus-{host}-{port}.{name}"


@dataclass(frozen=True)
class PipelineSettings:
    """What the nimbus keeps of each pipeline, and where its checkpoints live."""

    max_record_bytes: int  # nimbus.max.record.bytes
    versions_keep: int  # pipeline.versions.keep
    checkpoint_root: str  # pipeline.checkpoint.root, or its default directory
    purge_by: PurgeBy  # pipeline.checkpoint.purge.by
    checkpoint_retention_secs: float  # pipeline.checkpoint.retention.secs


@dataclass(frozen=True)
class NimbusSettings:
    """Every setting of one nimbus's components, built once from the configuration."""

    leadership: LeadershipSettings
    ha: HASettings
    scheduling: SchedulingSettings
    fencing: FencingSettings | None  # None: the leader never fences a silent supervisor
    detector: DetectorSettings
    submit: SubmitSettings
    service: ServiceSettings
    http: HttpBounds  # the API server's connection bounds
    code_server: ConnectionBounds  # the package server's connection bounds
    code_watch: bool  # nimbus.code.watch: a watch event starts a code sync round at once
    code_sync_freq_secs: float  # nimbus.code.sync.freq.secs
    code_lost_fail_secs: float  # nimbus.code.lost.fail.secs
    api: ApiSettings
    zk: ZkSettings
    history: TrailSettings  # history.file: the trail of this nimbus's terms
    state_store: StateStoreSettings  # cluster.state.store
    distributor: DistributorSettings  # nimbus.code.distributor
    code_port: int | None  # nimbus.code.port, with the local distributor; None: not served
    local_dir: LocalDirSettings
    pipelines: PipelineSettings

    @classmethod
    def from_config(
        cls, conf: StratusConfig, *, fixed: Credentials | None = None
    ) -> NimbusSettings:
        """The records; ``fixed`` are credentials the access policy takes beside the token
        file's (a supervised nimbus's controller). ``TokenFileError`` if the token file is
        unsafe or malformed."""
        locations = LocationPolicy(
            spark_masters=frozenset([*conf.pipeline_spark_masters, conf.pipeline_spark_master])
        )
        return cls(
            leadership=LeadershipSettings(
                lead_check_secs=conf.nimbus_lead_check_secs,
                monitor_freq_secs=conf.nimbus_monitor_freq_secs,
            ),
            ha=HASettings(
                # supervised: `stratus nimbus` runs this nimbus in zkfc mode under its own
                # controller (stratus.ha.supervised_nimbus); a Nimbus that a program builds
                # without one elects itself
                mode=HAMode.ZKFC if conf.nimbus_ha_mode == "zkfc" else HAMode.SELF,
                # a transition waits behind the duty round under way, which a ZooKeeper
                # call bounds by the connection timeout
                transition_timeout_secs=conf.zookeeper_connection_timeout_secs,
            ),
            scheduling=SchedulingSettings(
                supervisor_timeout_secs=conf.nimbus_supervisor_timeout_secs,
                task_timeout_secs=conf.nimbus_task_timeout_secs,
                blind_after_reconnect=conf.supervisor_zookeeper_outage == "ride",
                rollback=RollbackPolicy(
                    enabled=conf.pipeline_update_rollback,
                    crashes=conf.pipeline_update_rollback_crashes,
                ),
                standby=StandbySettings(
                    max_workers=conf.nimbus_standby_workers_max,
                    needs_beat_lease=conf.cluster_state_store != "zookeeper",
                    update_hold_secs=conf.nimbus_standby_update_hold_secs,
                    place_wait_secs=conf.nimbus_standby_place_wait_secs,
                ),
            ),
            fencing=_fencing(conf),
            detector=DetectorSettings(
                threshold=conf.nimbus_detector_threshold,
                window=conf.nimbus_detector_window,
                pause_secs=conf.nimbus_detector_pause_ms / 1000,
                min_std_secs=conf.nimbus_detector_min_std_ms / 1000,
                poll_secs=conf.nimbus_detector_poll_ms / 1000,
            ),
            submit=SubmitSettings(
                limits=package_limits(conf),
                replication=ReplicationPolicy(
                    required=conf.pipeline_min_replication_count,
                    wait_secs=conf.pipeline_max_replication_wait_time_sec,
                ),
                locations=locations,
            ),
            service=ServiceSettings(
                kill_wait_secs=conf.pipeline_kill_wait_secs,
                limits=RequestLimits(
                    max_upload_bytes=conf.nimbus_max_upload_bytes,
                    max_request_bytes=conf.nimbus_max_request_bytes,
                    max_concurrent_uploads=conf.nimbus_max_concurrent_uploads,
                ),
                locations=locations,
                ui_refresh_secs=conf.nimbus_ui_refresh_secs,
                series_step_secs=conf.nimbus_ui_series_step_secs,
                series_points=conf.nimbus_ui_series_points,
            ),
            http=http_bounds(conf),
            code_server=ConnectionBounds(
                max_connections=conf.nimbus_code_max_connections,
                idle_secs=conf.nimbus_code_idle_secs,
                max_per_address=conf.nimbus_code_max_connections_per_address,
                head_secs=conf.nimbus_code_head_timeout_secs,
                linger_secs=conf.nimbus_http_linger_secs,
                linger_max_bytes=conf.nimbus_http_linger_max_bytes,
            ),
            code_watch=conf.nimbus_code_watch,
            code_sync_freq_secs=conf.nimbus_code_sync_freq_secs,
            code_lost_fail_secs=conf.nimbus_code_lost_fail_secs,
            api=ApiSettings(
                host=conf.nimbus_host,
                bind=conf.nimbus_bind(),
                port=conf.nimbus_port,
                policy=access_policy(conf, fixed=fixed),
                tls=server_tls(conf),
                insecure=conf.nimbus_auth_insecure,
                insecure_warn_secs=conf.nimbus_auth_insecure_warn_secs,
                client=client_auth(conf),
            ),
            zk=zk_settings(conf),
            history=history_settings(conf),
            state_store=state_store_settings(conf),
            distributor=distributor_settings(conf),
            code_port=(
                conf.nimbus_code_port
                if conf.nimbus_code_distributor == "local" and conf.nimbus_code_port >= 0
                else None
            ),
            local_dir=LocalDirSettings(
                configured=Path(conf.nimbus_local_dir) if conf.nimbus_local_dir else None,
                cluster=ClusterIdentity.of(conf.zookeeper_hosts(), conf.zookeeper_root),
            ),
            pipelines=PipelineSettings(
                max_record_bytes=conf.nimbus_max_record_bytes,
                versions_keep=conf.pipeline_versions_keep,
                checkpoint_root=conf.checkpoint_root(),
                purge_by=PurgeBy(conf.pipeline_checkpoint_purge_by),
                checkpoint_retention_secs=conf.pipeline_checkpoint_retention_secs,
            ),
        )


def _fencing(conf: StratusConfig) -> FencingSettings | None:
    methods = supervisor_fencing_methods(conf.nimbus_supervisor_fencing_methods)
    after = conf.supervisor_fence_after()
    if after is None:
        return None
    return FencingSettings(
        after_secs=after,
        methods=methods,
        timeout_secs=conf.nimbus_supervisor_fencing_timeout_secs,
        stop_secs=conf.supervisor_worker_stop_secs,
    )


SUPERVISOR_METHODS_KEY = "nimbus.supervisor.fencing.methods"


def supervisor_fencing_methods(text: str) -> tuple[MethodSpec, ...]:
    """``nimbus.supervisor.fencing.methods`` (empty: none); ``FencingConfigError`` naming a
    bad entry, and saying why a method that cannot fence a supervisor (its registry entry's
    ``not_for_supervisors``: ``graceful``, ``epoch``) has no place there."""
    if not text.strip():
        return ()
    for name, method in REGISTRY.items():
        why = method.not_for_supervisors
        if why is not None and any(
            entry.split("(")[0].strip() == name for entry in split_entries(text)
        ):
            raise FencingConfigError(f"{SUPERVISOR_METHODS_KEY}: leave out {name}: {why}")
    return tuple(parse_methods(text, SUPERVISOR_METHODS_KEY, supervisor_method_names()))
