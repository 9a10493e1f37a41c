"""Which role each route of a nimbus needs; ``RequireNimbusRole`` checks it
outside every other check.

Every route needs a role (``required_role``): reads (``GET``/``HEAD``: the cluster, the
leader, pipelines, workers, supervisors, packages, the OpenAPI document and its page,
``/metrics``, a worker's log, a drain's progress) need ``read``; every other method
(submit, update, kill, activate, deactivate, rebalance) needs ``submit``, but a change of a
supervisor (``/api/v1/supervisors/<id>/``: cordon, uncordon, drain), which moves every
tenant's pipelines, needs ``admin``; then a call on one pipeline (a change,
or its log, which may hold the pipeline's data) needs an owner of it, or a reader for the
log, or an admin (``stratus.security.authorizer``, judged by the service); the HA
service protocol (``/ha/``, a failover controller's reads and transitions) needs
``admin``, which may do all. The check runs before the upload guard and the routes, so an
unauthenticated leader-only call on a standby gets 401, not 421, and no body is read. With
no token file configured every call goes through, as before. The web UI's page ``/`` and
its assets ``/ui/`` are answered before this check (``ui/front.py``): a browser cannot send a
token when it opens a page, and the page shows the cluster only to a reader.

A 401 carries ``WWW-Authenticate: Bearer``; both refusals have the API's error body
(``stratus.web.authorization``, which the zkfc's endpoint shares).
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends
from fastapi.security import HTTPBearer
from starlette.types import ASGIApp

from stratus.api.records import ErrorBody
from stratus.security.access import AccessPolicy
from stratus.security.roles import Role
from stratus.web import authorization
from stratus.web.audit import changes_only

HA_PREFIX = "/ha"  # the HA service protocol's routes (stratus.ha.protocol)
PIPELINES_PREFIX = "/api/v1/pipelines/"
SUBMIT_PATH = "/api/v1/pipelines"
SUPERVISORS_PREFIX = "/api/v1/supervisors/"  # cordon, uncordon, drain: admin
LOGS_SUFFIX = "/logs"  # a worker's log, streamed from its supervisor
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def required_role(method: str, path: str = "") -> Role:
    """The role a request needs: the HA protocol ``admin``, reads ``read`` (a worker's log
    too: its owners and readers are judged then), a change of a supervisor ``admin``, other
    changes ``submit``."""
    if path == HA_PREFIX or path.startswith(HA_PREFIX + "/"):
        return Role.ADMIN
    if method.upper() in READ_METHODS:
        return Role.READ
    return Role.ADMIN if path.startswith(SUPERVISORS_PREFIX) else Role.SUBMIT


def audited_call(method: str, path: str) -> tuple[str, str | None] | None:
    """What the audit trail records of a request (``stratus.web.audit``): (verb, pipeline)
    for a change (a submit, ``/pipelines/NAME/<verb>``, an HA transition, an upload) and a
    worker's log; None for the other reads (audited only when refused)."""
    if path.startswith(PIPELINES_PREFIX):
        name, _, verb = path.removeprefix(PIPELINES_PREFIX).partition("/")
        if verb == LOGS_SUFFIX.strip("/") or (verb and method.upper() not in READ_METHODS):
            return verb, name
    if path == SUBMIT_PATH and method.upper() == "POST":
        return "submit", None
    return changes_only(method, path)


class RequireNimbusRole(authorization.RequireRole):
    """ASGI middleware: refuse a request whose caller's role does not allow it
    (``required_role``; the caller from ``stratus.web.authorization``)."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        super().__init__(app, policy, required_role)


_BEARER = HTTPBearer(
    auto_error=False,  # RequireNimbusRole decides; this only declares the scheme in the document
    description="a token of the nimbus's token file (nimbus.auth.tokens.file)",
)
AUTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "unauthenticated: no token, or an unknown one"},
    403: {"model": ErrorBody, "description": "forbidden: the caller's role does not allow it"},
}


def documented_security(policy: AccessPolicy) -> list[Any]:
    """The app's dependencies that declare the bearer scheme, when tokens are required."""
    return [Depends(_BEARER)] if policy.enabled else []


def documented_refusals(policy: AccessPolicy) -> dict[int | str, dict[str, Any]]:
    """401 and 403 in every operation's responses, when tokens are required."""
    return AUTH_RESPONSES if policy.enabled else {}
