"""``stratus nimbus``: run one nimbus until SIGTERM or SIGINT, then hand leadership over; on
SIGHUP it reads its token file again."""

from __future__ import annotations

import click

from stratus.cli.daemon_run import run_daemon
from stratus.cli.options import log_level_option, with_config
from stratus.config import StratusConfig
from stratus.logs import configure_daemon_logging
from stratus.nimbus.daemon import Nimbus
from stratus.rlimits import raise_open_files_limit
from stratus.settings import audit_log, log_settings


@click.command()
@click.option(
    "--insecure",
    is_flag=True,
    help="Serve an unauthenticated API on a non-loopback address (nimbus.auth.insecure).",
)
@log_level_option
@with_config
def nimbus(conf: StratusConfig, insecure: bool) -> None:
    """Run a nimbus: the HTTP API, and a place in the leader election."""
    configure_daemon_logging(log_settings(conf))
    audit_log(conf)
    if insecure:
        conf = conf.model_copy(update={"nimbus_auth_insecure": True})
    raise_open_files_limit()
    scheme = "https" if conf.nimbus_tls_cert else "http"
    run_daemon(
        Nimbus(conf),
        ready=lambda d: f"nimbus {d.address} serving {scheme}://{d.address}/",
        reload=lambda d: d.policy.reload(),
    )
