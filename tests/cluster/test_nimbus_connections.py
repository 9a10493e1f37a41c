"""A real nimbus process under a flood of connections that never send a request.

Before the bounds, about a thousand idle connections to the package server exhausted the
nimbus's file descriptors: it lost its ZooKeeper session and its log grew by hundreds of
megabytes. Now the API closes what passes ``nimbus.http.max.connections`` and what sends no
request head in time, and the package server refuses what passes
``nimbus.code.max.connections`` with 503, while the nimbus keeps its session and its log small.
"""

from __future__ import annotations

import contextlib
import resource
import socket
from collections.abc import Iterator

import httpx
import pytest

from stratus.security.client_auth import ClientAuth
from stratus.zk.paths import ClusterPaths
from stratus.zk.ports import pick_free_port
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.secure_cluster import (
    ADMIN,
    READ,
    SecureCluster,
    bearer,
    secure_cluster,
    token_file,
)
from tests.harness.zkfixtures import kazoo_client, wait_until

IDLE_CONNECTIONS = 2000
CODE_MAX_CONNECTIONS = 64
LOG_BOUND_BYTES = 256 * 1024  # the whole log of the flooded nimbus, start-up included
REQUEST = b"GET /api/v1/leader HTTP/1.1\r\nHost: nimbus\r\n\r\n"
FLOODER = "127.0.0.2"  # another address of the loopback interface than the normal clients'


def raise_own_open_files_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, needed), hard))


@contextlib.contextmanager
def idle_connections(
    port: int, count: int, source: str = "127.0.0.1"
) -> Iterator[list[socket.socket]]:
    """``count`` connections to ``port`` from the address ``source`` that send nothing; all
    closed when the block ends."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sockets.append(
                socket.create_connection(
                    ("127.0.0.1", port), timeout=10.0, source_address=(source, 0)
                )
            )
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def answer_so_far(sock: socket.socket) -> bytes | None:
    """What the server sent on ``sock`` (b"" once it closed), None while it sent nothing."""
    sock.setblocking(False)
    try:
        return sock.recv(4096)
    except BlockingIOError:
        return None
    except ConnectionResetError:
        return b""


def single_nimbus(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory, name: str, *extra: str
) -> Iterator[NimbusCluster]:
    logs = tmp_path_factory.mktemp(name)
    with nimbus_cluster(zk_server.connect_string, logs, name, size=1, extra=extra) as cluster:
        cluster.wait_for_agreed_leader()
        yield cluster


@pytest.fixture(scope="module")
def code_port() -> int:
    return pick_free_port()


@pytest.fixture(scope="module")
def flooded(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory, code_port: int
) -> Iterator[NimbusCluster]:
    """One nimbus whose idle API connections stay open for the whole test."""
    yield from single_nimbus(
        zk_server,
        tmp_path_factory,
        "nimbus-flood",
        "-c", f"nimbus.code.port={code_port}",
        "-c", f"nimbus.code.max.connections={CODE_MAX_CONNECTIONS}",
        "-c", "nimbus.http.header.timeout.secs=120",
    )  # fmt: skip


def test_two_thousand_idle_connections_leave_the_session_and_normal_clients_alone(
    flooded: NimbusCluster, zk_server: ZooKeeperServer, code_port: int
) -> None:
    raise_own_open_files_limit(2 * IDLE_CONNECTIONS + 1024)
    nimbus = flooded.nimbuses[0]
    registration = ClusterPaths(flooded.root).nimbus(nimbus.address)
    with kazoo_client(zk_server.connect_string) as zk:
        owner = zk.get(registration)[1].ephemeralOwner
        with (
            idle_connections(nimbus.port, IDLE_CONNECTIONS, FLOODER),
            idle_connections(code_port, IDLE_CONNECTIONS, FLOODER) as to_code,
        ):
            # the package server holds its bounds and refuses the rest with 503 at once
            def refused() -> int:
                answers = [answer_so_far(sock) for sock in to_code]
                return sum(1 for a in answers if a is not None and (a == b"" or b" 503 " in a))

            wait_until(
                lambda: refused() >= IDLE_CONNECTIONS - CODE_MAX_CONNECTIONS,
                30,
                "the package server to refuse the connections past its bound",
            )
            # a normal client still gets the summary and can submit
            summary = httpx.get(f"{nimbus.url}/api/v1/cluster", timeout=10.0)
            assert summary.status_code == 200
            submitted = httpx.post(
                f"{nimbus.url}/api/v1/pipelines",
                data={"name": "under-flood"},
                files={"package": valid_package("under-flood")},
                timeout=30.0,
            )
            assert submitted.status_code == 201, submitted.text
        # the same session registered it all along: no expiry, no new session
        assert zk.get(registration)[1].ephemeralOwner == owner
    assert nimbus.is_running()
    assert nimbus.log_path.stat().st_size < LOG_BOUND_BYTES


@pytest.fixture(scope="module")
def bounded(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NimbusCluster]:
    """One nimbus that holds at most 20 API connections, with a long header timeout."""
    yield from single_nimbus(
        zk_server,
        tmp_path_factory,
        "nimbus-bounded",
        "-c", "nimbus.http.max.connections=20",
        "-c", "nimbus.http.header.timeout.secs=120",
    )  # fmt: skip


def test_api_connections_past_the_bound_are_closed_and_the_rest_served(
    bounded: NimbusCluster,
) -> None:
    nimbus = bounded.nimbuses[0]
    with idle_connections(nimbus.port, 30) as sockets:
        closed = []
        for sock in sockets:
            try:
                sock.sendall(REQUEST)
                answer = sock.recv(4096)
            except OSError:
                answer = b""
            # past the bound of pending connections: closed without an answer; past the
            # bound of admitted ones (the harness's kept-alive clients hold some): 503
            closed.append(answer == b"" or answer.startswith(b"HTTP/1.1 503 "))
            if answer:
                assert answer.startswith((b"HTTP/1.1 200 ", b"HTTP/1.1 503 "))
        assert sum(closed) >= 10
        assert not all(closed)  # within the bounds: served


@pytest.fixture(scope="module")
def impatient(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NimbusCluster]:
    """One nimbus that waits at most a second for a request head."""
    yield from single_nimbus(
        zk_server, tmp_path_factory, "nimbus-impatient", "-c", "nimbus.http.header.timeout.secs=1"
    )


@pytest.mark.parametrize("sent", [b"", b"GET /api/v1/leader HTTP/1.1\r\nHost: n"])
def test_a_connection_without_a_whole_request_head_is_closed(
    impatient: NimbusCluster, sent: bytes
) -> None:
    nimbus = impatient.nimbuses[0]
    with idle_connections(nimbus.port, 1) as (sock,):
        sock.sendall(sent)
        wait_until(lambda: answer_so_far(sock) == b"", 30, "the nimbus to close the connection")


@pytest.fixture(scope="module")
def guarded_code_port() -> int:
    return pick_free_port()


@pytest.fixture(scope="module")
def guarded(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory, guarded_code_port: int
) -> Iterator[SecureCluster]:
    """One nimbus with a token file whose unauthenticated connections wait two minutes for a
    request head, so that only the slot and per-address rules can free a place."""
    directory = tmp_path_factory.mktemp("nimbus-guarded")
    extra = [
        "-c", f"nimbus.auth.tokens.file={token_file(directory)}",
        "-c", f"nimbus.code.port={guarded_code_port}",
        "-c", "nimbus.code.head.timeout.secs=120",
        "-c", "nimbus.code.idle.secs=120",
        "-c", "nimbus.http.header.timeout.secs=120",
        "-c", "nimbus.http.max.connections=64",
        "-c", "nimbus.http.max.connections.per.address=16",
    ]  # fmt: skip
    with secure_cluster(
        zk_server.connect_string, directory, "nimbus-guarded", extra=extra,
        auth=ClientAuth(ADMIN), size=1,
    ) as cluster:  # fmt: skip
        yield cluster


def test_idle_connections_from_one_address_leave_authenticated_callers_their_slots(
    guarded: SecureCluster, guarded_code_port: int
) -> None:
    """More idle connections from one address than the package server (256) and the API
    (64) have slots: an authenticated caller from another address is still served."""
    raise_own_open_files_limit(1024 + 2 * IDLE_CONNECTIONS)
    nimbus = guarded.leader()
    submitted = guarded.http.post(
        f"{nimbus.url}/api/v1/pipelines",
        data={"name": "slots"},
        files={"package": valid_package("slots")},
    )
    assert submitted.status_code == 201, submitted.text
    package = f"http://127.0.0.1:{guarded_code_port}/api/v1/code/{submitted.json()['digest']}"
    with (
        idle_connections(guarded_code_port, 300, FLOODER),
        idle_connections(nimbus.port, 300, FLOODER),
    ):

        def fetched() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                answer = httpx.get(package, headers=bearer(READ), timeout=5.0)
                return answer.status_code == 200 and answer.content[:2] == b"PK"
            return False

        def summary_read() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                answer = httpx.get(f"{nimbus.url}/api/v1/cluster", headers=bearer(READ))
                return answer.status_code == 200
            return False

        wait_until(fetched, 30, "an authenticated fetch of the package")
        wait_until(summary_read, 30, "an authenticated read of the API")
        # the flood's own connections got no slot: a request on one of them is refused
        unauthenticated = httpx.get(package, timeout=5.0)
        assert unauthenticated.status_code == 401
