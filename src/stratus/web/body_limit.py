"""A bound on a request's body, checked before it is read and while it arrives.

A ``Content-Length`` over the limit is refused before anything is read; a chunked body as
soon as the bytes received pass it. The refusal is ``413`` with the API's JSON body and
the connection closed (the rest of the body is never read)::

    app = BodyLimit(app, 1024 * 1024, lambda: RequestTooLargeError("... 1048576 bytes"))
    add_refusal_handlers(fastapi_app)   # renders a RefusedBody raised while FastAPI reads
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stratus.api.errors import ApiError
from stratus.web.responses import error_response

# Answered before the body is read: close the connection rather than read the rest of it.
CLOSE = {"Connection": "close"}


class RefusedBody(HTTPException):
    """Raised while a body is read (its size, or its JSON); carries the API error.

    An HTTPException, because FastAPI turns any other exception raised while it reads a
    body into "400 There was an error parsing the body"; ``add_refusal_handlers`` renders it.
    """

    def __init__(self, error: ApiError, headers: dict[str, str] | None = None) -> None:
        super().__init__(error.status, str(error), headers=headers)
        self.error = error


class BodyTooLarge(RefusedBody):
    """Raised from ``receive`` once a body passes its limit: the rest is not read."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(error, headers=dict(CLOSE))


def add_refusal_handlers(app: FastAPI) -> None:
    """Render a ``RefusedBody`` as the API's error body (closing the connection when the
    rest of the body was not read)."""

    async def refused_body(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RefusedBody)
        return error_response(exc.error, dict(exc.headers or {}))

    app.add_exception_handler(RefusedBody, refused_body)


def declared_too_large(scope: Scope, limit: int) -> bool:
    """Whether the request's ``Content-Length`` already passes ``limit``."""
    length = dict(scope["headers"]).get(b"content-length")
    return length is not None and length.isdigit() and int(length) > limit


async def run_limited(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    limit: int,
    too_large: Callable[[], ApiError],
) -> None:
    """Run ``app`` with a ``receive`` that stops at ``limit`` bytes of body."""
    received = 0
    started = False

    async def counting_receive() -> Message:
        nonlocal received
        message = await receive()
        received += len(message.get("body", b""))
        if received > limit:
            raise BodyTooLarge(too_large())
        return message

    async def noting_send(message: Message) -> None:
        nonlocal started
        started = started or message["type"] == "http.response.start"
        await send(message)

    try:
        await app(scope, counting_receive, noting_send)
    except BodyTooLarge as exc:
        if started:
            raise
        await error_response(exc.error, dict(CLOSE))(scope, receive, send)


class BodyLimit:
    """ASGI middleware: a body over ``limit`` bytes is ``too_large()`` (413), unread."""

    def __init__(self, app: ASGIApp, limit: int, too_large: Callable[[], ApiError]) -> None:
        self.app = app
        self.limit = limit
        self.too_large = too_large

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if declared_too_large(scope, self.limit):
            await error_response(self.too_large(), dict(CLOSE))(scope, receive, send)
            return
        await run_limited(
            self.app, scope, receive, send, limit=self.limit, too_large=self.too_large
        )
