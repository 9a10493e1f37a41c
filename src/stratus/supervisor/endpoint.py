"""The supervisor's own HTTP(S) endpoint: its workers' logs, its health, its metrics.

Authenticated and bounded exactly as a nimbus's API, with the same pieces and settings: the
token file of ``nimbus.auth.tokens.file`` and client certificates (``RequireRole``), the TLS
of ``nimbus.tls.*``, and the connection bounds of ``nimbus.http.*`` (requests in progress,
request head size and time, TLS handshake time). ``/health`` and ``/metrics`` need the role
``read``; a worker's log may hold the pipeline's data: it needs an owner or a reader of the
pipeline, or an admin (``stratus.security.authorizer``), judged against the conf of the
worker's spec, which names the owner (``pipeline.owner``, from its assignment); the probes
``/healthz`` and ``/readyz`` (``stratus.web.probes``) need none; a leader's fences need
``admin``. Every refusal is the API's JSON error body; a fence, a log and every refusal are
written to the audit trail (``stratus.web.audit``). The address is advertised in the
supervisor's registration (``SupervisorSummary.endpoint``), where every nimbus finds it::

    endpoint = SupervisorEndpoint(settings.http, "s1", logs_of=..., healthy=..., metrics=...,
                                  ready=...)
    endpoint.start()          # endpoint.address: "host:6629"
    endpoint.stop()

``GET /api/v1/logs/{pipeline}?run=N&tail=N&previous=false&follow=false`` answers a run's
log as ``text/plain``, its files oldest first (run ``run``, else the newest kept, or with
``previous`` the one before it: ``run_logs``), every line redacted against the pipeline's
conf; ``tail`` sends only its last lines; ``follow`` goes on sending lines as they are
written, across rotations, until the run is over or the client leaves.

``POST /api/v1/fence`` with ``{"epoch": E, "supervisor": ID}`` is the leader's graceful
fence: ``409 wrong_supervisor`` (nothing stopped) when ID is not this supervisor's id, else
the control loop takes the lease away and stops every worker (SIGTERM, SIGKILL after
``supervisor.worker.stop.secs``), and starts none before a new heartbeat round and a read
of the assignments after it. It answers 200 (``FenceAnswer``) once no worker process is
left, 409 ``stale_epoch`` when ``E`` is older than an epoch the supervisor has seen (a
deposed leader's), and 503 ``unavailable`` when the workers are not gone within the stop
grace and a margin, or the control loop does not run.

``POST /api/v1/fence/pipelines`` with ``{"epoch": E, "supervisor": ID, "pipelines": [...]}``
(1 to 1024 pipeline names, each once) is the leader's pipeline fence, before it runs those
pipelines elsewhere: refused as the fence is (``wrong_supervisor``, ``stale_epoch``, 503),
else the control loop stops those pipelines' workers only, keeps its lease and every other
worker, and starts none of them again before an assignment with a newer fencing token
(``pipeline_fence``). It answers 200 (``PipelineFenceAnswer``) once no process of those
workers is left.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from stratus.api.echo import clip
from stratus.api.errors import (
    ApiError,
    InvalidRequestError,
    NoLogError,
    StaleEpochError,
    UnavailableError,
    WrongSupervisorError,
)
from stratus.api.names import check_pipeline_name
from stratus.api.records import (
    MAX_FENCED_PIPELINES,
    FenceAnswer,
    FenceRequest,
    PipelineFenceAnswer,
    PipelineFenceRequest,
)
from stratus.api.redaction import LineRedactor
from stratus.security.authorizer import PipelineAccess, Verb, check_pipeline_access
from stratus.security.loopback import is_loopback
from stratus.security.roles import Role
from stratus.supervisor.errors import SupervisorStartError, UnreachableEndpointError
from stratus.supervisor.loop_messages import (
    FenceOrder,
    FenceVerdict,
    LeaderOrder,
    PipelineFenceOrder,
)
from stratus.supervisor.metrics import CONTENT_TYPE_LATEST, SupervisorMetrics
from stratus.supervisor.settings import EndpointSettings
from stratus.supervisor.worker_log import read_run, tail_lines
from stratus.web.audit import AuditTrail, changes_only
from stratus.web.authorization import RequireRole, caller_of
from stratus.web.bounds import bounded_app
from stratus.web.probes import Checks, add_probe_routes
from stratus.web.responses import describe_validation, error_response
from stratus.web.threaded_server import ThreadedServer

log = logging.getLogger(__name__)

LOGS_PREFIX = "/api/v1/logs"
HEALTH_PATH = "/health"
METRICS_PATH = "/metrics"
FENCE_PATH = "/api/v1/fence"
PIPELINE_FENCE_PATH = "/api/v1/fence/pipelines"
FENCE_BODY = '{"epoch": <integer>, "supervisor": "<id>"}'
PIPELINE_FENCE_BODY = '{"epoch": <integer>, "supervisor": "<id>", "pipelines": ["<name>", ...]}'
LOOPBACK = "127.0.0.1"
FOLLOW_POLL_SECS = 0.2  # how often a follow looks for new lines


@dataclass(frozen=True)
class WorkerLog:
    """Where the log of one run of a pipeline's worker is, and the conf its lines are
    redacted against."""

    files: list[Path]  # the run's files, oldest first
    newest: Path  # the run's newest file (what a follow reads)
    conf: Mapping[str, Any]
    run: int | None = None  # its number (None: a run without one)
    superseded: Callable[[], bool] = lambda: False  # the run is over: a follow ends


LogsOf = Callable[[str, int | None, bool], WorkerLog]  # (pipeline, run, previous)


@dataclass(frozen=True)
class Fencing:
    """How the endpoint hands a leader's fence to the control loop, and how long it waits
    for the workers' exits."""

    order: Callable[[int], FenceOrder]  # epoch -> the order, posted to the control loop
    wait_secs: float  # supervisor.worker.stop.secs and a margin
    # (epoch, pipelines) -> the pipeline fence, posted to the control loop; None: refused
    pipelines: Callable[[int, frozenset[str]], PipelineFenceOrder] | None = None


def required_role(method: str, path: str) -> Role:
    """A leader's fences need ``admin``, the rest ``read`` (a worker's log: then its owners
    and readers are judged)."""
    return Role.ADMIN if path in (FENCE_PATH, PIPELINE_FENCE_PATH) else Role.READ


def audited_call(method: str, path: str) -> tuple[str, str | None] | None:
    """The audit trail's (verb, pipeline) of a worker's log and of every change (a fence,
    ``fence-pipelines``)."""
    if path.startswith(LOGS_PREFIX + "/"):
        return "logs", path.removeprefix(LOGS_PREFIX + "/")
    if path == PIPELINE_FENCE_PATH:
        return "fence-pipelines", None
    return changes_only(method, path)


async def stream_log(
    worker_log: WorkerLog, *, follow: bool, tail: int | None = None
) -> AsyncIterator[bytes]:
    """The redacted bytes of a worker's log; see the module docstring."""
    files = worker_log.files
    redactor = LineRedactor(worker_log.conf)
    if tail is not None:
        if out := redactor.feed(await anyio.to_thread.run_sync(tail_lines, files, tail)):
            yield out
        files = []
    chunks = read_run(files, follow=follow, newest=worker_log.newest, from_end=tail is not None)
    try:
        while True:
            chunk = await anyio.to_thread.run_sync(next, chunks, b"")
            if chunk == b"":  # the end of a run read whole
                break
            if chunk is None:  # following: nothing new yet
                if worker_log.superseded():
                    break  # its run is over: nothing more comes
                await asyncio.sleep(FOLLOW_POLL_SECS)
                continue
            if out := redactor.feed(chunk):
                yield out
        if rest := redactor.flush():
            yield rest
    finally:
        chunks.close()


def _which(run: int | None, previous: bool) -> str:
    if run is not None:
        return f"run {run}"
    return "the run before the newest" if previous else "its worker"


def create_app(
    supervisor: str,
    *,
    logs_of: LogsOf,
    healthy: Callable[[], bool],
    metrics: SupervisorMetrics,
    ready: Checks,
    settings: EndpointSettings,
    fencing: Fencing | None = None,
) -> Any:
    """The ASGI application: routes behind ``RequireRole``, behind the HTTP bounds."""
    app = FastAPI(title="stratus supervisor", openapi_url=None, docs_url=None, redoc_url=None)

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        if request.url.path == PIPELINE_FENCE_PATH:
            return error_response(
                InvalidRequestError(
                    f"{describe_validation(exc.errors())}; a pipeline fence's body is "
                    f"{PIPELINE_FENCE_BODY} (1 to {MAX_FENCED_PIPELINES} names, each once)"
                )
            )
        return error_response(
            InvalidRequestError(f"invalid request: a fence's body is {FENCE_BODY}")
        )

    @app.get(HEALTH_PATH)
    def health() -> JSONResponse:
        if not healthy():
            raise UnavailableError(f"supervisor {supervisor}: its control loop is not running")
        return JSONResponse({"supervisor": supervisor, "healthy": True})

    @app.get(METRICS_PATH)
    def prometheus() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    add_probe_routes(app, "supervisor", ready)

    @app.get(LOGS_PREFIX + "/{pipeline}")
    def worker_log(
        request: Request,
        pipeline: str,
        *,
        previous: bool = False,
        follow: bool = False,
        run: Annotated[int | None, Query(ge=0)] = None,
        tail: Annotated[int | None, Query(ge=0)] = None,
    ) -> Response:
        check_pipeline_name(pipeline)  # one path segment: never a path out of workers/
        found = logs_of(pipeline, run, previous)
        check_pipeline_access(
            caller_of(request.scope), Verb.LOGS, pipeline, PipelineAccess.of(None, found.conf)
        )
        if not found.files:
            raise NoLogError(
                f"supervisor {supervisor} has no log of {_which(run, previous)} of pipeline "
                f"{pipeline!r} (it keeps the newest supervisor.worker.log.runs.keep runs)"
            )
        return StreamingResponse(
            stream_log(found, follow=follow and not previous, tail=tail),
            media_type="text/plain; charset=utf-8",
        )

    add_fence_routes(app, supervisor, fencing, healthy)

    guarded = AuditTrail(
        RequireRole(app, settings.policy, required_role), "supervisor", audited_call
    )
    return bounded_app(guarded, settings.bounds)


def add_fence_routes(
    app: FastAPI, supervisor: str, fencing: Fencing | None, healthy: Callable[[], bool]
) -> None:
    """The leader's fences: of the whole supervisor, and of some of its pipelines."""

    def check_meant_for_me(asked_for: str, epoch: int, event: str, what: str) -> None:
        """A fence names the supervisor it is for: another one refuses it, stopping nothing."""
        if asked_for == supervisor:
            return
        log.error(
            "event=%s supervisor=%s asked_for=%r epoch=%d reason=wrong_supervisor",
            event,
            supervisor,
            clip(asked_for),
            epoch,
        )
        raise WrongSupervisorError(
            f"supervisor {supervisor} refuses {what} meant for supervisor "
            f"{clip(asked_for)!r}: nothing was stopped. The leader reached this "
            "endpoint through that supervisor's registration, which names this one's "
            "address: give that supervisor an endpoint of its own (supervisor.host, "
            "nimbus.auth.tokens.file)"
        )

    def obeyed(order: LeaderOrder, kind: str, workers: str) -> None:
        """Wait for the control loop's verdict on ``order``: refused, or its workers gone."""
        assert fencing is not None
        verdict = order.wait(fencing.wait_secs)
        if verdict is FenceVerdict.REFUSED:
            raise StaleEpochError(
                f"supervisor {supervisor} refuses a {kind} of epoch {order.epoch}: it has "
                f"seen epoch {order.newest_epoch}, so the caller is not the leader any more"
            )
        if verdict is not FenceVerdict.STOPPED:
            raise UnavailableError(
                f"supervisor {supervisor}: {workers} did not all stop within "
                f"{fencing.wait_secs:g} s of the {kind}; they are being killed, retry"
            )

    @app.post(FENCE_PATH)
    def fence(request: FenceRequest) -> JSONResponse:
        check_meant_for_me(request.supervisor, request.epoch, "fence_refused", "a fence")
        if fencing is None or not healthy():
            raise UnavailableError(f"supervisor {supervisor}: its control loop is not running")
        order = fencing.order(request.epoch)
        obeyed(order, "fence", "its workers")
        answer = FenceAnswer(supervisor=supervisor, epoch=request.epoch, stopped=order.stopped)
        return JSONResponse(answer.model_dump())

    @app.post(PIPELINE_FENCE_PATH)
    def fence_pipelines(request: PipelineFenceRequest) -> JSONResponse:
        check_meant_for_me(
            request.supervisor, request.epoch, "pipeline_fence_refused", "a pipeline fence"
        )
        if fencing is None or fencing.pipelines is None or not healthy():
            raise UnavailableError(f"supervisor {supervisor}: its control loop is not running")
        pipelines = frozenset(request.pipelines)
        order = fencing.pipelines(request.epoch, pipelines)
        named = ", ".join(sorted(pipelines)[:5]) + (", ..." if len(pipelines) > 5 else "")
        obeyed(order, "pipeline fence", f"the workers of {named}")
        answer = PipelineFenceAnswer(
            supervisor=supervisor,
            epoch=request.epoch,
            pipelines=sorted(pipelines),
            stopped=order.stopped,
        )
        return JSONResponse(answer.model_dump())


class SupervisorEndpoint:
    """The endpoint's server on its own thread; see the module docstring."""

    def __init__(
        self,
        settings: EndpointSettings,
        supervisor: str,
        *,
        logs_of: LogsOf,
        healthy: Callable[[], bool],
        metrics: SupervisorMetrics,
        ready: Checks,
        fencing: Fencing | None = None,
    ) -> None:
        self.settings = settings
        self.tls = settings.tls is not None
        check_reachable(settings, supervisor)
        bind = _bind_host(settings)
        if bind != settings.bind_host:
            _warn_loopback(settings.bind_host)
        try:
            self._sock = socket.create_server((bind, settings.port))
        except OSError as exc:
            raise SupervisorStartError(
                f"the supervisor's endpoint cannot listen on {bind}:{settings.port}: "
                f"{exc.strerror or exc}; set supervisor.http.port to a free port (0 picks "
                "one, -1 serves none)"
            ) from None
        port = self._sock.getsockname()[1]
        self.address = f"{_advertised_host(settings, bind)}:{port}"
        app = create_app(
            supervisor,
            logs_of=logs_of,
            healthy=healthy,
            metrics=metrics,
            ready=ready,
            settings=settings,
            fencing=fencing,
        )
        self._server = ThreadedServer(
            app,
            self._sock,
            settings.bounds,
            settings.tls.server_context() if settings.tls is not None else None,
            name="supervisor-endpoint",
        )

    def start(self) -> None:
        self._server.start(
            lambda: SupervisorStartError(
                f"the supervisor's endpoint did not start on {self.address}"
            )
        )

    def stop(self) -> None:
        self._server.stop()


def _bind_host(settings: EndpointSettings) -> str:
    """Where to listen: the configured address, or loopback alone for an open endpoint
    (no token file) on a network address that the operator did not call insecure."""
    host = settings.bind_host
    if settings.policy.enabled or settings.insecure or is_loopback(host):
        return host
    return LOOPBACK


def _advertised_host(settings: EndpointSettings, bind: str) -> str:
    """What the registration names: ``supervisor.host``, or loopback when it listens there."""
    return settings.advertised_host if bind != LOOPBACK else LOOPBACK


def _warn_loopback(host: str) -> None:
    log.warning(
        "event=supervisor_endpoint_loopback bind=%s: no nimbus.auth.tokens.file, so the "
        "endpoint (worker logs) listens on %s only; set the token file (or "
        "nimbus.auth.insecure) to serve it to the nimbuses",
        host,
        LOOPBACK,
    )


def check_reachable(settings: EndpointSettings, supervisor: str) -> None:
    """``UnreachableEndpointError`` when the endpoint would be registered on a loopback
    address while other hosts take part in the cluster (``EndpointSettings.spans_hosts``):
    no nimbus elsewhere could reach it, and a leader on another host would reach whatever
    listens on its own loopback instead. Checked when the supervisor starts, before it
    connects, and by the endpoint itself."""
    host = _advertised_host(settings, _bind_host(settings))
    if not is_loopback(host) or not settings.spans_hosts():
        return
    others = ", ".join(sorted({h for h in settings.cluster_hosts if not is_loopback(h)}))
    if host == LOOPBACK and not is_loopback(settings.bind_host):
        why = (
            "it has no nimbus.auth.tokens.file, so its open endpoint may listen on "
            f"{LOOPBACK} only; set nimbus.auth.tokens.file (the nimbuses' token file) so that "
            "it listens on supervisor.host (or nimbus.auth.insecure=true for an open one)"
        )
    else:
        why = (
            f"supervisor.host (default: the host name; or supervisor.http.bind.host) is "
            f"{host}; set supervisor.host to this host's address on the cluster's network"
        )
    raise UnreachableEndpointError(
        f"supervisor {supervisor} refuses to register its endpoint on the loopback address "
        f"{host}: other hosts take part in the cluster (its configuration names {others} in "
        "supervisor.host, zookeeper.servers, nimbus.seeds or pacemaker.servers), and no "
        f"nimbus there can reach it: {why}, or set supervisor.http.port=-1 to serve no "
        "endpoint"
    )
