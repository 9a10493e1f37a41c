"""The settings records of a pacemaker server and of its clients (built by the CLI)."""

from __future__ import annotations

from dataclasses import dataclass, field

from stratus.pacemaker.auth import AuthMethod
from stratus.pacemaker.kerberos import KerberosClientSettings, KerberosServerSettings
from stratus.pacemaker.store import StoreLimits
from stratus.security.tls import TlsSettings

DEFAULT_PORT = 6699


@dataclass(frozen=True)
class PacemakerServerSettings:
    """One pacemaker daemon: where it listens, who it lets in, what it holds."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    auth_method: AuthMethod = AuthMethod.NONE
    auth_file: str | None = None  # the credentials file (digest)
    auth_insecure: bool = False  # `none` on a non-loopback address
    auth_timeout_secs: float = 10.0  # a connection not authenticated by then is closed
    kerberos: KerberosServerSettings | None = None  # the keytab (kerberos)
    limits: StoreLimits = field(
        default_factory=lambda: StoreLimits(max_entries=200_000, max_bytes=256 << 20, ttl_secs=60)
    )
    max_frame_bytes: int = 1 << 20
    max_connections: int = 1024
    idle_timeout_secs: float = 120.0
    tls: TlsSettings | None = None


@dataclass(frozen=True)
class PacemakerClientSettings:
    """What a client of the pacemakers needs: the servers, its credentials, its timeouts."""

    servers: tuple[tuple[str, int], ...]
    auth_method: AuthMethod = AuthMethod.NONE
    principal: str | None = None
    secret: bytes | None = None
    kerberos: KerberosClientSettings = field(default_factory=KerberosClientSettings)
    max_frame_bytes: int = 1 << 20
    timeout_secs: float = 5.0
    tls: TlsSettings | None = None
    min_pulse_ttl_secs: float | None = None  # a server whose TTL is not above it is reported
    subtree: str | None = None  # where this client writes (a supervisor's store); a server
    # that grants its principal another subtree is refused (SubtreeMismatchError)
