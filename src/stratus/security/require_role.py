"""Who may call which route of an HTTP server: one ASGI middleware, outside every other check.

The server says which role each request needs (``required``: method and path to a role); the
caller is the bearer token of its ``Authorization`` header, else the verified client
certificate's CN (``PEER_NAME``, set by ``PeerCertificateProtocol``), looked up in the token
file (``AccessPolicy``). The nimbus's API and the supervisor's endpoint both use it; with no
token file configured every call goes through. A 401 carries ``WWW-Authenticate: Bearer``;
both refusals have the API's error body::

    app = RequireRole(app, policy, required=lambda method, path: Role.READ)
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from stratus.api.errors import ApiError, UnauthenticatedError
from stratus.api.records import ErrorBody
from stratus.security.access import CHALLENGE, AccessPolicy
from stratus.security.peer_certificate import PEER_NAME
from stratus.security.roles import Role

RoleOf = Callable[[str, str], Role]  # (method, path) -> the role the request needs


class RequireRole:
    """ASGI middleware: refuse a request whose caller's role does not allow it."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy, required: RoleOf) -> None:
        self.app = app
        self.policy = policy
        self.required = required

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.policy.enabled:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        authorization = headers.get(b"authorization")
        peer = (scope.get("state") or {}).get(PEER_NAME)
        try:
            self.policy.authorize(
                authorization.decode("latin-1") if authorization else None,
                peer,
                self.required(scope["method"], scope["path"]),
            )
        except ApiError as exc:
            await refusal(exc)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def refusal(error: ApiError) -> JSONResponse:
    """The 401 or 403 answer, with the challenge a 401 must carry (RFC 9110)."""
    body = ErrorBody(error=error.code, message=str(error))
    headers = {"WWW-Authenticate": CHALLENGE} if isinstance(error, UnauthenticatedError) else {}
    return JSONResponse(body.model_dump(), status_code=error.status, headers=headers)
