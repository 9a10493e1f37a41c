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

from stratus.cli.options import with_config
from stratus.config import StratusConfig
from stratus.logs import configure_daemon_logging
from stratus.pacemaker.auth import AuthMethod, Secret, load_secrets
from stratus.pacemaker.client import parse_servers
from stratus.pacemaker.errors import PacemakerAuthFileError, PacemakerConfigError
from stratus.pacemaker.kerberos import (
    KerberosClientSettings,
    KerberosServerSettings,
    KerberosService,
    load_kerberos_principals,
    server_principal,
)
from stratus.pacemaker.server import PacemakerServer
from stratus.pacemaker.settings import PacemakerClientSettings, PacemakerServerSettings
from stratus.pacemaker.store import StoreLimits
from stratus.rlimits import raise_open_files_limit
from stratus.security.tls import TlsSettings


@click.command("pacemaker")
@click.option("--host", default=None, help="Address to listen on (default: pacemaker.host).")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port (default: pacemaker.port; 0 picks a free one).",
)
@with_config
def pacemaker(*, conf: StratusConfig, host: str | None, port: int | None) -> None:
    """Run a pacemaker, the in-memory heartbeat store, until SIGINT or SIGTERM."""
    configure_daemon_logging()
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


def pacemaker_server_settings(conf: StratusConfig) -> PacemakerServerSettings:
    """``pacemaker.*`` as a server's settings."""
    return PacemakerServerSettings(
        host=conf.pacemaker_host,
        port=conf.pacemaker_port,
        auth_method=AuthMethod(conf.pacemaker_auth_method),
        auth_file=conf.pacemaker_auth_file,
        auth_insecure=conf.pacemaker_auth_insecure,
        auth_timeout_secs=conf.pacemaker_auth_timeout_secs,
        kerberos=_server_kerberos_settings(conf),
        limits=StoreLimits(
            max_entries=conf.pacemaker_max_entries,
            max_bytes=conf.pacemaker_max_bytes,
            ttl_secs=conf.pacemaker_pulse_ttl_secs,
        ),
        max_frame_bytes=conf.pacemaker_max_frame_bytes,
        max_connections=conf.pacemaker_max_connections,
        idle_timeout_secs=conf.pacemaker_idle_timeout_secs,
        tls=_tls(conf),
    )


def pacemaker_client_settings(conf: StratusConfig) -> PacemakerClientSettings:
    """``pacemaker.*`` as a client's settings; the secret read from pacemaker.auth.file."""
    method = AuthMethod(conf.pacemaker_auth_method)
    principal, secret = None, None
    if method is AuthMethod.DIGEST:
        if not conf.pacemaker_auth_file:
            raise PacemakerAuthFileError("pacemaker.auth.method digest needs pacemaker.auth.file")
        chosen = _client_secret(load_secrets(Path(conf.pacemaker_auth_file)), conf)
        principal, secret = chosen.principal.name, chosen.secret
    return PacemakerClientSettings(
        servers=parse_servers(conf.pacemaker_servers, conf.pacemaker_port),
        auth_method=method,
        principal=principal,
        secret=secret,
        kerberos=KerberosClientSettings(
            conf.pacemaker_kerberos_service_principal, conf.pacemaker_auth_principal
        ),
        max_frame_bytes=conf.pacemaker_max_frame_bytes,
        timeout_secs=conf.pacemaker_client_timeout_secs,
        tls=_tls(conf),
    )


def _client_secret(secrets: dict[str, Secret], conf: StratusConfig) -> Secret:
    name = conf.pacemaker_auth_principal
    if name is None:
        if len(secrets) != 1:
            raise PacemakerAuthFileError(
                f"{conf.pacemaker_auth_file} lists {len(secrets)} principals: set "
                "pacemaker.auth.principal to the one to use"
            )
        return next(iter(secrets.values()))
    if name not in secrets:
        raise PacemakerAuthFileError(
            f"pacemaker.auth.principal {name!r} is not in {conf.pacemaker_auth_file}"
        )
    return secrets[name]


def _server_secrets(settings: PacemakerServerSettings) -> dict[str, Secret] | None:
    if settings.auth_method is AuthMethod.DIGEST and settings.auth_file:
        return load_secrets(Path(settings.auth_file))
    return None


def _server_kerberos_settings(conf: StratusConfig) -> KerberosServerSettings | None:
    if conf.pacemaker_kerberos_keytab is None:
        return None
    principal = server_principal(conf.pacemaker_kerberos_service_principal, conf.pacemaker_host)
    return KerberosServerSettings(conf.pacemaker_kerberos_keytab, principal)


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


def _tls(conf: StratusConfig) -> TlsSettings | None:
    if not (conf.pacemaker_tls_cert or conf.pacemaker_tls_ca):
        return None
    return TlsSettings(
        cert=conf.pacemaker_tls_cert,
        key=conf.pacemaker_tls_key,
        ca=conf.pacemaker_tls_ca,
        require_client_cert=conf.pacemaker_tls_client_cert_required,
    )


def _replace(settings: PacemakerServerSettings, **changes: object) -> PacemakerServerSettings:
    return dataclasses.replace(settings, **changes)  # type: ignore[arg-type]
