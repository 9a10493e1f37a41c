"""The zkfc's remaining behaviours, on real ZooKeeper with real dummy HA service processes.

Self-fencing after a session expiry, a preferred node with failback, and process
supervision. Controllers that the test must reach into (to expire a session) run in this
process with the real ``Zkfc`` wiring; the services are real processes holding the shared
lock of ``dummy_ha_service``, so two actives at once are recorded as a conflict.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stratus.ha.daemon import Zkfc
from stratus.ha.failover_controller import ControllerSettings
from stratus.ha.fencing import FenceTarget, listening_pids, parse_methods, port_open
from stratus.ha.health_monitor import HealthSettings
from stratus.ha.preference import PreferenceSettings
from stratus.ha.protocol import HAState
from stratus.ha.self_fence import self_fence_methods
from stratus.ha.session_watch import SessionWatch
from stratus.ha.settings import ZkfcSettings
from stratus.ha.supervision import restart_delay
from stratus.security.client_auth import NO_AUTH
from stratus.zk.session import SessionChange, SessionState, ZkSession, ZkSettings
from tests.cluster.test_stress import expire_session
from tests.harness.tcp_proxy import TcpProxy
from tests.harness.zkfc_cluster import SESSION, WAIT, Node, ZkfcCluster
from tests.harness.zkfixtures import wait_until

HARNESS = Path(__file__).parents[1] / "harness"
FENCE_WHEN_STANDBY = f"shell({sys.executable} {HARNESS / 'fence_when_standby.py'} 4)"


def settings(address: str, fencing: str) -> ZkfcSettings:
    return ZkfcSettings(
        target=FenceTarget.parse(address),
        group="svc",
        rpc_timeout=1.0,
        health=HealthSettings(check_interval=0.1, max_backoff=0.5),
        controller=ControllerSettings(rejoin_delay=0.5),
        fencing_methods=parse_methods(fencing),
        fencing_timeout=5.0,
        graceful_timeout=1.0,
    )


class InProcess:
    """Real services (processes) under zkfcs that run in this process."""

    def __init__(self, zk_hosts: str, tmp_path: Path) -> None:
        self.zk_hosts = zk_hosts
        self.cluster = ZkfcCluster(zk_hosts, tmp_path, [])
        self.zkfcs: dict[str, Zkfc] = {}

    def start(self, name: str, fencing: str, hosts: str | None = None, **changes: object) -> Zkfc:
        if name not in self.cluster.nodes:
            self.cluster.start_service(name)
        node = self.cluster.nodes[name]
        session = ZkSession(ZkSettings(hosts or self.zk_hosts, "/stratus", SESSION, 15.0))
        zkfc = Zkfc(
            dataclasses.replace(settings(node.address, fencing), **changes),  # type: ignore[arg-type]
            session,
            NO_AUTH,
        )
        self.zkfcs[name] = zkfc
        zkfc.start()
        return zkfc

    def expire(self, name: str) -> None:
        client_id = self.zkfcs[name].session.client.client_id
        assert client_id is not None
        assert expire_session(self.zk_hosts, *client_id)

    def stop(self) -> None:
        for zkfc in self.zkfcs.values():
            zkfc.stop()
        self.cluster.stop()


@pytest.fixture
def proxy(zk_hosts: str) -> Iterator[tuple[TcpProxy, str]]:
    """A proxy to ZooKeeper that the test cuts, and the connect string through it."""
    host, _, chroot = zk_hosts.partition("/")
    zk_host, zk_port = host.rsplit(":", 1)
    with TcpProxy(zk_host, int(zk_port)) as proxy:
        yield proxy, f"127.0.0.1:{proxy.port}/{chroot}"


@pytest.fixture
def nodes(zk_hosts: str, tmp_path: Path) -> Iterator[InProcess]:
    nodes = InProcess(zk_hosts, tmp_path)
    yield nodes
    nodes.stop()
    assert nodes.cluster.conflicts() == [], "two services were active at once"


def test_a_partitioned_active_stands_down_after_a_session_timeout_so_another_takes_over(
    proxy, nodes
) -> None:
    # b can fence a only once a stands down by itself (the partition hides a from b).
    cut, hosts = proxy
    a = nodes.start("a", FENCE_WHEN_STANDBY, hosts=hosts)
    nodes.cluster.wait_active("a")
    b = nodes.start("b", FENCE_WHEN_STANDBY)
    wait_until(lambda: b.controller.given is HAState.STANDBY, WAIT, "b standby")

    cut.cut()  # a hears nothing more from ZooKeeper, not even that its session expired
    nodes.cluster.wait_active("b", timeout=WAIT + 2 * SESSION)
    assert nodes.cluster.state("a") == "standby"
    assert a.failure is None and b.failure is None
    events = [event[:2] for event in nodes.cluster.events()]
    assert events.index(("standby", "a")) < events.index(("active", "b"))
    cut.heal()  # a's zkfc then stops at once (cut off, it would wait on ZooKeeper)


def test_an_expired_service_that_will_not_stand_down_is_stopped_by_the_local_fence(
    nodes,
) -> None:
    a = nodes.start("a", "process")  # its self-fence: graceful, then process
    nodes.cluster.wait_active("a")
    nodes.start("b", FENCE_WHEN_STANDBY)  # b itself kills nothing
    nodes.cluster.control("a", refuse_standby=True)
    wait_until(lambda: a.controller.given is HAState.ACTIVE, WAIT, "a given active")

    nodes.expire("a")
    nodes.cluster.wait_active("b")
    assert nodes.cluster.nodes["a"].service.wait(WAIT) == -9  # killed by its own zkfc


PREFERRED = PreferenceSettings(preferred=True)
NOT_PREFERRED = PreferenceSettings(preferred=False, nonpreferred_join_delay=1.0)


def events(caplog: pytest.LogCaptureFixture, what: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if f"event={what} " in r.getMessage()]


def test_a_non_preferred_node_waits_before_joining_while_the_preferred_one_campaigns(
    nodes, caplog
) -> None:
    caplog.set_level(logging.INFO)
    nodes.start("a", "graceful, process", preference=PREFERRED)
    nodes.cluster.wait_active("a")
    b = nodes.start("b", "graceful, process", preference=NOT_PREFERRED)
    wait_until(lambda: b.controller.given is HAState.STANDBY, WAIT, "b standby")
    assert events(caplog, "join_deferred") == [
        f"event=join_deferred service={nodes.cluster.nodes['b'].address} secs=1 why=preferred_node"
    ]
    assert nodes.cluster.actives() == ["a"]


def test_the_preferred_node_back_healthy_takes_over_by_graceful_failback(nodes, caplog) -> None:
    caplog.set_level(logging.INFO)
    nodes.start("a", "graceful, process", preference=PREFERRED)
    nodes.cluster.wait_active("a")
    b = nodes.start("b", "graceful, process", preference=NOT_PREFERRED)
    wait_until(lambda: b.controller.given is HAState.STANDBY, WAIT, "b standby")
    nodes.cluster.control("a", healthy=False)
    nodes.cluster.wait_active("b")
    fences_before = len(events(caplog, "fence_old_active"))

    nodes.cluster.control("a", healthy=True)  # the preferred node is back
    nodes.cluster.wait_active("a")
    assert len(events(caplog, "fence_old_active")) == fences_before  # no fence in a failback
    assert events(caplog, "cede")[-1].endswith("was_active=True need_fence=False")
    wait_until(lambda: b.controller.given is HAState.STANDBY, WAIT, "b rejoined as standby")
    assert nodes.cluster.actives() == ["a"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def processes(zk_hosts: str, tmp_path: Path) -> Iterator[ZkfcCluster]:
    cluster = ZkfcCluster(zk_hosts, tmp_path, [])
    yield cluster
    cluster.stop()
    assert cluster.conflicts() == [], "two services were active at once"


def start_supervised(cluster: ZkfcCluster, name: str) -> Node:
    """A ``stratus zkfc --supervise`` process that runs the dummy service as its child."""
    port = free_port()
    service = [sys.executable, "-m", "tests.harness.dummy_ha_service", name, str(cluster.shared)]
    log = (cluster.logs / f"zkfc-{name}.log").open("ab")
    argv = cluster.zkfc_argv(Node(name, None, port))  # type: ignore[arg-type]
    # Restarted after the other node took over (a nimbus takes longer than that to start).
    argv += ["-c", "ha.zkfc.supervise.restart.backoff.secs=3"]
    zkfc = subprocess.Popen(
        [*argv, "--supervise", "--", *service, "--port", str(port)], stdout=log, stderr=log
    )
    node = cluster.nodes[name] = Node(name, zkfc, port, zkfc)  # type: ignore[arg-type]
    return node


@pytest.mark.slow
def test_a_supervised_service_killed_fails_over_then_restarts_and_rejoins_as_standby(
    processes,
) -> None:
    cluster = processes
    a = start_supervised(cluster, "a")
    cluster.wait_active("a")
    cluster.start_service("b")
    cluster.start_zkfc("b")
    wait_until(lambda: "service_standby" in cluster.zkfc_log("b"), WAIT, "b made standby")
    (first,) = listening_pids(a.port)

    os.kill(first, signal.SIGKILL)
    cluster.wait_active("b")
    wait_until(lambda: cluster.state("a") == "standby", WAIT, "a restarted, standby")
    (second,) = listening_pids(a.port)
    assert second != first
    assert "event=supervised_started" in cluster.zkfc_log("a")
    assert cluster.actives() == ["b"]

    assert a.zkfc is not None
    a.zkfc.terminate()  # stopping the zkfc stops its child
    assert a.zkfc.wait(WAIT) == 0
    assert not port_open(FenceTarget.parse(a.address), 1.0)


def test_self_fencing_uses_graceful_then_the_methods_that_stop_a_process() -> None:
    methods = parse_methods("epoch, graceful, shell(/bin/fence), process")
    assert [str(spec) for spec in self_fence_methods(methods)] == [
        "graceful",
        "shell(/bin/fence)",
        "process",
    ]


def test_the_restart_backoff_doubles_up_to_thirty_times_its_base() -> None:
    assert [restart_delay(1.0, n) for n in (1, 2, 3, 5)] == [1.0, 2.0, 4.0, 16.0]
    assert restart_delay(1.0, 10) == 30.0


class FakeSession:
    """The part of ``ZkSession`` that ``SessionWatch`` reads (unit tests of its timing)."""

    granted_session_timeout = 0.2
    session_id = 1

    def __init__(self) -> None:
        self.state = SessionState.CONNECTED
        self.listeners: list[Callable[[SessionChange], None]] = []

    def add_listener(self, listener: Callable[[SessionChange], None]) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[SessionChange], None]) -> None:
        self.listeners.remove(listener)

    def move(self, state: SessionState) -> None:
        change = SessionChange(self.state, state)
        self.state = state
        for listener in self.listeners:
            listener(change)


def watched() -> tuple[FakeSession, SessionWatch, threading.Event]:
    session, lost = FakeSession(), threading.Event()
    watch = SessionWatch(session, lost.set)  # type: ignore[arg-type]
    watch.start()
    return session, watch, lost


def test_a_session_suspended_for_a_whole_session_timeout_is_presumed_lost() -> None:
    session, watch, lost = watched()
    session.move(SessionState.SUSPENDED)
    assert watch.is_armed()
    assert lost.wait(WAIT)


def test_a_suspension_that_ends_before_the_session_timeout_changes_nothing() -> None:
    session, watch, lost = watched()
    session.move(SessionState.SUSPENDED)
    assert watch.is_armed()
    session.move(SessionState.CONNECTED)  # resumed: the same session
    assert not watch.is_armed() and not lost.is_set()


def test_an_expired_session_is_lost_at_once() -> None:
    session, watch, lost = watched()
    session.move(SessionState.SUSPENDED)
    session.move(SessionState.EXPIRED)
    assert lost.is_set() and not watch.is_armed()
    watch.stop()
