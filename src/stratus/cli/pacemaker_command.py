"""``stratus pacemaker``: the in-memory heartbeat store, until SIGINT/SIGTERM.

Once it listens it prints exactly one line, ``pacemaker: serving at <host>:<port>``, which
scripts and tests wait for; ``GET /metrics`` on the same port is Prometheus's::

    $ stratus pacemaker --port 6699
    pacemaker: serving at 127.0.0.1:6699
    $ stratus pacemaker -c pacemaker.host=0.0.0.0 -c pacemaker.auth.method=digest \\
          -c pacemaker.auth.file=/etc/stratus/pacemaker.secrets
    $ stratus pacemaker -c pacemaker.host=0.0.0.0 -c pacemaker.auth.method=kerberos \\
          -c pacemaker.kerberos.keytab=/etc/stratus/pacemaker.keytab \\
          -c pacemaker.auth.file=/etc/stratus/pacemaker.principals
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import sys
from pathlib import Path

import click

from stratus.cli.options import log_level_option, with_config
from stratus.config import StratusConfig
from stratus.logs import configure_daemon_logging
from stratus.pacemaker.auth import AuthMethod, Secret, load_secrets
from stratus.pacemaker.errors import PacemakerConfigError
from stratus.pacemaker.kerberos import KerberosService, load_kerberos_principals
from stratus.pacemaker.server import PacemakerServer
from stratus.pacemaker.settings import PacemakerServerSettings
from stratus.rlimits import raise_open_files_limit
from stratus.settings import log_settings, pacemaker_server_settings


@click.command("pacemaker")
@click.option("--host", default=None, help="Address to listen on (default: pacemaker.host).")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port (default: pacemaker.port; 0 picks a free one).",
)
@log_level_option
@with_config
def pacemaker(*, conf: StratusConfig, host: str | None, port: int | None) -> None:
    """Run a pacemaker, the in-memory heartbeat store, until SIGINT or SIGTERM."""
    configure_daemon_logging(log_settings(conf))
    raise_open_files_limit()
    settings = pacemaker_server_settings(conf)
    if host is not None:
        settings = _replace(settings, host=host)
    if port is not None:
        settings = _replace(settings, port=port)
    secrets = _server_secrets(settings)
    kerberos = _server_kerberos(settings)
    asyncio.run(_serve(PacemakerServer(settings, secrets=secrets, kerberos=kerberos)))


async def _serve(server: PacemakerServer) -> None:
    port = await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    click.echo(f"pacemaker: serving at {server.settings.host}:{port}")
    sys.stdout.flush()  # the line scripts wait for must not sit in a buffer
    await server.serve_until(stop)


def _server_secrets(settings: PacemakerServerSettings) -> dict[str, Secret] | None:
    if settings.auth_method is AuthMethod.DIGEST and settings.auth_file:
        return load_secrets(Path(settings.auth_file))
    return None


def _server_kerberos(settings: PacemakerServerSettings) -> KerberosService | None:
    """The keytab's acceptor credentials and the principals file (kerberos only)."""
    if settings.auth_method is not AuthMethod.KERBEROS:
        return None
    if settings.kerberos is None or not settings.auth_file:
        raise PacemakerConfigError(
            "pacemaker.auth.method kerberos needs pacemaker.kerberos.keytab (the service "
            "principal's keys) and pacemaker.auth.file (the principals allowed in)"
        )
    return KerberosService(settings.kerberos, load_kerberos_principals(Path(settings.auth_file)))


def _replace(settings: PacemakerServerSettings, **changes: object) -> PacemakerServerSettings:
    return dataclasses.replace(settings, **changes)  # type: ignore[arg-type]
