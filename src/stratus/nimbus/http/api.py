"""The nimbus HTTP JSON API under ``/api/v1/``, its OpenAPI document, ``/metrics``, the
probes ``/healthz`` and ``/readyz`` (``stratus.web.probes``), and the web UI at ``/``
(``ui/``).

Every error is ``{"error": code, "message": ..., "leader": ...}`` with the status of its
class in ``errors.py``; a leader-only call on a standby is ``421 not_leader`` naming the
leader. Reads come from the nimbus's cluster view, never from ZooKeeper directly, but for
the two histories (of leader terms, of a pipeline's assignments), read from ZooKeeper when
asked.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, File, Form, Path, Query, Request, UploadFile
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stratus import __version__
from stratus.api.errors import (
    UnknownPipelineError,
    UnknownRunError,
)
from stratus.api.names import PIPELINE_NAME, PIPELINE_NAME_RULE, check_pipeline_name
from stratus.api.purges import PurgeStatus
from stratus.api.records import (
    AssignmentChange,
    AssignmentHistory,
    ClusterSummary,
    CordonStatus,
    ErrorBody,
    KillRequest,
    LeaderInfo,
    LeaderTerms,
    PipelineList,
    PipelineRecord,
    PipelineRuns,
    PipelineWorkers,
    RebalanceRequest,
    RestartRequest,
    RollbackRequest,
    RunRecord,
)
from stratus.api.series import PipelineSeries
from stratus.nimbus.http.api_errors import add_error_handlers
from stratus.nimbus.http.authorization import (
    RequireNimbusRole,
    audited_call,
    documented_refusals,
    documented_security,
)
from stratus.nimbus.http.code_routes import add_code_routes
from stratus.nimbus.http.ha_routes import add_ha_routes
from stratus.nimbus.http.json_bodies import StrictJsonRoute
from stratus.nimbus.http.limits import RequestGuard, add_limit_handlers, leader_only_routes
from stratus.nimbus.http.log_relay import LogRelay
from stratus.nimbus.http.term_routes import add_term_routes
from stratus.nimbus.http.upload_spool import spooling_route
from stratus.nimbus.leadership.ha_service import NimbusHAService
from stratus.nimbus.metrics import CONTENT_TYPE_LATEST, NimbusMetrics
from stratus.nimbus.records.run_reads import RunReader, pick_run
from stratus.nimbus.service import MAX_REQUEST_ID_LENGTH, REQUEST_ID, LogSource, NimbusService
from stratus.nimbus.ui.front import UiFront, ui_route
from stratus.nimbus.ui.routes import add_ui_routes
from stratus.security.access import OPEN, AccessPolicy, Caller
from stratus.web.audit import AuditTrail, note_audit
from stratus.web.authorization import caller_of
from stratus.web.probes import Checks, add_probe_routes

PREFIX = "/api/v1"
SUBMIT_PATH = f"{PREFIX}/pipelines"
UPDATE_PATH = f"{PREFIX}/pipelines/{{name}}/update"
UPLOAD_PATHS = re.compile(re.escape(SUBMIT_PATH) + r"(/[^/]+/update)?")  # package bodies
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody} for status in (404, 409, 413, 421, 422, 503)
}
# The name rule in the document too; the check itself stays check_pipeline_name (invalid_name).
# So the path parameter is a plain string: the shared ``stratus.api.names.PipelineName`` would
# refuse a bad name as a validation error (invalid_request) before that check.
_NAME_SCHEMA: dict[str, Any] = {"pattern": PIPELINE_NAME.pattern}
PipelinePathName = Annotated[
    str,
    Path(description=f"the pipeline's name: {PIPELINE_NAME_RULE}", json_schema_extra=_NAME_SCHEMA),
]


def create_app(  # noqa: PLR0913 keyword-only: the sources of optional routes
    service: NimbusService,
    metrics: NimbusMetrics,
    policy: AccessPolicy = OPEN,
    *,
    ha: NimbusHAService | None = None,
    log_relay: LogRelay | None = None,
    zookeeper_state: Callable[[], str] = lambda: "unknown",
    ready: Checks | None = None,
    leader_terms: Callable[[], LeaderTerms] | None = None,
    assignment_history: Callable[[str], list[AssignmentChange]] | None = None,
    pipeline_series: Callable[[str], PipelineSeries] | None = None,
    runs: RunReader | None = None,
) -> FastAPI:
    """The ASGI application of one nimbus; ``policy`` says who may call it (authorization.py),
    ``ha`` serves the HA service protocol (ha_routes.py), ``log_relay`` reaches the
    supervisors' endpoints for workers' logs (log_relay.py), ``zookeeper_state`` names its
    ZooKeeper connection's state (the web UI shows it), ``ready`` are the checks of
    ``/readyz`` (the daemon's), ``leader_terms`` reads the history of terms
    (leader_terms.py), ``assignment_history`` a pipeline's assignment changes
    (assignment_history.py), ``pipeline_series`` a pipeline's time series
    (pipeline_series.py), ``runs`` a pipeline's runs (run_reads.py)."""
    app = FastAPI(
        title="stratus nimbus",
        version=__version__,
        description="Cluster summary, pipelines and leader discovery of a stratus cluster.",
        openapi_url=f"{PREFIX}/openapi.json",
        docs_url=None,  # the web UI's, with assets served here (ui/routes.py)
        redoc_url=None,
        responses=_ERRORS | documented_refusals(policy),
        dependencies=documented_security(policy),
    )
    app.router.route_class = StrictJsonRoute  # every JSON body: one key once, real text
    add_error_handlers(app)
    _add_read_routes(app, service)
    _add_log_route(app, service, log_relay or LogRelay(), runs)
    _add_leader_routes(app, service)
    _add_cordon_routes(app, service)
    if leader_terms is not None:
        add_term_routes(app, leader_terms)
    if assignment_history is not None:
        _add_history_route(app, service, assignment_history)
    if pipeline_series is not None:
        _add_series_route(app, service, pipeline_series)
    if runs is not None:
        _add_run_routes(app, service, runs)
    _add_page_routes(app, service, metrics)
    add_ui_routes(app, service, policy, zookeeper_state)
    add_probe_routes(app, "nimbus", ready or (lambda: {"started": False}))
    add_code_routes(app, service.incoming)
    if ha is not None:
        add_ha_routes(app, ha)
    add_limit_handlers(app)
    app.add_middleware(
        RequestGuard,
        limits=service.limits,
        leader_term=service.leader_term,
        leader_only=leader_only_routes(app.router.routes),
        upload_path=UPLOAD_PATHS,
    )
    app.add_middleware(EpochHeader, service=service)
    app.add_middleware(RequireNimbusRole, policy=policy)  # before the guard: 401, not 421 or 413
    app.add_middleware(UiFront, service=service, policy=policy)  # the page: before any role
    app.add_middleware(AuditTrail, daemon="nimbus", rule=audited_call)  # refusals included
    app.add_middleware(RequestMetrics, metrics=metrics)
    return app


def _add_read_routes(app: FastAPI, service: NimbusService) -> None:
    @app.get(f"{PREFIX}/cluster", response_model=ClusterSummary, tags=["any nimbus"])
    async def cluster() -> Response:
        """Every nimbus (the leader marked), supervisors and pipelines."""
        return Response(service.cluster_summary_json(), media_type="application/json")

    @app.get(f"{PREFIX}/leader", tags=["any nimbus"])
    async def leader() -> LeaderInfo:
        """The leader's address and epoch; address null while nobody leads."""
        return service.leader()

    @app.get(f"{PREFIX}/pipelines", tags=["any nimbus"])
    async def list_pipelines() -> PipelineList:
        return PipelineList(pipelines=service.pipelines())

    @app.get(f"{PREFIX}/pipelines/{{name}}", tags=["any nimbus"])
    async def pipeline_status(name: PipelinePathName) -> PipelineRecord:
        return service.pipeline(name)

    @app.get(f"{PREFIX}/pipelines/{{name}}/workers", tags=["any nimbus"])
    def pipeline_workers(name: PipelinePathName) -> PipelineWorkers:
        """Where the pipeline runs and what its workers last reported (heartbeats)."""
        return service.workers(name)

    @app.get(f"{PREFIX}/pipelines/{{name}}/purge", tags=["any nimbus"])
    def pipeline_purge(name: PipelinePathName) -> PurgeStatus:
        """Where the pipeline's removal and the purge of its checkpoints stand: the
        record's status (null once removed), and the purge recorded when a killed record
        with ``purge`` was removed or their retention ended, until whoever can write them
        deleted them: pending (who it is handed to) or failed (every reason); null once
        done. Read from ZooKeeper itself, the record first: any nimbus answers alike."""
        return service.purge(name)


def _add_history_route(
    app: FastAPI, service: NimbusService, read: Callable[[str], list[AssignmentChange]]
) -> None:
    @app.get(f"{PREFIX}/pipelines/{{name}}/history", tags=["any nimbus"])
    def pipeline_history(name: PipelinePathName) -> AssignmentHistory:
        """The pipeline's newest assignment changes (at most 50), newest first: when, in
        which epoch, from which supervisor to which (null: none), why, and the generation
        and code then. Read from ZooKeeper by any nimbus; each change was written by the
        leader in the same transaction as the assignment."""
        service.pipeline(name)  # unknown_pipeline (404), as its siblings answer
        return AssignmentHistory(pipeline=name, changes=read(name))


def _add_series_route(
    app: FastAPI, service: NimbusService, read: Callable[[str], PipelineSeries]
) -> None:
    @app.get(f"{PREFIX}/pipelines/{{name}}/series", tags=["any nimbus"])
    def pipeline_series(name: PipelinePathName) -> PipelineSeries:
        """The pipeline's figures over the last hour, oldest first, one point per step
        (10 s): input and processed rows per second, the longest batch against the trigger
        interval, the watermark's lag. From the answering nimbus's memory (the leader's
        from its scheduling rounds, a standby's from its own read of the heartbeats): empty
        after its start until it has read heartbeats, and points only while a worker runs."""
        service.pipeline(name)  # unknown_pipeline (404), as its siblings answer
        return read(name)


def _add_run_routes(app: FastAPI, service: NimbusService, reader: RunReader) -> None:
    @app.get(f"{PREFIX}/pipelines/{{name}}/runs", tags=["any nimbus"])
    def pipeline_runs(
        name: PipelinePathName,
        limit: Annotated[int | None, Query(ge=1, description="at most this many")] = None,
    ) -> PipelineRuns:
        """The pipeline's runs (one worker process's life on one supervisor each), newest
        first: the newest ``pipeline.runs.keep`` of its name, a killed and submitted again
        pipeline's included. Read from ZooKeeper by any nimbus; each was written by the
        supervisor that ran it, or its end inferred from the assignment history
        (``inferred``) when that supervisor died while it ran."""
        check_pipeline_name(name)
        runs = reader.runs(name, limit)
        if not runs and name not in service.view.pipelines():
            raise UnknownPipelineError(f"unknown pipeline {name!r}: no such pipeline, no runs")
        return PipelineRuns(pipeline=name, runs=runs)

    @app.get(f"{PREFIX}/pipelines/{{name}}/runs/{{run}}", tags=["any nimbus"])
    def pipeline_run(name: PipelinePathName, run: Annotated[int, Path(ge=0)]) -> RunRecord:
        """One run of the pipeline, by number; ``unknown_run`` names the runs kept."""
        check_pipeline_name(name)
        return reader.run(name, run)


def _add_log_route(
    app: FastAPI, service: NimbusService, relay: LogRelay, reader: RunReader | None
) -> None:
    def source_of(
        name: str, run: int | None, previous: bool, caller: Caller | None
    ) -> tuple[LogSource, bool]:
        """Where the log is, and whether the supervisor picks the run (``previous``)."""
        if reader is not None:
            picked = reader.run(name, run) if run is not None else None
            picked = picked or pick_run(name, reader.runs(name, 2), previous=previous)
            if picked is not None:
                return service.run_log_source(name, picked, caller), False
        if run is not None:
            raise UnknownRunError(f"pipeline {name!r} has no runs on record")
        return service.log_source(name, caller), previous

    # Not in the OpenAPI document: its body is a stream of text, not JSON (docs/pipelines.md).
    @app.get(f"{PREFIX}/pipelines/{{name}}/logs", include_in_schema=False)
    async def worker_log(
        request: Request,
        name: str,
        *,
        previous: bool = False,
        follow: bool = False,
        run: Annotated[int | None, Query(ge=0)] = None,
        tail: Annotated[int | None, Query(ge=0)] = None,
    ) -> Response:
        """A run's log: run ``run``, else the newest (the one before it with ``previous``);
        ``tail`` its last lines; ``follow`` streams new lines until the run ends or the
        client leaves. From the supervisor that ran it, wherever the pipeline is now."""
        note_audit(request.scope, pipeline=name)
        caller = caller_of(request.scope)
        source, previous = await run_in_threadpool(source_of, name, run, previous, caller)
        upstream = await relay.open(
            source,
            name,
            previous=previous,
            follow=follow,
            authorization=request.headers.get("authorization"),
            tail=tail,
        )
        return StreamingResponse(upstream.chunks(), media_type=upstream.media_type)


def _add_leader_routes(app: FastAPI, service: NimbusService) -> None:
    def submit(
        request: Request,
        response: Response,
        *,
        package: Annotated[
            UploadFile,
            File(
                description="the pipeline package: a zip with a stratus.yaml manifest",
                json_schema_extra={"minLength": 1},
            ),
        ],
        name: Annotated[
            str,
            Form(
                description=f"the pipeline's name (default: the manifest's): {PIPELINE_NAME_RULE}",
                json_schema_extra=_NAME_SCHEMA,
            ),
        ] = "",
        conf: Annotated[str, Form(description="pipeline conf, a JSON object")] = "{}",
        request_id: Annotated[
            str,
            Form(
                description="client id that makes retries safe: printable ASCII, no spaces",
                max_length=MAX_REQUEST_ID_LENGTH,
                pattern=REQUEST_ID.pattern,
            ),
        ] = "",
    ) -> PipelineRecord:
        """Check and store the package (content-addressed), create the pipeline.

        The pipeline is ACTIVE at once when ``pipeline.min.replication.count`` is 1, else
        PENDING until that many nimbuses hold its code (or the wait limit passes): poll its
        status. A retry with the same ``request_id`` returns the pipeline it created, with
        status 200.
        """
        note_audit(request.scope, pipeline=name, request_id=request_id)
        record, created = service.submit(
            name, conf, request_id, package.file, caller_of(request.scope)
        )
        note_audit(request.scope, pipeline=record.name)
        if not created:
            response.status_code = 200
        return record

    app.router.add_api_route(  # as @app.post, with the package spooled into the store
        SUBMIT_PATH,
        submit,
        methods=["POST"],
        status_code=201,
        tags=["leader only"],
        responses={200: {"model": PipelineRecord, "description": "a retry: the pipeline it made"}},
        route_class_override=spooling_route(service.incoming.directory),
    )

    def update(
        request: Request,
        response: Response,
        name: PipelinePathName,
        *,
        package: Annotated[
            UploadFile,
            File(
                description="the new package: a zip with a stratus.yaml manifest",
                json_schema_extra={"minLength": 1},
            ),
        ],
        conf: Annotated[
            str,
            Form(
                description="conf keys, a JSON object: over the conf the user set, over the new "
                "manifest's"
            ),
        ] = "{}",
        request_id: Annotated[
            str,
            Form(
                description="client id that makes retries safe: printable ASCII, no spaces",
                max_length=MAX_REQUEST_ID_LENGTH,
                pattern=REQUEST_ID.pattern,
            ),
        ] = "",
    ) -> PipelineRecord:
        """New code (and conf) for a pipeline, which keeps its name and checkpoints.

        The package is checked as a submit's is; a refused one changes nothing. The update
        waits in the record (``update``) until its code is on
        ``pipeline.min.replication.count`` nimbuses (or the wait limit passes), then the
        record names the new code with its ``version`` one higher, and the pipeline's
        worker stops gracefully and starts again with the new code: poll the status until
        ``version`` grows. Answers 202 while the update waits, 200 once it is applied; a
        retry with the same ``request_id`` changes nothing and answers the record.
        """
        note_audit(request.scope, request_id=request_id)
        record, _ = service.update(name, conf, request_id, package.file, caller_of(request.scope))
        if record.update is not None:
            response.status_code = 202
        return record

    app.router.add_api_route(  # as @app.post, with the package spooled into the store
        UPDATE_PATH,
        update,
        methods=["POST"],
        status_code=200,
        tags=["leader only"],
        responses={202: {"model": PipelineRecord, "description": "the update waits for its code"}},
        route_class_override=spooling_route(service.incoming.directory),
    )

    @app.post(f"{PREFIX}/pipelines/{{name}}/kill", tags=["leader only"])
    def kill(
        request: Request, name: PipelinePathName, body: KillRequest | None = None
    ) -> PipelineRecord:
        """Mark the pipeline KILLED; its record is removed after ``wait_secs``. Its
        checkpoints are kept (a later submit of the name resumes), unless ``purge``: then
        the removal records their purge, carried out by whoever can write them, and
        ``GET .../purge`` shows it until it is done. Needs an owner of the pipeline, or an
        admin."""
        caller = caller_of(request.scope)
        if body is None:
            return service.kill(name, None, caller=caller)
        return service.kill(name, body.wait_secs, purge=body.purge, caller=caller)

    @app.post(f"{PREFIX}/pipelines/{{name}}/activate", tags=["leader only"])
    def activate(request: Request, name: PipelinePathName) -> PipelineRecord:
        """Run the pipeline again. Needs an owner of the pipeline, or an admin."""
        return service.activate(name, caller_of(request.scope))

    @app.post(f"{PREFIX}/pipelines/{{name}}/deactivate", tags=["leader only"])
    def deactivate(request: Request, name: PipelinePathName) -> PipelineRecord:
        """Stop the pipeline's worker, keeping the pipeline. Needs an owner of the
        pipeline, or an admin."""
        return service.deactivate(name, caller_of(request.scope))

    @app.post(f"{PREFIX}/pipelines/{{name}}/rebalance", tags=["leader only"])
    def rebalance(
        request: Request, name: PipelinePathName, body: RebalanceRequest
    ) -> PipelineRecord:
        """Merge ``conf`` into the pipeline's conf; the pipeline restarts with it. A retry
        with the same ``request_id`` changes nothing. Needs an owner of the pipeline, or an
        admin."""
        note_audit(request.scope, request_id=body.request_id)
        return service.rebalance(name, body.conf, body.request_id, caller_of(request.scope))

    @app.post(f"{PREFIX}/pipelines/{{name}}/rollback", tags=["leader only"])
    def rollback(
        request: Request, name: PipelinePathName, body: RollbackRequest | None = None
    ) -> PipelineRecord:
        """Run a kept version of the pipeline again (``to_version``, or the version that ran
        before the current one), with the conf it ran with, from its checkpoint: a new
        generation, ``reason`` saying from which version to which. A version it does not
        keep (``pipeline.versions.keep``) is ``unknown_version`` (404), listing the kept ones;
        nothing changes. Refused for a KILLED or PENDING pipeline and while an update waits.
        A retry with the same ``request_id`` changes nothing. Needs an owner of the
        pipeline, or an admin."""
        body = body or RollbackRequest()
        note_audit(request.scope, request_id=body.request_id)
        return service.rollback(name, body.to_version, body.request_id, caller_of(request.scope))

    @app.post(f"{PREFIX}/pipelines/{{name}}/restart", tags=["leader only"])
    def restart(
        request: Request, name: PipelinePathName, body: RestartRequest | None = None
    ) -> PipelineRecord:
        """Run the pipeline again with its current version and checkpoint, a new generation:
        a FAILED or FINISHED pipeline becomes ACTIVE, an ACTIVE one's worker restarts.
        Refused for a KILLED, INACTIVE (activate it) or PENDING pipeline. A retry with the
        same ``request_id`` changes nothing. Needs an owner of the pipeline, or an admin."""
        body = body or RestartRequest()
        note_audit(request.scope, request_id=body.request_id)
        return service.restart(name, body.request_id, caller_of(request.scope))


SupervisorPathId = Annotated[
    str, Path(description="the supervisor's id (`supervisor.id`), as `stratus cluster` lists it")
]


def _add_cordon_routes(app: FastAPI, service: NimbusService) -> None:
    """Cordon, uncordon and drain a supervisor (docs/scheduling.md); they need ``admin``."""

    @app.post(f"{PREFIX}/supervisors/{{supervisor}}/cordon", tags=["leader only"])
    def cordon(request: Request, supervisor: SupervisorPathId) -> CordonStatus:
        """Give the supervisor no new pipeline; it keeps those it runs. The cordon is the
        cluster's (a znode the leader writes): it outlives restarts of the supervisor and of
        every nimbus. Cordoning twice changes nothing. 404 naming the known supervisors if
        none has that id. Needs an admin."""
        return service.cordon(supervisor, caller_of(request.scope))

    @app.post(f"{PREFIX}/supervisors/{{supervisor}}/uncordon", tags=["leader only"])
    def uncordon(supervisor: SupervisorPathId) -> CordonStatus:
        """Let the supervisor take new pipelines again; a drain under way stops (what it
        moved stays where it went). Needs an admin."""
        return service.uncordon(supervisor)

    @app.post(f"{PREFIX}/supervisors/{{supervisor}}/drain", tags=["leader only"])
    def drain(request: Request, supervisor: SupervisorPathId) -> CordonStatus:
        """Cordon the supervisor and move its pipelines to others with room, each one's old
        worker stopped before the new one starts (preferably in a warm worker that is
        ready). Answers at once: follow it with ``GET`` on this path. Needs an admin."""
        return service.cordon(supervisor, caller_of(request.scope), drain=True)

    @app.get(f"{PREFIX}/supervisors/{{supervisor}}/drain", tags=["leader only"])
    def drain_status(supervisor: SupervisorPathId) -> CordonStatus:
        """The supervisor's cordon and how far its drain is: the pipelines still there, those
        on the way, those that found no room in the leader's last round."""
        return service.cordon_status(supervisor)


def _add_page_routes(app: FastAPI, service: NimbusService, metrics: NimbusMetrics) -> None:
    @app.get("/metrics", include_in_schema=False)
    def prometheus() -> Response:  # in the thread pool: collecting reads the view and the code
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


EPOCH_HEADER = b"x-stratus-epoch"


class EpochHeader:
    """ASGI middleware: every response names the leader epoch this nimbus knows."""

    def __init__(self, app: ASGIApp, service: NimbusService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_epoch(message: Message) -> None:
            epoch = self.service.leader().epoch
            if message["type"] == "http.response.start" and epoch is not None:
                message["headers"] = [*message.get("headers", []), (EPOCH_HEADER, b"%d" % epoch)]
            await send(message)

        await self.app(scope, receive, send_with_epoch)


class RequestMetrics:
    """ASGI middleware: counts requests and their latency by route template and status."""

    def __init__(self, app: ASGIApp, metrics: NimbusMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            # the web UI's page and files under two labels, whatever the path (UiFront)
            route = ui_route(scope) or getattr(scope.get("route"), "path", None)
            if route is None:  # answered before routing (RequestGuard) or no route matched
                route = SUBMIT_PATH if scope["path"] == SUBMIT_PATH else "unmatched"
            self.metrics.observe_request(
                scope["method"], route, status, time.perf_counter() - started
            )
