"""The JSON reads of the web UI beyond the rest of the API, and the Swagger UI page.

Any nimbus answers them from what it holds (a standby answers the same as the leader), with
the ``read`` role: ``/api/v1/supervisors`` (each with its heartbeat age),
``/api/v1/workers`` (every pipeline's placement and workers in one answer, secrets redacted),
``/api/v1/nimbus`` (the nimbus that answers: role, leader, ZooKeeper session) and
``/api/v1/whoami`` (the caller's role, which decides the actions a page shows).
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse

from stratus.api.overview import Caller, NimbusSelf, SupervisorList, WorkersOverview
from stratus.nimbus.service import NimbusService
from stratus.nimbus.ui.assets import swagger_page
from stratus.security.access import AccessPolicy
from stratus.security.roles import Role
from stratus.web.authorization import PEER_NAME

PREFIX = "/api/v1"
DOCS_PATH = f"{PREFIX}/docs"


def add_ui_routes(
    app: FastAPI,
    service: NimbusService,
    policy: AccessPolicy,
    zookeeper_state: Callable[[], str],
) -> None:
    """The UI's reads and the API's documentation page (served with the app's own assets)."""

    @app.get(f"{PREFIX}/supervisors", tags=["any nimbus"])
    def supervisors() -> SupervisorList:
        """Every registered supervisor: slots, used slots, age of its last heartbeat."""
        return service.supervisors()

    @app.get(f"{PREFIX}/workers", tags=["any nimbus"])
    def workers() -> WorkersOverview:
        """Where every pipeline runs and what its workers last reported (as
        ``/pipelines/NAME/workers``, for every pipeline placed or heard from)."""
        return service.workers_overview()

    @app.get(f"{PREFIX}/nimbus", tags=["any nimbus"])
    async def this_nimbus() -> NimbusSelf:
        """The nimbus that answers: whether it leads, the leader it knows, its ZooKeeper
        connection."""
        leader = service.leader()
        return NimbusSelf(
            address=service.address,
            is_leader=service.is_leader(),
            leader=leader.address,
            epoch=leader.epoch,
            zookeeper=zookeeper_state(),
        )

    @app.get(f"{PREFIX}/whoami", tags=["any nimbus"])
    async def whoami(request: Request) -> Caller:
        """The role and principal the request's token or client certificate gives (admin
        without auth)."""
        peer = (request.scope.get("state") or {}).get(PEER_NAME)
        caller = policy.authorize(request.headers.get("authorization"), peer, Role.READ)
        if caller is None:
            return Caller(role=Role.ADMIN.value, auth_required=False)
        return Caller(
            role=caller.role.value, principal=caller.principal, auth_required=policy.enabled
        )

    @app.get(DOCS_PATH, include_in_schema=False)
    async def docs() -> HTMLResponse:
        return swagger_page(app.openapi_url or f"{PREFIX}/openapi.json", app.title)
