"""HTTP/1.1 GETs of packages from holders, each body moved into a file at an offset.

``CodeClient`` keeps connections alive per holder and opens a ``Body`` for each answer;
``Body.move_into`` puts the body's bytes into a file with ``splice(2)`` where it can (see
``splice.py``): only the bytes that ``http.client`` read along with the headers pass
through Python. Elsewhere, or if the socket or file refuses, the body is read into a buffer
and written from there. A network failure is a ``TransferError`` naming what failed; an
error writing the file is the ``OSError`` it is.

A connect waits ``connect_timeout`` (short: a holder on a dead host answers no SYN), each
read the longer ``timeout``. A holder that did not take a connection is a suspect for one
``timeout``: ``suspects_last`` puts it after the others, and it is trusted again as soon as
it takes one::

    client = CodeClient(timeout=10.0, connect_timeout=2.0, max_idle=4)
    with client.get("host-a:40123", digest, "bytes=0-1023") as body:
        body.status, body.header("content-range")      # 206, "bytes 0-1023/4096"
        n = body.move_into(fd, offset=0, limit=1024)   # 0 once the body has ended
    client.suspects_last(["host-b:40123", "host-a:40123"])  # host-b last if it did not connect
    client.close()

Never through a proxy: nimbus to nimbus (or supervisor).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from stratus.codedist.transfer.splice import (
    SocketReadError,
    SocketSplicer,
    SpliceUnsupportedError,
)
from stratus.security.client_auth import NO_AUTH, ClientAuth

CODE_PATH = "/api/v1/code/"
READ_BYTES = 1 << 20  # without splice, a body is read from the socket into a buffer this large
SPLICE = hasattr(os, "splice")  # tests turn it off to check the other way


class TransferError(Exception):
    """A request failed on the network: connect, send, or read (``reason`` says which)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CodeClient:
    """GETs of ``/api/v1/code/<digest>``, on connections kept alive per holder.

    ``connect_timeout`` bounds the TCP connect (never past ``timeout``), ``timeout`` each
    read after it (the TLS handshake's included); up to ``max_idle`` connections per holder
    are kept for the next requests. ``auth`` is the token sent and, with TLS settings, makes
    every connection https (a body then goes through the TLS layer, never ``splice``). A
    holder whose connect failed is a suspect for one ``timeout`` (``suspects_last``).
    """

    def __init__(
        self,
        timeout: float,
        *,
        connect_timeout: float,
        max_idle: int,
        auth: ClientAuth = NO_AUTH,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout = timeout
        self.connect_timeout = min(connect_timeout, timeout)
        self.max_idle = max_idle
        self._auth_headers = auth.headers()
        self._ssl = auth.ssl_context()
        self._clock = clock
        self._lock = threading.Lock()
        self._idle: dict[str, list[http.client.HTTPConnection]] = {}
        self._suspects: dict[str, float] = {}  # a holder that did not connect -> until when

    @contextlib.contextmanager
    def get(self, holder: str, digest: str, byte_range: str | None = None) -> Iterator[Body]:
        """The answer of ``holder`` to a GET of ``digest`` (``Range: byte_range`` if given).

        TransferError if the request fails on the network; the connection is kept for
        the next request only if the body was read to its end.
        """
        connection = self._connection(holder)
        headers = {"Accept-Encoding": "identity", **self._auth_headers}
        if byte_range is not None:
            headers["Range"] = byte_range
        try:
            self._connect(holder, connection)
            try:
                connection.request("GET", f"{CODE_PATH}{digest}", headers=headers)
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise TransferError(_describe(exc)) from None
            body = Body(response, connection.sock)
            try:
                yield body
            finally:
                body.close()
        except BaseException:
            connection.close()
            raise
        self._release(holder, connection, response)

    def suspected(self, holder: str) -> bool:
        """Whether ``holder`` did not take a connection within the last ``timeout``."""
        with self._lock:
            until = self._suspects.get(holder)
            if until is not None and until <= self._clock():
                del self._suspects[holder]
                until = None
        return until is not None

    def suspects_last(self, holders: Sequence[str]) -> list[str]:
        """``holders`` in their order, the suspects moved to the end (in their order)."""
        return sorted(holders, key=self.suspected)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    def _connection(self, holder: str) -> http.client.HTTPConnection:
        """An idle connection to ``holder`` that the holder has not closed, or a new one."""
        while True:
            with self._lock:
                idle = self._idle.get(holder)
                kept = idle.pop() if idle else None
            if kept is None:
                return self._new_connection(holder)
            if _alive(kept):
                return kept
            kept.close()

    def _new_connection(self, holder: str) -> http.client.HTTPConnection:
        connection: _Connection = (
            _TLSConnection(holder, timeout=self.timeout, context=self._ssl)
            if self._ssl is not None
            else _Connection(holder, timeout=self.timeout)
        )
        connection.connect_timeout = self.connect_timeout
        return connection

    def _connect(self, holder: str, connection: http.client.HTTPConnection) -> None:
        """Connect a new connection (a kept one is connected already); a holder that does
        not take it is a suspect for one ``timeout``, one that does is trusted again."""
        if connection.sock is not None:
            return
        try:
            connection.connect()
        except OSError as exc:
            with self._lock:
                self._suspects[holder] = self._clock() + self.timeout
            raise TransferError(f"ConnectError: {exc}") from None
        with self._lock:
            self._suspects.pop(holder, None)

    def _release(
        self,
        holder: str,
        connection: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
    ) -> None:
        if not response.isclosed() or response.will_close:
            connection.close()  # a body left unread, or the holder said it would close
            return
        with self._lock:
            idle = self._idle.setdefault(holder, [])
            if len(idle) < self.max_idle:
                idle.append(connection)
                return
        connection.close()


class _Connection(http.client.HTTPConnection):
    """A connection whose TCP connect waits ``connect_timeout``, every read on its socket
    after it the connection's ``timeout``."""

    connect_timeout: float  # set by ``CodeClient`` before the first connect

    def connect(self) -> None:
        read_timeout = self.timeout
        self.timeout = self.connect_timeout
        try:
            super().connect()
        finally:
            self.timeout = read_timeout
        self.sock.settimeout(read_timeout)


class _TLSConnection(http.client.HTTPSConnection, _Connection):
    """Over TLS: ``HTTPSConnection.connect`` wraps the socket of ``_Connection.connect``
    (next in the method order), so the TLS handshake waits ``timeout``, as every read."""


def _alive(connection: http.client.HTTPConnection) -> bool:
    """Whether a kept connection is still open: an idle one is readable only once closed."""
    if connection.sock is None:
        return False
    poller = select.poll()
    poller.register(connection.sock, select.POLLIN)
    return not poller.poll(0)


class Body:
    """The status, headers and body of one answer of ``CodeClient.get``."""

    def __init__(self, response: http.client.HTTPResponse, sock: socket.socket | None) -> None:
        self.status = response.status
        self._response = response
        plain = not isinstance(sock, ssl.SSLSocket)  # TLS bytes must be decrypted: no splice
        self._sock = sock if SPLICE and plain and response.length is not None else None
        self._splicer: SocketSplicer | None = None
        self._remaining = response.length  # body bytes not read yet; None: until EOF
        self._buffer: memoryview | None = None
        self._first = True
        self._spliced = 0

    def header(self, name: str) -> str | None:
        return self._response.getheader(name)

    def finished(self) -> bool:
        """Whether the body has no bytes left (one more is read if its length is unknown)."""
        if self._remaining is not None:
            return self._remaining == 0
        return self._read(memoryview(bytearray(1))) == 0

    def move_into(self, fd: int, offset: int, limit: int) -> int:
        """Write up to ``limit`` next bytes of the body to ``fd`` at ``offset``; how many.

        0 at the body's end, or if it was cut short. TransferError if the socket fails;
        an error writing the file is the OSError it is.
        """
        if limit <= 0 or self._remaining == 0:
            return 0
        if self._first:  # what http.client read along with the headers, at most 8 KiB
            self._first = False
            if self._sock is not None:
                return self._read_write(fd, offset, min(limit, self._buffered()))
        if self._splicer is not None or self._start_splice():
            return self._splice(fd, offset, limit)
        return self._read_write(fd, offset, limit)

    def close(self) -> None:
        if self._splicer is not None:
            self._splicer.close()
            self._splicer = None

    def _buffered(self) -> int:
        """How many body bytes http.client holds (one read of the socket if none)."""
        fp = self._response.fp
        try:
            return max(1, len(fp.peek(1))) if fp is not None else 1
        except OSError as exc:
            raise TransferError(_describe(exc)) from None

    def _start_splice(self) -> bool:
        if self._sock is None:
            return False
        try:
            self._splicer = SocketSplicer(self._sock, timeout=self._sock.gettimeout())
        except SpliceUnsupportedError:
            self._sock = None
            return False
        return True

    def _splice(self, fd: int, offset: int, limit: int) -> int:
        assert self._splicer is not None and self._remaining is not None
        try:
            n = self._splicer.move(fd, offset, min(limit, self._remaining))
        except SocketReadError as exc:
            raise TransferError(exc.reason) from None
        except SpliceUnsupportedError as exc:
            self.close()
            self._sock = None
            if self._spliced:  # http.client's count is behind: this connection is done
                raise TransferError(f"splice refused: {exc}") from None
            return self._read_write(fd, offset, limit)  # refused at once: the other way
        self._spliced += n
        self._remaining -= n
        if self._remaining == 0:
            self._response.close()  # read to its end: the connection may be kept
        return n

    def _read_write(self, fd: int, offset: int, limit: int) -> int:
        size = min(limit, READ_BYTES)
        if self._buffer is None or len(self._buffer) < size:
            self._buffer = memoryview(bytearray(READ_BYTES if self._buffer else size))
        n = self._read(self._buffer[:size])
        _pwrite_all(fd, self._buffer[:n], offset)
        return n

    def _read(self, buffer: memoryview) -> int:
        try:
            n = self._response.readinto(buffer)
        except (OSError, http.client.HTTPException) as exc:
            raise TransferError(_describe(exc)) from None
        if self._remaining is not None:
            self._remaining -= n
        return n


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def describe_status(body: Body) -> str:
    """What an answer other than the one expected means, for error messages."""
    if body.status == 404:
        return "does not have the package (404)"
    return f"answered HTTP {body.status}"


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
