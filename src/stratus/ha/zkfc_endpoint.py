"""The zkfc's own HTTP(S) endpoint: ``cede-active`` and ``graceful-failover`` (``zkfc_protocol``),
its ``/metrics`` and the probes ``/healthz`` and ``/readyz``.

A server like the nimbus API, built from the same pieces (``stratus.web``): every call needs
the ``admin`` role, except ``GET /metrics`` (``read``) and the probes (no role: load
balancers probe without credentials), from a bearer token of ``nimbus.auth.tokens.file`` or
from the client certificate that the TLS of ``nimbus.tls.*`` verified (its CN looked up in
the same file);
and it is bounded as the API is, by ``nimbus.http.*`` (connections, requests in progress
with a JSON 503, the time to send a request head or finish a TLS handshake, the head's
size) and ``nimbus.max.request.bytes`` (a body's size, 413). Every refusal is the API's
JSON error body. Each call (``cede-active``, ``graceful-failover``) and each refusal is a line
of the audit trail (``stratus.web.audit``)::

    endpoint = ZkfcEndpoint(("127.0.0.1", 8019), handlers, EndpointSecurity(policy, tls))
    endpoint.start()            # endpoint.address: "127.0.0.1:8019"
    endpoint.stop()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp

from stratus.api.echo import clip
from stratus.api.errors import ApiError, InvalidRequestError, RequestTooLargeError
from stratus.api.records import ErrorBody
from stratus.ha.metrics import CONTENT_TYPE_LATEST, ZkfcMetrics
from stratus.ha.zkfc_protocol import (
    CEDE_PATH,
    FAILOVER_PATH,
    CedeActive,
    CedeResult,
    FailoverResult,
)
from stratus.security.access import AccessPolicy
from stratus.security.roles import Role
from stratus.security.tls import TlsSettings
from stratus.web.audit import AuditTrail
from stratus.web.authorization import RequireRole
from stratus.web.body_limit import BodyLimit, add_refusal_handlers
from stratus.web.bounds import (
    DEFAULT_BOUNDS,
    HttpBounds,
    bounded_app,
)
from stratus.web.listening import tcp_listener
from stratus.web.probes import Checks, add_probe_routes
from stratus.web.responses import error_response
from stratus.web.threaded_server import ThreadedServer

DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024  # nimbus.max.request.bytes's default
METRICS_PATH = "/metrics"


class EndpointStartError(RuntimeError):
    """The zkfc's endpoint could not listen or start (the message names the address)."""


class Handlers(Protocol):
    """What the endpoint's two calls do (the zkfc daemon has them)."""

    def cede_active(self, millis: int) -> CedeResult: ...

    def graceful_failover(self) -> FailoverResult: ...


@dataclass(frozen=True)
class EndpointSecurity:
    """Who may call the endpoint (admins only, when a token file is set), over what TLS, and
    the bounds on what a caller may cost it (those of the nimbus API beside it)."""

    policy: AccessPolicy = field(default_factory=AccessPolicy)
    tls: TlsSettings | None = None
    bounds: HttpBounds = DEFAULT_BOUNDS  # nimbus.http.*
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES  # nimbus.max.request.bytes


def required_role(method: str, path: str) -> Role:
    """``read`` for the metrics; ``admin`` for the rest: every other call changes who is
    active."""
    return Role.READ if (method, path) == ("GET", METRICS_PATH) else Role.ADMIN


def _not_ready() -> dict[str, bool]:
    return {"started": False}


def create_app(
    handlers: Handlers,
    security: EndpointSecurity,
    metrics: ZkfcMetrics | None = None,
    ready: Checks = _not_ready,
) -> ASGIApp:
    """The endpoint's ASGI application, behind the role check, the body bound and the
    request bounds (outermost first: bounds, role, body)."""
    app = FastAPI(title="stratus zkfc", openapi_url=None, docs_url=None, redoc_url=None)
    add_probe_routes(app, "zkfc", ready)
    if metrics is not None:

        @app.get(METRICS_PATH)
        def prometheus() -> Response:
            return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return error_response(
            InvalidRequestError(f"invalid request: {clip(where)}: {clip(str(first.get('msg')))}")
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = clip(str(exc.detail), 64).lower().replace(" ", "_")
        body = ErrorBody(error=code, message=clip(str(exc.detail)))
        return JSONResponse(body.model_dump(), status_code=exc.status_code)

    add_refusal_handlers(app)

    @app.post(CEDE_PATH)
    def cede_active(body: CedeActive) -> CedeResult:
        return handlers.cede_active(body.millis)

    @app.post(FAILOVER_PATH)
    def graceful_failover() -> FailoverResult:
        return handlers.graceful_failover()

    limit = security.max_request_bytes

    def too_large() -> ApiError:
        return RequestTooLargeError(
            f"the request body is larger than nimbus.max.request.bytes ({limit} bytes); "
            "the zkfc's calls carry a few bytes of JSON"
        )

    guarded = RequireRole(BodyLimit(app, limit, too_large), security.policy, required_role)
    return bounded_app(AuditTrail(guarded, "zkfc"), security.bounds)


class ZkfcEndpoint:
    """The endpoint's server on its own thread; see the module docstring."""

    def __init__(
        self,
        bind: tuple[str, int],
        handlers: Handlers,
        security: EndpointSecurity,
        *,
        metrics: ZkfcMetrics | None = None,
        ready: Checks = _not_ready,
    ) -> None:
        try:
            self._sock = tcp_listener(*bind)
        except OSError as exc:
            raise EndpointStartError(
                f"the zkfc's endpoint cannot listen on {bind[0]}:{bind[1]}: "
                f"{exc.strerror or exc}; set ha.zkfc.port to a free port (0 picks one)"
            ) from None
        self.address = f"{bind[0]}:{self._sock.getsockname()[1]}"
        self._server = ThreadedServer(
            create_app(handlers, security, metrics, ready),
            self._sock,
            security.bounds,
            security.tls.server_context() if security.tls is not None else None,
            name="zkfc-endpoint",
        )

    def start(self) -> None:
        self._server.start(
            lambda: EndpointStartError(f"the zkfc's endpoint did not start on {self.address}")
        )

    def stop(self) -> None:
        self._server.stop()
