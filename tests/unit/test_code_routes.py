"""GET and HEAD /api/v1/code/{digest}: a real uvicorn server answering real HTTP requests
(the server is ``tests.harness.code_server``'s)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stratus.codedist.package_store import PackageStore
from stratus.nimbus.http.code_routes import SERVE_CHUNK
from tests.harness.code_server import Recorder, code_server, stored

MIB = 1 << 20


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
