"""GET and HEAD /api/v1/code/{digest}: a real uvicorn server answering real HTTP requests.

The server helpers (``code_server``, ``Recorder``) are shared with the fetch and distributor
tests: each "nimbus" of those tests is a store behind one of these servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stratus.codedist.package_store import PackageStore
from stratus.nimbus.code_routes import SERVE_CHUNK, add_code_routes
from tests.zkfixtures import wait_until

MIB = 1 << 20
START_TIMEOUT_SECS = 10.0


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


DATA = os.urandom(5 * MIB + 123)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, Recorder]]:
    """A store with DATA, served: (base URL, digest, recorder)."""
    store = PackageStore(tmp_path / "store", max_bytes=64 * MIB)
    digest = stored(store, DATA)
    with code_server(store) as running:
        yield f"http://{running.address}/api/v1/code", digest, running.recorder


def test_get_returns_the_whole_package_in_large_chunks(served):
    url, digest, recorder = served
    response = httpx.get(f"{url}/{digest}", timeout=10)
    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == digest
    assert response.headers["content-length"] == str(len(DATA))
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["accept-ranges"] == "bytes"
    assert response.headers["etag"] == f'"{digest}"'
    assert max(recorder.body_messages) == SERVE_CHUNK >= MIB


def test_head_gives_the_size_without_a_body(served):
    url, digest, _ = served
    response = httpx.head(f"{url}/{digest}", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-length"] == str(len(DATA))
    assert response.content == b""


@pytest.mark.parametrize(
    ("header", "start", "end"),
    [
        ("bytes=10-19", 10, 20),
        ("bytes=4194300-", 4194300, len(DATA)),
        ("bytes=-7", len(DATA) - 7, len(DATA)),
        ("bytes=5-99999999", 5, len(DATA)),
    ],
)
def test_one_byte_range_is_answered_with_206(served, header, start, end):
    url, digest, _ = served
    response = httpx.get(f"{url}/{digest}", headers={"Range": header}, timeout=10)
    assert response.status_code == 206
    assert response.headers["content-range"] == f"bytes {start}-{end - 1}/{len(DATA)}"
    assert response.headers["content-length"] == str(end - start)
    assert response.content == DATA[start:end]


@pytest.mark.parametrize(
    "header", [f"bytes={len(DATA)}-", f"bytes={len(DATA) + 5}-{len(DATA) + 9}", "bytes=-0"]
)
def test_a_range_past_the_end_is_416(served, header):
    url, digest, _ = served
    response = httpx.get(f"{url}/{digest}", headers={"Range": header}, timeout=10)
    assert response.status_code == 416
    assert response.headers["content-range"] == f"bytes */{len(DATA)}"
    assert response.json()["error"] == "range_not_satisfiable"


@pytest.mark.parametrize("header", ["bytes=0-1,5-6", "lines=1-2", "bytes=9-3", "bytes=-"])
def test_a_range_that_is_not_one_byte_range_is_invalid(served, header):
    url, digest, _ = served
    response = httpx.get(f"{url}/{digest}", headers={"Range": header}, timeout=10)
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_request"


def test_an_unknown_digest_is_404_unknown_code(served):
    url, _, _ = served
    missing = "0" * 64
    response = httpx.get(f"{url}/{missing}", timeout=10)
    assert response.status_code == 404
    body = response.json()
    assert body["error"] == "unknown_code"
    assert missing in body["message"]
    assert set(body) == {"error", "message", "leader"}
    assert httpx.head(f"{url}/{missing}", timeout=10).status_code == 404


@pytest.mark.parametrize("digest", ["abc", "A" * 64, "g" * 64, "0" * 65, "0" * 63 + "."])
def test_a_digest_that_is_not_64_lowercase_hex_digits_is_422(served, digest):
    url, _, _ = served
    response = httpx.get(f"{url}/{digest}", timeout=10)
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_request"
