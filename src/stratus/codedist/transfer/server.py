"""A nimbus's package server: ``GET /api/v1/code/<digest>`` with ``sendfile``, beside the API.

The API (FastAPI on uvicorn) serves the same route (``code_routes.py``), but its bodies go
through Python: uvicorn has no ``http.response.pathsend``, so Starlette's ``FileResponse``
reads the file and hands each chunk to the event loop. Serving a 100 MB package cost the
nimbus 40-80 ms of CPU that way; here the kernel sends the file's pages (``os.sendfile``,
through ``socket.sendfile``), 13-35 ms. Other nimbuses fetch from this server when a holder's
registration names it (``code_locations.holder_data``); the API route stays for the rest.

It answers exactly as the API route does: the same paths, one byte range (``Range``, 206 with
``Content-Range``, 416 past the end), 404 for a digest the store does not hold, 422 for what
is not a digest, the API's error body, and only files of the store named by a sha256. One
thread per connection, HTTP/1.1 kept alive until ``IDLE_SECS`` without a request::

    server = PackageServer(store, "127.0.0.1", 0)   # NimbusStartError if the port is taken
    server.start()
    server.address                                  # "127.0.0.1:40123"
    server.close()
"""

from __future__ import annotations

import logging
import os
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from stratus.api.records import ErrorBody
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.ranges import (
    DIGEST,
    UnsatisfiableRangeError,
    parse_range,
)

log = logging.getLogger(__name__)

CODE_PREFIX = "/api/v1/code/"
IDLE_SECS = 30.0  # a kept connection with no request for this long is closed (and each read)


class PackageServer:
    """Serves a store's packages with ``sendfile`` on its own port; see the module docstring."""

    def __init__(self, store: PackageStore, host: str, port: int) -> None:
        self._server = ThreadingHTTPServer((host, port), _handler_for(store))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        bound_port = self._server.server_address[1]
        self.address = f"{host}:{bound_port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="package-server", daemon=True
        )
        self._thread.start()
        log.info("event=package_server_started address=%s", self.address)

    def close(self) -> None:
        """Stop accepting; requests in progress end with their connections."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


def _handler_for(store: PackageStore) -> type[BaseHTTPRequestHandler]:
    class Handler(_PackageHandler):
        pass

    Handler.store = store
    return Handler


class _PackageHandler(BaseHTTPRequestHandler):
    """One connection: GET and HEAD of ``/api/v1/code/<digest>``."""

    store: PackageStore
    protocol_version = "HTTP/1.1"
    timeout = IDLE_SECS
    server_version = "stratus-package-server"

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("event=package_request %s", format % args)

    def _answer(self, *, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        digest = path.removeprefix(CODE_PREFIX)
        if not path.startswith(CODE_PREFIX) or "/" in digest:
            self._error(HTTPStatus.NOT_FOUND, "not_found", f"no route {path}")
        elif not DIGEST.fullmatch(digest):
            self._error(
                HTTPStatus.UNPROCESSABLE_ENTITY,
                "invalid_request",
                f"invalid request: {digest!r} is not a sha256 digest",
            )
        else:
            self._package(digest, body=body)

    def _package(self, digest: str, *, body: bool) -> None:
        try:
            fd = os.open(self.store.path(digest), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            log.debug("event=code_not_served digest=%s reason=unknown", digest)
            message = f"this nimbus holds no package {digest}"
            self._error(HTTPStatus.NOT_FOUND, "unknown_code", message)
            return
        try:
            size = os.fstat(fd).st_size
            span = self._span(digest, size)
            if span is not None:
                self._send_file(fd, digest, size, span, body=body)
        finally:
            os.close(fd)

    def _span(self, digest: str, size: int) -> tuple[int, int, bool] | None:
        """[start, end) of the body and whether it is a range; None once an error is sent."""
        header = self.headers.get("Range")
        if header is None:
            return 0, size, False
        try:
            start, end = parse_range(header, size)
        except ValueError as exc:
            self._error(
                HTTPStatus.UNPROCESSABLE_ENTITY, "invalid_request", f"invalid request: Range {exc}"
            )
            return None
        except UnsatisfiableRangeError:
            message = f"Range {header!r} starts past the end of package {digest} ({size} bytes)"
            self._error(
                HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE,
                "range_not_satisfiable",
                message,
                {"Content-Range": f"bytes */{size}"},
            )
            return None
        return start, end, True

    def _send_file(
        self, fd: int, digest: str, size: int, span: tuple[int, int, bool], *, body: bool
    ) -> None:
        start, end, partial = span
        self.send_response(HTTPStatus.PARTIAL_CONTENT if partial else HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{digest}"')  # content-addressed: the digest is the version
        if partial:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        if body and end > start:
            with os.fdopen(os.dup(fd), "rb", buffering=0) as file:
                self.connection.sendfile(file, start, end - start)

    def _error(
        self,
        status: HTTPStatus,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        payload = ErrorBody(error=code, message=message).model_dump_json().encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
