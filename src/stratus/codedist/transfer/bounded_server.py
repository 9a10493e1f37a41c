"""A threading HTTP server with a bounded number of connections, each with an idle timeout.

``http.server.ThreadingHTTPServer`` starts one thread per connection without limit: a
thousand idle clients are a thousand threads and file descriptors, until the process
cannot open another (a ZooKeeper reconnection included). ``BoundedHTTPServer`` serves at
most ``max_connections`` at once; one more gets ``503`` with ``Retry-After`` and is closed
at once, without a thread. A connection whose client sends or reads nothing for
``idle_secs`` is closed (the handler's socket timeout); with a handler that is a
``HeadDeadlineHandler``, so is one that has not sent a whole request head (nor finished its
TLS handshake) within ``idle_secs``: a trickle of bytes, each just in time, would otherwise
hold a connection, and its thread, for ever::

    server = BoundedHTTPServer(("127.0.0.1", 0), Handler, ConnectionBounds(256, 30.0))
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

_BUSY_BODY = (
    b'{"error":"unavailable","message":"too many connections; retry shortly","leader":null}'
)
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/json\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


@dataclass(frozen=True)
class ConnectionBounds:
    """How many connections a server holds, and how long one may stay silent."""

    max_connections: int  # nimbus.code.max.connections
    idle_secs: float  # nimbus.code.idle.secs


DEFAULT_BOUNDS = ConnectionBounds(max_connections=256, idle_secs=30.0)


class BoundedHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` that refuses connections beyond its bound; see the module."""

    daemon_threads = True
    request_queue_size = 128  # listen backlog; socketserver's default is 5

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        bounds: ConnectionBounds = DEFAULT_BOUNDS,
    ) -> None:
        handler.timeout = bounds.idle_secs  # the socket timeout of every read and write
        if issubclass(handler, HeadDeadlineHandler):
            handler.head_secs = bounds.idle_secs
        super().__init__(address, handler)
        self.bounds = bounds
        self._slots = threading.BoundedSemaphore(bounds.max_connections)
        self.refused = 0  # connections closed at once for want of a slot

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            log.warning(
                "event=connection_refused server=%s reason=max_connections max=%d",
                self.server_address,
                self.bounds.max_connections,
            )
            _refuse(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)  # starts the thread
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log through logging (rate-limited there), not socketserver's traceback on stderr."""
        log.warning("event=connection_error client=%s", client_address, exc_info=True)


class HeadDeadlineHandler(BaseHTTPRequestHandler):
    """A handler whose every request head (and TLS handshake, if ``arm_head_deadline`` is
    called before it) must arrive whole within ``head_secs``, else the connection is cut."""

    head_secs: float = DEFAULT_BOUNDS.idle_secs
    _head_timer: threading.Timer | None = None

    def arm_head_deadline(self) -> None:
        self.disarm_head_deadline()
        timer = threading.Timer(self.head_secs, self._cut)
        timer.daemon = True
        self._head_timer = timer
        timer.start()

    def disarm_head_deadline(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def handle_one_request(self) -> None:
        self.arm_head_deadline()
        try:
            super().handle_one_request()
        finally:
            self.disarm_head_deadline()

    def parse_request(self) -> bool:
        parsed = super().parse_request()  # the request line and the headers are read now
        self.disarm_head_deadline()
        return parsed

    def _cut(self) -> None:
        """The deadline passed: end the connection under the reading thread (its read then
        returns nothing, and the handler ends)."""
        log.debug("event=connection_cut reason=head_deadline secs=%g", self.head_secs)
        with contextlib.suppress(OSError):
            # socket's own shutdown, under TLS too: no TLS close while another thread reads
            socket.socket.shutdown(self.connection, socket.SHUT_RDWR)


def _refuse(request: socket.socket) -> None:
    """Tell the client it was refused, without ever blocking the accepting thread."""
    try:
        request.setblocking(False)
        request.send(_BUSY)
    except OSError:
        pass
