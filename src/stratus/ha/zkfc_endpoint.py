"""The zkfc's own HTTP(S) endpoint: ``cede-active`` and ``graceful-failover`` (``zkfc_protocol``).

Authenticated like a nimbus's API: the token file of ``nimbus.auth.tokens.file`` (every
call needs the ``admin`` role) and the TLS of ``nimbus.tls.*`` when they are configured::

    endpoint = ZkfcEndpoint(("127.0.0.1", 8019), handlers, EndpointSecurity(policy, tls))
    endpoint.start()            # endpoint.address: "127.0.0.1:8019"
    endpoint.stop()
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from stratus.api.errors import ApiError, UnauthenticatedError
from stratus.api.records import ErrorBody
from stratus.ha.zkfc_protocol import (
    CEDE_PATH,
    FAILOVER_PATH,
    CedeActive,
    CedeResult,
    FailoverResult,
)
from stratus.security.access import CHALLENGE, AccessPolicy
from stratus.security.roles import Role
from stratus.security.tls import TlsSettings

START_TIMEOUT_SECS = 10.0
STOP_TIMEOUT_SECS = 5.0


class EndpointStartError(RuntimeError):
    """The zkfc's endpoint could not listen or start (the message names the address)."""


class Handlers(Protocol):
    """What the endpoint's two calls do (the zkfc daemon has them)."""

    def cede_active(self, millis: int) -> CedeResult: ...

    def graceful_failover(self) -> FailoverResult: ...


@dataclass(frozen=True)
class EndpointSecurity:
    """Who may call the endpoint (admins only, when a token file is set), and its TLS."""

    policy: AccessPolicy = field(default_factory=AccessPolicy)
    tls: TlsSettings | None = None


def _error(error: ApiError) -> JSONResponse:
    headers = {"WWW-Authenticate": CHALLENGE} if isinstance(error, UnauthenticatedError) else {}
    body = ErrorBody(error=error.code, message=str(error))
    return JSONResponse(body.model_dump(), status_code=error.status, headers=headers)


class RequireAdmin:
    """ASGI middleware: every call needs the ``admin`` role (when auth is configured)."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.policy.enabled:
            authorization = dict(scope["headers"]).get(b"authorization")
            try:
                self.policy.authorize(
                    authorization.decode("latin-1") if authorization else None, None, Role.ADMIN
                )
            except ApiError as exc:
                await _error(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_app(handlers: Handlers, policy: AccessPolicy) -> ASGIApp:
    app = FastAPI(title="stratus zkfc", openapi_url=None, docs_url=None, redoc_url=None)

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc)

    @app.post(CEDE_PATH)
    def cede_active(body: CedeActive) -> CedeResult:
        return handlers.cede_active(body.millis)

    @app.post(FAILOVER_PATH)
    def graceful_failover() -> FailoverResult:
        return handlers.graceful_failover()

    return RequireAdmin(app, policy)


class ZkfcEndpoint:
    """The endpoint's server on its own thread; see the module docstring."""

    def __init__(
        self, bind: tuple[str, int], handlers: Handlers, security: EndpointSecurity
    ) -> None:
        try:
            self._sock = socket.create_server(bind, reuse_port=False)
        except OSError as exc:
            raise EndpointStartError(
                f"the zkfc's endpoint cannot listen on {bind[0]}:{bind[1]}: {exc}; set "
                "ha.zkfc.port to a free port (0 picks one)"
            ) from None
        self.address = f"{bind[0]}:{self._sock.getsockname()[1]}"
        config = uvicorn.Config(
            create_app(handlers, security.policy),
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        if security.tls is not None:
            config.load()
            config.ssl = security.tls.server_context()
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: self._server.run(sockets=[self._sock]), name="zkfc-endpoint", daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while not self._server.started:  # uvicorn offers no event to wait on
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise EndpointStartError(f"the zkfc's endpoint did not start on {self.address}")
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=STOP_TIMEOUT_SECS)
        self._sock.close()
