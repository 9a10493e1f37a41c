"""``stratus haadmin``: read and steer HA services by hand, with Hadoop's verbs.

    stratus haadmin -getServiceState n1.example:6627       # prints: active
    stratus haadmin -getAllServiceState                    # every nimbus.seeds entry
    stratus haadmin -checkHealth n1.example:6627           # exit 0 if healthy
    stratus haadmin -transitionToStandby n1.example:6627 --forcemanual
    stratus haadmin -transitionToActive n1.example:6627 --forcemanual [--epoch N]
    stratus haadmin -failover n1.example:6627 n2.example:6627   # graceful, through the zkfcs

A service is named by its ``host:port``. Exit codes are Hadoop's: 0 on success, 255 (its -1)
when the service is unhealthy, does not answer, refuses, or the transition is refused here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

import click

from stratus.cli.options import with_config
from stratus.client_settings import client_auth
from stratus.config import StratusConfig
from stratus.errors import StratusError
from stratus.ha import admin
from stratus.ha.protocol import HAServiceClient, HAServiceError
from stratus.settings import zk_settings
from stratus.zk.session import ZkSession

FAILED = 255  # Hadoop's haadmin returns -1
T = TypeVar("T")


def _client(conf: StratusConfig, address: str) -> HAServiceClient:
    return HAServiceClient(address, client_auth(conf), timeout=conf.ha_health_rpc_timeout_secs)


def _run(conf: StratusConfig, address: str, call: Callable[[HAServiceClient], T]) -> T:
    client = _client(conf, address)
    try:
        return call(client)
    except StratusError as exc:
        click.echo(f"haadmin: {exc}", err=True)
        sys.exit(FAILED)
    finally:
        client.close()


def _failover(conf: StratusConfig, to: str, force_fence: bool) -> None:
    """Hadoop's ``-failover`` with automatic failover: TO's zkfc does it (FROM is whichever
    node is active; the zkfcs know it)."""
    try:
        with ZkSession(zk_settings(conf)) as session:
            admin.failover(
                session,
                conf.ha_zkfc_group,
                to,
                client_auth(conf),
                automatic_failover=conf.ha_automatic_failover_enabled,
                force_fence=force_fence,
                timeout=2 * conf.ha_zkfc_failover_timeout_secs + conf.ha_health_rpc_timeout_secs,
            )
    except admin.FailoverNotPossibleError as exc:
        click.echo(f"haadmin: {exc}", err=True)
        sys.exit(FAILED)
    except StratusError as exc:
        click.echo(f"Failover failed: {exc}", err=True)
        sys.exit(FAILED)
    click.echo(f"Failover to {to} successful")


def _epoch(conf: StratusConfig) -> int:
    with ZkSession(zk_settings(conf)) as session:
        return admin.current_epoch(session, conf.ha_zkfc_group)


@click.command("haadmin")
@click.option("-getServiceState", "get_state", metavar="ID", help="Print the service's state.")
@click.option(
    "-getAllServiceState", "get_all", is_flag=True, help="Print the state of every nimbus.seeds."
)
@click.option(
    "-checkHealth", "check_health", metavar="ID", help="Exit 0 if the service is healthy."
)
@click.option("-transitionToActive", "to_active", metavar="ID", help="Make the service active.")
@click.option("-transitionToStandby", "to_standby", metavar="ID", help="Make it standby.")
@click.option(
    "-failover",
    "failover",
    is_flag=True,
    help="-failover [--forcefence] FROM TO: graceful failover to TO, through TO's zkfc.",
)
@click.option("--forcefence", is_flag=True, help="-failover: refused with automatic failover.")
@click.option(
    "--forcemanual",
    is_flag=True,
    help="Transition even though automatic failover is on (zkfcs manage the states).",
)
@click.option(
    "--epoch",
    type=click.IntRange(min=0),
    default=None,
    help="-transitionToActive: the epoch to act under [default: the group's last, from ZooKeeper].",
)
@click.argument("nodes", nargs=-1, metavar="[FROM TO]")
@with_config
def haadmin(  # noqa: PLR0913 click passes each option
    *,
    conf: StratusConfig,
    get_state: str | None,
    get_all: bool,
    check_health: str | None,
    to_active: str | None,
    to_standby: str | None,
    failover: bool,
    nodes: tuple[str, ...],
    forcefence: bool,
    forcemanual: bool,
    epoch: int | None,
) -> None:
    """Read and steer HA services by hand (Hadoop's haadmin verbs)."""
    verbs = [v for v in (get_state, check_health, to_active, to_standby) if v]
    verbs += (["all"] if get_all else []) + (["failover"] if failover else [])
    if len(verbs) != 1:
        raise click.UsageError(
            "give exactly one of -getServiceState, -getAllServiceState, -checkHealth, "
            "-failover, -transitionToActive, -transitionToStandby"
        )
    if nodes and not failover:
        raise click.UsageError(f"unexpected arguments: {' '.join(nodes)}")
    if failover:
        if len(nodes) != 2:
            raise click.UsageError("-failover takes two services: -failover [--forcefence] FROM TO")
        _failover(conf, nodes[1], forcefence)
    elif get_state:
        click.echo(_run(conf, get_state, admin.service_state))
    elif get_all:
        failed = False
        for address in conf.nimbus_seeds:
            client = _client(conf, address)
            try:
                click.echo(f"{address:<30} {admin.service_state(client)}")
            except HAServiceError as exc:
                click.echo(f"{address:<30} Failed to connect: {exc}")
                failed = True
            finally:
                client.close()
        if failed:
            sys.exit(FAILED)
    elif check_health:
        _run(conf, check_health, admin.check_health)
    else:
        target = to_active or to_standby
        assert target is not None
        automatic = conf.ha_automatic_failover_enabled
        if forcemanual and automatic:
            click.echo(
                "haadmin: WARNING: --forcemanual bypasses the zkfcs: the service may end up "
                "active beside another, or its zkfc may undo this.",
                err=True,
            )
        if to_active and epoch is None and (forcemanual or not automatic):
            epoch = _epoch(conf)
        status = _run(
            conf,
            target,
            lambda client: admin.transition(
                client,
                to_active=bool(to_active),
                automatic_failover=automatic,
                forced=forcemanual,
                epoch=epoch,
            ),
        )
        click.echo(status.state.value)
