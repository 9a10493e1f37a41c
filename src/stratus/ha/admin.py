"""What ``stratus haadmin`` does, over the HA service protocol: read and steer services by hand.

Plain functions over a client of each service, so the command stays thin::

    service_state(client)                          # "active", "standby", ...
    check_health(client)                           # raises ServiceUnhealthyError / ...
    transition(client, to_active=True, epoch=12, forced=True)

While automatic failover is on (``ha.automatic.failover.enabled``) the zkfcs own the
services' states: a manual transition is refused unless forced (``--forcemanual``), and a
forced one is sent with the ``user_forced`` source so that the service knows it bypasses its
controller. A forced transition to active needs the epoch to act under; by default it is the
epoch of the group's last term in ZooKeeper (``current_epoch``), so the service's writes
pass the fence exactly as long as no controller wins a newer term.

``-failover FROM TO`` with automatic failover on asks TO's zkfc (found in ZooKeeper, see
``zkfc_registry``) for a graceful failover; that zkfc has the others cede, and refuses if
its own service is not healthy and ready (``graceful_failover``).
"""

from __future__ import annotations

from stratus.errors import StratusError
from stratus.ha.protocol import HAServiceClient, RequestSource, ServiceStatus
from stratus.ha.zkfc_protocol import FailoverResult, ZkfcClient
from stratus.ha.zkfc_registry import ZkfcRegistry
from stratus.security.client_auth import ClientAuth
from stratus.zk.paths import GroupPaths
from stratus.zk.session import ZkSession


class ManualTransitionRefusedError(StratusError):
    """A manual transition while automatic failover is on, without ``--forcemanual``."""


class FailoverNotPossibleError(StratusError):
    """``-failover`` cannot even be asked: flags it does not support, or no zkfc for TO."""


def service_state(client: HAServiceClient) -> str:
    return client.status().state.value


def check_health(client: HAServiceClient) -> None:
    """Return if the service says it is healthy; raise the protocol's error otherwise."""
    client.check_health()


def transition(
    client: HAServiceClient,
    *,
    to_active: bool,
    automatic_failover: bool,
    forced: bool,
    epoch: int | None = None,
) -> ServiceStatus:
    """Make the service active (under ``epoch``) or standby, by hand; see the module doc."""
    if automatic_failover and not forced:
        verb = "transitionToActive" if to_active else "transitionToStandby"
        raise ManualTransitionRefusedError(
            f"automatic failover is enabled (ha.automatic.failover.enabled): refusing to "
            f"-{verb} {client.address} by hand, since its zkfc manages its state. Add "
            "--forcemanual to do it anyway (it can leave two services active), or run "
            "with -c ha.automatic.failover.enabled=false if no zkfc runs"
        )
    source = RequestSource.USER_FORCED if forced else RequestSource.USER
    if to_active:
        if epoch is None:
            raise ValueError("a transition to active needs the epoch to act under")
        return client.transition_to_active(epoch, source)
    return client.transition_to_standby(source)


def current_epoch(session: ZkSession, group: str) -> int:
    """The epoch of the last term won in ``group`` (its first slot's), 0 if none was."""
    path = GroupPaths(session.root, group).epoch(0)
    stat = session.call(f"read the epoch of group {group!r}", session.client.exists, path)
    return stat.version if stat is not None else 0


def failover(
    session: ZkSession,
    group: str,
    to: str,
    auth: ClientAuth,
    *,
    automatic_failover: bool,
    force_fence: bool,
    timeout: float,
) -> FailoverResult:
    """Ask ``to``'s zkfc for a graceful failover to its service; see the module doc.

    Raises ``FailoverNotPossibleError`` (nothing was asked) or ``ZkfcCallError`` (the zkfc
    refused, or the failover failed: its message says why).
    """
    if not automatic_failover:
        raise FailoverNotPossibleError(
            "-failover is done by the zkfcs: it needs ha.automatic.failover.enabled (the "
            "default) and a zkfc beside each service; without zkfcs, use "
            "-transitionToStandby then -transitionToActive"
        )
    if force_fence:
        raise FailoverNotPossibleError(
            "forcefence and forceactive flags not supported with auto-failover enabled: "
            "a graceful failover through the zkfcs never fences (drop --forcefence)"
        )
    endpoint = ZkfcRegistry(session, GroupPaths(session.root, group)).endpoint(to)
    if endpoint is None:
        raise FailoverNotPossibleError(
            f"no zkfc manages {to} in group {group!r}: start `stratus zkfc --target {to}`, "
            "or check the address and ha.zkfc.group"
        )
    with ZkfcClient(endpoint, auth, timeout=timeout) as zkfc:
        return zkfc.graceful_failover()
