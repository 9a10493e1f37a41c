"""``stratus nimbus``: run one nimbus until SIGTERM or SIGINT, then hand leadership over."""

from __future__ import annotations

import signal
import threading

import click

from stratus.cli.options import with_config
from stratus.config import StratusConfig
from stratus.logs import configure_daemon_logging
from stratus.nimbus.daemon import Nimbus
from stratus.rlimits import raise_open_files_limit


@click.command()
@click.option(
    "--insecure",
    is_flag=True,
    help="Serve an unauthenticated API on a non-loopback address (nimbus.auth.insecure).",
)
@with_config
def nimbus(conf: StratusConfig, insecure: bool) -> None:
    """Run a nimbus: the HTTP API, and a place in the leader election."""
    configure_daemon_logging()
    if insecure:
        conf = conf.model_copy(update={"nimbus_auth_insecure": True})
    raise_open_files_limit()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _s, _f: stop.set())
    daemon = Nimbus(conf)
    try:
        daemon.start()
    except Exception:
        if daemon.session.failure is None:
            raise
        raise daemon.session.failure from None  # what made ZooKeeper unusable, not its echo
    scheme = "https" if conf.nimbus_tls_cert else "http"
    click.echo(f"nimbus {daemon.address} serving {scheme}://{daemon.address}/", err=True)
    try:
        while not stop.wait(1.0):
            if daemon.session.failure is not None:  # ZooKeeper's history went back
                raise daemon.session.failure
    finally:
        daemon.stop()
