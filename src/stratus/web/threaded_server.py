"""A bounded uvicorn server on a socket of its own, served from a daemon thread.

The nimbus's API, the supervisor's endpoint and the zkfc's endpoint each run beside their
daemon's own work::

    server = ThreadedServer(app, sock, bounds, tls.server_context(), name="zkfc-endpoint")
    server.start(lambda: EndpointStartError("did not start"))   # returns once it serves
    server.stop()                                               # and closes the socket
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from stratus.web.bounds import HttpBounds, serve_bounded, uvicorn_options
from stratus.web.peer_certificate import PeerCertificateProtocol

START_TIMEOUT_SECS = 10.0
STOP_TIMEOUT_SECS = 5.0


class ThreadedServer:
    """``app`` served on ``sock`` within ``bounds``, over TLS when ``tls`` (a server context)
    is set: the client certificate's CN then reaches the role check."""

    def __init__(
        self,
        app: ASGIApp,
        sock: socket.socket,
        bounds: HttpBounds,
        tls: ssl.SSLContext | None,
        *,
        name: str,
    ) -> None:
        self._sock = sock
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
            **uvicorn_options(
                bounds, base=PeerCertificateProtocol if tls is not None else H11Protocol
            ),
        )
        if tls is not None:
            config.load()
            config.ssl = tls  # stratus.security's context, not one from uvicorn's options
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: serve_bounded(self._server, [sock], bounds), name=name, daemon=True
        )

    def start(self, failed: Callable[[], Exception]) -> None:
        """Serve; raise ``failed()`` if the server does not start within the start timeout."""
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while not self._server.started:  # uvicorn offers no event to wait on
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise failed()
            time.sleep(0.01)

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=STOP_TIMEOUT_SECS)
        self._sock.close()
