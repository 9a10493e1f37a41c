"""TLS between stratus and ZooKeeper: the client's settings and the embedded server's port.

The client side is kazoo's ``use_ssl`` with the CA that signed the servers' certificates and,
when the servers demand one, the client's own certificate and key (PEM files). The server
side is ZooKeeper's secure client port, served by its Netty connection factory (the netty
jars ship with pyspark) from PEM key and trust stores, so no Java keystore tool is needed::

    client = KazooClient("zk1:2281", **ZkTls(True, ca_file="ca.pem").client_options())
    ServerTls(port=2281, keystore="server.pem", truststore="ca.pem").zoo_cfg_lines("0.0.0.0")
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class ServerTls:
    """The embedded server's secure client port and its PEM stores.

    ``keystore`` holds the server's private key and certificate chain; ``truststore``, if
    given, the CAs whose client certificates it accepts, and every client must then show one.
    """

    port: int
    keystore: Path
    truststore: Path | None = None

    def zoo_cfg_lines(self, host: str) -> list[str]:
        """The ``zoo.cfg`` lines of a secure client port listening on ``host``."""
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
        return lines
