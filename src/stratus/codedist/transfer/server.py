"""A nimbus's package server: ``GET /api/v1/code/<digest>`` with ``sendfile``, beside the API.

The API (FastAPI on uvicorn) serves the same route (``nimbus/http/code_routes.py``), but its
bodies go through Python: uvicorn has no ``http.response.pathsend``, so Starlette's
``FileResponse`` reads the file and hands each chunk to the event loop. Here the kernel
sends the file's pages (``socket.sendfile``), for a fraction of the serving nimbus's CPU
(``docs/benchmarks.md``, code replication). Other nimbuses and supervisors fetch from this
server when a holder's registration names it (``code_locations.holder_data``); the API route
stays for the rest.

Both servers send what ``serve.locate`` decides, so they answer alike: one byte range
(``Range``, 206 with ``Content-Range``, 416 past the end), 404 for a digest the store does
not hold, 422 for what is not a digest, the API's error body, and only files of the store
named by a sha256. One thread per connection; a connection takes one of
``bounds.max_connections`` slots once its caller is authenticated, before that it has
``bounds.head_secs`` for its TLS handshake and first request head, and one address holds at
most ``bounds.max_per_address`` connections (``bounded_server``); HTTP/1.1 kept alive until
``bounds.idle_secs`` without a request::

    server = PackageServer(store, "127.0.0.1", 0)   # OSError if the port is taken
    server.start()
    server.address                                  # "127.0.0.1:40123"
    server.close()

With an ``AccessPolicy`` every request needs the ``read`` role (a bearer token or a client
certificate), and with a TLS context the server speaks https only; the TLS handshake runs on
the connection's own thread, so a slow client never holds up the others.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import BinaryIO

from stratus.api.echo import clip
from stratus.api.errors import ApiError, UnavailableError, UnknownCodeError
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.bounded_server import (
    BUSY_MESSAGE,
    DEFAULT_BOUNDS,
    BoundedHTTPServer,
    ConnectionBounds,
    HeadDeadlineHandler,
)
from stratus.codedist.transfer.serve import PackageFile, Refusal, locate
from stratus.security.access import CHALLENGE, OPEN, AccessPolicy, one_authorization
from stratus.security.roles import Role
from stratus.security.tls import peer_common_name

log = logging.getLogger(__name__)

CODE_PREFIX = "/api/v1/code/"


class PackageServer:
    """Serves a store's packages with ``sendfile`` on its own port; see the module docstring."""

    def __init__(
        self,
        store: PackageStore,
        host: str,
        port: int,
        *,
        advertised_host: str | None = None,
        policy: AccessPolicy = OPEN,
        tls: ssl.SSLContext | None = None,
        bounds: ConnectionBounds = DEFAULT_BOUNDS,
    ) -> None:
        """Listen on ``host:port``; ``address`` names ``advertised_host`` (default ``host``)."""
        self._server = BoundedHTTPServer((host, port), _handler_for(store, policy), bounds)
        if tls is not None:
            self._server.socket = tls.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._thread: threading.Thread | None = None
        bound_port = self._server.server_address[1]
        self.address = f"{advertised_host or host}:{bound_port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="package-server", daemon=True
        )
        self._thread.start()
        log.info("event=package_server_started address=%s", self.address)

    @property
    def serving(self) -> bool:
        """True while the serving thread runs (started and neither closed nor crashed)."""
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> None:
        """Stop accepting; requests in progress end with their connections."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


def _handler_for(store: PackageStore, policy: AccessPolicy) -> type[BaseHTTPRequestHandler]:
    class Handler(_PackageHandler):
        pass

    Handler.store = store
    Handler.policy = policy
    return Handler


class _PackageHandler(HeadDeadlineHandler):
    """One connection: GET and HEAD of ``/api/v1/code/<digest>``."""

    store: PackageStore
    policy: AccessPolicy
    protocol_version = "HTTP/1.1"
    # a request line that is not HTTP is answered with a status line and headers too (the
    # standard library's default, HTTP/0.9, sends a bare body)
    default_request_version = "HTTP/1.1"
    server_version = "stratus-package-server"

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802 (http.server names it)
        self._answer(body=False)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (a request that is not HTTP, too many headers,
        a line too long, an unsupported method) as the API's JSON error body, not HTML."""
        status = HTTPStatus(code)
        text = clip(message or status.phrase)
        error = "invalid_request" if code == HTTPStatus.BAD_REQUEST else _error_code(status)
        self.close_connection = True
        self._refuse(Refusal(status, error, text, {"Connection": "close"}))

    def log_message(self, format: str, *args: object) -> None:
        log.debug("event=package_request %s", format % args)

    def _answer(self, *, body: bool) -> None:
        if not self._authorized():
            return
        if not self.admit():
            busy = UnavailableError(f"{BUSY_MESSAGE} (nimbus.code.max.connections)")
            self._refuse(Refusal(busy.status, busy.code, str(busy), {"Retry-After": "1"}))
            return
        path = self.path.split("?", 1)[0]
        digest = path.removeprefix(CODE_PREFIX)
        if not path.startswith(CODE_PREFIX) or "/" in digest:
            self._refuse(Refusal(HTTPStatus.NOT_FOUND, "not_found", f"no route {path}"))
            return
        answer = locate(self.store, digest, self.headers.get("Range"))
        if isinstance(answer, Refusal):
            self._refuse(answer)
            return
        try:
            fd = os.open(answer.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # removed since: as if it had never been there
            self._refuse(Refusal.of(UnknownCodeError(f"this nimbus holds no package {digest}")))
            return
        with os.fdopen(fd, "rb", buffering=0) as file:
            self._send_file(file, answer, body=body)

    def _authorized(self) -> bool:
        """Whether the caller may read packages; if not, the 401 or 403 is sent."""
        peer = None
        if isinstance(self.connection, ssl.SSLSocket):
            peer = peer_common_name(self.connection.getpeercert())
        try:
            authorization = one_authorization(self.headers.get_all("Authorization") or [])
            self.policy.authorize(authorization, peer, Role.READ)
        except ApiError as exc:
            challenge = {"WWW-Authenticate": CHALLENGE} if exc.status == 401 else {}
            self._refuse(Refusal(exc.status, exc.code, str(exc), challenge))
            return False
        return True

    def _send_file(self, file: BinaryIO, answer: PackageFile, *, body: bool) -> None:
        self.send_response(HTTPStatus.PARTIAL_CONTENT if answer.partial else HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(answer.end - answer.start))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", answer.etag)
        if answer.partial:
            self.send_header("Content-Range", answer.content_range)
        self.end_headers()
        if body and answer.end > answer.start:
            self.connection.sendfile(file, answer.start, answer.end - answer.start)

    def _refuse(self, refusal: Refusal) -> None:
        payload = refusal.body().model_dump_json().encode()
        self.send_response(refusal.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in refusal.headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)


def _error_code(status: HTTPStatus) -> str:
    """``request_header_fields_too_large`` for 431: the API's error codes are snake case."""
    return status.phrase.lower().replace(" ", "_").replace("-", "_")
