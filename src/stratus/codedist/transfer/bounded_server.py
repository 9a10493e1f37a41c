"""A threading HTTP server that gives a slot only to authenticated callers, within bounds.

``http.server.ThreadingHTTPServer`` starts one thread per connection without limit: a
thousand idle clients are a thousand threads and file descriptors, until the process
cannot open another (a ZooKeeper reconnection included). ``BoundedHTTPServer`` keeps two
pools of ``max_connections`` each:

- a new connection is **pending** until its caller has proved who it is: its TLS handshake
  and its first request head must be whole within ``head_secs`` together (else it is cut,
  so a trickle of bytes, each just in time, holds nothing for long), and it is closed after
  that first request unless the handler ``admit``-ted it;
- an **admitted** connection (the handler calls ``admit`` once the caller is authenticated)
  holds a slot, kept alive until ``idle_secs`` without a request.

One address holds at most ``max_per_address`` connections, pending and admitted together.
A connection past the pending pool or its address's bound gets ``503`` with
``Retry-After`` and is closed at once, without a thread; an authenticated request that
finds no free slot gets the same answer from the handler. So idle connections that never
authenticate cannot take the slots of callers that do, and one address cannot take every
pending place::

    server = BoundedHTTPServer(("127.0.0.1", 0), Handler, ConnectionBounds(256, 30.0))
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

BUSY_MESSAGE = "too many connections; retry shortly"
_BUSY_BODY = b'{"error":"unavailable","message":"%s","leader":null}' % BUSY_MESSAGE.encode()
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/json\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


@dataclass(frozen=True)
class ConnectionBounds:
    """How many connections a server holds, from one address and in all, and how long one
    may stay silent."""

    max_connections: int  # nimbus.code.max.connections
    idle_secs: float  # nimbus.code.idle.secs
    max_per_address: int = 32  # nimbus.code.max.connections.per.address
    head_secs: float = 10.0  # nimbus.code.head.timeout.secs
    linger_secs: float = 5.0  # nimbus.http.linger.secs
    linger_max_bytes: int = 64 * 1024 * 1024  # nimbus.http.linger.max.bytes


DEFAULT_BOUNDS = ConnectionBounds(max_connections=256, idle_secs=30.0)


class BoundedHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` that admits authenticated connections within its bounds; see
    the module."""

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
            handler.first_head_secs = bounds.head_secs
        super().__init__(address, handler)
        self.bounds = bounds
        self._lock = threading.Lock()
        self._pending = 0
        self._admitted: set[Any] = set()  # the sockets of admitted connections
        self._per_address: Counter[str] = Counter()
        self.refused = 0  # connections closed at once for want of a place

    def process_request(self, request: Any, client_address: Any) -> None:
        address = str(client_address[0])
        with self._lock:
            reason = self._refusal(address)
            if reason is None:
                self._pending += 1
                self._per_address[address] += 1
            else:
                self.refused += 1
        if reason is not None:
            log.warning(
                "event=connection_refused server=%s client=%s reason=%s",
                self.server_address,
                address,
                reason,
            )
            _refuse(request)
            super().shutdown_request(request)  # at once: the accepting thread never waits
            return
        try:
            super().process_request(request, client_address)  # starts the thread
        except BaseException:
            self._forget(request, address)
            raise

    def admit(self, request: Any) -> bool:
        """Give ``request``'s connection (authenticated now) a slot; False if none is free."""
        with self._lock:
            if request in self._admitted:
                return True
            if len(self._admitted) >= self.bounds.max_connections:
                self.refused += 1
                return False
            self._admitted.add(request)
            self._pending -= 1
            return True

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request, str(client_address[0]))

    def shutdown_request(self, request: Any) -> None:
        """Close a served connection with a lingering close: the write side shut, what the
        client still sends (the body of a request answered before it was read) read and
        dropped within the linger bounds, then the close. Closing with unread bytes would
        reset the connection, and a client that sends its body before it reads would see
        the reset instead of the answer."""
        with contextlib.suppress(OSError):
            socket.socket.shutdown(request, socket.SHUT_WR)  # under TLS too: no close_notify
            _drain(request, self.bounds.linger_max_bytes, self.bounds.linger_secs)
        self.close_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log through logging (rate-limited there), not socketserver's traceback on stderr."""
        log.warning("event=connection_error client=%s", client_address, exc_info=True)

    def _refusal(self, address: str) -> str | None:
        if self._per_address[address] >= self.bounds.max_per_address:
            return f"max_connections_per_address max={self.bounds.max_per_address}"
        if self._pending >= self.bounds.max_connections:
            return f"max_pending_connections max={self.bounds.max_connections}"
        return None

    def _forget(self, request: Any, address: str) -> None:
        with self._lock:
            if request in self._admitted:
                self._admitted.discard(request)
            else:
                self._pending -= 1
            self._per_address[address] -= 1
            if self._per_address[address] <= 0:
                del self._per_address[address]


class HeadDeadlineHandler(BaseHTTPRequestHandler):
    """A handler whose TLS handshake and first request head must arrive whole within
    ``first_head_secs`` together, and each later request head within ``head_secs``, else
    the connection is cut. A connection the handler does not ``admit`` (its caller not
    authenticated) is closed after its first request."""

    head_secs: float = DEFAULT_BOUNDS.idle_secs
    first_head_secs: float = DEFAULT_BOUNDS.head_secs
    admitted = False
    _head_timer: threading.Timer | None = None

    def setup(self) -> None:
        super().setup()
        self.arm_head_deadline(self.first_head_secs)
        if isinstance(self.connection, ssl.SSLSocket):
            try:
                self.connection.do_handshake()  # on this connection's thread, in the deadline
            except BaseException:
                self.disarm_head_deadline()
                raise

    def admit(self) -> bool:
        """Take a slot for this connection, whose caller is authenticated; False (and the
        connection to be closed) when the server has none free."""
        if not self.admitted and isinstance(self.server, BoundedHTTPServer):
            self.admitted = self.server.admit(self.request)
        elif not self.admitted:
            self.admitted = True
        return self.admitted

    def arm_head_deadline(self, secs: float) -> None:
        self.disarm_head_deadline()
        timer = threading.Timer(secs, self._cut, args=(secs,))
        timer.daemon = True
        self._head_timer = timer
        timer.start()

    def disarm_head_deadline(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def handle_one_request(self) -> None:
        if self.admitted:  # the first request's deadline runs since the connection opened
            self.arm_head_deadline(self.head_secs)
        try:
            super().handle_one_request()
        finally:
            self.disarm_head_deadline()
            if not self.admitted:
                self.close_connection = True

    def parse_request(self) -> bool:
        parsed = super().parse_request()  # the request line and the headers are read now
        self.disarm_head_deadline()
        return parsed

    def _cut(self, secs: float) -> None:
        """The deadline passed: end the connection under the reading thread (its read then
        returns nothing, and the handler ends)."""
        log.debug("event=connection_cut reason=head_deadline secs=%g", secs)
        with contextlib.suppress(OSError):
            # socket's own shutdown, under TLS too: no TLS close while another thread reads
            socket.socket.shutdown(self.connection, socket.SHUT_RDWR)


LINGER_QUIET_SECS = 1.0  # a linger ends once the client sends nothing for this long


def _drain(request: socket.socket, max_bytes: int, secs: float) -> None:
    """Read and drop what the client sends until it closes, is quiet for
    ``LINGER_QUIET_SECS``, or ``max_bytes`` or ``secs`` pass."""
    deadline = time.monotonic() + secs
    left = max_bytes
    while left > 0 and (remaining := deadline - time.monotonic()) > 0:
        socket.socket.settimeout(request, min(remaining, LINGER_QUIET_SECS))
        try:
            chunk = socket.socket.recv(request, min(left, 65536))
        except TimeoutError:
            return
        if not chunk:
            return
        left -= len(chunk)


def _refuse(request: socket.socket) -> None:
    """Tell the client it was refused, without ever blocking the accepting thread."""
    try:
        request.setblocking(False)
        request.send(_BUSY)
    except OSError:
        pass
