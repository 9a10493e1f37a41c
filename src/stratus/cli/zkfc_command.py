"""``stratus zkfc``: the failover controller beside one service, until SIGINT/SIGTERM.

It checks the service's health, campaigns for it in its election group while it is healthy,
makes it active with the epoch of the term it won (fencing the old active first) and standby
when another node won. Once running it prints ``zkfc: managing <host:port> in group <g>``::

    $ stratus zkfc --target n1.example:6627 -c zookeeper.servers=zk1:2181
    $ stratus zkfc -c ha.zkfc.target=127.0.0.1:6627 -c 'ha.fencing.methods=graceful, process'
    $ stratus zkfc --target 127.0.0.1:6627 --supervise -- \
          stratus nimbus -c nimbus.ha.mode=zkfc -c nimbus.port=6627

With ``--supervise -- COMMAND...`` it runs the service itself, restarts it when it dies and
stops it when the zkfc stops.

It exits non-zero when it cannot go on (its health monitor or elector failed, or its
ZooKeeper session failed for good), so a service manager restarts it.
"""

from __future__ import annotations

import click

from stratus.cli.daemon_run import run_daemon
from stratus.cli.options import log_level_option, with_config
from stratus.client_settings import client_auth
from stratus.config import StratusConfig
from stratus.ha.daemon import Zkfc
from stratus.ha.settings import ZkfcSettings
from stratus.ha.zkfc_endpoint import EndpointSecurity
from stratus.logs import configure_daemon_logging
from stratus.rlimits import raise_open_files_limit
from stratus.settings import (
    access_policy,
    audit_log,
    http_bounds,
    log_settings,
    server_tls,
    zk_settings,
)
from stratus.zk.session import ZkSession


def check_zkfc(zkfc: Zkfc) -> None:
    """End the command with the controller's failure, once it has one."""
    if zkfc.failure is not None:
        raise zkfc.failure


@click.command("zkfc")
@click.option(
    "--target",
    default=None,
    help="host:port of the managed service's HA protocol (default: ha.zkfc.target).",
)
@click.option(
    "--supervise",
    is_flag=True,
    help="Run the service as a child: the command after --, restarted when it dies.",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@log_level_option
@with_config
def zkfc(
    *, conf: StratusConfig, target: str | None, supervise: bool, command: tuple[str, ...]
) -> None:
    """Run the failover controller of one service until SIGINT or SIGTERM."""
    if command and not supervise:
        raise click.UsageError("a command after -- is run only with --supervise")
    if supervise and not command and not conf.ha_zkfc_supervise_command:
        raise click.UsageError(
            "--supervise needs the service's command: stratus zkfc --supervise -- COMMAND..."
        )
    configure_daemon_logging(log_settings(conf))
    audit_log(conf)
    raise_open_files_limit()  # a supervised service inherits it
    settings = ZkfcSettings.from_config(conf, target=target, supervise=command)
    security = EndpointSecurity(
        access_policy(conf), server_tls(conf), http_bounds(conf), conf.nimbus_max_request_bytes
    )
    daemon = Zkfc(settings, ZkSession(zk_settings(conf)), client_auth(conf), security)
    run_daemon(
        daemon,
        ready=lambda d: f"zkfc: managing {d.settings.target.address} in group {d.settings.group}",
        check=check_zkfc,
        period_secs=0.2,
        reload=lambda _daemon: security.policy.reload(),
    )
