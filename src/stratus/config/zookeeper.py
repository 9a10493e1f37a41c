"""The ``zookeeper.*`` keys: the ensemble, how stratus authenticates to it, and the
server that ``stratus zookeeper`` runs."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from stratus.cluster_names import cluster_dir_name, cluster_root
from stratus.config.section import Section


class ZookeeperSection(Section):
    """The ZooKeeper ensemble every daemon and client connects to, how stratus
    authenticates to it, and the server that `stratus zookeeper` runs."""

    prefix: ClassVar[str] = "zookeeper"

    zookeeper_servers: list[str] = Field(
        default=["127.0.0.1:2181"],
        alias="zookeeper.servers",
        description="host:port of every server of the ZooKeeper ensemble",
    )
    zookeeper_root: str = Field(
        default="/stratus",
        alias="zookeeper.root",
        description="znode under which stratus keeps all of its state",
    )
    zookeeper_session_timeout_secs: float = Field(
        default=10.0,
        gt=0,
        alias="zookeeper.session.timeout.secs",
        description="ZooKeeper session timeout; bounds how long a crashed leader blocks failover",
    )
    zookeeper_connection_timeout_secs: float = Field(
        default=15.0,
        gt=0,
        alias="zookeeper.connection.timeout.secs",
        description="how long a daemon waits for its first ZooKeeper connection at start-up",
    )
    zookeeper_stop_wait_secs: float = Field(
        default=5.0,
        gt=0,
        alias="zookeeper.stop.wait.secs",
        description="longest a daemon's stop waits on a connected ZooKeeper (leadership "
        "handed over, last heartbeat, unregistered); one that is not connected, or loses "
        "ZooKeeper meanwhile, ends its session at once and stops without it",
    )
    zookeeper_outage_refusals: Literal["local", "trust", "none"] = Field(
        default="local",
        alias="zookeeper.outage.refusals",
        description="which refused connections to a ZooKeeper member prove it down when "
        "supervisor.zookeeper.outage is ride: `local` those of a member on this host (a "
        "loopback address or one of its own), where no firewall can answer for it; `trust` "
        "every one (the network never answers a partition with a REJECT or a reset); "
        "`none` no refusal, only members that answer they serve nothing",
    )
    zookeeper_server_port: int = Field(
        default=2181,
        ge=0,
        le=65535,
        alias="zookeeper.server.port",
        description="client port of `stratus zookeeper` (0 picks a free port)",
    )
    zookeeper_server_data_dir: str | None = Field(
        default=None,
        alias="zookeeper.server.data.dir",
        description="data directory of `stratus zookeeper`, kept across restarts "
        "(default: ~/.stratus/zookeeper)",
    )
    zookeeper_server_tick_time_ms: int = Field(
        default=200,
        gt=0,
        le=60_000,
        alias="zookeeper.server.tick.time.ms",
        description="tickTime of `stratus zookeeper` (at most 60000); the minimum session "
        "timeout is two ticks",
    )
    zookeeper_server_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        alias="zookeeper.server.host",
        description="address `stratus zookeeper` listens on for clients (0.0.0.0: every interface)",
    )
    zookeeper_server_force_sync: bool = Field(
        default=True,
        alias="zookeeper.server.force.sync",
        description="`stratus zookeeper` fsyncs its transaction log before it acknowledges a "
        "write (false: faster, but a machine crash may lose acknowledged writes)",
    )
    zookeeper_server_auth_required: bool = Field(
        default=False,
        alias="zookeeper.server.auth.required",
        description="`stratus zookeeper` admits only clients whose SASL identity it checks "
        "(stratus's user of zookeeper.auth.file with DIGEST-MD5, or the users of "
        "zookeeper.server.sasl.jaas.file), reads included, and locks `/` and stratus's root "
        "under a quota",
    )
    zookeeper_server_auth_insecure: bool = Field(
        default=False,
        alias="zookeeper.server.auth.insecure",
        description="let `stratus zookeeper` listen on a non-loopback address without "
        "requiring authentication (`--insecure`): anyone who reaches it may read and write "
        "every znode",
    )
    zookeeper_server_quota_count: int = Field(
        default=100_000,
        ge=1,
        alias="zookeeper.server.quota.count",
        description="hard limit of znodes under zookeeper.root on a `stratus zookeeper` that "
        "requires authentication",
    )
    zookeeper_server_quota_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1,
        alias="zookeeper.server.quota.bytes",
        description="hard limit of the bytes of data under zookeeper.root on a "
        "`stratus zookeeper` that requires authentication",
    )
    zookeeper_server_super_file: str | None = Field(
        default=None,
        alias="zookeeper.server.super.file",
        description="file holding `super:<password>` (mode 600): `stratus zookeeper` lets "
        "whoever authenticates as that superuser read and repair any znode (SASL "
        "DIGEST-MD5 when it requires authentication; default then: one it makes, "
        "super.secret in its data directory)",
    )
    zookeeper_server_sasl_jaas_file: str | None = Field(
        default=None,
        alias="zookeeper.server.sasl.jaas.file",
        description="JAAS configuration whose Server section lets `stratus zookeeper` accept "
        "SASL clients (DIGEST-MD5 users, or Kerberos with the server's keytab)",
    )
    zookeeper_server_sasl_krb5_conf: str | None = Field(
        default=None,
        alias="zookeeper.server.sasl.krb5.conf",
        description="Kerberos configuration (krb5.conf) the JVM of `stratus zookeeper` reads "
        "for its realm and KDCs (default: the KRB5_CONFIG variable, else Java's default, "
        "/etc/krb5.conf)",
    )
    zookeeper_server_secure_port: int | None = Field(
        default=None,
        ge=0,
        le=65535,
        alias="zookeeper.server.secure.port",
        description="TLS client port of `stratus zookeeper` (0 picks a free port; default: "
        "none); its plain port then listens on loopback only",
    )
    zookeeper_server_ssl_keystore_file: str | None = Field(
        default=None,
        alias="zookeeper.server.ssl.keystore.file",
        description="PEM file with the private key and certificate chain of `stratus "
        "zookeeper`'s TLS port",
    )
    zookeeper_server_ssl_truststore_file: str | None = Field(
        default=None,
        alias="zookeeper.server.ssl.truststore.file",
        description="PEM file of the CAs whose client certificates `stratus zookeeper` "
        "accepts; when set, every TLS client must show one",
    )
    zookeeper_server_ssl_quorum: bool = Field(
        default=False,
        alias="zookeeper.server.ssl.quorum",
        description="the members of `stratus zookeeper --ensemble` talk to each other over TLS "
        "too, each showing the keystore's certificate (which must name its address) and "
        "trusting the truststore's CAs (required)",
    )
    zookeeper_ssl_enabled: bool = Field(
        default=False,
        alias="zookeeper.ssl.enabled",
        description="connect to ZooKeeper with TLS (zookeeper.servers then name secure ports)",
    )
    zookeeper_ssl_ca_file: str | None = Field(
        default=None,
        alias="zookeeper.ssl.ca.file",
        description="PEM file of the CAs that signed the ZooKeeper servers' certificates "
        "(default: the system's)",
    )
    zookeeper_ssl_cert_file: str | None = Field(
        default=None,
        alias="zookeeper.ssl.cert.file",
        description="PEM certificate stratus shows to ZooKeeper, when the servers require one",
    )
    zookeeper_ssl_key_file: str | None = Field(
        default=None,
        alias="zookeeper.ssl.key.file",
        description="PEM private key of zookeeper.ssl.cert.file",
    )
    zookeeper_ssl_check_hostname: bool = Field(
        default=True,
        alias="zookeeper.ssl.check.hostname",
        description="a server's certificate must name the host it is reached at",
    )
    zookeeper_auth_scheme: Literal["none", "digest", "sasl"] = Field(
        default="none",
        alias="zookeeper.auth.scheme",
        description="how stratus authenticates to ZooKeeper; with digest or sasl every znode "
        "it creates is readable and writable by its own identity only",
    )
    zookeeper_auth_file: str | None = Field(
        default=None,
        alias="zookeeper.auth.file",
        description="file holding `user:password` (mode 600) for zookeeper.auth.scheme digest "
        "(or sasl with DIGEST-MD5); credentials are never read from the configuration itself",
    )
    zookeeper_auth_sasl_mechanism: Literal["GSSAPI", "DIGEST-MD5"] = Field(
        default="GSSAPI",
        alias="zookeeper.auth.sasl.mechanism",
        description="SASL mechanism when zookeeper.auth.scheme is sasl (GSSAPI: Kerberos, "
        "tickets from the keytab KRB5_CLIENT_KTNAME names, or the ticket cache)",
    )
    zookeeper_auth_sasl_service: str = Field(
        default="zookeeper",
        min_length=1,
        alias="zookeeper.auth.sasl.service",
        description="service name of ZooKeeper's Kerberos principal (service/host@REALM)",
    )
    zookeeper_auth_sasl_principal: str | None = Field(
        default=None,
        alias="zookeeper.auth.sasl.principal",
        description="stratus's Kerberos principal as ZooKeeper names it (user@REALM); the ACL "
        "of its znodes names it",
    )

    def zookeeper_hosts(self) -> str:
        """The kazoo connect string for ``zookeeper.servers``."""
        return ",".join(self.zookeeper_servers)

    def cluster_root(self) -> str:
        """The cluster's ZooKeeper root: the chroot of ``zookeeper.servers`` joined with
        ``zookeeper.root``; what names the cluster (``stratus.cluster_names``)."""
        return cluster_root(self.zookeeper_hosts(), self.zookeeper_root)

    def cluster_default_dir(self, what: str) -> Path:
        """``<tmp>/stratus-<what>.<cluster>``: a default directory of this cluster. Each is a
        child of the system's temporary directory, as in 0.2.0, made by its own daemon with
        its own modes; the cluster's name follows the last '.', which no cluster's name holds
        (``stratus.cluster_names``)."""
        name = cluster_dir_name(self.cluster_root())
        return Path(tempfile.gettempdir()) / f"stratus-{what}.{name}"
