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
@with_config
def nimbus(conf: StratusConfig) -> None:
    """Run a nimbus: the HTTP API, and a place in the leader election."""
    configure_daemon_logging()
    raise_open_files_limit()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _s, _f: stop.set())
    daemon = Nimbus(conf)
    daemon.start()
    click.echo(f"nimbus {daemon.address} serving http://{daemon.address}/", err=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        daemon.stop()
