"""Bounds on an HTTP server's connections (the nimbus API's, a supervisor's and the zkfc's
endpoints): how many, from one address, and how long one may stay silent.

uvicorn closes a kept-alive connection that is idle after a response, and can answer 503
past ``limit_concurrency``, but it accepts every connection and waits forever for a first
request: a thousand clients that connect and send nothing hold a thousand descriptors. The
protocol made here keeps two pools of ``max_connections`` each: a connection is *pending*
until a request of its caller passes the role check (``RequireRole`` calls the ``ADMIT``
function the protocol puts in the scope's state), then *admitted*. A connection past the
pending pool, or past ``max_per_address`` connections of its client address (pending and
admitted together), is closed at once; so is one that has not sent a whole request head
within ``header_timeout_secs`` of opening (or of its last response: a slow trickle of header
bytes counts as silence). Over TLS the handshake gets the same time to finish, before the
connection counts at all (``serve_bounded``). So idle connections that never authenticate
cannot take the places of callers that do, and one address cannot take every place.

Every refusal is the API's JSON error body, as every other error of the API: an
authenticated request that finds every admitted place taken, or past ``max_connections``
requests in progress (handlers whose clients left count too, ``InFlightLimit``), gets
``503 unavailable`` with ``Retry-After``, in place of uvicorn's plain-text 503; a request
that is not HTTP (or whose head passes ``max_header_bytes`` while it arrives) is
``400 invalid_request`` in place of uvicorn's plain-text 400, and a whole head over
``max_header_bytes`` is ``431`` (``HeadLimit``)::

    bounds = HttpBounds(4096, 10.0, 5.0, 16384)
    uvicorn.Config(bounded_app(app, bounds), **uvicorn_options(bounds))
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h11
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from stratus.api.echo import clip
from stratus.api.errors import HeadTooLargeError, InvalidRequestError, UnavailableError
from stratus.api.records import ErrorBody
from stratus.web.responses import RETRY_AFTER_SECS, error_response

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpBounds:
    """An HTTP server's connection bounds (``nimbus.http.*``, which the zkfc's endpoint
    shares)."""

    max_connections: int  # nimbus.http.max.connections
    header_timeout_secs: float  # nimbus.http.header.timeout.secs
    keepalive_secs: float  # nimbus.http.keepalive.secs
    max_header_bytes: int  # nimbus.http.max.header.bytes
    max_per_address: int = 256  # nimbus.http.max.connections.per.address
    linger_secs: float = 5.0  # nimbus.http.linger.secs
    linger_max_bytes: int = 64 * 1024 * 1024  # nimbus.http.linger.max.bytes


DEFAULT_BOUNDS = HttpBounds(4096, 10.0, 5.0, 16 * 1024)  # the defaults of nimbus.http.*

ADMIT = "stratus.admit"  # the scope's state: gives the connection an admitted place, or False
Admit = Callable[[], bool]


def uvicorn_options(bounds: HttpBounds, base: type[H11Protocol] = H11Protocol) -> dict[str, Any]:
    """The ``uvicorn.Config`` keyword arguments that apply ``bounds`` to the ``base`` protocol."""
    return {
        "http": bounded_protocol(bounds, base),
        "log_config": None,  # uvicorn logs through the daemon's handlers (and their limits)
        # connections stop at the bound (the protocol), requests in progress at InFlightLimit's:
        # uvicorn's own limit would answer a plain-text 503
        "limit_concurrency": None,
        "timeout_keep_alive": bounds.keepalive_secs,
        "h11_max_incomplete_event_size": bounds.max_header_bytes,
    }


def bounded_app(app: ASGIApp, bounds: HttpBounds) -> ASGIApp:
    """``app`` behind the bounds on requests in progress and on the request head; see the
    module docstring."""
    return HeadLimit(InFlightLimit(app, bounds.max_connections), bounds.max_header_bytes)


class HeadLimit:
    """ASGI middleware: a request head (request line and headers) over ``limit`` bytes is
    ``431 request_head_too_large`` (JSON), the connection closed.

    uvicorn's parser bounds a head that arrives in pieces (400); one sent in a single burst
    is parsed whole, however many headers it holds: this bound holds for both.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            size = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) + 16
            size += sum(len(name) + len(value) + 4 for name, value in scope["headers"])
            if size > self.limit:
                log.warning("event=request_refused reason=head_too_large max=%d", self.limit)
                error = HeadTooLargeError(
                    f"the request head is {size} bytes, more than nimbus.http.max.header.bytes "
                    f"({self.limit}): send fewer or shorter headers and a shorter URL"
                )
                await error_response(error, {"Connection": "close"})(scope, receive, send)
                return
        await self.app(scope, receive, send)


class InFlightLimit:
    """ASGI middleware: past ``limit`` HTTP requests in progress, ``503 unavailable`` (JSON,
    ``Retry-After``, the connection closed) without calling the app.

    A handler whose client left runs on, holding its place: when ZooKeeper is slow they pile
    up, and the bound keeps their number (and their memory) finite.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.in_flight = 0  # only the event loop counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.limit:
            log.warning("event=request_refused reason=in_flight max=%d", self.limit)
            busy = UnavailableError(
                f"this server has {self.in_flight} requests in progress, the most "
                f"nimbus.http.max.connections allows; retry in {RETRY_AFTER_SECS} s"
            )
            headers = {"Retry-After": str(RETRY_AFTER_SECS), "Connection": "close"}
            await error_response(busy, headers)(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


class HandshakeBoundedLoop(asyncio.SelectorEventLoop):
    """An event loop whose TLS servers give a handshake ``handshake_secs`` to finish.

    asyncio's default is 60 s, and a connection enters the protocol (and its bounds) only
    once its handshake is done: without this, a client that opens a TLS connection and
    stops half way holds a descriptor for a minute, whatever ``header_timeout_secs`` says.
    """

    def __init__(self, handshake_secs: float) -> None:
        super().__init__()
        self.handshake_secs = handshake_secs

    async def create_server(self, *args: Any, **kwargs: Any) -> asyncio.Server:
        if kwargs.get("ssl") is not None:
            kwargs.setdefault("ssl_handshake_timeout", self.handshake_secs)
        return await super().create_server(*args, **kwargs)


def serve_bounded(server: uvicorn.Server, sockets: list[socket.socket], bounds: HttpBounds) -> None:
    """Run ``server`` on ``sockets`` (as ``server.run``) in a loop that bounds TLS handshakes
    to ``bounds.header_timeout_secs``."""
    with asyncio.Runner(
        loop_factory=lambda: HandshakeBoundedLoop(bounds.header_timeout_secs)
    ) as runner:
        runner.run(server.serve(sockets=sockets))


def bounded_protocol(
    bounds: HttpBounds, base: type[H11Protocol] = H11Protocol
) -> type[H11Protocol]:
    """uvicorn's h11 protocol (or ``base``, a subclass of it) with ``bounds`` applied; see the
    module docstring. Each call makes the places of one server."""
    bases = (_BoundedH11Protocol,) if base is H11Protocol else (_BoundedH11Protocol, base)
    namespace = {"bounds": bounds, "places": _Places()}
    protocol: type[H11Protocol] = type("BoundedH11Protocol", bases, namespace)
    return protocol


@dataclass
class _Places:
    """The connections of one server, by state and by client address (its event loop alone
    touches them)."""

    pending: int = 0
    admitted: int = 0
    per_address: Counter[str] = field(default_factory=Counter)


class _BoundedH11Protocol(H11Protocol):
    bounds: HttpBounds
    places: _Places
    _head_timer: asyncio.TimerHandle | None = None
    _armed_cycle: object = None
    _address: str | None = None  # set while the connection counts among the places
    _admitted = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        address = self.client[0] if self.client else ""
        refusal = self._refusal(address)
        if refusal is not None:
            log.warning("event=connection_refused client=%s reason=%s", address, refusal)
            # Out of uvicorn's set at once, so that its shutdown does not wait for it
            self.connections.discard(self)
            transport.close()
            return
        self._address = address
        self.places.pending += 1
        self.places.per_address[address] += 1
        self.app_state = {**self.app_state, ADMIT: self._admit}  # this connection's only
        # every close goes through the lingering close, the request cycles' included
        self.transport = _LingeringTransport(transport, self._close_with_body_unread, self.bounds)
        self._arm_head_timer()

    def _close_with_body_unread(self) -> bool:
        """Whether to linger: the connection closes while its client still sends a body
        (an answer given before the body was read, such as an early 413)."""
        return self.conn.their_state is h11.SEND_BODY

    def data_received(self, data: bytes) -> None:
        if isinstance(self.transport, _LingeringTransport) and self.transport.lingering:
            self.transport.discard(len(data))
            return
        super().data_received(data)

    def eof_received(self) -> None:
        if isinstance(self.transport, _LingeringTransport) and self.transport.lingering:
            self.transport.finish()  # the client sent all and has read the answer
            return
        super().eof_received()

    def _refusal(self, address: str) -> str | None:
        if self.places.per_address[address] >= self.bounds.max_per_address:
            return f"max_connections_per_address max={self.bounds.max_per_address}"
        if self.places.pending >= self.bounds.max_connections:
            return f"max_pending_connections max={self.bounds.max_connections}"
        return None

    def _admit(self) -> bool:
        """Move this connection, whose caller passed the role check, to an admitted place."""
        if self._admitted:
            return True
        if self._address is None or self.places.admitted >= self.bounds.max_connections:
            return False
        self.places.pending -= 1
        self.places.admitted += 1
        self._admitted = True
        return True

    def _forget(self) -> None:
        if self._address is None:
            return
        if self._admitted:
            self.places.admitted -= 1
        else:
            self.places.pending -= 1
        self.places.per_address[self._address] -= 1
        if self.places.per_address[self._address] <= 0:
            del self.places.per_address[self._address]
        self._address = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        self._forget()
        if isinstance(self.transport, _LingeringTransport):
            self.transport.lost()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """A request that is not HTTP (or whose head is too large): the API's JSON error, not
        uvicorn's plain text; then the connection is closed, as uvicorn does."""
        error = InvalidRequestError(f"invalid HTTP request: {clip(msg)}")
        body = ErrorBody(error=error.code, message=str(error)).model_dump_json().encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()

    def on_response_complete(self) -> None:
        self._arm_head_timer()  # before a pipelined request may start the next cycle
        super().on_response_complete()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._armed_cycle = self.cycle  # a new request replaces the cycle
        self._head_timer = self.loop.call_later(
            self.bounds.header_timeout_secs, self._head_timed_out
        )

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.cycle is self._armed_cycle and not self.transport.is_closing():
            self.transport.close()  # no request began: nothing to answer


class _LingeringTransport(asyncio.Transport):
    """A connection's transport whose ``close`` lingers when the client is still sending a
    body, as nginx's ``lingering_close``: the answer is sent, the write side shut (where
    the transport can, not under TLS), and what the client still sends is read and
    discarded, at most ``linger_max_bytes`` for at most ``linger_secs``, before the close.
    Closing at once, with unread bytes in the socket, would make the kernel reset the
    connection, and a client that sends its whole body before reading (most do) would see
    that reset instead of the answer."""

    def __init__(
        self, transport: asyncio.Transport, body_unread: Callable[[], bool], bounds: HttpBounds
    ) -> None:
        super().__init__()
        self._raw = transport
        self._body_unread = body_unread
        self._secs = bounds.linger_secs
        self.lingering = False
        self._left = bounds.linger_max_bytes
        self._timer: asyncio.TimerHandle | None = None

    def close(self) -> None:
        if self.lingering or self._raw.is_closing():
            return
        if not self._body_unread():
            self._raw.close()
            return
        self.lingering = True
        if self._raw.can_write_eof():
            self._raw.write_eof()  # once the answer is flushed
        self._raw.resume_reading()  # uvicorn pauses reading while a body waits
        self._timer = asyncio.get_running_loop().call_later(self._secs, self.finish)

    def discard(self, size: int) -> None:
        """``size`` more bytes of the body arrived while lingering: dropped."""
        self._left -= size
        if self._left <= 0:
            self.finish()

    def finish(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._raw.close()

    def lost(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def is_closing(self) -> bool:
        return self.lingering or self._raw.is_closing()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._raw.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._raw.writelines(list_of_data)

    def write_eof(self) -> None:
        self._raw.write_eof()

    def can_write_eof(self) -> bool:
        return self._raw.can_write_eof()

    def abort(self) -> None:
        self.lost()
        self._raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._raw.get_extra_info(name, default)

    def pause_reading(self) -> None:
        if not self.lingering:
            self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._raw.get_write_buffer_limits()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._raw.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._raw.get_protocol()
