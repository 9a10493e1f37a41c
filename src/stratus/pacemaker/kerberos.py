"""Kerberos (GSSAPI) authentication of pacemaker callers: the principals file and the handshake.

The client initiates a GSSAPI security context (Kerberos 5 mechanism, mutual authentication)
for the pacemaker's service principal, ``pacemaker/<host>@REALM`` by default (``<host>`` as
written in ``pacemaker.servers``); the server accepts it with the keys of its keytab. Tokens
travel in ``authenticate`` frames (``token`` both ways) after ``hello``: at most
``MAX_ROUNDS`` round trips, tokens of at most ``MAX_TOKEN_BYTES``. The context is bound to the
connection's ``hello`` nonce (GSSAPI channel bindings), so a token captured on one connection
is refused on another. The client checks that the server proved its principal (the mutual
authentication token) before it sends anything else::

    service = KerberosService(KerberosServerSettings(keytab="/etc/stratus/pacemaker.keytab"),
                              load_kerberos_principals(Path("/etc/stratus/pacemaker.principals")))
    acceptor = service.acceptor(nonce)       # one per connection, on the server
    answer = await kerberos_handshake(conn.request, host, hello, KerberosClientSettings())

The principals file has one principal a line, ``<principal>@<REALM> <role>``, no secret::

    nimbus/nimbus1.example.org@EXAMPLE.ORG     nimbus
    supervisor/node7.example.org@EXAMPLE.ORG   supervisor

The realm is required (no default realm: ``alice@OTHER`` from a trusted realm must not pass
for ``alice``). A supervisor's subtree is named by its principal's instance, the host:
``supervisor/node7.example.org@EXAMPLE.ORG`` writes ``/supervisors/node7.example.org`` (and
``/beats/node7.example.org``); a principal without an instance (``node7@EXAMPLE.ORG``) writes
``/supervisors/node7``.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
import stat
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratus.pacemaker.auth import PacemakerRole, Principal, file_lines
from stratus.pacemaker.errors import (
    KerberosHandshakeError,
    KerberosUnavailableError,
    PacemakerAuthFileError,
    PacemakerConfigError,
    PacemakerRequestError,
)
from stratus.pacemaker.protocol import Op
from stratus.security.errors import TokenFileError
from stratus.security.tokens import read_private_file

SERVICE = "pacemaker"
HOST_PLACEHOLDER = "_HOST"  # in a configured principal: the server's host, as Hadoop writes it
MAX_TOKEN_BYTES = 64 << 10  # a Kerberos AP-REQ with a large PAC stays well below this
MAX_ROUNDS = 3  # Kerberos 5 with mutual authentication takes one
Request = Callable[..., Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class KerberosServerSettings:
    """The server's keytab, and the principal it accepts as (None: any key of the keytab)."""

    keytab: str
    service_principal: str | None = None


@dataclass(frozen=True)
class KerberosClientSettings:
    """The principal a client expects of every server (None: ``pacemaker/<host>@REALM``),
    and the one it authenticates as (None: the ticket cache's or client keytab's default)."""

    service_principal: str | None = None
    client_principal: str | None = None


def _gssapi() -> Any:
    """The gssapi module, imported at first use: the extra is optional."""
    try:
        return importlib.import_module("gssapi")
    except ImportError:
        raise KerberosUnavailableError(
            "pacemaker.auth.method kerberos needs the gssapi package: install "
            "stratus-ha[kerberos] (it builds against the system's Kerberos: Debian's "
            "libkrb5-dev and a C compiler)"
        ) from None


# --- the principals file ------------------------------------------------------------------
def load_kerberos_principals(path: Path) -> dict[str, Principal]:
    """The principals file at ``path``; PacemakerAuthFileError if unusable."""
    try:
        text = read_private_file(path, "the pacemaker principals file")
    except TokenFileError as exc:
        raise PacemakerAuthFileError(str(exc)) from None
    return parse_kerberos_principals(text, str(path))


def parse_kerberos_principals(text: str, source: str) -> dict[str, Principal]:
    """The lines of a Kerberos principals file, by full principal name."""
    principals: dict[str, Principal] = {}
    subtrees: dict[str, str] = {}
    for where, fields in file_lines(text, source):
        if len(fields) != 2:
            raise PacemakerAuthFileError(
                f"{where}: expected 2 fields `<principal>@<REALM> nimbus|supervisor` "
                f"(no secret with pacemaker.auth.method kerberos), found {len(fields)}"
            )
        name, role_word = fields
        try:
            role = PacemakerRole(role_word)
        except ValueError:
            raise PacemakerAuthFileError(
                f"{where}: the role must be `nimbus` or `supervisor`"
            ) from None
        subtree = kerberos_subtree(name, where)
        if name in principals:
            raise PacemakerAuthFileError(f"{where}: the principal {name!r} is listed twice")
        if role is PacemakerRole.SUPERVISOR:
            if subtree in subtrees:
                raise PacemakerAuthFileError(
                    f"{where}: {name!r} and {subtrees[subtree]!r} would both write "
                    f"/supervisors/{subtree}; give each supervisor its own host"
                )
            subtrees[subtree] = name
        principals[name] = Principal(name, role, subtree)
    if not principals:
        raise PacemakerAuthFileError(f"{source} lists no principal")
    return principals


def kerberos_subtree(name: str, where: str = "a principal") -> str:
    """The name under ``/supervisors`` a principal writes: its instance, else its primary."""
    primary_and_instance, at, realm = name.rpartition("@")
    if not at or not realm or not primary_and_instance:
        raise PacemakerAuthFileError(
            f"{where}: {name!r} is not a full Kerberos principal; write it with its realm, "
            "as `supervisor/<host>@<REALM>`"
        )
    parts = primary_and_instance.split("/")
    if len(parts) > 2 or not all(parts):
        raise PacemakerAuthFileError(
            f"{where}: {name!r} has {len(parts)} components; use `<primary>@<REALM>` or "
            "`<primary>/<host>@<REALM>`"
        )
    return parts[-1]


# --- names ----------------------------------------------------------------------------------
def expected_service_principal(settings: KerberosClientSettings, host: str) -> str | None:
    """The configured principal for ``host`` (``_HOST`` replaced), or None for the default."""
    if settings.service_principal is None:
        return None
    return settings.service_principal.replace(HOST_PLACEHOLDER, host)


def server_principal(configured: str | None, listen_host: str) -> str | None:
    """A server's configured principal with ``_HOST`` as its host (its FQDN on a wildcard)."""
    if configured is None or HOST_PLACEHOLDER not in configured:
        return configured
    host = listen_host
    if host in ("", "0.0.0.0", "::"):
        host = socket.getfqdn()
    return configured.replace(HOST_PLACEHOLDER, host)


def _target_name(settings: KerberosClientSettings, host: str) -> tuple[Any, str]:
    gssapi = _gssapi()
    configured = expected_service_principal(settings, host)
    if configured is None:
        name = gssapi.Name(f"{SERVICE}@{host}", gssapi.NameType.hostbased_service)
        shown = f"{SERVICE}/{host}@<default realm>"
    else:
        name = gssapi.Name(configured, gssapi.NameType.kerberos_principal)
        shown = configured
    return name, shown


def _bindings(nonce: bytes) -> Any:
    return _gssapi().raw.ChannelBindings(application_data=nonce)


# --- the server side ----------------------------------------------------------------------
class KerberosService:
    """The server's acceptor credentials (read from its keytab once) and who may come in."""

    def __init__(
        self, settings: KerberosServerSettings, principals: Mapping[str, Principal]
    ) -> None:
        gssapi = _gssapi()
        self.settings = settings
        self.principals = dict(principals)
        name = None
        if settings.service_principal:
            name = gssapi.Name(settings.service_principal, gssapi.NameType.kerberos_principal)
        keytab = Path(settings.keytab)
        if not keytab.is_file():
            raise PacemakerConfigError(
                f"pacemaker.kerberos.keytab {keytab} is not a file; export the "
                "service principal's keys into it (kadmin: ktadd -k <file> pacemaker/<host>)"
            )
        mode = stat.S_IMODE(keytab.stat().st_mode)
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise PacemakerConfigError(
                f"pacemaker.kerberos.keytab {keytab} is open to group or others (mode "
                f"{mode:04o}): it holds the service's keys; run `chmod 600 {keytab}`"
            )
        try:
            self.credentials = gssapi.Credentials(
                name=name, usage="accept", store={"keytab": settings.keytab}
            )
        except gssapi.exceptions.GSSError as exc:
            raise PacemakerConfigError(
                f"cannot accept Kerberos with the keytab {settings.keytab} "
                f"(principal {settings.service_principal or 'any in the keytab'}): {exc}"
            ) from None

    def acceptor(self, nonce: bytes) -> KerberosAcceptor:
        """A fresh acceptor for one connection, bound to its ``hello`` nonce."""
        return KerberosAcceptor(self, nonce)


class KerberosAcceptor:
    """The server's half of one connection's handshake."""

    def __init__(self, service: KerberosService, nonce: bytes) -> None:
        gssapi = _gssapi()
        self._service = service
        self._rounds = 0
        self._context = gssapi.SecurityContext(
            creds=service.credentials, usage="accept", channel_bindings=_bindings(nonce)
        )

    def step(self, token: object) -> tuple[bytes | None, Principal | None]:
        """The token to answer, and the principal once the context is complete.

        KerberosHandshakeError if the token is refused, the client is not in the principals
        file, or the handshake takes more than ``MAX_ROUNDS`` tokens.
        """
        gssapi = _gssapi()
        self._rounds += 1
        if self._rounds > MAX_ROUNDS:
            raise KerberosHandshakeError(f"the handshake took more than {MAX_ROUNDS} tokens")
        if not isinstance(token, bytes) or not 0 < len(token) <= MAX_TOKEN_BYTES:
            raise KerberosHandshakeError(
                f"authenticate needs a token of 1 to {MAX_TOKEN_BYTES} bytes"
            )
        try:
            answer = self._context.step(token)
            # gssapi defers a failure that has an error token to the next attribute read
            if not self._context.complete:
                return answer, None
            name = str(self._context.initiator_name)
        except gssapi.exceptions.GSSError as exc:
            raise KerberosHandshakeError(f"the Kerberos token was refused: {exc}") from None
        principal = self._service.principals.get(name)
        if principal is None:
            raise KerberosHandshakeError(
                f"{name!r:.128} is authenticated but not in pacemaker.auth.file"
            )
        return answer, principal


# --- the client side ----------------------------------------------------------------------
def _initiator(settings: KerberosClientSettings, target: Any, nonce: bytes) -> Any:
    """A context that asks for mutual authentication, as the configured client principal."""
    gssapi = _gssapi()
    creds = None
    if settings.client_principal:
        me = gssapi.Name(settings.client_principal, gssapi.NameType.kerberos_principal)
        creds = gssapi.Credentials(name=me, usage="initiate")
    return gssapi.SecurityContext(
        name=target,
        creds=creds,
        usage="initiate",
        flags=gssapi.RequirementFlag.mutual_authentication,
        channel_bindings=_bindings(nonce),
    )


async def kerberos_handshake(
    request: Request, host: str, hello: Mapping[str, Any], settings: KerberosClientSettings
) -> dict[str, Any]:
    """Authenticate a connection after ``hello`` (``request`` sends one frame); the server's
    last answer.

    KerberosHandshakeError when the server does not speak Kerberos, there is no ticket, the
    server refuses the ticket, or it does not prove that it holds the expected principal's key.
    """
    gssapi = _gssapi()
    nonce = hello.get("nonce")
    if hello.get("auth") != "kerberos" or not isinstance(nonce, bytes):
        raise KerberosHandshakeError(
            f"the pacemaker at {host} authenticates with {hello.get('auth')!r:.20}, not "
            "kerberos: set the same pacemaker.auth.method on clients and servers"
        )
    name, shown = _target_name(settings, host)
    contexts: list[Any] = []

    def step(token: bytes | None) -> tuple[bytes | None, bool]:
        try:
            if not contexts:
                contexts.append(_initiator(settings, name, nonce))
            context = contexts[0]
            out: bytes | None = context.step(token)
            return out, bool(context.complete)  # a deferred failure is raised by the read
        except gssapi.exceptions.GSSError as exc:
            who = settings.client_principal or "the default principal"
            raise KerberosHandshakeError(
                f"Kerberos could not authenticate {who} to the pacemaker at {host} "
                f"({shown}): {exc}. A client needs a ticket (kinit, or a client keytab in "
                "KRB5_CLIENT_KTNAME) and the server must hold that principal's key "
                "(pacemaker.kerberos.service.principal)"
            ) from None

    token, complete = await asyncio.to_thread(step, None)  # may ask the KDC for tickets
    for _ in range(MAX_ROUNDS):
        if token is None:
            break
        try:
            answer = await request(Op.AUTHENTICATE, token=token)
        except PacemakerRequestError as exc:
            raise KerberosHandshakeError(
                f"the pacemaker at {host} refused the Kerberos ticket for {shown}: {exc}. Check "
                "that its keytab holds that principal's key and that the client's principal is "
                "in its pacemaker.auth.file"
            ) from None
        reply = answer.get("token")
        if reply is not None:
            if not isinstance(reply, bytes) or len(reply) > MAX_TOKEN_BYTES:
                raise KerberosHandshakeError(f"the pacemaker at {host} sent a malformed token")
            token, complete = await asyncio.to_thread(step, reply)
        else:
            token = None
        if answer.get("complete"):
            if not complete or token is not None:
                raise KerberosHandshakeError(
                    f"the pacemaker at {host} claims success but did not prove it is {shown} "
                    "(no valid mutual authentication token): refusing it"
                )
            return answer
    raise KerberosHandshakeError(
        f"the Kerberos handshake with the pacemaker at {host} did not complete in "
        f"{MAX_ROUNDS} rounds"
    )
