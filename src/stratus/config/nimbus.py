"""The ``nimbus.*`` keys: a nimbus's address and API, its bounds, code distribution, and
how the leader watches supervisors and workers."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from stratus.config.section import Section


class NimbusSection(Section):
    """A nimbus: its address, API, authentication and TLS, the bounds of its API and
    package server, code distribution, and how the leader judges supervisors and workers."""

    prefix: ClassVar[str] = "nimbus"

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
    nimbus_code_download_connect_timeout_secs: float = Field(
        default=2.0,
        gt=0,
        alias="nimbus.code.download.connect.timeout.secs",
        description="how long a nimbus or supervisor fetching code waits for a holder to take "
        "the connection before it asks the next holder (a dead host answers nothing); "
        "client.request.timeout.secs still bounds each read, and this never exceeds it",
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
        "succeeds (not one whose last heartbeat said it was stopping: a restart keeps its "
        "workers running, and is waited out up to the timeout); must be less than "
        "nimbus.supervisor.timeout.secs and more than "
        "nimbus.monitor.freq.secs + worker.heartbeat.frequency.secs; 0: never, the leader "
        "waits out the timeout (default: half of nimbus.supervisor.timeout.secs, or never "
        "when that half is not more than that sum)",
    )
    nimbus_supervisor_fencing_methods: str = Field(
        default="",
        alias="nimbus.supervisor.fencing.methods",
        description="how the leader fences a silent supervisor when its graceful stop fails, "
        "a comma-separated list of methods tried in order: those of zkfc.md's table of "
        "methods that can fence a supervisor (shell(command), process, sshfence, ...; see "
        "supervisor.md); empty: none, the leader waits out the supervisor's lease "
        "(nimbus.supervisor.timeout.secs)",
    )
    nimbus_supervisor_fencing_timeout_secs: float = Field(
        default=10.0,
        gt=0,
        alias="nimbus.supervisor.fencing.timeout.secs",
        description="longest wait for a supervisor's answer to a graceful stop or to a "
        "pipeline fence of the failover lane (past the floor: a late answer still counts), and "
        "time one shell, process or ssh fence may take before it is killed and counted as "
        "failed",
    )
    nimbus_task_timeout_secs: float = Field(
        default=30.0,
        gt=0,
        alias="nimbus.task.timeout.secs",
        description="the leader moves a pipeline elsewhere once it has seen no heartbeat of "
        "its worker for this long",
    )
    nimbus_standby_workers_max: int = Field(
        default=-1,
        ge=-1,
        alias="nimbus.standby.workers.max",
        description="most standby workers the leader places in the whole cluster, one per "
        "pipeline with pipeline.standby: hot, the oldest submits first (each takes a slot "
        "and the memory of a Spark driver on its supervisor); a hot pipeline past it runs "
        "without one and its placement says so; 0: none; -1: no bound",
    )
    nimbus_standby_update_hold_secs: float = Field(
        default=120.0,
        ge=0,
        alias="nimbus.standby.update.hold.secs",
        description="longest the leader keeps a pipeline with pipeline.standby: hot on its "
        "old generation after an update, a rollback, a restart or a rebalance, while its "
        "standby worker starts for the new one: once that worker is READY the old worker "
        "stops and the standby worker is promoted (no Spark start); past this bound, or with "
        "no standby worker, the pipeline restarts in place; 0: always in place",
    )
    nimbus_standby_place_wait_secs: float = Field(
        default=10.0,
        ge=0,
        alias="nimbus.standby.place.wait.secs",
        description="longest the leader waits, after a pipeline with pipeline.standby: hot was "
        "assigned (a promotion, a move, a submit), before it places the pipeline's next "
        "standby worker: it places it as soon as the active worker has committed a batch, so "
        "that the standby worker's start (a Spark driver's) does not take the CPU of a "
        "pipeline that is recovering; 0: at once",
    )

    nimbus_detector_threshold: float = Field(
        default=8.0,
        gt=0,
        alias="nimbus.detector.threshold",
        description="phi at which the leader suspects the supervisor of a pipeline with a "
        "standby worker, once that supervisor is also silent for its floor: phi 8 means "
        "one chance in 10^8 that its next beat still comes; higher waits longer before a "
        "failover, lower moves pipelines off hosts that are only slow (standby-workers.md)",
    )
    nimbus_detector_window: int = Field(
        default=200,
        ge=2,
        alias="nimbus.detector.window",
        description="intervals between beats the leader keeps per supervisor to learn its "
        "rhythm (200 of 100 ms: the last 20 seconds)",
    )
    nimbus_detector_pause_ms: int = Field(
        default=300,
        ge=0,
        alias="nimbus.detector.pause.ms",
        description="a pause of a supervisor's beats that the failure detector accepts on "
        "top of their usual interval (a garbage collection, a busy moment): added to the "
        "mean of the intervals it learnt",
    )
    nimbus_detector_min_std_ms: int = Field(
        default=50,
        gt=0,
        alias="nimbus.detector.min.std.ms",
        description="the least standard deviation of a supervisor's intervals the failure "
        "detector assumes, so that a host whose beats were perfectly regular is not "
        "suspected at its first late one",
    )
    nimbus_detector_poll_ms: int = Field(
        default=100,
        gt=0,
        alias="nimbus.detector.poll.ms",
        description="how often the leader reads the supervisors' fast beats; two reads more "
        "than three polls apart (a pause of the leader, an outage of the store) restart "
        "what the detector learnt",
    )

    def nimbus_bind(self) -> str:
        """``nimbus.bind.host``, or ``nimbus.host``: where a nimbus listens."""
        return self.nimbus_bind_host or self.nimbus_host
