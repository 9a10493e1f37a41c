"""The zkfc's endpoint is a server like the nimbus API: mutual TLS and the same bounds.

Operators who hold client certificates rather than tokens fail over with ``haadmin
-failover`` (real dummy services and real ``stratus zkfc`` processes on a real ZooKeeper);
an anonymous caller is 401 and a certificate the token file does not list, or lists below
``admin``, is 403, both the API's JSON error; an oversized body is 413 unread, and a head
sent too slowly or a TLS handshake left half done is closed within the header timeout.
The bounds are checked on an endpoint in this process, over real sockets and real TLS,
with recording handlers on the other side of its ``Handlers`` interface.
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result

from stratus.cli.main import main
from stratus.ha.health_monitor import HealthState
from stratus.ha.metrics import ZkfcMetrics
from stratus.ha.zkfc_endpoint import EndpointSecurity, ZkfcEndpoint
from stratus.ha.zkfc_protocol import CEDE_PATH, CedeResult, FailoverResult
from stratus.logs import event_fields
from stratus.security.access import AccessPolicy
from stratus.security.certificates import Issued
from stratus.security.tls import TlsSettings
from stratus.security.tokens import load_credentials
from stratus.web.bounds import HttpBounds
from tests.harness.tls_certs import TestCa
from tests.harness.zkfc_cluster import WAIT, ZkfcCluster
from tests.harness.zkfixtures import wait_until

pytestmark = pytest.mark.slow

OPERATOR = "ops-admin"  # a person's client certificate, admin in the token file
ZKFC_PEER = "zkfc-peer"  # the zkfcs' own, to ask each other to cede
SUBMITTER = "ci-runner"  # known, but only submit
TOKENS = f"admin cn {OPERATOR}\nadmin cn {ZKFC_PEER}\nsubmit cn {SUBMITTER}\n"
HEADER_TIMEOUT = 0.5
MAX_BODY = 1024


@dataclass
class Pki:
    ca: TestCa
    server: Issued
    clients: dict[str, Issued] = field(default_factory=dict)
    tokens: Path = Path()

    def client(self, name: str) -> TlsSettings:
        issued = self.clients[name]
        return TlsSettings(cert=str(issued.cert), key=str(issued.key), ca=str(self.ca.cert))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("zkfc-pki")
    ca = TestCa(directory)
    pki = Pki(ca, ca.issue("zkfc", ip="127.0.0.1"))
    for name in (OPERATOR, ZKFC_PEER, SUBMITTER, "stranger"):
        pki.clients[name] = ca.issue(name)
    pki.tokens = directory / "tokens"
    pki.tokens.write_text(TOKENS)
    pki.tokens.chmod(0o600)
    return pki


# ---------------------------------------------------------------- a failover by certificate


def haadmin(cluster: ZkfcCluster, tls: TlsSettings, *args: str) -> Result:
    conf = {
        "zookeeper.servers": cluster.zk_hosts,
        "ha.zkfc.group": "svc",
        "client.tls.ca": tls.ca,
        "client.tls.cert": tls.cert,
        "client.tls.key": tls.key,
    }
    options = [item for key, value in conf.items() for item in ("-c", f"{key}={value}")]
    return CliRunner().invoke(main, ["haadmin", *args, *options])


def test_an_operator_with_a_client_certificate_fails_over_and_a_stranger_cannot(
    zk_hosts: str, tmp_path: Path, pki: Pki
) -> None:
    peer = pki.client(ZKFC_PEER)
    cluster = ZkfcCluster(
        zk_hosts,
        tmp_path,
        ["a", "b"],
        service_args=["--cert", str(pki.server.cert), "--key", str(pki.server.key)],
        scheme="https",
        extra={
            "nimbus.auth.tokens.file": str(pki.tokens),
            "nimbus.tls.cert": str(pki.server.cert),
            "nimbus.tls.key": str(pki.server.key),
            "nimbus.tls.ca": str(pki.ca.cert),
            "client.tls.ca": str(pki.ca.cert),
            "client.tls.cert": str(peer.cert),
            "client.tls.key": str(peer.key),
        },
    )
    try:
        cluster.start()  # both at once: whichever wins, the other is the target
        wait_until(lambda: len(cluster.actives()) == 1, WAIT, "one active")
        (active,) = cluster.actives()
        standby = "b" if active == "a" else "a"
        wait_until(lambda: "service_standby" in cluster.zkfc_log(standby), WAIT, "a standby")
        for name in (active, standby):  # registered: their zkfcs may be found (a loaded
            cluster.zkfc_endpoint(name)  # machine: registration comes after the election)
        source, target = cluster.nodes[active].address, cluster.nodes[standby].address

        stranger = haadmin(cluster, pki.client("stranger"), "-failover", source, target)
        assert stranger.exit_code == 255 and "Failover failed" in stranger.output
        assert "CN=stranger is not listed" in stranger.output
        assert cluster.actives() == [active]

        operator = haadmin(cluster, pki.client(OPERATOR), "-failover", source, target)
        assert operator.exit_code == 0, operator.output
        assert f"Failover to {target} successful" in operator.output
        cluster.wait_active(standby)
    finally:
        cluster.stop()
    assert cluster.conflicts() == []


# ---------------------------------------------------------------- the endpoint's own refusals


@dataclass
class Recording:
    """The endpoint's handlers: they note each call and succeed."""

    cedes: list[int] = field(default_factory=list)

    def cede_active(self, millis: int) -> CedeResult:
        self.cedes.append(millis)
        return CedeResult(service="127.0.0.1:1", was_active=False)

    def graceful_failover(self) -> FailoverResult:
        return FailoverResult(service="127.0.0.1:1")


@pytest.fixture
def endpoint(pki: Pki) -> Iterator[tuple[ZkfcEndpoint, Recording]]:
    handlers = Recording()
    security = EndpointSecurity(
        AccessPolicy(load_credentials(pki.tokens)),
        TlsSettings(cert=str(pki.server.cert), key=str(pki.server.key), ca=str(pki.ca.cert)),
        HttpBounds(16, HEADER_TIMEOUT, 5.0, 16 * 1024),
        MAX_BODY,
    )
    server = ZkfcEndpoint(("127.0.0.1", 0), handlers, security)
    server.start()
    try:
        yield server, handlers
    finally:
        server.stop()


def cede(endpoint: ZkfcEndpoint, tls: TlsSettings, **kwargs: object) -> httpx.Response:
    with httpx.Client(verify=tls.client_context(), timeout=10.0) as http:
        return http.post(f"https://{endpoint.address}{CEDE_PATH}", **kwargs)  # type: ignore[arg-type]


def test_only_a_certificate_the_token_file_makes_admin_may_call(endpoint, pki: Pki) -> None:
    server, handlers = endpoint
    anonymous = cede(server, TlsSettings(ca=str(pki.ca.cert)), json={"millis": 1})
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "unauthenticated"
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    stranger = cede(server, pki.client("stranger"), json={"millis": 2})
    assert stranger.status_code == 403 and stranger.json()["error"] == "forbidden"
    assert "CN=stranger" in stranger.json()["message"]
    submitter = cede(server, pki.client(SUBMITTER), json={"millis": 3})
    assert submitter.status_code == 403 and "role admin" in submitter.json()["message"]
    assert handlers.cedes == []

    operator = cede(server, pki.client(OPERATOR), json={"millis": 4})
    assert operator.status_code == 200 and operator.json()["was_active"] is False
    assert handlers.cedes == [4]


def test_each_call_and_each_refusal_is_an_audit_line_naming_the_certificate(
    endpoint, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="stratus.web.audit")
    server, _ = endpoint
    assert cede(server, pki.client(SUBMITTER), json={"millis": 3}).status_code == 403
    allowed = cede(server, pki.client(OPERATOR), json={"millis": 4}, headers={"X-Request-Id": "c1"})
    assert allowed.status_code == 200 and allowed.headers["x-request-id"] == "c1"

    def audited_now() -> list[dict[str, object]]:
        return [event_fields(r) for r in caplog.records if r.name == "stratus.web.audit"]

    # a line is written once the answer is sent: the client may see the answer first
    wait_until(lambda: len(audited_now()) == 2, WAIT, "two audit lines")
    audited = audited_now()
    assert [(a["principal"], a["role"], a["verb"], a["status"], a["error"]) for a in audited] == [
        (SUBMITTER, "submit", "cede-active", 403, "forbidden"),
        (OPERATOR, "admin", "cede-active", 200, "-"),
    ]
    assert audited[1]["request_id"] == "c1" and audited[1]["remote"] == "127.0.0.1"
    assert {a["daemon"] for a in audited} == {"zkfc"}


def test_an_oversized_body_is_413_unread(endpoint, pki: Pki) -> None:
    server, handlers = endpoint
    padding = "x" * (MAX_BODY * 4)
    declared = cede(server, pki.client(OPERATOR), json={"millis": 1, "pad": padding})
    assert declared.status_code == 413 and declared.json()["error"] == "request_too_large"
    assert "nimbus.max.request.bytes" in declared.json()["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: refused as the bytes pass the bound
        yield b'{"millis": 1, "pad": "'
        for _ in range(8):
            yield b"x" * MAX_BODY

    chunked = cede(server, pki.client(OPERATOR), content=chunks())
    assert chunked.status_code == 413 and chunked.json()["error"] == "request_too_large"
    assert handlers.cedes == []


def closed_by_the_server(sock: socket.socket | ssl.SSLSocket) -> bool:
    sock.settimeout(0.2)
    try:
        return sock.recv(4096) == b""
    except TimeoutError:
        return False
    except (ConnectionResetError, ssl.SSLError):
        return True


def test_a_slow_head_and_a_half_done_handshake_are_closed(endpoint, pki: Pki) -> None:
    server, _ = endpoint
    host, port = server.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10.0) as raw:
        raw.sendall(b"\x16\x03\x01")  # a TLS record header, and nothing more
        wait_until(lambda: closed_by_the_server(raw), 30, "the handshake closed")

    context = pki.client(OPERATOR).client_context()
    with (
        socket.create_connection((host, int(port)), timeout=10.0) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        tls.sendall(f"POST {CEDE_PATH} HTTP/1.1\r\nHost: zkfc\r\n".encode())  # never ends
        wait_until(lambda: closed_by_the_server(tls), 30, "the slow head closed")

    assert cede(server, pki.client(OPERATOR), json={"millis": 5}).status_code == 200


def test_the_probes_are_open_and_the_metrics_need_the_read_role(pki: Pki) -> None:
    metrics = ZkfcMetrics(
        health=lambda: HealthState.SERVICE_HEALTHY,
        active=lambda: True,
        zookeeper_connected=lambda: True,
    )
    security = EndpointSecurity(
        AccessPolicy(load_credentials(pki.tokens)),
        TlsSettings(cert=str(pki.server.cert), key=str(pki.server.key), ca=str(pki.ca.cert)),
    )
    server = ZkfcEndpoint(
        ("127.0.0.1", 0),
        Recording(),
        security,
        metrics=metrics,
        ready=lambda: {"zookeeper": False, "service_healthy": True},
    )
    server.start()
    base = f"https://{server.address}"
    try:
        with httpx.Client(verify=TlsSettings(ca=str(pki.ca.cert)).client_context()) as anonymous:
            assert anonymous.get(f"{base}/healthz").json() == {"daemon": "zkfc", "alive": True}
            not_ready = anonymous.get(f"{base}/readyz")
            assert not_ready.status_code == 503
            assert not_ready.json()["checks"] == {"zookeeper": False, "service_healthy": True}
            assert anonymous.get(f"{base}/metrics").status_code == 401
        with httpx.Client(verify=pki.client("stranger").client_context()) as stranger:
            assert stranger.get(f"{base}/metrics").status_code == 403
        with httpx.Client(verify=pki.client(SUBMITTER).client_context()) as reader:
            shown = reader.get(f"{base}/metrics")
            assert shown.status_code == 200
            assert "stratus_zkfc_service_active 1.0" in shown.text
            assert reader.post(f"{base}{CEDE_PATH}", json={"millis": 1}).status_code == 403
    finally:
        server.stop()
