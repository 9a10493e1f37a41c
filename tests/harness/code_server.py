"""A test "nimbus" of code: a package store behind the real code routes, served by uvicorn on a
free port, with a ``Recorder`` that notes requests and misbehaves when told to.

Shared by the code route, package server, fetch and distributor tests: each holder of those
tests is a store behind one of these servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stratus.codedist.package_store import PackageStore
from stratus.nimbus.http.code_routes import add_code_routes
from tests.harness.zkfixtures import wait_until

START_TIMEOUT_SECS = 10.0
QUEUE_PROBE_SECS = 0.1  # a connect to a queue with room takes microseconds on loopback


class ConnectionCutError(Exception):
    """Raised by ``Recorder`` mid-body: uvicorn closes the connection, the body is short."""


class Recorder:
    """ASGI middleware of a test "nimbus": notes requests, and misbehaves when told to.

    ``cuts``: the next that many responses stop after ``cut_after`` body bytes (the
    connection closes). ``ignore_range``: Range headers are dropped (a 200 answers them).
    ``bad_content_range``: a 206 names another range than the one sent. ``stall``: bodies
    wait until the event is set (a holder that hangs).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.requests: list[tuple[str, str | None]] = []  # (method, Range header)
        self.client_ports: list[int] = []  # of every request: which connection it came on
        self.body_messages: list[int] = []  # size of every body message sent
        self.cuts = 0
        self.cut_after = 0
        self.ignore_range = False
        self.bad_content_range = False
        self.stall: threading.Event | None = None

    def ranges(self) -> list[str | None]:
        return [rng for method, rng in self.requests if method == "GET"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        rng = headers.get(b"range")
        self.requests.append((scope["method"], rng.decode() if rng is not None else None))
        self.client_ports.append(scope["client"][1] if scope.get("client") else 0)
        if self.ignore_range:
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"range"]}
        cut = self.cuts > 0
        self.cuts -= cut
        await self.app(scope, receive, self._sending(send, cut))

    def _sending(self, send: Send, cut: bool) -> Send:
        sent = 0

        async def wrapped(message: Message) -> None:
            nonlocal sent
            if message["type"] == "http.response.start" and self.bad_content_range:
                message = {**message, "headers": _shifted_content_range(message["headers"])}
            if message["type"] == "http.response.body":
                body = message.get("body", b"")
                self.body_messages.append(len(body))
                if self.stall is not None:
                    await asyncio.to_thread(self.stall.wait)
                if cut and sent + len(body) > self.cut_after:
                    keep = self.cut_after - sent
                    await send({**message, "body": body[:keep], "more_body": True})
                    raise ConnectionCutError(f"cut after {self.cut_after} bytes")
                sent += len(body)
            await send(message)

        return wrapped


def _shifted_content_range(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A Content-Range one byte further than the one sent (the body is unchanged)."""
    shifted = []
    for key, value in headers:
        if key != b"content-range":
            shifted.append((key, value))
            continue
        unit, rest = value.split(b" ", 1)
        span, size = rest.split(b"/")
        first, last = span.split(b"-")
        shifted.append((key, b"%s %d-%d/%s" % (unit, int(first) + 1, int(last), size)))
    return shifted


@dataclass
class CodeServer:
    """A running server of code routes: its address and its recorder."""

    address: str
    recorder: Recorder
    server: uvicorn.Server

    def stop_soon(self) -> None:
        """Ask it to stop (several servers then stop at once, not one after the other)."""
        if self.recorder.stall is not None:
            self.recorder.stall.set()
        self.server.should_exit = True


@contextlib.contextmanager
def code_server(store: PackageStore, *, keep_alive_secs: int = 5) -> Iterator[CodeServer]:
    """The code routes of ``store`` served by uvicorn on a free port, in a thread.

    ``keep_alive_secs``: how long an idle connection stays open (uvicorn's default, 5 s).
    """
    app = FastAPI()
    add_code_routes(app, store)
    recorder = Recorder(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        recorder,
        log_level="critical",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=1,
        timeout_keep_alive=keep_alive_secs,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    running = CodeServer(f"127.0.0.1:{sock.getsockname()[1]}", recorder, server)
    try:
        wait_until(lambda: server.started, START_TIMEOUT_SECS, "the code server to start")
        yield running
    finally:
        running.stop_soon()
        thread.join(timeout=10)
        sock.close()


def stored(store: PackageStore, data: bytes) -> str:
    """Put ``data`` in ``store``; its digest."""
    return store.put(io.BytesIO(data)).digest


def free_address() -> str:
    """A local address that refuses connections (bound, never listening)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@contextlib.contextmanager
def unanswered_address() -> Iterator[str]:
    """A local address whose connects are never answered, as a dead host's: a listener that
    never accepts, its accept queue (backlog 0) held full, so the kernel drops every new SYN
    (no refusal, no answer) until the block ends."""
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        address = listener.getsockname()
        while True:  # one connection fills a queue of backlog 0; a probe proves it full
            sock = stack.enter_context(socket.socket())
            sock.settimeout(QUEUE_PROBE_SECS)
            try:
                sock.connect(address)
            except TimeoutError:
                break
        yield f"127.0.0.1:{address[1]}"
