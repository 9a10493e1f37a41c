"""The nimbus HTTP JSON API under ``/api/v1/``, its OpenAPI document, ``/metrics`` and ``/``.

Every error is ``{"error": code, "message": ..., "leader": ...}`` with the status of its
class in ``errors.py``; a leader-only call on a standby is ``421 not_leader`` naming the
leader. Reads come from the nimbus's cluster view, never from ZooKeeper directly.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import FastAPI, File, Form, Path, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stratus import __version__
from stratus.api.errors import (
    ApiError,
    InvalidRequestError,
    NotLeaderError,
    PackageTooLargeError,
)
from stratus.api.names import PIPELINE_NAME, PIPELINE_NAME_RULE
from stratus.api.records import (
    ClusterSummary,
    ErrorBody,
    KillRequest,
    LeaderInfo,
    PipelineList,
    PipelineRecord,
    PipelineWorkers,
    RebalanceRequest,
)
from stratus.nimbus.authorization import (
    RequireRole,
    documented_refusals,
    documented_security,
)
from stratus.nimbus.code_routes import add_code_routes
from stratus.nimbus.metrics import CONTENT_TYPE_LATEST, NimbusMetrics
from stratus.nimbus.service import MAX_REQUEST_ID_LENGTH, NimbusService
from stratus.nimbus.status_page import render_status_page
from stratus.security.access import OPEN, AccessPolicy

PREFIX = "/api/v1"
SUBMIT_PATH = f"{PREFIX}/pipelines"
MULTIPART_OVERHEAD = 64 * 1024  # room for the form's other fields and boundaries
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


def create_app(
    service: NimbusService, metrics: NimbusMetrics, policy: AccessPolicy = OPEN
) -> FastAPI:
    """The ASGI application of one nimbus; ``policy`` says who may call it (authorization.py)."""
    app = FastAPI(
        title="stratus nimbus",
        version=__version__,
        description="Cluster summary, pipelines and leader discovery of a stratus cluster.",
        openapi_url=f"{PREFIX}/openapi.json",
        docs_url=f"{PREFIX}/docs",
        redoc_url=None,
        responses=_ERRORS | documented_refusals(policy),
        dependencies=documented_security(policy),
    )
    _add_error_handlers(app)
    _add_read_routes(app, service)
    _add_leader_routes(app, service)
    _add_page_routes(app, service, metrics)
    add_code_routes(app, service.incoming)
    app.add_middleware(UploadGuard, service=service)
    app.add_middleware(EpochHeader, service=service)
    app.add_middleware(RequireRole, policy=policy)  # before the guard: 401, not 421 or 413
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


def _add_leader_routes(app: FastAPI, service: NimbusService) -> None:
    @app.post(
        SUBMIT_PATH,
        status_code=201,
        tags=["leader only"],
        responses={200: {"model": PipelineRecord, "description": "a retry: the pipeline it made"}},
    )
    def submit(
        response: Response,
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
            Form(description="client id that makes retries safe", max_length=MAX_REQUEST_ID_LENGTH),
        ] = "",
    ) -> PipelineRecord:
        """Check and store the package (content-addressed), create the pipeline.

        The pipeline is ACTIVE at once when ``pipeline.min.replication.count`` is 1, else
        PENDING until that many nimbuses hold its code (or the wait limit passes): poll its
        status. A retry with the same ``request_id`` returns the pipeline it created, with
        status 200.
        """
        record, created = service.submit(name, conf, request_id, package.file)
        if not created:
            response.status_code = 200
        return record

    @app.post(f"{PREFIX}/pipelines/{{name}}/kill", tags=["leader only"])
    def kill(name: PipelinePathName, body: KillRequest | None = None) -> PipelineRecord:
        """Mark the pipeline KILLED; its record is removed after ``wait_secs``."""
        return service.kill(name, body.wait_secs if body else None)

    @app.post(f"{PREFIX}/pipelines/{{name}}/activate", tags=["leader only"])
    def activate(name: PipelinePathName) -> PipelineRecord:
        return service.activate(name)

    @app.post(f"{PREFIX}/pipelines/{{name}}/deactivate", tags=["leader only"])
    def deactivate(name: PipelinePathName) -> PipelineRecord:
        return service.deactivate(name)

    @app.post(f"{PREFIX}/pipelines/{{name}}/rebalance", tags=["leader only"])
    def rebalance(name: PipelinePathName, body: RebalanceRequest) -> PipelineRecord:
        """Merge ``conf`` into the pipeline's conf; the pipeline restarts with it."""
        return service.rebalance(name, body.conf)


def _add_page_routes(app: FastAPI, service: NimbusService, metrics: NimbusMetrics) -> None:
    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", include_in_schema=False)
    async def status_page() -> HTMLResponse:
        return HTMLResponse(render_status_page(service.cluster_summary(), service.address))


def error_response(error: ApiError) -> JSONResponse:
    leader = error.leader if isinstance(error, NotLeaderError) else None
    body = ErrorBody(error=error.code, message=str(error), leader=leader)
    return JSONResponse(body.model_dump(), status_code=error.status)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(InvalidRequestError(_describe_validation(exc)))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # a body FastAPI could not parse (not UTF-8, broken form)
            return error_response(InvalidRequestError(f"invalid request: {exc.detail}"))
        code = str(exc.detail).lower().replace(" ", "_")
        body = ErrorBody(error=code, message=str(exc.detail))
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # Allow names every method of the path (RFC 9110)
            headers["Allow"] = _allowed_methods(app, request.scope)
        return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=headers)


def _allowed_methods(app: FastAPI, scope: Scope) -> str:
    """The methods of every route at the request's path; Starlette names the first route's only."""
    methods: set[str] = set()
    for route in app.router.routes:
        if route.matches(scope)[0] is not Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def _describe_validation(exc: RequestValidationError) -> str:
    problems = []
    for error in exc.errors()[:5]:
        where = ".".join(str(part) for part in error.get("loc", ()))
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(problems)


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
            route = getattr(scope.get("route"), "path", None)
            if route is None:  # answered before routing (UploadGuard) or no route matched
                route = SUBMIT_PATH if scope["path"] == SUBMIT_PATH else "unmatched"
            self.metrics.observe_request(
                scope["method"], route, status, time.perf_counter() - started
            )


class UploadGuard:
    """ASGI middleware for submits: refuse on a standby or past the size limit before reading.

    Without it a standby would read a whole package only to answer not_leader, and an
    upload without a Content-Length could fill the disk before any check ran.
    """

    def __init__(self, app: ASGIApp, service: NimbusService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"].rstrip("/") == SUBMIT_PATH
        ):
            await self.app(scope, receive, send)
            return
        limit = self.service.max_upload_bytes + MULTIPART_OVERHEAD
        refusal = self._refusal(scope, limit)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self._limited(scope, receive, send, limit)

    def _refusal(self, scope: Scope, limit: int) -> JSONResponse | None:
        try:
            self.service.leader_term()
        except NotLeaderError as exc:
            return error_response(exc)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return error_response(self._too_large())
        return None

    async def _limited(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise self._too_large()
            return message

        async def noting_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, noting_send)
        except PackageTooLargeError as exc:
            if started:
                raise
            await error_response(exc)(scope, receive, send)

    def _too_large(self) -> PackageTooLargeError:
        return PackageTooLargeError(
            f"the upload is larger than nimbus.max.upload.bytes "
            f"({self.service.max_upload_bytes} bytes)"
        )
