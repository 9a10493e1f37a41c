"""Typed configuration: defaults, a YAML file, and ``-c key=value`` overrides, validated once.

Keys are flat and dotted, as in Storm's ``storm.yaml`` (``zookeeper.servers``,
``nimbus.seeds``); "topology" in Storm's vocabulary is spelled "pipeline" here. Precedence,
lowest first: built-in defaults, the file named by ``--config`` (or ``STRATUS_CONF``), then each
``-c key=value``. An unknown key is an error that names it and the closest valid key; a bad value
names the key and the type it expects::

    conf = load_config(path="stratus.yaml", overrides=["zookeeper.session.timeout.secs=4"])
    conf.zookeeper_session_timeout_secs  # 4.0
"""

from __future__ import annotations

import difflib
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from stratus.cluster_names import cluster_dir_name, cluster_root
from stratus.errors import ConfigError

CONFIG_ENV_VAR = "STRATUS_CONF"
_LIST_KEYS = frozenset(  # `a,b` splits at commas, in a file as with `-c key=a,b`
    {
        "zookeeper.servers",
        "nimbus.seeds",
        "pacemaker.servers",
        "pipeline.checkpoint.schemes",
        "pipeline.spark.masters",
        "supervisor.worker.env",
        "supervisor.worker.users",
        "supervisor.deps.find.links",
    }
)

LEGACY_CHECKPOINT_DIR = "stratus-checkpoints"  # <tmp>/<this>: the default up to 0.2.0
UNSPECIFIED_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})  # bind-only, never advertised
SUPERVISOR_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"  # a znode name and a directory name


class StratusConfig(BaseModel):
    """Every setting stratus reads, under its dotted name (the field alias)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

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
    nimbus_host: str = Field(
        default="127.0.0.1",
        min_length=1,
        alias="nimbus.host",
        description="address a nimbus advertises: registered in ZooKeeper and used by peers "
        "and clients (never 0.0.0.0 or ::); also the bind address unless nimbus.bind.host is set",
    )
    nimbus_port: int = Field(
        default=6627,
        ge=0,
        le=65535,
        alias="nimbus.port",
        description="port of a nimbus's HTTP API (0 picks a free port)",
    )
    nimbus_bind_host: str | None = Field(
        default=None,
        min_length=1,
        alias="nimbus.bind.host",
        description="address a nimbus's HTTP API and package server listen on, such as "
        "0.0.0.0 (default: nimbus.host)",
    )
    nimbus_auth_tokens_file: str | None = Field(
        default=None,
        alias="nimbus.auth.tokens.file",
        description="file of `<role> token|cn <value> [principal=NAME] [expires=ISO-8601]` "
        "lines (mode 600): the bearer tokens (best as sha256:<hex>) and client certificate "
        "names that nimbuses, supervisor endpoints and zkfc endpoints accept, each with a role "
        "(read, submit, admin) and a principal; read again on SIGHUP; unset, calls are not "
        "authenticated",
    )
    nimbus_auth_insecure: bool = Field(
        default=False,
        alias="nimbus.auth.insecure",
        description="let a nimbus bound to a non-loopback address start without "
        "authentication (anyone who reaches it may run code on every supervisor)",
    )
    nimbus_auth_insecure_warn_secs: float = Field(
        default=300.0,
        gt=0,
        alias="nimbus.auth.insecure.warn.secs",
        description="how often a nimbus started with nimbus.auth.insecure on a non-loopback "
        "address logs its INSECURE warning again",
    )
    nimbus_tls_cert: str | None = Field(
        default=None,
        alias="nimbus.tls.cert",
        description="PEM certificate of a nimbus's HTTP API and package server (and of a "
        "supervisor's or zkfc's endpoint); set, they speak https only, and the daemon's own "
        "calls to other daemons are https too",
    )
    nimbus_tls_key: str | None = Field(
        default=None,
        alias="nimbus.tls.key",
        description="PEM private key of nimbus.tls.cert (default: in the certificate file)",
    )
    nimbus_tls_ca: str | None = Field(
        default=None,
        alias="nimbus.tls.ca",
        description="PEM CA bundle that signs client certificates; a verified certificate's "
        "subject CN is looked up in nimbus.auth.tokens.file",
    )
    nimbus_tls_client_cert_required: bool = Field(
        default=False,
        alias="nimbus.tls.client.cert.required",
        description="refuse TLS connections without a client certificate signed by "
        "nimbus.tls.ca (mutual TLS)",
    )
    nimbus_seeds: list[str] = Field(
        default=["127.0.0.1:6627"],
        min_length=1,
        alias="nimbus.seeds",
        description="host:port of nimbuses a client asks to find the leader; any subset works",
    )
    nimbus_local_dir: str | None = Field(
        default=None,
        alias="nimbus.local.dir",
        description="where a nimbus keeps pipeline packages (default: "
        "stratus-nimbus-<host>-<port>.<cluster> under the system's temporary directory, "
        "<cluster> naming the cluster's ZooKeeper root; set it in production)",
    )
    nimbus_max_upload_bytes: int = Field(
        default=256 * 1024 * 1024,
        gt=0,
        alias="nimbus.max.upload.bytes",
        description="largest pipeline package a nimbus accepts; larger uploads get HTTP 413",
    )
    nimbus_max_request_bytes: int = Field(
        default=1024 * 1024,
        gt=0,
        alias="nimbus.max.request.bytes",
        description="largest body of any API request but a submit; larger bodies get HTTP 413 "
        "before they are read",
    )
    nimbus_max_concurrent_uploads: int = Field(
        default=4,
        gt=0,
        alias="nimbus.max.concurrent.uploads",
        description="submits whose packages a nimbus reads at once; one more gets HTTP 503 "
        "with Retry-After",
    )
    nimbus_max_record_bytes: int = Field(
        default=512 * 1024,
        gt=0,
        le=1_000_000,
        alias="nimbus.max.record.bytes",
        description="largest pipeline record (its znode), below ZooKeeper's jute.maxbuffer "
        "(1 MiB by default); a submit or rebalance that would pass it gets HTTP 413 "
        "record_too_large",
    )
    nimbus_http_max_connections: int = Field(
        default=4096,
        gt=0,
        alias="nimbus.http.max.connections",
        description="connections of authenticated callers to a nimbus's API, and as many not "
        "yet authenticated; one more is closed at once (an authenticated request past the "
        "bound, or beyond it in progress at once, gets HTTP 503)",
    )
    nimbus_http_max_connections_per_address: int = Field(
        default=256,
        gt=0,
        alias="nimbus.http.max.connections.per.address",
        description="connections one client address may hold to a nimbus's API (and to a "
        "supervisor's or zkfc's endpoint), authenticated or not; one more is closed at once",
    )
    nimbus_http_linger_secs: float = Field(
        default=5.0,
        ge=0,
        alias="nimbus.http.linger.secs",
        description="after an answer given before the request's body was read (such as a "
        "413), how long a nimbus's API and package server (and a supervisor's or zkfc's "
        "endpoint) read and drop the rest of the body before they close, so that the client "
        "reads the answer rather than a connection reset",
    )
    nimbus_http_linger_max_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=0,
        alias="nimbus.http.linger.max.bytes",
        description="the most of such a body read and dropped before the connection is closed",
    )
    nimbus_http_header_timeout_secs: float = Field(
        default=10.0,
        gt=0,
        alias="nimbus.http.header.timeout.secs",
        description="a connection to the API that has not sent a whole request head this long "
        "after it opened (or after its last response) is closed",
    )
    nimbus_http_keepalive_secs: float = Field(
        default=5.0,
        gt=0,
        alias="nimbus.http.keepalive.secs",
        description="an idle kept-alive API connection is closed after this long",
    )
    nimbus_http_max_header_bytes: int = Field(
        default=16 * 1024,
        ge=1024,
        alias="nimbus.http.max.header.bytes",
        description="largest request head (request line and headers) the API reads; a larger "
        "one gets HTTP 431 (400 if it passes the limit while it arrives) and the connection "
        "is closed",
    )
    nimbus_ui_refresh_secs: float = Field(
        default=2.0,
        ge=0.5,
        le=3600,
        alias="nimbus.ui.refresh.secs",
        description="how often an open page of the web UI reads the cluster again (only while "
        "its tab is visible, one round at a time)",
    )
    nimbus_ui_series_step_secs: float = Field(
        default=10.0,
        ge=0.5,
        le=600,
        alias="nimbus.ui.series.step.secs",
        description="seconds between two points of a pipeline's charts (its series, kept in "
        "every nimbus's memory)",
    )
    nimbus_ui_series_points: int = Field(
        default=360,
        ge=10,
        le=10_000,
        alias="nimbus.ui.series.points",
        description="points kept per pipeline for its charts (360 of 10 s: the last hour); "
        "at most 500 pipelines have a series",
    )
    nimbus_code_max_connections: int = Field(
        default=256,
        gt=0,
        alias="nimbus.code.max.connections",
        description="connections of authenticated callers a nimbus's package server holds "
        "(one thread each), and as many not yet authenticated; one more gets HTTP 503 and is "
        "closed",
    )
    nimbus_code_max_connections_per_address: int = Field(
        default=32,
        gt=0,
        alias="nimbus.code.max.connections.per.address",
        description="connections one client address may hold to a nimbus's package server, "
        "authenticated or not; one more gets HTTP 503 and is closed",
    )
    nimbus_code_head_timeout_secs: float = Field(
        default=10.0,
        gt=0,
        alias="nimbus.code.head.timeout.secs",
        description="a new package server connection whose TLS handshake and first request "
        "head are not whole this long after it opened is closed",
    )
    nimbus_code_idle_secs: float = Field(
        default=30.0,
        gt=0,
        alias="nimbus.code.idle.secs",
        description="an authenticated package server connection idle this long (no request, "
        "or a read or write that makes no progress), or whose next request head is not whole "
        "this long after it began, is closed",
    )
    nimbus_lead_check_secs: float = Field(
        default=1.0,
        gt=0,
        alias="nimbus.lead.check.secs",
        description="how often a nimbus that may not lead yet checks again before queuing",
    )
    nimbus_monitor_freq_secs: float = Field(
        default=2.0,
        gt=0,
        alias="nimbus.monitor.freq.secs",
        description="how often the leader looks for work to do on its own, such as removing "
        "killed pipelines whose wait is over",
    )
    nimbus_ha_mode: Literal["supervised", "self", "zkfc"] = Field(
        default="supervised",
        alias="nimbus.ha.mode",
        description="who makes this nimbus the leader: `supervised` (`stratus nimbus` is a "
        "failover controller that runs the nimbus as its child and fails it over as soon as "
        "the child dies or hangs), `self` (it campaigns in the nimbus election itself) or "
        "`zkfc` (it never campaigns; it leads only after the transition-to-active of a "
        "`stratus zkfc` beside it, fenced by the epoch that controller won)",
    )
    nimbus_code_distributor: Literal["local", "shared"] = Field(
        default="local",
        alias="nimbus.code.distributor",
        description="where pipeline code lives: `local` (each nimbus's disk, replicated between "
        "nimbuses over HTTP) or `shared` (one fsspec store at nimbus.code.shared.url)",
    )
    nimbus_code_shared_url: str | None = Field(
        default=None,
        alias="nimbus.code.shared.url",
        description="fsspec URL of the shared code store (`file:///mnt/shared/stratus`, "
        "`hdfs://...`, `s3://...`); required when nimbus.code.distributor is `shared`",
    )
    nimbus_code_sync_freq_secs: float = Field(
        default=120.0,
        gt=0,
        alias="nimbus.code.sync.freq.secs",
        description="how often a nimbus's background sync repairs whatever code the "
        "ZooKeeper watches missed, and re-checks its copies' digests",
    )
    nimbus_code_watch: bool = Field(
        default=True,
        alias="nimbus.code.watch",
        description="fetch new code as soon as a ZooKeeper watch reports it; false leaves "
        "replication to the background sync alone (for comparison only)",
    )
    nimbus_code_lost_fail_secs: float = Field(
        default=300.0,
        gt=0,
        alias="nimbus.code.lost.fail.secs",
        description="how long a pipeline's code may be on no live nimbus before the pipeline "
        "is marked FAILED so that a nimbus can lead without it (Storm's STORM-3664)",
    )
    nimbus_code_download_parts: int = Field(
        default=4,
        ge=1,
        le=64,
        alias="nimbus.code.download.parts",
        description="how many byte ranges a nimbus fetches at once when several nimbuses "
        "hold a package",
    )
    nimbus_code_download_part_min_bytes: int = Field(
        default=8 * 1024 * 1024,
        gt=0,
        alias="nimbus.code.download.part.min.bytes",
        description="packages smaller than this are fetched in one request",
    )
    nimbus_code_port: int = Field(
        default=6628,
        ge=-1,
        le=65535,
        alias="nimbus.code.port",
        description="port of a nimbus's package server, from which other nimbuses and the "
        "supervisors fetch code with sendfile (0 picks a free port at each start, registered "
        "with each copy: for several nimbuses on one host; -1: none, code is fetched from the "
        "HTTP API instead)",
    )
    package_max_unpacked_bytes: int = Field(
        default=1024 * 1024 * 1024,
        gt=0,
        alias="package.max.unpacked.bytes",
        description="largest total size of a package's files once unpacked",
    )
    package_max_ratio: float = Field(
        default=200.0,
        gt=1,
        alias="package.max.ratio",
        description="largest ratio of unpacked to packed size, for the whole package and "
        "for each entry (a zip bomb's is in the thousands)",
    )
    package_max_entries: int = Field(
        default=10_000,
        gt=0,
        alias="package.max.entries",
        description="most files and directories a package may hold",
    )
    pipeline_min_replication_count: int = Field(
        default=1,
        ge=1,
        alias="pipeline.min.replication.count",
        description="nimbuses that must hold a pipeline's code before it is activated "
        "(the leader included); a pipeline's conf may set its own",
    )
    pipeline_max_replication_wait_time_sec: int = Field(
        default=60,
        ge=-1,
        alias="pipeline.max.replication.wait.time.sec",
        description="longest wait for pipeline.min.replication.count before the pipeline is "
        "activated anyway; -1 waits forever; a pipeline's conf may set its own",
    )
    pipeline_versions_keep: int = Field(
        default=3,
        ge=2,
        le=20,
        alias="pipeline.versions.keep",
        description="versions of each pipeline whose package and conf the nimbuses keep (the "
        "current one included), to roll back to (stratus rollback) and to restart a FAILED "
        "or FINISHED pipeline with",
    )
    pipeline_update_rollback: bool = Field(
        default=True,
        alias="pipeline.update.rollback",
        description="roll an updated pipeline back to its previous version when the new "
        "version's worker fails (FAILED, or pipeline.update.rollback.crashes crashes) before "
        "its first committed batch; a pipeline's conf may set its own. An update whose entry "
        "point does not import is refused whatever this says",
    )
    pipeline_update_rollback_crashes: int = Field(
        default=3,
        ge=1,
        le=1000,
        alias="pipeline.update.rollback.crashes",
        description="crashes of a new version's worker before its first committed batch "
        "that roll it back (a worker the supervisor gave up on rolls it back sooner)",
    )
    pipeline_kill_wait_secs: float = Field(
        default=30.0,
        ge=0,
        alias="pipeline.kill.wait.secs",
        description="time between `kill` and the removal of the pipeline's record, "
        "when the kill names no wait",
    )
    pipeline_checkpoint_root: str | None = Field(
        default=None,
        alias="pipeline.checkpoint.root",
        description="where each pipeline's checkpoints live, under <root>/<pipeline>: a "
        "directory or any Hadoop-compatible URL that every supervisor reaches (default: "
        "stratus-checkpoints.<cluster> under the system's temporary directory, <cluster> "
        "naming the cluster's ZooKeeper root, for one machine only); "
        "the operator's alone: a pipeline's conf may only add pipeline.checkpoint.subpath "
        "below its own directory",
    )
    pipeline_checkpoint_schemes: list[str] = Field(
        default=["file", "hdfs", "s3a", "s3", "gs", "abfs", "abfss"],
        min_length=1,
        alias="pipeline.checkpoint.schemes",
        description="the URL schemes pipeline.checkpoint.root may use (a plain path is "
        "`file`); checked when the configuration is loaded",
    )
    pipeline_checkpoint_retention_secs: float = Field(
        default=0.0,
        ge=0,
        alias="pipeline.checkpoint.retention.secs",
        description="how long the checkpoints a kill keeps (a kill without --purge) stay "
        "after the killed pipeline's record is removed; then the leader deletes them (only "
        "<root>/<pipeline>, never for a pipeline submitted again meanwhile). 0: kept until "
        "a kill --purge of a later submit, or the operator, removes them",
    )
    pipeline_checkpoint_purge_by: Literal["auto", "supervisor", "nimbus"] = Field(
        default="auto",
        alias="pipeline.checkpoint.purge.by",
        description="who deletes a pipeline's checkpoints for a kill --purge or at the end of "
        "their retention: `supervisor` (a live supervisor, which can write the root its "
        "workers write), `nimbus` (the leader itself: a root the nimbuses can write, such as "
        "a shared mount), or `auto` (the leader tries when <root>/<pipeline> is on a file "
        "system it reaches and exists there, and hands the purge to a supervisor when it "
        "cannot delete it)",
    )
    pipeline_spark_masters: list[str] = Field(
        default=[],
        alias="pipeline.spark.masters",
        description="the Spark masters a pipeline's conf may name in spark.master, "
        "pipeline.spark.master or spark.remote besides local[...] and the cluster's own "
        "pipeline.spark.master (e.g. `yarn`, `spark://m1:7077`); anything else is refused "
        "at submit and rebalance",
    )
    supervisor_worker_env: list[str] = Field(
        default=[],
        alias="supervisor.worker.env",
        description="names of the supervisor's environment variables its workers get, "
        "beyond the built-in allow-list (PATH, HOME, LANG, JAVA_HOME, SPARK_HOME, ...); "
        "a pipeline adds its own with pipeline.env.NAME",
    )
    pipeline_spark_master: str = Field(
        default="local[*]",
        min_length=1,
        alias="pipeline.spark.master",
        description="spark.master of the workers when the pipeline's conf sets none "
        "(`local[*]`, `spark://...`, `yarn`, `k8s://...`)",
    )
    cluster_state_store: Literal["zookeeper", "pacemaker"] = Field(
        default="zookeeper",
        alias="cluster.state.store",
        description="where workers' and supervisors' heartbeats go: `zookeeper` "
        "(under <zookeeper.root>/heartbeats) or `pacemaker` (the servers of pacemaker.servers; "
        "everything else stays in ZooKeeper)",
    )
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
    nimbus_supervisor_timeout_secs: float = Field(
        default=10.0,
        gt=0,
        alias="nimbus.supervisor.timeout.secs",
        description="the leader moves a supervisor's pipelines elsewhere once it has seen no "
        "heartbeat of that supervisor for this long",
    )
    nimbus_supervisor_fence_after_secs: float | None = Field(
        default=None,
        ge=0,
        alias="nimbus.supervisor.fence.after.secs",
        description="the leader fences a supervisor that holds pipelines once it has seen no "
        "heartbeat of it for this long (a graceful stop through its endpoint, then "
        "nimbus.supervisor.fencing.methods), and moves its pipelines as soon as a fence "
        "succeeds; must be less than nimbus.supervisor.timeout.secs and more than "
        "nimbus.monitor.freq.secs + worker.heartbeat.frequency.secs; 0: never, the leader "
        "waits out the timeout (default: half of nimbus.supervisor.timeout.secs, or never "
        "when that half is not more than that sum)",
    )
    nimbus_supervisor_fencing_methods: str = Field(
        default="",
        alias="nimbus.supervisor.fencing.methods",
        description="how the leader fences a silent supervisor when its graceful stop fails, "
        "methods tried in order: shell(command), process, process(pid file), sshfence, "
        "sshfence(user:port) (see supervisor.md); empty: none, the leader waits out the "
        "supervisor's lease (nimbus.supervisor.timeout.secs)",
    )
    nimbus_supervisor_fencing_timeout_secs: float = Field(
        default=10.0,
        gt=0,
        alias="nimbus.supervisor.fencing.timeout.secs",
        description="longest wait for a supervisor's answer to a graceful stop, and time one "
        "shell, process or ssh fence may take before it is killed and counted as failed",
    )
    nimbus_task_timeout_secs: float = Field(
        default=30.0,
        gt=0,
        alias="nimbus.task.timeout.secs",
        description="the leader moves a pipeline elsewhere once it has seen no heartbeat of "
        "its worker for this long",
    )
    supervisor_id: str | None = Field(
        default=None,
        pattern=SUPERVISOR_ID_PATTERN,
        alias="supervisor.id",
        description="name of a supervisor, unique in the cluster (default: the host name)",
    )
    supervisor_host: str | None = Field(
        default=None,
        alias="supervisor.host",
        description="address a supervisor advertises: registered in ZooKeeper, where the "
        "nimbuses find its endpoint (never 0.0.0.0 or ::; default: the host name); also "
        "the endpoint's bind address unless supervisor.http.bind.host is set",
    )
    supervisor_slots: int = Field(
        default=4,
        ge=1,
        le=1024,
        alias="supervisor.slots",
        description="how many pipelines a supervisor runs at once (one worker each)",
    )
    supervisor_local_dir: str | None = Field(
        default=None,
        alias="supervisor.local.dir",
        description="where a supervisor keeps code, worker directories and logs (default: "
        "stratus-supervisor-<id>.<cluster> under the system's temporary directory, <cluster> "
        "naming the cluster's ZooKeeper root)",
    )
    supervisor_fence_timeout_secs: float = Field(
        default=6.0,
        gt=0,
        alias="supervisor.fence.timeout.secs",
        description="a supervisor that has written no heartbeat for this long (ZooKeeper "
        "unreachable) stops its workers itself, unless it proves an outage of ZooKeeper "
        "(supervisor.zookeeper.outage); with supervisor.worker.stop.secs it must stay "
        "below nimbus.supervisor.timeout.secs, so a pipeline never runs twice",
    )
    supervisor_zookeeper_outage: Literal["fence", "ride"] = Field(
        default="ride",
        alias="supervisor.zookeeper.outage",
        description="what a supervisor that cannot write its heartbeats to ZooKeeper does at "
        "supervisor.fence.timeout.secs: `ride` keeps its workers while it can prove that no "
        "ZooKeeper quorum serves (a majority of the members of zookeeper.servers, asked at "
        "once, say they serve nothing or refuse the connection as "
        "zookeeper.outage.refusals trusts, and none that it serves), and fences otherwise, "
        "as it does when zookeeper.servers does not name every voting member once (each "
        "proof keeps the lease nimbus.supervisor.timeout.secs - supervisor.worker.stop.secs "
        "- 0.5 s from its start, at least supervisor.fence.timeout.secs, so that the session "
        "may reconnect); `fence` stops them on time whatever the cause; every nimbus must be "
        "given the same value",
    )
    supervisor_worker_stop_secs: float = Field(
        default=3.0,
        gt=0,
        alias="supervisor.worker.stop.secs",
        description="time a worker gets to stop its queries on SIGTERM before SIGKILL",
    )
    supervisor_worker_timeout_secs: float = Field(
        default=20.0,
        gt=0,
        alias="supervisor.worker.timeout.secs",
        description="a supervisor kills and restarts a worker silent for this long; it must "
        "stay below nimbus.task.timeout.secs",
    )
    supervisor_worker_max_restarts: int = Field(
        default=3,
        ge=0,
        alias="supervisor.worker.max.restarts",
        description="crashes in a row, each before the pipeline ran for "
        "supervisor.worker.restart.reset.secs, after which the supervisor gives up and the "
        "pipeline is FAILED with the worker's error",
    )
    supervisor_worker_restart_backoff_secs: float = Field(
        default=1.0,
        gt=0,
        alias="supervisor.worker.restart.backoff.secs",
        description="wait before restarting a crashed worker; doubles at every crash in a "
        "row, up to 30 times this",
    )
    supervisor_worker_restart_reset_secs: float = Field(
        default=60.0,
        gt=0,
        alias="supervisor.worker.restart.reset.secs",
        description="a worker that ran this long before crashing starts a new count of "
        "crashes in a row",
    )
    supervisor_worker_warm: bool = Field(
        default=True,
        alias="supervisor.worker.warm",
        description="keep a warm worker per free slot, within supervisor.worker.warm.memory.mb: "
        "a process whose SparkSession is already up with the cluster's default static conf, "
        "so that an assigned pipeline whose static conf matches starts in it in about a "
        "second; left unset, it is on only where workers run as the supervisor's user and "
        "pipeline.spark.master is local[...] (see docs/supervisor.md); false: none",
    )
    supervisor_worker_warm_memory_mb: int | None = Field(
        default=None,
        ge=0,
        alias="supervisor.worker.warm.memory.mb",
        description="memory, in MiB, the warm workers may use together (each counted at its "
        "measured resident memory, JVM included, once up); default: a quarter of the "
        "machine's memory or of the supervisor's cgroup limit, whichever is less; 0: no "
        "warm workers; and no warm worker starts while the machine's available memory is "
        "short (see docs/supervisor.md)",
    )
    supervisor_worker_adopt: bool = Field(
        default=True,
        alias="supervisor.worker.adopt",
        description="workers outlive their supervisor: a SIGTERM, a crash or an upgrade "
        "of the supervisor leaves them running on the lease they saw, and a supervisor "
        "started again on the same supervisor.local.dir adopts them; false: a supervisor "
        "that stops (or dies) stops its workers, and one that starts kills what it finds "
        "left (see docs/supervisor.md)",
    )
    supervisor_worker_run_as: Literal["supervisor", "pool", "shared"] = Field(
        default="supervisor",
        alias="supervisor.worker.run.as",
        description="which operating-system user runs the workers: `supervisor` (the "
        "supervisor's own, which lets a pipeline's code read the daemons' credentials), "
        "`pool` (one user of supervisor.worker.users per running pipeline, never two "
        "pipelines at once) or `shared` (the one user of supervisor.worker.users for every "
        "worker: walled off from the daemons, not from each other); see docs/security.md",
    )
    supervisor_worker_users: list[str] = Field(
        default=[],
        alias="supervisor.worker.users",
        description="the operating-system users workers run as (supervisor.worker.run.as "
        "`pool`: at least supervisor.slots of them; `shared`: exactly one); never root, "
        "none below supervisor.worker.min.uid",
    )
    supervisor_worker_min_uid: int = Field(
        default=1000,
        ge=1,
        alias="supervisor.worker.min.uid",
        description="the lowest uid a worker may run as: system accounts below it are "
        "refused (the worker launcher's own min.uid applies too)",
    )
    supervisor_worker_launcher: Literal["auto", "direct", "sudo"] = Field(
        default="auto",
        alias="supervisor.worker.launcher",
        description="how a supervisor runs workers as another user: `direct` (it runs as "
        "root and switches user itself), `sudo` (through supervisor.worker.launcher.command) "
        "or `auto` (direct when root, else sudo)",
    )
    supervisor_worker_launcher_command: list[str] = Field(
        default=["sudo", "-n", "/opt/stratus/venv/bin/stratus-worker-launcher"],
        min_length=1,
        alias="supervisor.worker.launcher.command",
        description="the privileged worker launcher a supervisor that is not root runs "
        "(deploy/stratus-worker-launcher.sudoers allows it)",
    )
    supervisor_deps_index_url: str | None = Field(
        default=None,
        min_length=1,
        alias="supervisor.deps.index.url",
        description="the package index a supervisor installs pipelines' requirements from "
        "(pip's --index-url); unset: pip's own default or its configuration",
    )
    supervisor_deps_find_links: list[str] = Field(
        default=[],
        alias="supervisor.deps.find.links",
        description="local wheelhouse directories (or URLs) searched for pipelines' "
        "requirements besides the index (pip's --find-links)",
    )
    supervisor_deps_offline: bool = Field(
        default=False,
        alias="supervisor.deps.offline",
        description="install pipelines' requirements from supervisor.deps.find.links only, "
        "never from an index (pip's --no-index)",
    )
    supervisor_deps_install_timeout_secs: float = Field(
        default=600.0,
        gt=0,
        alias="supervisor.deps.install.timeout.secs",
        description="longest time the installation of one pipeline environment may take; "
        "past it the install is killed and the pipeline is FAILED",
    )
    supervisor_update_preflight_timeout_secs: float = Field(
        default=120.0,
        ge=0,
        alias="supervisor.update.preflight.timeout.secs",
        description="longest time the import of an update's entry point, in the new code's "
        "environment, may take before the old worker is stopped; an import that fails or "
        "takes longer refuses the update and the old worker runs on. 0: no preflight",
    )
    supervisor_http_port: int = Field(
        default=6629,
        ge=-1,
        le=65535,
        alias="supervisor.http.port",
        description="port of a supervisor's endpoint (worker logs, health, metrics), "
        "authenticated and bounded as the nimbus's API (0 picks a free port, -1 serves none)",
    )
    supervisor_http_bind_host: str | None = Field(
        default=None,
        alias="supervisor.http.bind.host",
        description="address a supervisor's endpoint listens on, such as 0.0.0.0 (default: "
        "supervisor.host); without nimbus.auth.tokens.file (or nimbus.auth.insecure) it "
        "listens on loopback only",
    )
    supervisor_worker_log_max_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        alias="supervisor.worker.log.max.bytes",
        description="size at which a worker's log file is rotated (worker.log becomes "
        "worker.log.1, and so on)",
    )
    supervisor_worker_log_backups: int = Field(
        default=3,
        ge=0,
        le=100,
        alias="supervisor.worker.log.backups",
        description="rotated files kept of each worker run's log, besides the current one "
        "(the oldest is deleted)",
    )
    supervisor_worker_log_runs_keep: int = Field(
        default=10,
        ge=1,
        le=1000,
        alias="supervisor.worker.log.runs.keep",
        description="runs of a pipeline whose worker logs a supervisor keeps (workers/"
        "<pipeline>/runs/<run>/); a new run deletes the oldest beyond it",
    )
    pipeline_runs_keep: int = Field(
        default=50,
        ge=1,
        le=10000,
        alias="pipeline.runs.keep",
        description="run records kept in ZooKeeper per pipeline (stratus runs); the "
        "supervisor that starts a run deletes the oldest ended ones beyond it",
    )
    worker_heartbeat_frequency_secs: float = Field(
        default=1.0,
        gt=0,
        alias="worker.heartbeat.frequency.secs",
        description="how often workers (through their supervisor) and supervisors heartbeat",
    )
    client_retry_deadline_secs: float = Field(
        default=30.0,
        gt=0,
        alias="client.retry.deadline.secs",
        description="how long a client keeps retrying a call across a failover",
    )
    client_request_timeout_secs: float = Field(
        default=10.0,
        gt=0,
        alias="client.request.timeout.secs",
        description="timeout of one HTTP request from a client to a nimbus",
    )
    client_auth_token: str | None = Field(
        default=None,
        alias="client.auth.token",
        description="bearer token a client (CLI, supervisor, nimbus fetching code) sends to "
        "nimbuses (default: client.auth.token.file, else the STRATUS_TOKEN variable)",
    )
    client_auth_token_file: str | None = Field(
        default=None,
        alias="client.auth.token.file",
        description="file (mode 600) whose first line is the client's bearer token",
    )
    client_tls_ca: str | None = Field(
        default=None,
        alias="client.tls.ca",
        description="PEM CA bundle that signs the nimbuses' certificates; set, clients speak "
        "https to nimbuses and their package servers, and nimbuses to supervisors' endpoints",
    )
    client_tls_cert: str | None = Field(
        default=None,
        alias="client.tls.cert",
        description="PEM client certificate presented to nimbuses (mutual TLS)",
    )
    client_tls_key: str | None = Field(
        default=None,
        alias="client.tls.key",
        description="PEM private key of client.tls.cert (default: in the certificate file)",
    )
    log_level: Literal["debug", "info", "warning", "error", "critical"] = Field(
        default="info",
        alias="log.level",
        description="daemons and `stratus elect`: the lowest level of the lines they log (debug, "
        "info, warning, error, critical; --log-level overrides)",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        alias="log.format",
        description="daemons and `stratus elect`: text (one key=value line per event) or json "
        "(one JSON object per line, with the same fields)",
    )
    audit_log_file: str | None = Field(
        default=None,
        alias="audit.log.file",
        description="nimbus, supervisor and zkfc: file (created 0600) that the audit trail is "
        "appended to, one JSON object per line: every call that changes something and every "
        "refused call, with its caller (default: in the daemon's log)",
    )
    history_file: str | None = Field(
        default=None,
        alias="history.file",
        description="daemons and their workers append one JSON line per start, stop, batch "
        "and leader write to this file, for the reliability oracle (default: nothing recorded)",
    )
    ha_zkfc_target: str | None = Field(
        default=None,
        alias="ha.zkfc.target",
        description="`stratus zkfc`: host:port of the service it manages (its HA protocol's "
        "address; --target overrides)",
    )
    ha_zkfc_group: str = Field(
        default="nimbus",
        alias="ha.zkfc.group",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): the election "
        "group its service takes part in",
    )
    ha_zkfc_rejoin_delay_secs: float = Field(
        default=1.0,
        gt=0,
        alias="ha.zkfc.rejoin.delay.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): wait before "
        "rejoining the election after fencing failed, the service refused to become active, or it "
        "reported a state it was not given",
    )
    ha_zkfc_port: int = Field(
        default=8019,
        ge=0,
        le=65535,
        alias="ha.zkfc.port",
        description="port of a failover controller's own endpoint (cede-active, "
        "graceful-failover; admin only), on its service's host; 0 picks a free port. A "
        "supervised nimbus's controller picks a free port unless this is set, and registers "
        "it in ZooKeeper, where haadmin and the other controllers look",
    )
    ha_zkfc_failover_timeout_secs: float = Field(
        default=30.0,
        gt=0,
        alias="ha.zkfc.failover.timeout.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): how long a "
        "graceful failover waits for the target's service to become active before the nodes that "
        "ceded rejoin",
    )
    ha_zkfc_preferred: bool = Field(
        default=False,
        alias="ha.zkfc.preferred",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): its service is "
        "the group's preferred active: the others let it win, and fail back to it (gracefully) "
        "when it comes back healthy",
    )
    ha_zkfc_nonpreferred_join_delay_secs: float = Field(
        default=5.0,
        ge=0,
        alias="ha.zkfc.nonpreferred.join.delay.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): a zkfc that is "
        "not preferred waits this long before joining the election while the preferred node "
        "campaigns (also after ceding to it)",
    )
    ha_zkfc_supervise_command: str | None = Field(
        default=None,
        alias="ha.zkfc.supervise.command",
        description="`stratus zkfc`: run the service as its child with this command (split "
        "as a shell would), restart it when it dies, stop it with the zkfc "
        "(--supervise -- COMMAND... overrides)",
    )
    ha_zkfc_supervise_restart_backoff_secs: float = Field(
        default=1.0,
        gt=0,
        alias="ha.zkfc.supervise.restart.backoff.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): wait before "
        "restarting its supervised service, doubling at every exit in a row up to 30 times this",
    )
    ha_zkfc_supervise_stop_grace_secs: float = Field(
        default=10.0,
        gt=0,
        alias="ha.zkfc.supervise.stop.grace.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): time its "
        "supervised service has to exit after SIGTERM when the zkfc stops, before SIGKILL",
    )
    ha_health_check_interval_secs: float = Field(
        default=1.0,
        gt=0,
        alias="ha.health.check.interval.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): how often it "
        "checks its service's status and health",
    )
    ha_health_rpc_timeout_secs: float = Field(
        default=5.0,
        gt=0,
        alias="ha.health.rpc.timeout.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): a health or "
        "status call unanswered this long means the service is not responding (and is failed over)",
    )
    ha_health_max_backoff_secs: float = Field(
        default=5.0,
        gt=0,
        alias="ha.health.max.backoff.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): longest wait "
        "between attempts to reach a service that does not answer (the wait doubles from "
        "ha.health.check.interval.secs)",
    )
    ha_fencing_methods: str = Field(
        default="graceful, epoch",
        alias="ha.fencing.methods",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): how the old "
        "active is fenced, methods tried in order: graceful, epoch, shell(command), process, "
        "process(pid file), sshfence, sshfence(user:port) (see zkfc.md)",
    )
    ha_fencing_timeout_secs: float = Field(
        default=10.0,
        gt=0,
        alias="ha.fencing.timeout.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): time one "
        "shell, process or ssh fence may take before it is killed and counted as failed",
    )
    ha_fencing_graceful_timeout_secs: float = Field(
        default=1.0,
        gt=0,
        alias="ha.fencing.graceful.timeout.secs",
        description="a failover controller (`stratus zkfc`, a supervised nimbus's): timeout of "
        "each of the graceful fence's two transition-to-standby calls (the second only after a "
        "refusal, not after a timeout)",
    )
    ha_automatic_failover_enabled: bool = Field(
        default=True,
        alias="ha.automatic.failover.enabled",
        description="zkfcs manage the services' states: `stratus haadmin` refuses manual "
        "transitions unless --forcemanual",
    )
    elect_stop_grace_secs: float | None = Field(
        default=None,
        gt=0,
        alias="elect.stop.grace.secs",
        description="`stratus elect`: time between SIGTERM and SIGKILL of the command "
        "(default: a fifth of the session timeout, at most 1 s)",
    )

    @model_validator(mode="after")
    def _worker_users_fit_the_mode(self) -> StratusConfig:
        mode, users = self.supervisor_worker_run_as, self.supervisor_worker_users
        if len(set(users)) != len(users):
            raise ValueError("supervisor.worker.users names a user twice")
        if "root" in users:
            raise ValueError("supervisor.worker.users may not name root: workers run a user's code")
        if mode == "supervisor" and users:
            raise ValueError(
                "supervisor.worker.users is set but supervisor.worker.run.as is `supervisor`: "
                "set supervisor.worker.run.as to `pool` (one user per pipeline) or `shared`"
            )
        if mode == "pool" and len(users) < self.supervisor_slots:
            raise ValueError(
                f"supervisor.worker.run.as is `pool` but supervisor.worker.users names "
                f"{len(users)} users for supervisor.slots {self.supervisor_slots}: two "
                "pipelines never share a user, so list at least one user per slot"
            )
        if mode == "shared" and len(users) != 1:
            raise ValueError(
                "supervisor.worker.run.as is `shared`: supervisor.worker.users must name "
                f"exactly one user (it names {len(users)})"
            )
        warm_asked = "supervisor_worker_warm" in self.model_fields_set
        if mode != "supervisor" and self.supervisor_worker_warm and warm_asked:
            raise ValueError(
                "supervisor.worker.warm works only with supervisor.worker.run.as `supervisor`: "
                "a warm worker starts before it knows its pipeline, hence its user"
            )
        return self

    @model_validator(mode="after")
    def _grace_fits_in_session(self) -> StratusConfig:
        grace = self.elect_stop_grace_secs
        if grace is not None and grace >= self.zookeeper_session_timeout_secs / 4:
            raise ValueError(
                "elect.stop.grace.secs must be less than a quarter of "
                "zookeeper.session.timeout.secs, so that a command is dead before its "
                "leadership can pass to another process"
            )
        return self

    @model_validator(mode="after")
    def _a_fetch_fits_in_its_address_bound(self) -> StratusConfig:
        if self.nimbus_code_download_parts > self.nimbus_code_max_connections_per_address:
            raise ValueError(
                f"nimbus.code.download.parts ({self.nimbus_code_download_parts}) must be at "
                "most nimbus.code.max.connections.per.address "
                f"({self.nimbus_code_max_connections_per_address}): a nimbus fetches that many "
                "byte ranges at once from one package server, which refuses connections of "
                "one address past its bound"
            )
        return self

    @model_validator(mode="after")
    def _advertised_hosts_are_reachable(self) -> StratusConfig:
        _refuse_unspecified(
            "nimbus.host", self.nimbus_host, "nimbus.bind.host", "peers and clients"
        )
        if self.supervisor_host:  # unset (or empty): the host name
            _refuse_unspecified(
                "supervisor.host", self.supervisor_host, "supervisor.http.bind.host", "the nimbuses"
            )
        return self

    @model_validator(mode="after")
    def _shared_code_has_a_url(self) -> StratusConfig:
        if self.nimbus_code_distributor == "shared" and not self.nimbus_code_shared_url:
            raise ValueError(
                "nimbus.code.distributor is `shared` but nimbus.code.shared.url is not set"
            )
        return self

    @model_validator(mode="after")
    def _supervisors_fence_before_reassignment(self) -> StratusConfig:
        stop_by = self.supervisor_fence_timeout_secs + self.supervisor_worker_stop_secs
        if stop_by >= self.nimbus_supervisor_timeout_secs:
            raise ValueError(
                "supervisor.fence.timeout.secs + supervisor.worker.stop.secs "
                f"({stop_by:g}) must be less than nimbus.supervisor.timeout.secs "
                f"({self.nimbus_supervisor_timeout_secs:g}): a supervisor cut off from "
                "ZooKeeper must have stopped its workers before the leader moves them"
            )
        if self.supervisor_worker_timeout_secs >= self.nimbus_task_timeout_secs:
            raise ValueError(
                "supervisor.worker.timeout.secs must be less than nimbus.task.timeout.secs: "
                "a supervisor kills a silent worker before the leader moves its pipeline"
            )
        return self

    @model_validator(mode="after")
    def _leader_fences_before_the_timeout(self) -> StratusConfig:
        after = self.nimbus_supervisor_fence_after_secs
        if not after:  # unset (the default fits) or 0 (never)
            return self
        timeout = self.nimbus_supervisor_timeout_secs
        if after >= timeout:
            raise ValueError(
                f"nimbus.supervisor.fence.after.secs ({after:g}) must be less than "
                f"nimbus.supervisor.timeout.secs ({timeout:g}): the leader fences a silent "
                "supervisor to move its pipelines before the timeout; lower it, or leave it "
                "unset (half of the timeout), or 0 to never fence"
            )
        seen_every = self.nimbus_monitor_freq_secs + self.worker_heartbeat_frequency_secs
        if after <= seen_every:
            raise ValueError(
                f"nimbus.supervisor.fence.after.secs ({after:g}) must be more than "
                "nimbus.monitor.freq.secs + worker.heartbeat.frequency.secs "
                f"({seen_every:g}): a supervisor that heartbeats on time can look silent "
                "that long between two rounds of the leader, and would be fenced; raise it, "
                "lower nimbus.monitor.freq.secs, or set 0 to never fence"
            )
        return self

    @model_validator(mode="after")
    def _pacemaker_store_fits_the_timeouts(self) -> StratusConfig:
        if self.cluster_state_store == "pacemaker":
            self.check_pulse_ttl()
            bound = min(self.zookeeper_session_timeout_secs, self.supervisor_fence_timeout_secs)
            if self.pacemaker_client_timeout_secs >= bound:
                raise ValueError(
                    f"pacemaker.client.timeout.secs ({self.pacemaker_client_timeout_secs:g}) "
                    "must be less than supervisor.fence.timeout.secs and "
                    f"zookeeper.session.timeout.secs (the shorter is {bound:g}): a pacemaker "
                    "that hangs must be given up while the others still take a supervisor's "
                    "heartbeats, before the supervisor fences itself"
                )
        return self

    def check_pulse_ttl(self) -> None:
        """``pacemaker.pulse.ttl.secs`` above both leader timeouts, else ``ValueError``.

        A pulse evicted before the leader's timeout would read as a heartbeat gone, and the
        warm-up of a restarted pacemaker (one TTL) would end before a dead supervisor is
        judged. Checked at load when ``cluster.state.store`` is ``pacemaker``: every nimbus
        and supervisor refuses to start otherwise.
        """
        ttl = self.pacemaker_pulse_ttl_secs
        for key, timeout in (
            ("nimbus.supervisor.timeout.secs", self.nimbus_supervisor_timeout_secs),
            ("nimbus.task.timeout.secs", self.nimbus_task_timeout_secs),
        ):
            if ttl <= timeout:
                raise ValueError(
                    f"pacemaker.pulse.ttl.secs ({ttl:g}) must exceed {key} ({timeout:g}): "
                    "a pulse must outlive the time after which the leader judges its writer "
                    f"dead; raise pacemaker.pulse.ttl.secs above {timeout:g}"
                )

    @model_validator(mode="after")
    def _checkpoint_root_scheme_allowed(self) -> StratusConfig:
        scheme = url_scheme(self.checkpoint_root())
        if scheme not in self.pipeline_checkpoint_schemes:
            raise ValueError(
                f"pipeline.checkpoint.root {self.checkpoint_root()!r} uses the scheme "
                f"{scheme!r}, which pipeline.checkpoint.schemes "
                f"({', '.join(self.pipeline_checkpoint_schemes)}) does not allow"
            )
        return self

    def supervisor_fence_after(self) -> float | None:
        """``nimbus.supervisor.fence.after.secs`` (None for 0: the leader never fences), or
        half of the supervisor timeout, when that is more than a round of the leader and a
        heartbeat period (else None)."""
        if self.nimbus_supervisor_fence_after_secs is not None:
            return self.nimbus_supervisor_fence_after_secs or None
        half = self.nimbus_supervisor_timeout_secs / 2
        if half <= self.nimbus_monitor_freq_secs + self.worker_heartbeat_frequency_secs:
            return None
        return half

    def checkpoint_root(self) -> str:
        """``pipeline.checkpoint.root``, or its default directory,
        ``<tmp>/stratus-checkpoints.<cluster>``."""
        if self.pipeline_checkpoint_root:
            return self.pipeline_checkpoint_root
        return str(self.cluster_default_dir("checkpoints"))

    def legacy_checkpoint_root(self) -> str | None:
        """The default root up to 0.2.0, shared by every cluster of the machine
        (``<tmp>/stratus-checkpoints``), when the root is the default; None when configured."""
        if self.pipeline_checkpoint_root:
            return None
        return str(Path(tempfile.gettempdir()) / LEGACY_CHECKPOINT_DIR)

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

    def elect_stop_grace(self) -> float:
        """``elect.stop.grace.secs``, or its default for this session timeout."""
        if self.elect_stop_grace_secs is not None:
            return self.elect_stop_grace_secs
        return min(1.0, self.zookeeper_session_timeout_secs / 5)

    def nimbus_bind(self) -> str:
        """``nimbus.bind.host``, or ``nimbus.host``: where a nimbus listens."""
        return self.nimbus_bind_host or self.nimbus_host

    def zookeeper_hosts(self) -> str:
        """The kazoo connect string for ``zookeeper.servers``."""
        return ",".join(self.zookeeper_servers)


def url_scheme(location: str) -> str:
    """The scheme of a URL, lower case; ``file`` for a plain path."""
    scheme, sep, _ = location.partition("://")
    return scheme.lower() if sep and scheme.isascii() and scheme.isalnum() else "file"


def _refuse_unspecified(key: str, host: str, bind_key: str, reached_by: str) -> None:
    """Refuse an unspecified address (0.0.0.0, ::) as the advertised ``key``: it is only
    ever a bind address (``bind_key``), and nobody can reach it."""
    if host in UNSPECIFIED_HOSTS:
        raise ValueError(
            f"{key} is {host}, which {reached_by} cannot reach: set {key} to the address "
            f"they use and {bind_key} to {host} to listen on every interface"
        )


def valid_keys() -> list[str]:
    """Every dotted key that a configuration may set."""
    return [str(field.alias) for field in StratusConfig.model_fields.values()]


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Iterable[str] = (),
    *,
    environ: Mapping[str, str] | None = None,
) -> StratusConfig:
    """Build the configuration from defaults, a YAML file and ``key=value`` overrides."""
    environ = os.environ if environ is None else environ
    if path is None and environ.get(CONFIG_ENV_VAR):
        path = environ[CONFIG_ENV_VAR]
    values: dict[str, Any] = {}
    if path is not None:
        values.update(_read_file(Path(path)))
    for item in overrides:
        key, value = _parse_override(item)
        values[key] = value
    return config_from_mapping(values)


def config_from_mapping(values: Mapping[str, Any]) -> StratusConfig:
    """Validate a mapping of dotted keys, with errors that name the key at fault. A list
    key given as one string is the comma-separated list that ZooKeeper's connection strings
    taught users (``zookeeper.servers: zk1:2181,zk2:2181``), wherever it comes from."""
    _reject_unknown_keys(values)
    values = {key: _split_list(key, value) for key, value in values.items()}
    try:
        return StratusConfig.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"configuration file {path} is not valid YAML: {detail}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"configuration file {path} must be a mapping of dotted keys to values, "
            f"not a {type(data).__name__}"
        )
    return {str(key): value for key, value in data.items()}


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r} is not of the form key=value")
    # YAML parsing gives `4` an int, `a,b` stays a string, `[a, b]` a list.
    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def _split_list(key: str, value: Any) -> Any:
    """A list key's string value as the list of its comma-separated items."""
    if key in _LIST_KEYS and isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _reject_unknown_keys(values: Mapping[str, Any]) -> None:
    known = valid_keys()
    for key in values:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown configuration key {key!r}{hint}")


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "configuration"
        got = error.get("input")
        problems.append(f"{key}: {error['msg']} (got {got!r})" if error["loc"] else error["msg"])
    return "invalid configuration: " + "; ".join(problems)
