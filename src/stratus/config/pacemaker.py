"""The ``pacemaker.*`` keys: the in-memory heartbeat store, its servers and clients."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from stratus.config.section import Section


class PacemakerSection(Section):
    """The pacemaker, the in-memory heartbeat store of `cluster.state.store:
    pacemaker`: its servers, authentication, TLS and bounds, and its clients' timeout."""

    prefix: ClassVar[str] = "pacemaker"

    pacemaker_servers: list[str] = Field(
        default=["127.0.0.1"],
        min_length=1,
        alias="pacemaker.servers",
        description="host or host:port of every pacemaker (port: pacemaker.port); clients write "
        "to every live one and read the newest pulse of any",
    )
    pacemaker_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        alias="pacemaker.host",
        description="address a pacemaker listens on (0.0.0.0 for every interface; a non-loopback "
        "address needs pacemaker.auth.method digest or pacemaker.auth.insecure)",
    )
    pacemaker_port: int = Field(
        default=6699,
        ge=0,
        le=65535,
        alias="pacemaker.port",
        description="port of a pacemaker: heartbeat frames, and GET /metrics on the same port "
        "(0 picks a free one)",
    )
    pacemaker_auth_method: Literal["none", "digest", "kerberos"] = Field(
        default="none",
        alias="pacemaker.auth.method",
        description="how pacemaker callers authenticate: `none` (loopback), `digest` "
        "(challenge-response with the secrets of pacemaker.auth.file), `kerberos` (GSSAPI: "
        "tickets, pacemaker.kerberos.keytab, the principals of pacemaker.auth.file)",
    )
    pacemaker_auth_file: str | None = Field(
        default=None,
        alias="pacemaker.auth.file",
        description="pacemaker credentials, one `<principal> nimbus|supervisor <secret>` a line "
        "(kerberos: `<principal>@<REALM> nimbus|supervisor`, no secret), mode 600: a server "
        "knows every principal; a digest client uses pacemaker.auth.principal's line",
    )
    pacemaker_auth_principal: str | None = Field(
        default=None,
        alias="pacemaker.auth.principal",
        description="the principal a pacemaker client authenticates as (default: a "
        "supervisor's supervisor.id when pacemaker.auth.file has its line, else the file's "
        "only line; kerberos: the ticket's principal, e.g. "
        "supervisor/<host>@<REALM>, default: that of the ticket cache or client keytab)",
    )
    pacemaker_auth_timeout_secs: float = Field(
        default=10.0,
        gt=0,
        alias="pacemaker.auth.timeout.secs",
        description="a pacemaker closes a connection that has not authenticated within this "
        "long (digest and kerberos)",
    )
    pacemaker_kerberos_keytab: str | None = Field(
        default=None,
        alias="pacemaker.kerberos.keytab",
        description="keytab holding a pacemaker's service principal keys (kerberos; mode 600); "
        "required by the server",
    )
    pacemaker_kerberos_service_principal: str | None = Field(
        default=None,
        alias="pacemaker.kerberos.service.principal",
        description="the pacemaker's Kerberos principal, `_HOST` standing for the server's "
        "host: clients refuse a server that cannot prove it (default "
        "`pacemaker/<host in pacemaker.servers>@<default realm>`); a server accepts only it "
        "(default: any principal of pacemaker.kerberos.keytab)",
    )
    pacemaker_auth_insecure: bool = Field(
        default=False,
        alias="pacemaker.auth.insecure",
        description="let a pacemaker on a non-loopback address start with pacemaker.auth.method "
        "none (anyone who reaches it may forge or erase heartbeats)",
    )
    pacemaker_max_frame_bytes: int = Field(
        default=1 << 20,
        gt=0,
        le=64 << 20,
        alias="pacemaker.max.frame.bytes",
        description="largest request or answer frame; a bigger one closes its connection",
    )
    pacemaker_max_entries: int = Field(
        default=200_000,
        gt=0,
        alias="pacemaker.max.entries",
        description="most nodes a pacemaker holds; a write past it is refused as `full`",
    )
    pacemaker_max_bytes: int = Field(
        default=256 << 20,
        gt=0,
        alias="pacemaker.max.bytes",
        description="most bytes of pulses and node names a pacemaker holds; a write past it is "
        "refused as `full`",
    )
    pacemaker_pulse_ttl_secs: float = Field(
        default=60.0,
        gt=0,
        alias="pacemaker.pulse.ttl.secs",
        description="a pulse not written for this long is evicted; a started pacemaker reports "
        "warming up for this long; must exceed nimbus.supervisor.timeout.secs and "
        "nimbus.task.timeout.secs (checked at start)",
    )
    pacemaker_max_connections: int = Field(
        default=1024,
        gt=0,
        alias="pacemaker.max.connections",
        description="open connections a pacemaker serves at once; one more is closed at once",
    )
    pacemaker_idle_timeout_secs: float = Field(
        default=120.0,
        gt=0,
        alias="pacemaker.idle.timeout.secs",
        description="a pacemaker closes a connection silent for this long (or a frame not "
        "finished within it)",
    )
    pacemaker_client_timeout_secs: float = Field(
        default=5.0,
        gt=0,
        alias="pacemaker.client.timeout.secs",
        description="longest wait of a pacemaker client for a connection or an answer",
    )
    pacemaker_tls_cert: str | None = Field(
        default=None,
        alias="pacemaker.tls.cert",
        description="PEM certificate of a pacemaker; set, it speaks TLS only",
    )
    pacemaker_tls_key: str | None = Field(
        default=None,
        alias="pacemaker.tls.key",
        description="PEM private key of pacemaker.tls.cert (default: in the certificate file)",
    )
    pacemaker_tls_ca: str | None = Field(
        default=None,
        alias="pacemaker.tls.ca",
        description="PEM CA bundle: clients verify pacemakers against it; a pacemaker verifies "
        "client certificates signed by it",
    )
    pacemaker_tls_client_cert_required: bool = Field(
        default=False,
        alias="pacemaker.tls.client.cert.required",
        description="refuse TLS connections without a client certificate signed by "
        "pacemaker.tls.ca (mutual TLS)",
    )
