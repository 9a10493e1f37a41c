"""The package server: the API's code route, served with sendfile on its own port.

Each request goes to both over real sockets, the package server and the API route (uvicorn,
``code_routes``) on the same store: their answers must be the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import random
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from stratus.codedist.distributor import CodeMeta
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.bounded_server import ConnectionBounds
from stratus.codedist.transfer.fetch import FetchSettings, fetch_package
from stratus.codedist.transfer.server import PackageServer
from tests.harness.code_server import code_server, stored
from tests.harness.zkfixtures import wait_until

MIB = 1 << 20
DATA = random.Random(5).randbytes(5 * MIB + 123)  # fixed: test ids name its digest
DIGEST = hashlib.sha256(DATA).hexdigest()
COMPARED_HEADERS = ("content-length", "content-range", "content-type", "etag", "accept-ranges")


@dataclass
class Served:
    store: PackageStore
    server: PackageServer
    api: str  # host:port of the API route on the same store

    @property
    def address(self) -> str:
        return self.server.address


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    store = PackageStore(tmp_path / "store", max_bytes=64 * MIB)
    assert stored(store, DATA) == DIGEST
    server = PackageServer(store, "127.0.0.1", 0)
    server.start()
    try:
        with code_server(store) as api:
            yield Served(store, server, api.address)
    finally:
        server.close()


def answer(address: str, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.request(method, f"http://{address}{path}", headers=headers, timeout=10)


CASES = [
    ("GET", f"/api/v1/code/{DIGEST}", {}),
    ("HEAD", f"/api/v1/code/{DIGEST}", {}),
    ("GET", f"/api/v1/code/{DIGEST}", {"Range": "bytes=10-19"}),
    ("GET", f"/api/v1/code/{DIGEST}", {"Range": "bytes=4194300-"}),
    ("GET", f"/api/v1/code/{DIGEST}", {"Range": "bytes=-7"}),
    ("GET", f"/api/v1/code/{DIGEST}", {"Range": "bytes=5-99999999"}),
    ("GET", f"/api/v1/code/{DIGEST}", {"Range": f"bytes={len(DATA)}-"}),
    ("GET", f"/api/v1/code/{DIGEST}", {"Range": "bytes=-0"}),
    ("GET", f"/api/v1/code/{DIGEST}", {"Range": "bytes=0-1,5-6"}),
    ("GET", f"/api/v1/code/{DIGEST}", {"Range": "bytes=9-3"}),
    ("GET", f"/api/v1/code/{'0' * 64}", {}),
    ("HEAD", f"/api/v1/code/{'0' * 64}", {}),
    ("GET", "/api/v1/code/abc", {}),
    ("GET", f"/api/v1/code/{'A' * 64}", {}),
]


@pytest.mark.parametrize(("method", "path", "headers"), CASES)
def test_it_answers_as_the_api_route_does(served, method, path, headers):
    ours = answer(served.address, method, path, headers)
    api = answer(served.api, method, path, headers)
    assert ours.status_code == api.status_code
    for name in COMPARED_HEADERS:
        if ours.status_code < 300 or name in ("content-range", "content-type"):
            assert ours.headers.get(name) == api.headers.get(name), name
    if method == "HEAD":
        assert ours.content == api.content == b""
    elif ours.headers.get("content-type") == "application/json":
        assert ours.json()["error"] == api.json()["error"]
        assert set(ours.json()) == set(api.json())
    else:
        assert ours.content == api.content


@pytest.mark.parametrize(
    "path",
    ["/api/v1/code/../../etc/passwd", f"/api/v1/code/{DIGEST}/x", "/api/v1/pipelines", "/"],
)
def test_only_packages_by_digest_are_served(served, path):
    response = answer(served.address, "GET", path, {})
    assert response.status_code in (404, 422)
    assert response.json()["error"] in ("not_found", "invalid_request")


def test_a_file_of_the_store_that_is_not_a_package_is_not_served(served):
    (served.store.directory / f".upload-{'1' * 64}.tmp").write_bytes(b"not adopted")
    assert answer(served.address, "GET", f"/api/v1/code/{'1' * 64}", {}).status_code == 404


def test_a_connection_is_kept_for_the_next_request(served):
    host, port = served.address.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        ports = []
        for _ in range(2):
            connection.request("GET", f"/api/v1/code/{DIGEST}", headers={"Range": "bytes=0-9"})
            response = connection.getresponse()
            assert response.read() == DATA[:10]
            assert connection.sock is not None
            ports.append(connection.sock.getsockname()[1])
    finally:
        connection.close()
    assert ports[0] == ports[1]


def test_a_package_fetched_from_it_is_verified(served, tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    settings = FetchSettings(parts=1, timeout=10.0)
    path = fetch_package("etl", CodeMeta(DIGEST, len(DATA)), [served.address], dest, settings)
    assert path.read_bytes() == DATA


def test_after_close_it_refuses_connections(tmp_path):
    store = PackageStore(tmp_path / "store", max_bytes=64 * MIB)
    server = PackageServer(store, "127.0.0.1", 0)
    server.start()
    assert answer(server.address, "HEAD", f"/api/v1/code/{DIGEST}", {}).status_code == 404
    server.close()
    with pytest.raises(httpx.ConnectError):
        answer(server.address, "HEAD", f"/api/v1/code/{DIGEST}", {})


def test_a_port_in_use_is_refused_at_construction(served):
    port = int(served.address.rsplit(":", 1)[1])
    with pytest.raises(OSError), contextlib.closing(PackageServer(served.store, "127.0.0.1", port)):
        pass


@contextlib.contextmanager
def bounded_server(tmp_path: Path, idle_secs: float) -> Iterator[PackageServer]:
    """A package server that holds two authenticated connections (and two pending)."""
    store = PackageStore(tmp_path / "store", max_bytes=64 * MIB)
    stored(store, DATA)
    bounds = ConnectionBounds(max_connections=2, idle_secs=idle_secs, head_secs=idle_secs)
    server = PackageServer(store, "127.0.0.1", 0, bounds=bounds)
    server.start()
    try:
        yield server
    finally:
        server.close()


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30.0)


def test_a_connection_past_the_bound_gets_503_and_the_others_are_served(tmp_path):
    with contextlib.ExitStack() as held:
        bounded = held.enter_context(bounded_server(tmp_path, idle_secs=120.0))
        first, second = (held.enter_context(connect(bounded.address)) for _ in range(2))
        for sock in (first, second):  # both served: they hold the two slots
            sock.sendall(f"HEAD /api/v1/code/{DIGEST} HTTP/1.1\r\nHost: n\r\n\r\n".encode())
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        with connect(bounded.address) as third:  # pending: no slot until it asks
            third.sendall(f"HEAD /api/v1/code/{DIGEST} HTTP/1.1\r\nHost: n\r\n\r\n".encode())
            refused = third.recv(4096)
        assert refused.startswith(b"HTTP/1.1 503 ")
        assert b"Retry-After: 1" in refused
        first.close()  # a slot is free again once a held connection closes
        wait_until(
            lambda: (
                answer(bounded.address, "HEAD", f"/api/v1/code/{DIGEST}", {}).status_code == 200
            ),
            30,
            "the package server to serve again",
        )


def test_a_silent_connection_is_closed_after_the_idle_time(tmp_path):
    with bounded_server(tmp_path, idle_secs=1.0) as bounded, connect(bounded.address) as silent:
        assert silent.recv(4096) == b""  # closed by the server, not by this test's timeout


def test_a_client_that_sends_a_body_before_reading_gets_the_refusal_not_a_reset(served):
    """The package server takes no body: it answers at once, then lingers (reads and drops
    what the client still sends) before it closes, so the answer is not lost to a reset."""
    body = b"x" * (4 * MIB)
    with connect(served.address) as sock:
        sock.sendall(
            b"POST /api/v1/code/%s HTTP/1.1\r\nHost: n\r\nContent-Length: %d\r\n\r\n"
            % (DIGEST.encode(), len(body))
            + body
        )
        answer = b""
        while more := sock.recv(65536):
            answer += more
    assert answer.startswith(b"HTTP/1.1 501 "), answer[:200]
    assert b'"error":' in answer
