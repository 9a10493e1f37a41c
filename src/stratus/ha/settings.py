"""The zkfc's settings: small frozen records built from the configuration in one place::

settings = ZkfcSettings.from_config(conf, target="n1.example:6627")
settings.health.check_interval        # ha.health.check.interval.secs
settings.fencing_methods              # ha.fencing.methods, parsed (errors at load)

A supervised nimbus's controller (``nimbus.ha.mode: supervised``) is the same zkfc, managing
the ``stratus nimbus`` it runs as its child::

    settings = ZkfcSettings.supervising(conf, "127.0.0.1:6627", command, environment)
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
        try:
            parsed = FenceTarget.parse(address)
        except ValueError as exc:
            raise ZkfcConfigError(f"the zkfc's target: {exc}") from None
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

    @classmethod
    def supervising(
        cls,
        conf: StratusConfig,
        target: str,
        command: tuple[str, ...],
        environment: tuple[tuple[str, str], ...],
    ) -> ZkfcSettings:
        """The controller of a supervised nimbus: it runs ``command`` (the nimbus, serving
        its HA protocol at ``target``) with ``environment`` added, and its endpoint takes a
        free port unless ``ha.zkfc.port`` is set (its default, 8019, is for one ``stratus
        zkfc`` per host; several nimbuses may share a host, and the port is registered in
        ZooKeeper, where haadmin and the other controllers look)."""
        settings = cls.from_config(conf, target=target)
        supervise = SupervisionSettings(
            command,
            restart_backoff=conf.ha_zkfc_supervise_restart_backoff_secs,
            stop_grace=conf.ha_zkfc_supervise_stop_grace_secs,
            environment=environment,
            lifeline=Lifeline.PIPE,
        )
        return replace(
            settings,
            supervise=supervise,
            port=conf.ha_zkfc_port if "ha_zkfc_port" in conf.model_fields_set else 0,
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
