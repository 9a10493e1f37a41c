"""stratus's identity in ZooKeeper: how the session authenticates and the ACL of its znodes.

With ``digest`` (or ``sasl``) the session adds its credentials to every connection and creates
every znode with an ACL that gives that identity, and nobody else, every permission: no world
READ either (pipeline records carry their configuration, which may hold secrets, and every
stratus component reads through an authenticated session anyway)::

    auth = ZkAuth.digest_from_file(Path("/etc/stratus/zk.secret"))   # one line: user:password
    client = KazooClient(hosts, default_acl=auth.acl(), **auth.client_options())

Credentials come only from a file that its owner alone may read (``read_credentials``), never
from the command line or the YAML configuration, where ``ps`` and backups would show them.
``ServerAuth`` is the other side: what ``stratus zookeeper`` demands of its clients.
"""

from __future__ import annotations

import importlib.util
import logging
import posixpath
import stat
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, Id, Permissions, make_digest_acl, make_digest_acl_credential

from stratus.zk.errors import ZooKeeperAuthError

log = logging.getLogger(__name__)

SASL_MECHANISMS = ("GSSAPI", "DIGEST-MD5")


class AuthScheme(Enum):
    """How the session proves who it is (``zookeeper.auth.scheme``)."""

    NONE = "none"  # anonymous; znodes open to anyone (world:anyone), as before
    DIGEST = "digest"  # ZooKeeper's digest scheme: user:password
    SASL = "sasl"  # SASL: Kerberos (GSSAPI) or DIGEST-MD5


@dataclass(frozen=True)
class Credentials:
    """A user name and its password, read from a protected file."""

    user: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class ZkAuth:
    """The session's identity: its scheme, its credentials and, for SASL, what it asks for.

    ``sasl_principal`` is the name ZooKeeper gives a Kerberos client once authenticated
    (``user@REALM``, unless the server strips host or realm): the ACL names it.
    """

    scheme: AuthScheme = AuthScheme.NONE
    credentials: Credentials | None = None
    sasl_mechanism: str = "GSSAPI"
    sasl_service: str = "zookeeper"
    sasl_principal: str | None = None

    def __post_init__(self) -> None:
        if self.scheme is AuthScheme.DIGEST and self.credentials is None:
            raise ZooKeeperAuthError(
                "zookeeper.auth.scheme is digest but no credentials were given: set "
                "zookeeper.auth.file to a file holding user:password"
            )
        if self.scheme is AuthScheme.SASL:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ZooKeeperAuthError(
                    f"zookeeper.auth.sasl.mechanism {self.sasl_mechanism!r} is not one of "
                    f"{', '.join(SASL_MECHANISMS)}"
                )
            if self.sasl_mechanism == "DIGEST-MD5" and self.credentials is None:
                raise ZooKeeperAuthError(
                    "SASL DIGEST-MD5 needs credentials: set zookeeper.auth.file to a file "
                    "holding user:password"
                )
            if self.sasl_mechanism == "GSSAPI" and not self.sasl_principal:
                raise ZooKeeperAuthError(
                    "SASL GSSAPI needs zookeeper.auth.sasl.principal, the Kerberos principal "
                    "that ZooKeeper sees (user@REALM): the ACL of stratus's znodes names it"
                )
            if self.sasl_mechanism == "GSSAPI" and importlib.util.find_spec("kerberos") is None:
                raise ZooKeeperAuthError(
                    "SASL GSSAPI needs the Python package kerberos (the binding pure-sasl "
                    "uses): install stratus-ha[kerberos] (it builds against the system's "
                    "Kerberos headers: libkrb5-dev on Debian)"
                )

    @classmethod
    def digest_from_file(cls, path: Path) -> ZkAuth:
        """Digest authentication with the ``user:password`` that ``path`` holds."""
        return cls(AuthScheme.DIGEST, read_credentials(path))

    @property
    def enabled(self) -> bool:
        return self.scheme is not AuthScheme.NONE

    @property
    def identity(self) -> str:
        """Who stratus is in ZooKeeper (``digest:stratus``, ``sasl:user@REALM``, ``anyone``)."""
        acl = self.acl()
        if acl is None:
            return "anyone"
        return f"{self.scheme.value}:{acl[0].id.id.split(':')[0]}"

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``KazooClient``: ``auth_data`` or ``sasl_options`` (the
        service name and, for Kerberos, the client principal to authenticate as)."""
        if self.scheme is AuthScheme.DIGEST:
            assert self.credentials is not None
            secret = f"{self.credentials.user}:{self.credentials.password}"
            return {"auth_data": [("digest", secret)]}
        if self.scheme is AuthScheme.SASL:
            options: dict[str, Any] = {
                "mechanism": self.sasl_mechanism,
                "service": self.sasl_service,
            }
            if self.credentials is not None and self.sasl_mechanism == "DIGEST-MD5":
                options["username"] = self.credentials.user
                options["password"] = self.credentials.password
            if self.sasl_mechanism == "GSSAPI":
                # the client principal pure-sasl asks GSSAPI for: without it GSSAPI takes the
                # default one (the first of a client keytab, the ticket cache's), which need
                # not be the principal the ACL names
                options["principal"] = self.sasl_principal
            return {"sasl_options": options}
        return {}

    def acl(self) -> list[ACL] | None:
        """The ACL of every znode stratus creates: ALL for stratus's identity, nothing else.

        None without authentication: kazoo then creates znodes open to anyone, as before.
        """
        if self.scheme is AuthScheme.DIGEST:
            assert self.credentials is not None
            return [make_digest_acl(self.credentials.user, self.credentials.password, all=True)]
        if self.scheme is AuthScheme.SASL:
            user = self.sasl_principal
            if self.sasl_mechanism == "DIGEST-MD5":
                assert self.credentials is not None
                user = self.credentials.user
            return [ACL(Permissions.ALL, Id("sasl", str(user)))]
        return None


@dataclass(frozen=True)
class ServerAuth:
    """What ``stratus zookeeper`` demands of its clients.

    ``required``: every client must authenticate (with digest, or SASL when the server has
    it) before any other request (ZooKeeper's ``enforce.auth``); an anonymous client cannot
    even read. ``super_digest`` (``super:<base64 sha1>``, see ``super_digest``) makes the
    operator who knows the super password able to read and repair any znode, whatever its
    ACL. ``jaas_file`` turns SASL on: a JAAS configuration whose ``Server`` section says how
    the server checks SASL clients (ZooKeeper's ``DigestLoginModule`` with its users for
    DIGEST-MD5, or Kerberos's ``Krb5LoginModule`` with the server's keytab). ``krb5_conf`` is
    the Kerberos configuration the JVM reads (its realm and KDCs; Java reads neither
    ``KRB5_CONFIG`` nor, by default, anything but ``/etc/krb5.conf``).
    """

    required: bool = False
    super_digest: str | None = field(default=None, repr=False)
    jaas_file: Path | None = None
    krb5_conf: Path | None = None

    @property
    def schemes(self) -> tuple[str, ...]:
        """The schemes a client may authenticate with."""
        return ("digest", "sasl") if self.jaas_file else ("digest",)

    def zoo_cfg_lines(self) -> list[str]:
        """Lines of ``zoo.cfg``; ZooKeeper turns unknown keys into ``zookeeper.*`` properties."""
        lines: list[str] = []
        if self.required:
            lines += ["enforce.auth.enabled=true", f"enforce.auth.schemes={','.join(self.schemes)}"]
        if self.jaas_file:
            lines.append(
                "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
            )
        if self.super_digest:
            lines.append(f"DigestAuthenticationProvider.superDigest={self.super_digest}")
        return lines

    def jvm_flags(self) -> list[str]:
        """Flags of the server's JVM: where its JAAS and Kerberos configurations are."""
        if self.jaas_file is None:
            return []
        if not self.jaas_file.is_file():
            raise ZooKeeperAuthError(
                f"the JAAS file {self.jaas_file} (zookeeper.server.sasl.jaas.file) does not "
                "exist: write one with a Server section"
            )
        flags = [f"-Djava.security.auth.login.config={self.jaas_file.absolute()}"]
        if self.krb5_conf is not None:
            if not self.krb5_conf.is_file():
                raise ZooKeeperAuthError(
                    f"the Kerberos configuration {self.krb5_conf} "
                    "(zookeeper.server.sasl.krb5.conf) does not exist: name the krb5.conf "
                    "of the server's realm"
                )
            flags.append(f"-Djava.security.krb5.conf={self.krb5_conf.absolute()}")
        return flags


def refusal_message(auth: ZkAuth, hosts: str, exc: BaseException) -> str:
    """Why the connection's authentication failed, and what to do, in one line.

    With Kerberos the cause is most often on this side (no ticket, no keytab, an unknown
    service principal): kazoo wraps the GSSAPI library's error, whose text says which.
    """
    cause = exc.__cause__
    if (
        auth.scheme is AuthScheme.SASL
        and auth.sasl_mechanism == "GSSAPI"
        and cause is not None
        and type(cause).__module__ == "kerberos"
    ):
        return (
            f"Kerberos could not authenticate {auth.sasl_principal} to ZooKeeper at {hosts} "
            f"(service {auth.sasl_service}): {_gss_text(cause)}; give the daemon its ticket: "
            "set KRB5_CLIENT_KTNAME to its keytab (or run kinit -kt KEYTAB PRINCIPAL), and "
            "check that KRB5_CONFIG names the realm's krb5.conf"
        )
    if auth.scheme is AuthScheme.SASL and auth.sasl_mechanism == "GSSAPI":
        return (
            f"ZooKeeper at {hosts} refused the Kerberos authentication of "
            f"{auth.sasl_principal} ({exc}): check that the server logs in as "
            f"{auth.sasl_service}/<host as in zookeeper.servers>@REALM from its keytab and "
            "that its JVM reads the realm's krb5.conf; the server's log says more"
        )
    return (
        f"ZooKeeper at {hosts} refused stratus's credentials "
        f"({auth.scheme.value}: {type(exc).__name__}); check zookeeper.auth.* and the "
        "server's users"
    )


def _gss_text(error: BaseException) -> str:
    """The messages of a ``kerberos.GSSError``: ``((major text, code), (minor text, code))``."""
    parts = [
        str(arg[0]).strip()
        for arg in error.args
        if isinstance(arg, tuple) and arg and str(arg[0]).strip()
    ]
    return ": ".join(parts) or str(error)


def super_digest(path: Path) -> str:
    """The ``super:<digest>`` line of ZooKeeper's superuser, from a ``super:password`` file."""
    credentials = read_credentials(path)
    if credentials.user != "super":
        raise ZooKeeperAuthError(
            f"{path} names user {credentials.user!r}; ZooKeeper's superuser is 'super': "
            "write super:<password> into it"
        )
    return str(make_digest_acl_credential(credentials.user, credentials.password))


def read_credentials(path: Path) -> Credentials:
    """The ``user:password`` on the first non-empty line of ``path``, a file only its owner
    may read: one that group or others can read is refused, so a leak is never silent."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ZooKeeperAuthError(
            f"cannot read the ZooKeeper credentials file {path}: {exc.strerror or exc}; "
            "create it with one line user:password and chmod 600"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ZooKeeperAuthError(
            f"the ZooKeeper credentials file {path} is accessible by group or others "
            f"(mode {stat.S_IMODE(mode):04o}): run chmod 600 {path}"
        )
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    user, sep, password = line.partition(":")
    if not sep or not user or not password:
        raise ZooKeeperAuthError(
            f"the ZooKeeper credentials file {path} must hold one line user:password "
            "(both non-empty)"
        )
    return Credentials(user, password)


def tighten_tree(client: KazooClient, root: str, acl: list[ACL]) -> int:
    """Give every znode under ``root`` that has another ACL (an open one, from a time
    without authentication) exactly ``acl``; return how many changed.

    ZooKeeper's ACLs are per znode, not inherited, so the whole tree is walked, ``root``
    last: a root that has ``acl`` means an earlier walk finished, and the next start does
    nothing more than read the root's ACL.
    """
    if _same_acl(client.get_acls(root)[0], acl):
        return 0
    changed = 0

    def walk(path: str) -> None:
        nonlocal changed
        try:
            children = client.get_children(path)
            for child in children:
                walk(posixpath.join(path, child))
            if not _same_acl(client.get_acls(path)[0], acl):
                client.set_acls(path, acl)
                changed += 1
        except NoNodeError:
            return  # an ephemeral gone meanwhile

    walk(root)
    log.warning("event=zookeeper_acl_tightened root=%s znodes=%d", root, changed)
    return changed


def _same_acl(current: list[ACL], wanted: list[ACL]) -> bool:
    def key(acls: list[ACL]) -> set[tuple[int, str, str]]:
        return {(entry.perms, entry.id.scheme, entry.id.id) for entry in acls}

    return key(current) == key(wanted)
