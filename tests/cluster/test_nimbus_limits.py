"""Hostile input against real nimbus processes: every class of it is bounded.

A standby refuses a leader-only call before it reads the body; a body over its limit is
413 whether it says its length or streams it chunked; a record that would pass the cap
is 413 with nothing written; non-finite numbers are 422; a YAML bomb is refused without
being expanded; uploads past the bound wait with 503; no error body echoes its input whole.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stratus.local.processes import NimbusProcess
from stratus.zk.paths import ClusterPaths
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import APP_MODULE, APP_SOURCE, valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

MAX_UPLOAD = 64 * 1024
MAX_REQUEST = 64 * 1024
MAX_RECORD = 20_000
SMALL_ERROR_BYTES = 2048  # an error body about hostile input stays this small
HUGE_BODY = 50 * 1024 * 1024


@pytest.fixture(scope="module")
def cluster(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NimbusCluster]:
    extra = [
        "-c", f"nimbus.max.upload.bytes={MAX_UPLOAD}",
        "-c", f"nimbus.max.request.bytes={MAX_REQUEST}",
        "-c", f"nimbus.max.record.bytes={MAX_RECORD}",
        "-c", "nimbus.max.concurrent.uploads=1",
        "-c", "pipeline.kill.wait.secs=0",
    ]  # fmt: skip
    logs = tmp_path_factory.mktemp("nimbus-limits")
    with nimbus_cluster(zk_server.connect_string, logs, "nimbus-limits", 2, extra) as running:
        running.wait_for_agreed_leader()
        yield running


def leader_url(cluster: NimbusCluster) -> str:
    return cluster.by_address(cluster.wait_for_agreed_leader()).url


def standby(cluster: NimbusCluster) -> tuple[str, int]:
    leader = cluster.wait_for_agreed_leader()
    other = next(n for n in cluster.nimbuses if n.address != leader)
    return other.host, other.port


def submit(url: str, name: str, package: bytes, **form: str) -> httpx.Response:
    return httpx.post(
        f"{url}/api/v1/pipelines",
        data={"name": name, **form},
        files={"package": package},
        timeout=30.0,
    )


def zip_of(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def multipart(name: str, package: bytes) -> tuple[str, bytes]:
    """A submit form's content type and body, as a client would send it."""
    boundary = "stratus-test-boundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\n{name}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="package"; '
            f'filename="p.zip"\r\nContent-Type: application/zip\r\n\r\n'
        ).encode()
        + package
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return f"multipart/form-data; boundary={boundary}", body


def chunks(data: bytes, size: int = 16 * 1024) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def files_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()}


def test_a_huge_body_to_a_standby_is_not_leader_before_the_client_has_sent_it(cluster):
    host, port = standby(cluster)
    sent = 0
    with socket.create_connection((host, port), timeout=30.0) as sock:
        sock.sendall(
            b"POST /api/v1/pipelines/p/rebalance HTTP/1.1\r\nHost: n\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % HUGE_BODY
        )

        def send_body() -> None:
            nonlocal sent
            block = b" " * (1024 * 1024)
            while sent < HUGE_BODY:
                try:
                    sock.sendall(block)
                except OSError:  # the nimbus answered and closed
                    return
                sent += len(block)

        sender = threading.Thread(target=send_body, daemon=True)
        sender.start()
        answer = sock.recv(65536)
        sent_when_answered = sent
        while b'"not_leader"' not in answer and len(answer) < 65536:  # the body may come apart
            try:
                more = sock.recv(65536)
            except OSError:
                break
            if not more:
                break
            answer += more
        sender.join(timeout=60)
    assert answer.startswith(b"HTTP/1.1 421 "), answer[:200]
    assert b'"not_leader"' in answer
    assert sent_when_answered < HUGE_BODY // 2  # most of the body was never sent


def test_a_client_that_sends_its_whole_body_before_reading_gets_the_413_not_a_reset(cluster):
    """The nimbus answers 413 before it reads the body, then lingers (reads and drops the
    rest) before it closes: closing at once, with the body unread, resets the connection,
    and a client that reads only after sending sees the reset instead of the answer."""
    leader = cluster.by_address(cluster.wait_for_agreed_leader())
    body = b" " * (4 * 1024 * 1024)  # far over nimbus.max.request.bytes, all sent first
    with socket.create_connection((leader.host, leader.port), timeout=30.0) as sock:
        sock.sendall(
            b"POST /api/v1/pipelines/p/rebalance HTTP/1.1\r\nHost: n\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body) + body
        )
        answer = b""
        while b"request_too_large" not in answer:
            more = sock.recv(65536)
            if not more:
                break
            answer += more
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b'"request_too_large"' in answer


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_json_body_over_the_request_limit_is_413(cluster, chunked):
    body = json.dumps({"conf": {"spark.x": "y" * (MAX_REQUEST + 1)}}).encode()
    content: bytes | Iterator[bytes] = chunks(body) if chunked else body
    response = httpx.post(
        f"{leader_url(cluster)}/api/v1/pipelines/any/rebalance",
        content=content,
        headers={"Content-Type": "application/json"},
        timeout=30.0,
    )
    assert response.status_code == 413
    assert response.json()["error"] == "request_too_large"
    assert len(response.content) < SMALL_ERROR_BYTES


def test_a_chunked_upload_over_the_limit_is_413_and_leaves_nothing_in_the_store(cluster):
    leader = cluster.by_address(cluster.wait_for_agreed_leader())
    store = leader.local_dir / "packages"
    before = files_under(store)
    content_type, body = multipart("too-big", os.urandom(MAX_UPLOAD * 2))
    response = httpx.post(
        f"{leader.url}/api/v1/pipelines",
        content=chunks(body),
        headers={"Content-Type": content_type},
        timeout=30.0,
    )
    assert response.status_code == 413
    assert response.json()["error"] == "package_too_large"
    assert files_under(store) == before


def test_a_conf_that_would_pass_the_record_cap_is_413_and_writes_nothing(cluster, zk_server):
    url = leader_url(cluster)
    big_conf = {f"spark.key{i}": "v" * 1000 for i in range(MAX_RECORD // 1000 + 5)}
    refused = submit(url, "too-big-conf", valid_package("cap"), conf=json.dumps(big_conf))
    assert refused.status_code == 413, refused.text
    assert refused.json()["error"] == "record_too_large"
    created = submit(url, "capped", valid_package("cap"))
    assert created.status_code == 201, created.text
    paths = ClusterPaths(cluster.root)
    with kazoo_client(zk_server.connect_string) as zk:
        assert zk.exists(paths.pipeline("too-big-conf")) is None
        data, stat = zk.get(paths.pipeline("capped"))
        rebalanced = httpx.post(
            f"{url}/api/v1/pipelines/capped/rebalance", json={"conf": big_conf}, timeout=30.0
        )
        assert rebalanced.status_code == 413, rebalanced.text
        assert rebalanced.json()["error"] == "record_too_large"
        assert zk.get(paths.pipeline("capped")) == (data, stat)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_422(cluster, number):
    url = leader_url(cluster)
    conf = '{"spark.x": ' + number + "}"
    submitted = submit(url, "non-finite", valid_package("nan"), conf=conf)
    assert submitted.status_code == 422, submitted.text
    assert submitted.json()["error"] == "invalid_conf"
    assert submit(url, "finite", valid_package("nan"), request_id="f").status_code in (200, 201)
    rebalanced = httpx.post(
        f"{url}/api/v1/pipelines/finite/rebalance",
        content=b'{"conf": %s}' % conf.encode(),
        headers={"Content-Type": "application/json"},
        timeout=30.0,
    )
    assert rebalanced.status_code == 422, rebalanced.text
    assert rebalanced.json()["error"] == "invalid_conf"


BILLION_LAUGHS = "\n".join(
    [
        "name: bomb",
        "kind: app",
        "entrypoint: pipeline_main:run",
        'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
        *(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)),
        "conf: {spark.bomb: *a9}",
    ]
)


def test_a_yaml_bomb_manifest_is_refused_with_a_small_error(cluster):
    package = zip_of({"stratus.yaml": BILLION_LAUGHS, APP_MODULE: APP_SOURCE})
    response = submit(leader_url(cluster), "bomb", package)
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_package"
    assert "not allowed" in response.json()["message"]
    assert len(response.content) < SMALL_ERROR_BYTES


def test_error_bodies_quote_hostile_input_only_in_part(cluster):
    url = leader_url(cluster)
    huge = "x" * 50_000
    answers = [
        submit(url, huge, valid_package("echo")),
        submit(url, "echo", valid_package("echo"), conf=json.dumps({f"spark.{huge}": 1})),
        submit(url, "echo", valid_package("echo"), conf=json.dumps({"pipeline.a": huge})),
        submit(
            url,
            "echo",
            zip_of(
                {
                    "stratus.yaml": f"name: echo\nkind: app\nentrypoint: {huge}\n",
                    APP_MODULE: APP_SOURCE,
                }
            ),
        ),
        httpx.post(
            f"{url}/api/v1/pipelines/echo/rebalance",
            json={"conf": {huge: 1}, huge: 2},
            timeout=30.0,
        ),
    ]
    for answer in answers:
        assert 400 <= answer.status_code < 500, answer.text[:300]
        assert len(answer.content) < SMALL_ERROR_BYTES, answer.text[:300]


@contextlib.contextmanager
def held_upload(nimbus: NimbusProcess) -> Iterator[None]:
    """A submit whose package is sent but for its last bytes, held until the block ends."""
    content_type, body = multipart("slow", valid_package("slow", payload_bytes=MAX_UPLOAD // 2))
    with socket.create_connection((nimbus.host, nimbus.port), timeout=30.0) as slow:
        slow.sendall(
            b"POST /api/v1/pipelines HTTP/1.1\r\nHost: n\r\n"
            b"Content-Type: %s\r\nContent-Length: %d\r\n\r\n" % (content_type.encode(), len(body))
        )
        slow.sendall(body[:-100])
        yield


def open_files_of(pid: int) -> list[str]:
    found = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            found.append(os.readlink(fd))
    return found


def test_an_upload_is_spooled_in_the_package_store_while_it_arrives(cluster):
    leader = cluster.by_address(cluster.wait_for_agreed_leader())
    assert leader.pid is not None
    store = str(leader.local_dir / "packages")
    with held_upload(leader):
        wait_until(
            lambda: any(f.startswith(store + "/") for f in open_files_of(leader.pid or 0)),
            30,
            "the nimbus to spool the upload in its package store",
        )
    wait_until(
        lambda: not any(f.startswith(store + "/") for f in open_files_of(leader.pid or 0)),
        30,
        "the spooled upload to be closed",
    )


def test_an_upload_past_the_bound_is_503_with_retry_after(cluster):
    leader = cluster.by_address(cluster.wait_for_agreed_leader())
    with held_upload(leader):
        answers: list[httpx.Response] = []

        def refused() -> bool:
            answers[:] = [submit(leader.url, "second", b"not a zip")]
            return answers[0].status_code == 503

        wait_until(refused, 30, "a second upload to be refused while the first is read")
        assert answers[0].headers["Retry-After"] == "1"
        assert answers[0].json()["error"] == "unavailable"
    # the slow upload is gone: the next one is read (and refused for what it is)
    wait_until(
        lambda: submit(leader.url, "second", b"not a zip").status_code == 422,
        30,
        "uploads to be read again",
    )
