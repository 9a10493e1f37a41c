"""TLS between stratus and ZooKeeper: the client's settings and the embedded server's port.

The client side is kazoo's ``use_ssl`` with the CA that signed the servers' certificates and,
when the servers demand one, the client's own certificate and key (PEM files); the same
settings make the ``ssl.SSLContext`` of stratus's own probes (the four-letter words, which
ZooKeeper answers on its secure port too). The server side is ZooKeeper's secure client port,
served by its Netty connection factory (the netty jars ship with pyspark) from PEM key and
trust stores, so no Java keystore tool is needed; ``quorum`` also encrypts and authenticates
the traffic between ensemble members with the same stores::

    client = KazooClient("zk1:2281", **ZkTls(True, ca_file="ca.pem").client_options())
    ServerTls(port=2281, keystore="server.pem", truststore="ca.pem").zoo_cfg_lines("0.0.0.0")
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratus.zk.errors import ZooKeeperServerError

NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"


@dataclass(frozen=True)
class ZkTls:
    """How the session connects: TLS or not, whom it trusts, which certificate it shows.

    ``check_hostname``: the server's certificate must name the host of ``zookeeper.servers``
    (as a DNS name or an IP address).
    """

    enabled: bool = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    check_hostname: bool = True

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``KazooClient`` (none without TLS)."""
        if not self.enabled:
            return {}
        return {
            "use_ssl": True,
            "verify_certs": True,
            "check_hostname": self.check_hostname,
            "ca": self.ca_file,
            "certfile": self.cert_file,
            "keyfile": self.key_file,
        }

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context of a TLS connection kazoo would make (None without TLS): the same CA,
        hostname check and client certificate. ``OSError`` if a file cannot be read."""
        if not self.enabled:
            return None
        context = ssl.create_default_context(cafile=self.ca_file)
        context.check_hostname = self.check_hostname
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


@dataclass(frozen=True)
class ServerTls:
    """The embedded server's secure client port and its PEM stores.

    ``keystore`` holds the server's private key and certificate chain; ``truststore``, if
    given, the CAs whose client certificates it accepts, and every client must then show one.
    ``quorum``: the members of an ensemble talk to each other (quorum and election ports)
    over TLS too, each showing its keystore's certificate to the others, which must trust
    it (``truststore`` required) and find in it the address the member is reached at.
    """

    port: int
    keystore: Path
    truststore: Path | None = None
    quorum: bool = False

    def __post_init__(self) -> None:
        if self.quorum and self.truststore is None:
            raise ZooKeeperServerError(
                "quorum TLS needs a truststore: the members check each other's certificates "
                "(set zookeeper.server.ssl.truststore.file)"
            )

    def probe_context(self) -> ssl.SSLContext:
        """The context of the server's own probes of its secure port (``srvr``, to learn
        whether it serves): no check of the server, which is this very server; it shows its
        own keystore's certificate when the port demands one."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        if self.truststore is not None:
            context.load_cert_chain(self.keystore)  # one PEM file: the key and the chain
        return context

    def zoo_cfg_lines(self, host: str, *, member: bool = False) -> list[str]:
        """The ``zoo.cfg`` lines of a secure client port listening on ``host``, and of quorum
        TLS if the server is an ensemble ``member``."""
        for store in (self.keystore, self.truststore):
            if store is not None and not store.is_file():
                raise ZooKeeperServerError(
                    f"the TLS store {store} does not exist: give a PEM file "
                    "(zookeeper.server.ssl.keystore.file / .truststore.file)"
                )
        lines = [
            f"serverCnxnFactory={NETTY_FACTORY}",
            f"secureClientPort={self.port}",
            f"secureClientPortAddress={host}",
            f"ssl.keyStore.location={self.keystore.absolute()}",
            "ssl.keyStore.type=PEM",
        ]
        if self.truststore is not None:
            lines += [
                f"ssl.trustStore.location={self.truststore.absolute()}",
                "ssl.trustStore.type=PEM",
                "ssl.clientAuth=need",
            ]
        else:
            lines.append("ssl.clientAuth=none")
        if member and self.quorum and self.truststore is not None:
            lines += [
                "sslQuorum=true",
                f"ssl.quorum.keyStore.location={self.keystore.absolute()}",
                "ssl.quorum.keyStore.type=PEM",
                f"ssl.quorum.trustStore.location={self.truststore.absolute()}",
                "ssl.quorum.trustStore.type=PEM",
            ]
        return lines
