"""Who may call a stratus server: one ASGI middleware, outside every other check.

The caller's role comes from its bearer token or, without one, from the subject CN of the
client certificate that TLS verified (``peer_certificate.py`` puts it in the scope); the
server says which role each request needs. The caller (``Caller``: principal and role) is
left in the scope's state for the routes (``caller_of``: who owns what) and the audit trail,
also when its role is too low. A request with two ``Authorization`` headers is 401 whatever
they hold. A request that passes takes its connection from the pending places to the
admitted ones (``bounds.ADMIT``), or is 503 when none is free. A 401 carries
``WWW-Authenticate: Bearer``; both refusals are the API's JSON error body. The probes
``/healthz`` and ``/readyz`` (``probes.py``) need no role: load balancers and kubelets call
them without credentials. With no token file every call goes through (one Authorization
header at most, and the connection places still apply)::

    app = RequireRole(app, policy, lambda method, path: Role.ADMIN)
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from stratus.api.errors import ApiError, UnauthenticatedError, UnavailableError
from stratus.security.access import (
    CHALLENGE,
    AccessPolicy,
    Caller,
    check_role,
    one_authorization,
)
from stratus.security.roles import Role
from stratus.web.bounds import ADMIT, Admit
from stratus.web.probes import OPEN_PATHS
from stratus.web.responses import RETRY_AFTER_SECS, error_response

log = logging.getLogger(__name__)

PEER_NAME = "stratus.peer_name"  # the scope's state: the verified client certificate's CN
CALLER = "stratus.caller"  # the scope's state: the Caller that RequireRole identified

RoleRule = Callable[[str, str], Role]  # (method, path) -> the role the request needs


class RequireRole:
    """ASGI middleware: refuse a request whose caller's role does not allow it."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy, rule: RoleRule) -> None:
        self.app = app
        self.policy = policy
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        try:
            authorization = one_authorization(request_authorizations(scope))
            if self.policy.enabled:
                caller = self.policy.identify(authorization, state.get(PEER_NAME))
                state[CALLER] = caller
                check_role(caller, self.rule(scope["method"], scope["path"]))
        except ApiError as exc:
            await refusal(exc)(scope, receive, send)
            return
        admit: Admit | None = state.get(ADMIT)
        if admit is not None and not admit():
            log.warning("event=request_refused reason=max_connections")
            busy = UnavailableError(
                "every connection place of an authenticated caller is taken "
                f"(nimbus.http.max.connections); retry in {RETRY_AFTER_SECS} s"
            )
            headers = {"Retry-After": str(RETRY_AFTER_SECS), "Connection": "close"}
            await error_response(busy, headers)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def caller_of(scope: Scope) -> Caller | None:
    """The caller that RequireRole identified; None on a server without a token file."""
    found = (scope.get("state") or {}).get(CALLER)
    return found if isinstance(found, Caller) else None


def request_authorizations(scope: Scope) -> list[str]:
    """Every Authorization header of the request, in order."""
    return [value.decode("latin-1") for name, value in scope["headers"] if name == b"authorization"]


def refusal(error: ApiError) -> JSONResponse:
    """The 401 or 403 answer, with the challenge a 401 must carry (RFC 9110)."""
    headers = {"WWW-Authenticate": CHALLENGE} if isinstance(error, UnauthenticatedError) else {}
    return error_response(error, headers)
