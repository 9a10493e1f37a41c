"""Bounds on what one API request may cost a nimbus, checked before its body is read.

``RequestGuard`` is an ASGI middleware in front of every route:

- a leader-only route (tagged "leader only") on a standby answers ``421 not_leader`` at
  once, without reading the body: a standby never reads a large body only to refuse it;
- a body larger than its route's limit answers ``413``: a ``Content-Length`` over the limit
  before anything is read, a chunked body as soon as the bytes received pass it. A submit
  may carry ``nimbus.max.upload.bytes`` (plus room for the form), any other request
  ``nimbus.max.request.bytes``;
- at most ``nimbus.max.concurrent.uploads`` submits read their packages at once; one more
  answers ``503 unavailable`` with ``Retry-After``: the nimbus is busy, not the client wrong,
  and clients retry a 503::

    app.add_middleware(RequestGuard, limits=limits, leader_term=service.leader_term,
                       leader_only=leader_only_routes(app), upload_path=UPLOAD_PATHS)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from fastapi import FastAPI
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from stratus.api.errors import (
    ApiError,
    NotLeaderError,
    PackageTooLargeError,
    RequestTooLargeError,
    UploadsBusyError,
)
from stratus.nimbus.settings import RequestLimits
from stratus.web.body_limit import CLOSE as _CLOSE
from stratus.web.body_limit import add_refusal_handlers, declared_too_large, run_limited
from stratus.web.responses import RETRY_AFTER_SECS, error_response

LEADER_ONLY_TAG = "leader only"
MULTIPART_OVERHEAD = 64 * 1024  # room for a submit form's other fields and boundaries


def leader_only_routes(routes: Sequence[BaseRoute]) -> tuple[BaseRoute, ...]:
    """The routes tagged "leader only", which a standby refuses before reading a body."""
    return tuple(r for r in routes if LEADER_ONLY_TAG in (getattr(r, "tags", None) or ()))


def add_limit_handlers(app: FastAPI) -> None:
    """Render a ``RefusedBody`` (a body's size, or its JSON) as the API's error body."""
    add_refusal_handlers(app)


class RequestGuard:
    """ASGI middleware: leader-only refusal, body limits and the upload bound; see the module."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: RequestLimits,
        leader_term: Callable[[], object],
        leader_only: Sequence[BaseRoute],
        upload_path: str | re.Pattern[str],
    ) -> None:
        self.app = app
        self.limits = limits
        self._leader_term = leader_term  # raises NotLeaderError on a standby
        self._leader_only = tuple(leader_only)
        # the paths whose body is a package (a submit, an update): a path, or a pattern
        self._upload_path = re.compile(
            re.escape(upload_path) if isinstance(upload_path, str) else upload_path.pattern
        )
        self._uploads = 0  # submits reading their bodies now (only the event loop counts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self._leader_only_route(scope):
            try:
                self._leader_term()
            except NotLeaderError as exc:
                await error_response(exc, dict(_CLOSE))(scope, receive, send)
                return
        path = scope["path"].rstrip("/")
        upload = scope["method"] == "POST" and self._upload_path.fullmatch(path) is not None
        too_large = self._package_too_large if upload else self._request_too_large
        if declared_too_large(scope, self._limit(upload)):
            await error_response(too_large(), dict(_CLOSE))(scope, receive, send)
            return
        if not upload:
            await self._limited(scope, receive, send, self._limit(upload), too_large)
            return
        if self._uploads >= self.limits.max_concurrent_uploads:
            busy = UploadsBusyError(
                f"{self._uploads} uploads are being read, the most nimbus.max.concurrent.uploads "
                f"allows; retry in {RETRY_AFTER_SECS} s"
            )
            headers = {"Retry-After": str(RETRY_AFTER_SECS), **_CLOSE}
            await error_response(busy, headers)(scope, receive, send)
            return
        self._uploads += 1
        try:
            await self._limited(scope, receive, send, self._limit(upload), too_large)
        finally:
            self._uploads -= 1

    def _leader_only_route(self, scope: Scope) -> bool:
        """Whether the request is for a leader-only route; notes the route for the metrics."""
        for route in self._leader_only:
            if route.matches(scope)[0] is Match.FULL:
                scope["route"] = route  # as routing would: the request is counted under it
                return True
        return False

    def _limit(self, upload: bool) -> int:
        if upload:
            return self.limits.max_upload_bytes + MULTIPART_OVERHEAD
        return self.limits.max_request_bytes

    async def _limited(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        limit: int,
        too_large: Callable[[], ApiError],
    ) -> None:
        """Run the app with a ``receive`` that stops at ``limit`` bytes of body."""
        await run_limited(self.app, scope, receive, send, limit=limit, too_large=too_large)

    def _package_too_large(self) -> ApiError:
        return PackageTooLargeError(
            f"the upload is larger than nimbus.max.upload.bytes "
            f"({self.limits.max_upload_bytes} bytes)"
        )

    def _request_too_large(self) -> ApiError:
        return RequestTooLargeError(
            f"the request body is larger than nimbus.max.request.bytes "
            f"({self.limits.max_request_bytes} bytes); a pipeline's package goes in a submit"
        )
