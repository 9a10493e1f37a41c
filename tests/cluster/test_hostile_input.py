"""Hostile input of the classes an attacker tries first, on real servers over real sockets.

A real nimbus process (its API and status page), the package server, and uvicorn with the
nimbus's own bounds: requests that are not HTTP, heads too large, JSON with duplicate keys,
deep nesting or text that is not Unicode, conf keys and values with control characters,
integers out of range, wrong content types, path traversal in every path parameter, HTTP/1.0
and pipelining, more requests in progress than the bound, TLS handshakes left half done,
a request head or a pacemaker frame trickled in a byte at a time (slowloris), and options
of ``stratus zookeeper`` that would add lines to its ``zoo.cfg`` or write among another's
files.
Each gets a clear 4xx (or a 503 to retry) whose body is the API's JSON error, or a closed
connection in bounded time, and the server goes on serving others.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send

from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.bounded_server import ConnectionBounds
from stratus.codedist.transfer.server import PackageServer
from stratus.security.certificates import CertificateAuthority
from stratus.security.client_auth import ClientAuth
from stratus.security.tls import TlsSettings
from stratus.web.bounds import HttpBounds, bounded_app, uvicorn_options
from stratus.zk.errors import ZooKeeperOptionError
from stratus.zk.ports import pick_free_port
from stratus.zk.server import ZooKeeperServer
from tests.cluster.test_secrets_and_paths_nimbus import put_failed_worker
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.pacemaker_process import PacemakerProcess
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import wait_until

HOST = "Host: nimbus\r\n"
MAX_HEADER_BYTES = 16 * 1024  # nimbus.http.max.header.bytes's default


@pytest.fixture(scope="module")
def cluster(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NimbusCluster]:
    logs = tmp_path_factory.mktemp("hostile-input")
    with nimbus_cluster(zk_server.connect_string, logs, "hostile-input", 1) as running:
        running.wait_for_agreed_leader()
        url = running.nimbuses[0].url
        created = httpx.post(
            f"{url}/api/v1/pipelines",
            data={"name": "target", "conf": "{}"},
            files={"package": valid_package("target")},
        )
        assert created.status_code == 201, created.text
        yield running


def exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a new connection; everything the server sent until it closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=30.0) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def status_and_body(answer: bytes) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of the one response in ``answer``."""
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(body)


def still_serves(cluster: NimbusCluster) -> bool:
    return httpx.get(f"{cluster.nimbuses[0].url}/api/v1/pipelines/target").status_code == 200


# ---------------------------------------------------------------------- the request itself

NOT_HTTP = {
    "a TLS hello on the plain port": b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\0" * 40,
    "a non-ASCII path": "GET /api/v1/pipelines/été HTTP/1.1\r\nHost: n\r\n\r\n".encode(),
    "a header without a colon": b"GET / HTTP/1.1\r\nHost: n\r\nno colon here\r\n\r\n",
    "a bare line feed soup": b"\n\n\n\n\x00\x01\x02\r\n\r\n",
}


@pytest.mark.parametrize("data", NOT_HTTP.values(), ids=NOT_HTTP.keys())
def test_a_request_that_is_not_http_gets_the_apis_json_400(cluster, data):
    status, body = status_and_body(exchange(cluster.nimbuses[0].port, data))
    assert (status, body["error"]) == (400, "invalid_request")
    assert still_serves(cluster)


HEADS = {
    "many small headers": "".join(f"X-Flood-{i}: v\r\n" for i in range(3000)),
    "one huge header": "X-Huge: " + "v" * (MAX_HEADER_BYTES + 10) + "\r\n",
    "a huge query string": None,
}


@pytest.mark.parametrize("headers", HEADS.values(), ids=HEADS.keys())
def test_a_head_over_the_bound_sent_at_once_is_431(cluster, headers):
    query = "?" + "q=1&" * (MAX_HEADER_BYTES // 4) if headers is None else ""
    request = f"GET /api/v1/leader{query} HTTP/1.1\r\n{HOST}{headers or ''}\r\n".encode()
    status, body = status_and_body(exchange(cluster.nimbuses[0].port, request))
    assert (status, body["error"]) == (431, "request_head_too_large")
    assert "nimbus.http.max.header.bytes" in body["message"]
    assert still_serves(cluster)


def test_http_1_0_and_pipelined_requests_are_answered_in_order(cluster):
    port = cluster.nimbuses[0].port
    old = exchange(port, b"GET /api/v1/pipelines/target HTTP/1.0\r\n\r\n")
    assert old.startswith(b"HTTP/1.1 200 ") and b'"name":"target"' in old
    pipelined = exchange(
        port,
        f"GET /api/v1/leader HTTP/1.1\r\n{HOST}\r\n"
        f"GET /api/v1/pipelines/nope HTTP/1.1\r\n{HOST}\r\n"
        f"GET /api/v1/pipelines/target HTTP/1.1\r\n{HOST}Connection: close\r\n\r\n".encode(),
    )
    statuses = re.findall(rb"HTTP/1\.1 (\d{3}) ", pipelined)  # bodies have no newline
    assert statuses == [b"200", b"404", b"200"]


# ---------------------------------------------------------------------- path parameters

TRAVERSALS = ["..", "%2e%2e", "..%2f..%2fetc%2fpasswd", "a%00b", "%0d%0aX-Injected:%201", "%ff"]


@pytest.mark.parametrize("value", TRAVERSALS)
@pytest.mark.parametrize(
    ("method", "template"),
    [
        ("GET", "/api/v1/pipelines/{}"),
        ("GET", "/api/v1/pipelines/{}/workers"),
        ("POST", "/api/v1/pipelines/{}/kill"),
        ("POST", "/api/v1/pipelines/{}/activate"),
        ("GET", "/api/v1/code/{}"),
    ],
)
def test_traversal_and_control_characters_in_a_path_parameter_are_a_4xx(
    cluster, method, template, value
):
    # Sent as written: an HTTP client would resolve "/pipelines/../workers" to "/workers", a
    # route of its own, before the nimbus sees the parameter.
    path = template.format(value)
    request = f"{method} {path} HTTP/1.1\r\n{HOST}Content-Length: 0\r\nConnection: close\r\n\r\n"
    answer = exchange(cluster.nimbuses[0].port, request.encode())
    status, body = status_and_body(answer)
    assert status in (404, 422), answer
    assert body["error"] in ("not_found", "invalid_name", "invalid_request")
    assert b"x-injected" not in answer.partition(b"\r\n\r\n")[0].lower()


# ---------------------------------------------------------------------- JSON bodies

BODIES = {
    "duplicate keys": ('{"conf": {"spark.a": 1, "spark.a": 2}}', "the key 'spark.a' twice"),
    "duplicate top-level keys": ('{"conf": {"spark.a": 1}, "conf": {"spark.b": 2}}', "twice"),
    "deep nesting": ('{"conf": {"spark.a": ' + "[" * 5000 + "]" * 5000 + "}}", "nests deeper"),
    "shallow nesting past the bound": (
        '{"conf": {"spark.a": ' + '{"b": ' * 40 + "1" + "}" * 40 + "}}",
        "nests deeper",
    ),
    "a lone surrogate": ('{"conf": {"spark.a": "\\ud800"}}', "not valid Unicode"),
    "a lone surrogate in a key": ('{"conf": {"spark.\\udfff": 1}}', "not valid Unicode"),
    "bytes that are not UTF-8": (b'{"conf": {"spark.a": "\xff\xfe"}}', "not UTF-8"),
}


@pytest.mark.parametrize(("body", "named"), BODIES.values(), ids=BODIES.keys())
def test_a_json_body_with_two_meanings_or_no_text_is_422_naming_the_problem(
    cluster, zk_server, body, named
):
    url = cluster.nimbuses[0].url
    answer = httpx.post(
        f"{url}/api/v1/pipelines/target/rebalance",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert (answer.status_code, answer.json()["error"]) == (422, "invalid_request"), answer.text
    assert named in answer.json()["message"]
    assert httpx.get(f"{url}/api/v1/pipelines/target").json()["rebalances"] == 0


def test_a_submits_conf_is_parsed_as_strictly(cluster):
    url = cluster.nimbuses[0].url
    answer = httpx.post(
        f"{url}/api/v1/pipelines",
        data={"name": "twice", "conf": '{"spark.a": 1, "spark.a": 2}'},
        files={"package": valid_package("twice")},
    )
    assert (answer.status_code, answer.json()["error"]) == (422, "invalid_request")
    assert answer.json()["message"].startswith("conf holds the key 'spark.a' twice")


CONFS = {
    "a NUL in a value": ({"spark.a": "x\x00y"}, "control character (U+0000"),
    "an escape sequence in a value": ({"spark.a": "\x1b[31mred"}, "control character (U+001B"),
    "a control character in a key": ({"spark.a\x07": 1}, "printable ASCII"),
    "a space in a key": ({"spark.a b": 1}, "printable ASCII"),
    "a non-ASCII key": ({"spark.été": 1}, "printable ASCII"),
    "an integer past 64 bits": ({"spark.a": 2**63}, "out of range"),
    "a negative integer past 64 bits": ({"spark.a": -(2**63) - 1}, "out of range"),
    "a replication count past its end": ({"pipeline.min.replication.count": 10**6}, "at most"),
    "a wait past its end": ({"pipeline.max.replication.wait.time.sec": 10**12}, "at most"),
    "a trigger interval past its end": ({"pipeline.trigger.interval.secs": 1e300}, "at most"),
}


@pytest.mark.parametrize(("conf", "named"), CONFS.values(), ids=CONFS.keys())
def test_conf_text_and_numbers_out_of_their_range_are_422_in_submit_and_rebalance(
    cluster, conf, named
):
    url = cluster.nimbuses[0].url
    answers = {
        "rebalance": httpx.post(f"{url}/api/v1/pipelines/target/rebalance", json={"conf": conf}),
        "submit": httpx.post(
            f"{url}/api/v1/pipelines",
            data={"name": "odd", "conf": json.dumps(conf)},
            files={"package": valid_package("odd")},
        ),
    }
    for route, answer in answers.items():
        assert (answer.status_code, answer.json()["error"]) == (422, "invalid_conf"), route
        assert named in answer.json()["message"], route
    assert "odd" not in {
        p["name"] for p in httpx.get(f"{url}/api/v1/pipelines").json()["pipelines"]
    }


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
def test_a_body_of_the_wrong_content_type_is_a_422_not_parsed_as_json(cluster, content_type):
    answer = httpx.post(
        f"{cluster.nimbuses[0].url}/api/v1/pipelines/target/rebalance",
        content=b'{"conf": {"spark.a": 1}}',
        headers={"Content-Type": content_type},
    )
    assert (answer.status_code, answer.json()["error"]) == (422, "invalid_request")


# ---------------------------------------------------------------------- requests in progress


async def _parked(scope: Scope, receive: Receive, send: Send) -> None:
    """An app whose handlers never finish (a ZooKeeper that does not answer)."""
    if scope["type"] == "http":
        await asyncio.Event().wait()


@contextlib.contextmanager
def bounded_uvicorn(max_connections: int) -> Iterator[int]:
    """uvicorn with the nimbus's bounds around ``_parked``, on a free port; its port."""
    bounds = HttpBounds(max_connections, 30.0, 5.0, MAX_HEADER_BYTES)
    port = pick_free_port()
    config = uvicorn.Config(
        bounded_app(_parked, bounds), host="127.0.0.1", port=port, **uvicorn_options(bounds)
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 30, "uvicorn to start")
    try:
        yield port
    finally:
        server.should_exit = True
        server.force_exit = True
        thread.join(30)


def test_past_the_requests_in_progress_bound_the_answer_is_json_503_with_retry_after():
    """Handlers whose clients left keep their place: the bound counts requests, not sockets."""
    with bounded_uvicorn(max_connections=2) as port:
        for _ in range(2):  # two requests park; their clients leave
            with socket.create_connection(("127.0.0.1", port), timeout=10.0) as sock:
                sock.sendall(f"GET /slow HTTP/1.1\r\n{HOST}\r\n".encode())
        answer = httpx.get(f"http://127.0.0.1:{port}/slow", timeout=10.0)
    assert answer.status_code == 503
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["retry-after"] == "1"
    assert answer.json()["error"] == "unavailable"
    assert "nimbus.http.max.connections" in answer.json()["message"]


# ---------------------------------------------------------------------- the package server


@pytest.fixture
def package_server(tmp_path: Path) -> Iterator[PackageServer]:
    server = PackageServer(PackageStore(tmp_path / "store", max_bytes=1 << 20), "127.0.0.1", 0)
    server.start()
    try:
        yield server
    finally:
        server.close()


PACKAGE_SERVER_REFUSALS = {
    "not HTTP": (b"\x16\x03\x01\x00\xa5\x01\x00\x00\r\n\r\n", 400),
    "too many headers": (
        f"GET /api/v1/code/x HTTP/1.1\r\n{HOST}".encode()
        + b"".join(b"X-%d: v\r\n" % i for i in range(200))
        + b"\r\n",
        431,
    ),
    "a request line too long": (b"GET /api/v1/code/" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
    "a method it does not serve": (
        f"POST /api/v1/code/x HTTP/1.1\r\n{HOST}Content-Length: 0\r\n\r\n".encode(),
        501,
    ),
}


@pytest.mark.parametrize(
    ("data", "status"), PACKAGE_SERVER_REFUSALS.values(), ids=PACKAGE_SERVER_REFUSALS.keys()
)
def test_the_package_servers_own_refusals_are_the_apis_json_errors(package_server, data, status):
    port = int(package_server.address.rsplit(":", 1)[1])
    answer = exchange(port, data)
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:200]
    got, body = status_and_body(answer)
    assert got == status and isinstance(body["error"], str) and body["message"]
    assert b"<html" not in answer.lower()
    probe = httpx.get(f"http://{package_server.address}/api/v1/code/{'0' * 64}", timeout=10.0)
    assert probe.status_code == 404  # and it serves the next client


# ---------------------------------------------------------------------- TLS handshakes

HALF_A_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 20


@pytest.fixture(scope="module")
def tls_nimbus(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NimbusCluster]:
    """One nimbus serving https that waits at most a second for a request head."""
    directory = tmp_path_factory.mktemp("hostile-tls")
    ca = CertificateAuthority.create(directory / "pki", "hostile-ca")
    server = ca.issue("nimbus", ip="127.0.0.1")
    extra = [
        "-c", f"nimbus.tls.cert={server.cert}",
        "-c", f"nimbus.tls.key={server.key}",
        "-c", f"client.tls.ca={ca.cert}",
        "-c", "nimbus.http.header.timeout.secs=1",
    ]  # fmt: skip
    auth = ClientAuth(tls=TlsSettings(ca=str(ca.cert)))
    with nimbus_cluster(
        zk_server.connect_string, directory, "hostile-tls", 1, extra, auth=auth
    ) as running:
        yield running


def closed_by_the_server(sock: socket.socket) -> bool:
    sock.settimeout(0.2)
    try:
        return sock.recv(4096) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("sent", [b"", HALF_A_CLIENT_HELLO], ids=["silent", "half a hello"])
def test_a_tls_handshake_left_half_done_is_closed_after_the_header_timeout(tls_nimbus, sent):
    """asyncio's own handshake limit is a minute, and such a connection is not yet one the
    connection bound counts: the handshake gets ``nimbus.http.header.timeout.secs``."""
    nimbus = tls_nimbus.nimbuses[0]
    with socket.create_connection(("127.0.0.1", nimbus.port), timeout=10.0) as sock:
        sock.sendall(sent)
        wait_until(lambda: closed_by_the_server(sock), 30, "the nimbus to close the handshake")
    assert tls_nimbus.http.get(f"{nimbus.url}/api/v1/leader").status_code == 200


# ---------------------------------------------------------------------- slowloris

TRICKLE_PAUSE_SECS = 0.25  # each byte well within the one-second idle time


def trickle_until_cut(sock: socket.socket, data: bytes) -> int:
    """Send ``data`` a byte at a time, each pause within the server's idle time; how many
    bytes went before the server cut the connection (``len(data)`` if it never did)."""
    sock.settimeout(TRICKLE_PAUSE_SECS)
    for sent in range(len(data)):
        try:
            sock.sendall(data[sent : sent + 1])
            if sock.recv(4096) == b"":
                return sent
        except TimeoutError:
            continue  # nothing to read yet: the pause between bytes
        except OSError:  # reset, broken pipe: cut
            return sent
    return len(data)


def test_a_package_server_request_head_trickled_in_is_cut_at_the_idle_time(tmp_path):
    bounds = ConnectionBounds(max_connections=4, idle_secs=1.0, head_secs=1.0)
    store = PackageStore(tmp_path / "store", max_bytes=1 << 20)
    server = PackageServer(store, "127.0.0.1", 0, bounds=bounds)
    server.start()
    try:
        head = f"GET /api/v1/code/{'0' * 64} HTTP/1.1\r\n{HOST}X-Pad: {'p' * 100}\r\n\r\n"
        port = int(server.address.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10.0) as sock:
            assert trickle_until_cut(sock, head.encode()) < len(head)
        probe = httpx.get(f"http://{server.address}/api/v1/code/{'0' * 64}", timeout=10.0)
        assert probe.status_code == 404  # and it serves the next client
    finally:
        server.close()


def test_a_pacemaker_frame_trickled_in_is_cut_at_the_idle_time(tmp_path):
    pacemaker = PacemakerProcess(tmp_path, ["pacemaker.idle.timeout.secs=1"]).start()
    try:
        body = msgpack.packb({"id": 1, "op": "get", "path": "/x" + "y" * 100})
        frame = struct.pack(">I", len(body)) + body
        with socket.create_connection(pacemaker.address, timeout=10.0) as sock:
            assert trickle_until_cut(sock, frame) < len(frame)
        with socket.create_connection(pacemaker.address, timeout=10.0) as sock:
            sock.sendall(frame)  # the same frame at once is answered
            assert sock.recv(4096)
    finally:
        pacemaker.stop()


# ---------------------------------------------------------------------- stratus zookeeper


def stratus_zookeeper(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STRATUS_CONF"}
    return subprocess.run(
        [sys.executable, "-m", "stratus", "zookeeper", *args],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--host", "127.0.0.1\nenforce.auth.enabled=false"], "control character"),
        (["--host", "evil host"], "not a host name or an IP address"),
        (["--tick-time", "999999999999"], "1<=x<=60000"),
        (["--ensemble", "100000"], "1<=x<=9"),
        (["-c", "zookeeper.server.tick.time.ms=70000"], "less than or equal to 60000"),
    ],
    ids=["a line break in the host", "a space in the host", "a huge tick", "a huge ensemble",
         "a huge tick in the conf"],
)  # fmt: skip
def test_stratus_zookeeper_refuses_options_out_of_range_or_that_would_add_lines_to_zoo_cfg(
    args, named
):
    result = stratus_zookeeper("--temporary", "--port", "0", *args)
    assert result.returncode in (1, 2), result.stdout
    assert named in result.stderr
    assert "serving at" not in result.stdout


def test_a_data_dir_that_holds_other_files_is_refused_and_left_as_it_was(tmp_path):
    foreign = tmp_path / "etc"
    foreign.mkdir()
    (foreign / "passwd").write_text("root:x:0:0\n")
    for args in (["--data-dir", str(foreign)], ["--data-dir", str(foreign), "--ensemble", "3"]):
        result = stratus_zookeeper("--port", "0", *args)
        assert result.returncode == 1, result.stdout
        assert "holds other files (passwd) and no ZooKeeper data" in result.stderr
        assert sorted(p.name for p in foreign.iterdir()) == ["passwd"]


def test_a_data_dir_path_with_a_line_break_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ZooKeeperOptionError, match="control character"):
        ZooKeeperServer(tmp_path / "zk\nforceSync=no")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------- what a terminal shows


def test_escape_sequences_in_a_workers_error_reach_a_terminal_escaped(cluster, zk_server):
    """A crashing pipeline's log tail could retitle, clear or rewrite the operator's terminal."""
    put_failed_worker(
        zk_server.connect_string, cluster.root, "target", "boom\x1b]0;pwned\x07\x1b[2Jcleared"
    )
    env = {k: v for k, v in os.environ.items() if k != "STRATUS_CONF"} | {"COLUMNS": "300"}
    shown = subprocess.run(
        [sys.executable, "-m", "stratus", "status", "target", "-c",
         f"nimbus.seeds={','.join(cluster.seeds)}"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "\x1b]" not in shown.stdout and "\x1b[2J" not in shown.stdout
    assert "boom\\x1b]0;pwned\\x07\\x1b[2Jcleared" in shown.stdout


@pytest.mark.parametrize("request_id", ["a\x1b[2Jb", "two words", "é"])
def test_a_request_id_that_is_not_printable_ascii_is_refused(cluster, request_id):
    answer = httpx.post(
        f"{cluster.nimbuses[0].url}/api/v1/pipelines",
        data={"name": "rid", "conf": "{}", "request_id": request_id},
        files={"package": valid_package("rid")},
    )
    assert (answer.status_code, answer.json()["error"]) == (422, "invalid_request")
    assert "request_id" in answer.json()["message"]
