"""The zkfc's settings: small frozen records built from the configuration in one place::

settings = ZkfcSettings.from_config(conf, target="n1.example:6627")
settings.health.check_interval        # ha.health.check.interval.secs
settings.fencing_methods              # ha.fencing.methods, parsed (errors at load)

A supervised nimbus's controller (``nimbus.ha.mode: supervised``) is the same zkfc, managing
the ``stratus nimbus`` it runs as its child, once the child's port is known::

    supervised = SupervisedNimbusSettings.from_config(conf)
    settings = supervised.supervising("127.0.0.1:6627", command, environment)

This module is the only one of ``stratus.ha`` that reads the configuration.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace

from stratus.config import StratusConfig
from stratus.ha.errors import ZkfcConfigError
from stratus.ha.failover_controller import ControllerSettings
from stratus.ha.fencing import FenceTarget, MethodSpec, parse_methods
from stratus.ha.health_monitor import HealthSettings
from stratus.ha.preference import PreferenceSettings
from stratus.ha.supervision import SupervisionSettings
from stratus.process import Lifeline
from stratus.zk.paths import check_group_name


@dataclass(frozen=True)
class ZkfcSettings:
    """Everything ``stratus zkfc`` needs besides its ZooKeeper session and client auth."""

    target: FenceTarget  # the managed service: ha.zkfc.target or --target
    group: str  # ha.zkfc.group
    rpc_timeout: float  # ha.health.rpc.timeout.secs: every call to the managed service
    health: HealthSettings
    controller: ControllerSettings
    fencing_methods: list[MethodSpec]
    fencing_timeout: float  # ha.fencing.timeout.secs
    graceful_timeout: float  # ha.fencing.graceful.timeout.secs
    preference: PreferenceSettings = field(default_factory=PreferenceSettings)  # ha.zkfc.preferred
    supervise: SupervisionSettings | None = None  # --supervise or ha.zkfc.supervise.command
    port: int = 0  # ha.zkfc.port (8019 from the configuration); 0: a free port
    failover_timeout: float = 30.0  # ha.zkfc.failover.timeout.secs
    # A supervised nimbus that was made active and stops answering is killed by its
    # controller before it leaves the election (a supervised nimbus's controller only)
    kill_unresponsive: bool = False

    @classmethod
    def from_config(
        cls,
        conf: StratusConfig,
        target: str | None = None,
        supervise: tuple[str, ...] = (),
    ) -> ZkfcSettings:
        address = target or conf.ha_zkfc_target
        if not address:
            raise ZkfcConfigError(
                "stratus zkfc needs the service it manages: give --target host:port "
                "or set ha.zkfc.target"
            )
        return cls._of(conf, _target(address), supervise)

    @classmethod
    def _of(
        cls, conf: StratusConfig, parsed: FenceTarget, supervise: tuple[str, ...] = ()
    ) -> ZkfcSettings:
        try:
            group = check_group_name(conf.ha_zkfc_group)
        except ValueError as exc:
            raise ZkfcConfigError(f"ha.zkfc.group: {exc}") from None
        return cls(
            target=parsed,
            group=group,
            rpc_timeout=conf.ha_health_rpc_timeout_secs,
            health=HealthSettings(
                check_interval=conf.ha_health_check_interval_secs,
                max_backoff=conf.ha_health_max_backoff_secs,
            ),
            controller=ControllerSettings(rejoin_delay=conf.ha_zkfc_rejoin_delay_secs),
            fencing_methods=parse_methods(conf.ha_fencing_methods),
            fencing_timeout=conf.ha_fencing_timeout_secs,
            graceful_timeout=conf.ha_fencing_graceful_timeout_secs,
            supervise=_supervision(conf, supervise),
            port=conf.ha_zkfc_port,
            failover_timeout=conf.ha_zkfc_failover_timeout_secs,
            preference=PreferenceSettings(
                preferred=conf.ha_zkfc_preferred,
                nonpreferred_join_delay=conf.ha_zkfc_nonpreferred_join_delay_secs,
            ),
        )


def _target(address: str) -> FenceTarget:
    try:
        return FenceTarget.parse(address)
    except ValueError as exc:
        raise ZkfcConfigError(f"the zkfc's target: {exc}") from None


@dataclass(frozen=True)
class SupervisedNimbusSettings:
    """What the controller of a supervised nimbus takes of the configuration: the nimbus's
    address, and the zkfc's settings, which ``supervising`` completes with the child's
    address, command and environment once its port is known."""

    host: str  # nimbus.host
    port: int  # nimbus.port; 0: the controller picks a free port, once
    zkfc: ZkfcSettings  # ha.*, its target the nimbus's address until ``supervising``
    restart_backoff: float  # ha.zkfc.supervise.restart.backoff.secs
    stop_grace: float  # ha.zkfc.supervise.stop.grace.secs
    endpoint_port: int  # ha.zkfc.port when set; else 0: a free port

    @classmethod
    def from_config(cls, conf: StratusConfig) -> SupervisedNimbusSettings:
        return cls(
            host=conf.nimbus_host,
            port=conf.nimbus_port,
            zkfc=ZkfcSettings._of(conf, FenceTarget(conf.nimbus_host, conf.nimbus_port)),
            restart_backoff=conf.ha_zkfc_supervise_restart_backoff_secs,
            stop_grace=conf.ha_zkfc_supervise_stop_grace_secs,
            endpoint_port=conf.ha_zkfc_port if "ha_zkfc_port" in conf.model_fields_set else 0,
        )

    def supervising(
        self,
        target: str,
        command: tuple[str, ...],
        environment: tuple[tuple[str, str], ...],
    ) -> ZkfcSettings:
        """The controller of a supervised nimbus: it runs ``command`` (the nimbus, serving
        its HA protocol at ``target``) with ``environment`` added, and its endpoint takes a
        free port unless ``ha.zkfc.port`` is set (its default, 8019, is for one ``stratus
        zkfc`` per host; several nimbuses may share a host, and the port is registered in
        ZooKeeper, where haadmin and the other controllers look)."""
        supervise = SupervisionSettings(
            command,
            restart_backoff=self.restart_backoff,
            stop_grace=self.stop_grace,
            environment=environment,
            lifeline=Lifeline.PIPE,
        )
        return replace(
            self.zkfc,
            target=_target(target),
            supervise=supervise,
            port=self.endpoint_port,
            kill_unresponsive=True,
        )


def _supervision(conf: StratusConfig, command: tuple[str, ...]) -> SupervisionSettings | None:
    """The command given after ``--supervise --``, else ``ha.zkfc.supervise.command``."""
    if not command and conf.ha_zkfc_supervise_command:
        try:
            command = tuple(shlex.split(conf.ha_zkfc_supervise_command))
        except ValueError as exc:
            raise ZkfcConfigError(
                f"ha.zkfc.supervise.command: {exc}: quote it as a shell would"
            ) from None
    if not command:
        return None
    return SupervisionSettings(
        command,
        restart_backoff=conf.ha_zkfc_supervise_restart_backoff_secs,
        stop_grace=conf.ha_zkfc_supervise_stop_grace_secs,
    )
