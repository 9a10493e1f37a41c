"""The credentials of a secured local cluster (``stratus local --secure``), made at its start.

Everything goes into the cluster's own directory, secrets readable by their owner only:
a CA and the nimbuses' certificate for 127.0.0.1 (TLS on the API and the package server),
a token file with an ``admin`` token for the user, a ``read`` token for the daemons
(supervisors fetch code with it), an ``admin`` token for the nimbuses (they fetch code
with it too, and the leader fences a silent supervisor through its endpoint, which needs
``admin``) and one for the zkfcs (the HA calls to their nimbus and to each other change
who is active), and ZooKeeper
credentials: the ZooKeeper server admits stratus's SASL user alone and every znode's ACL
names it::

    security = LocalSecurity.create(workdir / "security")
    ZooKeeperServer(..., auth=security.zookeeper_server_auth())
    options += security.daemon_options()         # -c key=value of every daemon
    nimbus_options += security.nimbus_options()   # of a nimbus: its admin token
    zkfc_options += security.zkfc_options()       # of a zkfc: its endpoint, its admin token
    NimbusProcess(options, ..., auth=security.daemon_auth())
    NimbusClient(seeds, auth=security.admin_auth())
    security.client_lines(seeds)                  # how a user's client connects

No secret is on a command line: daemons read the token and the ZooKeeper password from files.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stratus.files import write_private
from stratus.security.certificates import CertificateAuthority
from stratus.security.client_auth import ClientAuth
from stratus.security.tls import TlsSettings
from stratus.zk.auth import AuthScheme, ServerAuth, ZkAuth, read_credentials

PRIVATE_FILE_MODE = 0o600
LOOPBACK = "127.0.0.1"
ZOOKEEPER_USER = "stratus"


@dataclass(frozen=True)
class LocalSecurity:
    """The files of a secured local cluster; see the module docstring."""

    directory: Path
    ca: Path
    cert: Path
    key: Path
    tokens: Path
    admin_token_file: Path
    daemon_token_file: Path
    nimbus_token_file: Path
    zkfc_token_file: Path
    zookeeper_credentials: Path
    admin_token: str = field(repr=False)
    daemon_token: str = field(repr=False)

    @classmethod
    def create(cls, directory: Path) -> LocalSecurity:
        """Make the CA, the certificate, the tokens and the ZooKeeper credentials."""
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        authority = CertificateAuthority.create(directory, "stratus-local-ca")
        server = authority.issue("nimbus", ip=LOOPBACK)
        admin, daemon, nimbus, zkfc = (secrets.token_hex(32) for _ in range(4))
        tokens = write_private(
            directory / "tokens",
            "# role kind value: the user's token, the daemons' own, the nimbuses' own, the "
            "zkfcs' own\n"
            f"admin token {admin}\nread token {daemon}\nadmin token {nimbus}\n"
            f"admin token {zkfc}\n",
        )
        return cls(
            directory=directory,
            ca=authority.cert,
            cert=server.cert,
            key=server.key,
            tokens=tokens,
            admin_token_file=write_private(directory / "admin-token", admin + "\n"),
            daemon_token_file=write_private(directory / "daemon-token", daemon + "\n"),
            nimbus_token_file=write_private(directory / "nimbus-token", nimbus + "\n"),
            zkfc_token_file=write_private(directory / "zkfc-token", zkfc + "\n"),
            zookeeper_credentials=write_private(
                directory / "zookeeper-credentials",
                f"{ZOOKEEPER_USER}:{secrets.token_hex(24)}\n",
            ),
            admin_token=admin,
            daemon_token=daemon,
        )

    def zookeeper_server_auth(self) -> ServerAuth:
        """The local ZooKeeper admits stratus's SASL user alone, checked against its password,
        and locks its tree to it under a quota (``stratus.zk.lockdown``)."""
        return ServerAuth(required=True, users=(read_credentials(self.zookeeper_credentials),))

    def zookeeper_auth(self) -> ZkAuth:
        """stratus's ZooKeeper identity, for a session of the local cluster's own."""
        return ZkAuth(
            AuthScheme.SASL,
            read_credentials(self.zookeeper_credentials),
            sasl_mechanism="DIGEST-MD5",
        )

    def daemon_options(self) -> list[str]:
        """``-c key=value`` options of every nimbus and supervisor."""
        settings = {
            "nimbus.auth.tokens.file": self.tokens,
            "nimbus.tls.cert": self.cert,
            "nimbus.tls.key": self.key,
            "client.tls.ca": self.ca,
            "client.auth.token.file": self.daemon_token_file,
            "zookeeper.auth.scheme": "sasl",
            "zookeeper.auth.sasl.mechanism": "DIGEST-MD5",
            "zookeeper.auth.file": self.zookeeper_credentials,
        }
        return [item for key, value in settings.items() for item in ("-c", f"{key}={value}")]

    def nimbus_options(self) -> list[str]:
        """``-c key=value`` options of a nimbus, after ``daemon_options``: the leader fences
        a silent supervisor through its endpoint (``admin``) with the nimbuses' token."""
        return ["-c", f"client.auth.token.file={self.nimbus_token_file}"]

    def zkfc_options(self) -> list[str]:
        """``-c key=value`` options of a zkfc, after ``daemon_options``: it calls its nimbus's
        HA protocol and the other zkfcs' endpoints (both ``admin``) with the zkfcs' token,
        and serves its endpoint as the nimbuses serve their API."""
        return ["-c", f"client.auth.token.file={self.zkfc_token_file}"]

    def daemon_auth(self) -> ClientAuth:
        """How whoever waits for a nimbus reaches it: https and the daemons' token."""
        return ClientAuth(token=self.daemon_token, tls=TlsSettings(ca=str(self.ca)))

    def admin_auth(self) -> ClientAuth:
        """The user's client: https and the admin token."""
        return ClientAuth(token=self.admin_token, tls=TlsSettings(ca=str(self.ca)))

    def client_lines(self, seeds: Sequence[str]) -> list[str]:
        """How a user's client connects, as shell lines to copy."""
        return [
            f"export STRATUS_TOKEN=$(cat {self.admin_token_file})",
            f"stratus list -c nimbus.seeds={','.join(seeds)} -c client.tls.ca={self.ca}",
        ]
