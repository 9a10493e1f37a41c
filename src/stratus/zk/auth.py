"""stratus's identity in ZooKeeper: how the session authenticates and the ACL of its znodes.

With ``digest`` (or ``sasl``) the session adds its credentials to every connection and creates
every znode with an ACL that gives that identity, and nobody else, every permission: no world
READ either (pipeline records carry their configuration, which may hold secrets, and every
stratus component reads through an authenticated session anyway)::

    auth = ZkAuth.digest_from_file(Path("/etc/stratus/zk.secret"))   # one line: user:password
    client = KazooClient(hosts, default_acl=auth.acl(), **auth.client_options())

Credentials (``ZkCredentials``) come only from a file that its owner alone may read
(``read_credentials``), never from the command line or the YAML configuration, where ``ps``
and backups would show them.
``ServerAuth`` is the other side: what ``stratus zookeeper`` demands of its clients.
"""

from __future__ import annotations

import importlib.util
import logging
import posixpath
import re
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
class ZkCredentials:
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
    credentials: ZkCredentials | None = None
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


SUPERUSER = "super"  # ZooKeeper's superuser name (its zookeeper.superUser, DigestAuth's "super")
# A SASL user name as a JAAS option (user_<name>) and a password in its double quotes can hold.
_JAAS_USER = re.compile(r"[A-Za-z0-9._-]{1,64}")
_JAAS_PASSWORD = re.compile(r'[^"\\\x00-\x1f\x7f]{1,256}')


@dataclass(frozen=True)
class ZnodeQuota:
    """A hard quota on stratus's root: at most ``znodes`` znodes and ``data_bytes`` bytes of
    data under it (ZooKeeper's ``countHardLimit`` and ``byteHardLimit``, with ``enforceQuota``)."""

    znodes: int = 100_000
    data_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.znodes < 1 or self.data_bytes < 1:
            raise ZooKeeperAuthError(
                f"the ZooKeeper quota must be positive, not {self.znodes} znodes and "
                f"{self.data_bytes} bytes (zookeeper.server.quota.count, .bytes)"
            )

    def limits_data(self) -> bytes:
        """The data of the quota's ``zookeeper_limits`` znode, in ZooKeeper's format."""
        return (
            f"count=-1,bytes=-1=;byteHardLimit={self.data_bytes};countHardLimit={self.znodes}"
        ).encode()


@dataclass(frozen=True)
class ServerAuth:
    """What ``stratus zookeeper`` demands of its clients.

    ``required``: every client must authenticate with SASL before any other request
    (ZooKeeper's ``enforce.auth`` with the ``sasl`` scheme alone): an anonymous client cannot
    even read, and neither can one that presents a digest, since ZooKeeper's digest scheme
    admits every ``user:password`` pair and only compares it with ACLs. SASL identities are
    checked by the server: ``users`` are the DIGEST-MD5 users it knows (stratus's own, from
    ``zookeeper.auth.file``), written into a JAAS file of its data directory; or ``jaas_file``
    names the operator's own JAAS configuration (Kerberos's ``Krb5LoginModule`` with the
    server's keytab), and ``krb5_conf`` the Kerberos configuration its JVM reads (Java reads
    neither ``KRB5_CONFIG`` nor, by default, anything but ``/etc/krb5.conf``).

    ``superuser`` (user ``super``) may read and repair any znode whatever its ACL; with
    ``users`` and none given, the server makes one (``zk/lockdown.py``) and locks ``/``, the
    parents of ``root`` and the quota's znodes to it, ``root`` to ``users``, under ``quota``.
    ``super_digest`` is the older digest superuser (``super:<base64 sha1>``) of a server that
    does not require authentication.
    """

    required: bool = False
    super_digest: str | None = field(default=None, repr=False)
    jaas_file: Path | None = None
    krb5_conf: Path | None = None
    users: tuple[ZkCredentials, ...] = ()
    superuser: ZkCredentials | None = None
    root: str = "/stratus"
    quota: ZnodeQuota = field(default_factory=ZnodeQuota)

    def __post_init__(self) -> None:
        if self.required and not self.sasl:
            raise ZooKeeperAuthError(
                "a ZooKeeper that requires authentication must be able to check who its "
                "clients are: set zookeeper.auth.file (stratus's user:password, checked with "
                "SASL DIGEST-MD5) or zookeeper.server.sasl.jaas.file (Kerberos)"
            )
        if self.users and self.jaas_file is not None:
            raise ZooKeeperAuthError(
                f"the JAAS file {self.jaas_file} (zookeeper.server.sasl.jaas.file) and "
                "DIGEST-MD5 users exclude each other: with a JAAS file of your own, list "
                "stratus's user in it and leave the server's users out"
            )
        for credentials in (*self.users, *filter(None, [self.superuser])):
            _check_jaas_credentials(credentials)
        if self.superuser is not None and self.superuser.user != SUPERUSER:
            raise ZooKeeperAuthError(
                f"ZooKeeper's superuser is named {SUPERUSER!r}, not {self.superuser.user!r}: "
                f"write {SUPERUSER}:<password> into zookeeper.server.super.file"
            )

    @property
    def sasl(self) -> bool:
        """Whether the server checks SASL identities (its users, or a JAAS file)."""
        return bool(self.users) or self.jaas_file is not None

    @property
    def schemes(self) -> tuple[str, ...]:
        """The schemes that admit a client: only those whose secret the server checks."""
        return ("sasl",) if self.sasl else ("digest",)

    def zoo_cfg_lines(self) -> list[str]:
        """Lines of ``zoo.cfg``; ZooKeeper turns unknown keys into ``zookeeper.*`` properties."""
        lines = ["enforceQuota=true"]  # the quota of stratus's root is a hard limit
        if self.required:
            lines += ["enforce.auth.enabled=true", f"enforce.auth.schemes={','.join(self.schemes)}"]
        if self.sasl:
            lines.append(
                "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
            )
        if self.super_digest:
            lines.append(f"DigestAuthenticationProvider.superDigest={self.super_digest}")
        return lines

    def jaas_text(self, superuser: ZkCredentials | None) -> str:
        """The ``Server`` section of the JAAS file that the server writes for ``users``."""
        entries = [
            f'    user_{credentials.user}="{credentials.password}"'
            for credentials in (*self.users, *filter(None, [superuser]))
        ]
        return (
            "Server {\n    org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            + "\n".join(entries)
            + ";\n};\n"
        )

    def jvm_flags(self, written_jaas: Path | None = None) -> list[str]:
        """Flags of the server's JVM: its JAAS file (the operator's, or ``written_jaas``, the
        one the server wrote for ``users``), its Kerberos configuration, its superuser."""
        jaas = self.jaas_file or written_jaas
        if jaas is None:
            return []
        if not jaas.is_file():
            raise ZooKeeperAuthError(
                f"the JAAS file {jaas} (zookeeper.server.sasl.jaas.file) does not "
                "exist: write one with a Server section"
            )
        flags = [f"-Djava.security.auth.login.config={jaas.absolute()}"]
        if written_jaas is not None:
            flags.append(f"-Dzookeeper.superUser={SUPERUSER}")
        if self.krb5_conf is not None:
            if not self.krb5_conf.is_file():
                raise ZooKeeperAuthError(
                    f"the Kerberos configuration {self.krb5_conf} "
                    "(zookeeper.server.sasl.krb5.conf) does not exist: name the krb5.conf "
                    "of the server's realm"
                )
            flags.append(f"-Djava.security.krb5.conf={self.krb5_conf.absolute()}")
        return flags


def _check_jaas_credentials(credentials: ZkCredentials) -> None:
    """Refuse a user or password that a JAAS option cannot hold as it is."""
    if not _JAAS_USER.fullmatch(credentials.user):
        raise ZooKeeperAuthError(
            f"the ZooKeeper user {credentials.user!r} cannot be a SASL user: use letters, "
            "digits, '.', '_' and '-' (at most 64)"
        )
    if not _JAAS_PASSWORD.fullmatch(credentials.password):
        raise ZooKeeperAuthError(
            f"the password of ZooKeeper user {credentials.user!r} cannot be a SASL password: "
            "no double quote, backslash or control character, at most 256 characters "
            "(make one with: openssl rand -hex 24)"
        )


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


def read_credentials(path: Path) -> ZkCredentials:
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
    return ZkCredentials(user, password)


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
