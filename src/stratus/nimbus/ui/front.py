"""What a browser may load from a nimbus before it has shown any credentials, and the
cross-origin rule that lets a standby's page send an action to the leader.

``UiFront`` sits outside the role check (``RequireNimbusRole``):

- ``GET /`` is the page. With credentials that allow ``read`` (none needed on a cluster
  without auth, or a client certificate) it holds the cluster as the status page renders it,
  so it reads without JavaScript too; without them, only the frame, where the user pastes a
  token. Either way the UI's script then takes the page over, reading the JSON API.
- ``/ui/...`` are the page's script, style and Swagger UI's files: nothing of the cluster.
- A request whose ``Origin`` is another nimbus of the cluster (its registered ``host:port``,
  same scheme) is allowed across origins (CORS), credentials included: the page of a standby
  sends a leader-only action to the leader the 421 ``not_leader`` answer names, as the CLI
  follows it. The preflight (``OPTIONS``) is answered here, before the role check, since a
  browser sends it without the ``Authorization`` header; the real request is checked as
  every other. No other origin is allowed.
- A request that would change something (any method but ``GET``, ``HEAD``, ``OPTIONS``)
  sent by a page of another site (its ``Origin`` is neither this nimbus nor another of the
  cluster) is refused, ``403 forbidden``: a browser attaches a client certificate to any
  site's form post, so without this a page anywhere could submit code with the user's
  certificate (cross-site request forgery). Clients other than browsers send no ``Origin``.
"""

from __future__ import annotations

from html import escape

from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stratus.api.echo import clip
from stratus.api.errors import ApiError, ForbiddenError
from stratus.nimbus.service import NimbusService
from stratus.nimbus.ui.assets import ASSETS_PATH, OWN_PATH, assets_routes
from stratus.nimbus.ui.status_page import render_status_page
from stratus.security.access import AccessPolicy, one_authorization
from stratus.security.roles import Role
from stratus.web.authorization import PEER_NAME, request_authorizations
from stratus.web.responses import error_response

UI_HEAD = (
    "<meta name='stratus-refresh-secs' content='{refresh}'>"
    f"<link rel='stylesheet' href='{OWN_PATH}/uplot/uPlot.min.css'>"
    f"<link rel='stylesheet' href='{OWN_PATH}/ui.css'>"
    f"<link rel='icon' href='{OWN_PATH}/favicon.svg'>"
    f"<script src='{OWN_PATH}/uplot/uPlot.iife.min.js' defer></script>"
    f"<script src='{OWN_PATH}/charts.js' defer></script>"
    f"<script src='{OWN_PATH}/app.js' defer></script>"
)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # they change nothing
PREFLIGHT_MAX_AGE_SECS = 600  # how long a browser may reuse an allowed preflight
_ALLOWED_HEADERS = "authorization, content-type"


PAGE_ROUTE = "/"
ASSET_ROUTE = f"{ASSETS_PATH}/{{asset}}"


def ui_route(scope: Scope) -> str | None:
    """The route a request that ``UiFront`` answers itself is counted under: ``/`` (the
    page) or ``/ui/{asset}`` (any of its files, found or not: one label, so the request
    metrics' cardinality stays bounded whatever paths are asked); None for the others."""
    if scope["method"] not in ("GET", "HEAD"):
        return None
    path: str = scope["path"]
    if path == "/":
        return PAGE_ROUTE
    if path.startswith(ASSETS_PATH + "/"):
        return ASSET_ROUTE
    return None


class UiFront:
    """ASGI middleware: the page, its assets and the cross-origin rule; see the module
    docstring."""

    def __init__(self, app: ASGIApp, service: NimbusService, policy: AccessPolicy) -> None:
        self.app = app
        self.service = service
        self.policy = policy

        async def index(request: Request) -> Response:
            return index_page(self, request.scope)  # from the cluster view: no I/O

        # a file that does not exist is a 404 here too (StaticFiles raises it), not a 500
        pages = Router(routes=[Route("/", index, methods=["GET"]), *assets_routes()])
        self.pages = ExceptionMiddleware(pages)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if ui_route(scope) is not None:
            await self.pages(scope, receive, send)
            return
        origin = _header(scope, b"origin")
        if origin is None or _is_same_origin(origin, scope):
            await self.app(scope, receive, send)
            return
        if not self._is_nimbus_origin(origin, scope):
            if scope["method"] not in SAFE_METHODS:
                await error_response(_cross_site(origin))(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS" and _header(scope, b"access-control-request-method"):
            await _preflight(origin)(scope, receive, send)
            return
        await self.app(scope, receive, _with_cors(send, origin))

    def _is_nimbus_origin(self, origin: str, scope: Scope) -> bool:
        scheme, sep, address = origin.partition("://")
        return bool(sep) and scheme == scope["scheme"] and address in self.service.view.nimbuses()

    def may_read(self, scope: Scope) -> bool:
        """Whether the request's credentials allow ``read`` (always without auth)."""
        peer = (scope.get("state") or {}).get(PEER_NAME)
        try:
            authorization = one_authorization(request_authorizations(scope))
            self.policy.authorize(authorization, peer, Role.READ)
        except ApiError:
            return False
        return True


def index_page(front: UiFront, scope: Scope) -> HTMLResponse:
    """The page at ``/``: the cluster when the caller may read it, else the frame alone."""
    head = UI_HEAD.format(refresh=front.service.ui_refresh_secs)
    if front.may_read(scope):
        page = render_status_page(front.service.cluster_summary(), front.service.address, head)
    else:
        page = (
            "<!doctype html><html><head><meta charset='utf-8'><title>stratus</title>"
            f"{head}</head><body><div id='status'><h1>stratus</h1><p>This nimbus "
            f"({escape(front.service.address)}) requires a token: paste one above.</p>"
            "</div></body></html>"
        )
    return HTMLResponse(page, headers={"Cache-Control": "no-store"})


def _is_same_origin(origin: str, scope: Scope) -> bool:
    return origin == f"{scope['scheme']}://{_header(scope, b'host')}"


def _cross_site(origin: str) -> ForbiddenError:
    return ForbiddenError(
        f"a browser page of {clip(origin)} may not change this cluster: only the pages of "
        "its own nimbuses may (send the call without an Origin header from a script)"
    )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _preflight(origin: str) -> Response:
    return Response(
        status_code=204,
        headers={
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Allow-Credentials": "true",
            "Access-Control-Allow-Methods": "GET, POST",
            "Access-Control-Allow-Headers": _ALLOWED_HEADERS,
            "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_SECS),
            "Vary": "Origin",
        },
    )


def _with_cors(send: Send, origin: str) -> Send:
    async def send_allowing(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [
                *message.get("headers", []),
                (b"access-control-allow-origin", origin.encode("latin-1")),
                (b"access-control-allow-credentials", b"true"),
                (b"vary", b"Origin"),
            ]
        await send(message)

    return send_allowing
