"""The ``ha.*`` and ``elect.*`` keys: failover controllers, ``stratus haadmin`` and
``stratus elect``."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from stratus.config.section import Section


class HaSection(Section):
    """A failover controller (`stratus zkfc`, a supervised nimbus's): its election,
    endpoint, health checks and fencing; and `stratus haadmin`."""

    prefix: ClassVar[str] = "ha"

    ha_zkfc_target: str | None = Field(
        default=None,
        alias="ha.zkfc.target",
        description="`stratus zkfc`: host:port of the service it manages (its HA protocol's "
        "address; --target overrides)",
    )
    ha_zkfc_group: str = Field(
        default="nimbus",
        alias="ha.zkfc.group",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): the election "
        "group its service takes part in",
    )
    ha_zkfc_rejoin_delay_secs: float = Field(
        default=1.0,
        gt=0,
        alias="ha.zkfc.rejoin.delay.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): wait before "
        "rejoining the election after fencing failed, the service refused to become active, or it "
        "reported a state it was not given",
    )
    ha_zkfc_port: int = Field(
        default=8019,
        ge=0,
        le=65535,
        alias="ha.zkfc.port",
        description="port of a failover controller's own endpoint (cede-active, "
        "graceful-failover; admin only), on its service's host; 0 picks a free port. A "
        "supervised nimbus's controller picks a free port unless this is set, and registers "
        "it in ZooKeeper, where haadmin and the other controllers look",
    )
    ha_zkfc_failover_timeout_secs: float = Field(
        default=30.0,
        gt=0,
        alias="ha.zkfc.failover.timeout.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): how long a "
        "graceful failover waits for the target's service to become active before the nodes that "
        "ceded rejoin",
    )
    ha_zkfc_preferred: bool = Field(
        default=False,
        alias="ha.zkfc.preferred",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): its service is "
        "the group's preferred active: the others let it win, and fail back to it (gracefully) "
        "when it comes back healthy",
    )
    ha_zkfc_nonpreferred_join_delay_secs: float = Field(
        default=5.0,
        ge=0,
        alias="ha.zkfc.nonpreferred.join.delay.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): a zkfc that is "
        "not preferred waits this long before joining the election while the preferred node "
        "campaigns (also after ceding to it)",
    )
    ha_zkfc_supervise_command: str | None = Field(
        default=None,
        alias="ha.zkfc.supervise.command",
        description="`stratus zkfc`: run the service as its child with this command (split "
        "as a shell would), restart it when it dies, stop it with the zkfc "
        "(--supervise -- COMMAND... overrides)",
    )
    ha_zkfc_supervise_restart_backoff_secs: float = Field(
        default=1.0,
        gt=0,
        alias="ha.zkfc.supervise.restart.backoff.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): wait before "
        "restarting its supervised service, doubling at every exit in a row up to 30 times this",
    )
    ha_zkfc_supervise_stop_grace_secs: float = Field(
        default=10.0,
        gt=0,
        alias="ha.zkfc.supervise.stop.grace.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): time its "
        "supervised service has to exit after SIGTERM when the zkfc stops, before SIGKILL",
    )
    ha_health_check_interval_secs: float = Field(
        default=1.0,
        gt=0,
        alias="ha.health.check.interval.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): how often it "
        "checks its service's status and health",
    )
    ha_health_rpc_timeout_secs: float = Field(
        default=5.0,
        gt=0,
        alias="ha.health.rpc.timeout.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): a health or "
        "status call unanswered this long means the service is not responding (and is failed over)",
    )
    ha_health_max_backoff_secs: float = Field(
        default=5.0,
        gt=0,
        alias="ha.health.max.backoff.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): longest wait "
        "between attempts to reach a service that does not answer (the wait doubles from "
        "ha.health.check.interval.secs)",
    )
    ha_fencing_methods: str = Field(
        default="graceful, epoch",
        alias="ha.fencing.methods",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): how the old "
        "active is fenced, a comma-separated list of methods tried in order (the table of "
        "methods in zkfc.md: graceful, epoch, shell(command), process, sshfence, ...)",
    )
    ha_fencing_timeout_secs: float = Field(
        default=10.0,
        gt=0,
        alias="ha.fencing.timeout.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): time one "
        "shell, process or ssh fence may take before it is killed and counted as failed",
    )
    ha_fencing_graceful_timeout_secs: float = Field(
        default=1.0,
        gt=0,
        alias="ha.fencing.graceful.timeout.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): timeout of "
        "each of the graceful fence's two transition-to-standby calls (the second only after a "
        "refusal, not after a timeout)",
    )
    ha_automatic_failover_enabled: bool = Field(
        default=True,
        alias="ha.automatic.failover.enabled",
        description="zkfcs manage the services' states: `stratus haadmin` refuses manual "
        "transitions unless --forcemanual",
    )


class ElectSection(Section):
    """`stratus elect`: a command run under leader election."""

    prefix: ClassVar[str] = "elect"

    elect_stop_grace_secs: float | None = Field(
        default=None,
        gt=0,
        alias="elect.stop.grace.secs",
        description="`stratus elect`: time between SIGTERM and SIGKILL of the command "
        "(default: a fifth of the session timeout, at most 1 s)",
    )
