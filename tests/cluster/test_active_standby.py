"""Hadoop's ActiveStandbyElector scenarios (breadcrumb fencing, a lost session), real ZooKeeper."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from stratus.coordination import ActiveStandbyElector, Coordinator, ElectorState
from tests.harness.tcp_proxy import TcpProxy
from tests.harness.zkfixtures import wait_until

SESSION = 2.0


@dataclass
class Service:
    """Records what the elector asked of it; its fencer fails ``fence_failures`` times first."""

    fence_failures: int = 0
    calls: list[str] = field(default_factory=list)
    fenced: list[bytes] = field(default_factory=list)
    epochs: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def become_active(self, epoch: int) -> None:
        self.calls.append("active")
        self.epochs.append(epoch)

    def become_standby(self) -> None:
        self.calls.append("standby")

    def enter_neutral_mode(self) -> None:
        self.calls.append("neutral")

    def fence_old_active(self, data: bytes) -> bool:
        self.fenced.append(data)
        if self.fence_failures > 0:
            self.fence_failures -= 1
            return False
        return True

    def notify_fatal_error(self, message: str) -> None:
        self.calls.append(f"fatal {message}")


@pytest.fixture
def coordinators(zk_hosts: str) -> Iterator[list[Coordinator]]:
    started = [Coordinator.standalone(zk_hosts, session_timeout=SESSION).start() for _ in range(3)]
    yield started
    for coordinator in started:
        coordinator.close()


def elector(coordinator: Coordinator, name: str, service: Service) -> ActiveStandbyElector:
    return ActiveStandbyElector(coordinator, "ha", service, member_id=name, rejoin_delay=0.2)


def active_and_standby(
    coordinators: list[Coordinator], b_service: Service, data: tuple[bytes, bytes] = (b"a", b"b")
) -> tuple[ActiveStandbyElector, ActiveStandbyElector]:
    """Elector a active, elector b joined after it (so standby), b driving ``b_service``."""
    a = elector(coordinators[0], "a", Service())
    b = elector(coordinators[1], "b", b_service)
    a.join_election(data[0])
    wait_until(lambda: a.state is ElectorState.ACTIVE, 10, "a active")
    b.join_election(data[1])
    wait_until(lambda: b_service.calls == ["standby"], 10, "b standby")
    return a, b


def test_new_active_fences_the_old_one_with_its_breadcrumb(coordinators) -> None:
    b_service = Service()
    _, b = active_and_standby(coordinators, b_service, (b"a-host:8020", b"b-host:8020"))

    coordinators[0].close()  # a dies uncleanly: its breadcrumb stays

    wait_until(lambda: b.state is ElectorState.ACTIVE, 10, "b active")
    assert b_service.fenced == [b"a-host:8020"]
    breadcrumb, _ = coordinators[2].session.client.get("/stratus/groups/ha/breadcrumb")
    assert breadcrumb == b"b-host:8020"
    term = coordinators[1].leadership("ha")  # b is told the epoch of the term it just won
    assert term is not None and b_service.epochs == [term.epoch]


def test_fencing_failure_means_not_active_and_retry(coordinators) -> None:
    b_service = Service(fence_failures=2)
    _, b = active_and_standby(coordinators, b_service)
    coordinators[0].close()

    wait_until(lambda: len(b_service.fenced) >= 1, 10, "b tried to fence")
    assert "active" not in b_service.calls
    wait_until(lambda: b.state is ElectorState.ACTIVE, 10, "b active after retrying")
    assert b_service.fenced == [b"a", b"a", b"a"]
    assert b_service.calls.count("active") == 1


def test_quit_without_fence_deletes_breadcrumb_so_nobody_fences_us(coordinators) -> None:
    b_service = Service()
    a, b = active_and_standby(coordinators, b_service)

    a.quit_election(need_fence=False)

    wait_until(lambda: b.state is ElectorState.ACTIVE, 10, "b active")
    assert b_service.fenced == []


def test_quit_with_fence_keeps_breadcrumb_for_the_next_active(coordinators) -> None:
    b_service = Service()
    a, b = active_and_standby(coordinators, b_service)

    a.quit_election(need_fence=True)

    wait_until(lambda: b.state is ElectorState.ACTIVE, 10, "b active")
    assert b_service.fenced == [b"a"]


def test_quit_returns_once_resigned_while_callbacks_run(coordinators, caplog) -> None:
    """Leaving waits for the resign's on_revoked, a callback that takes the elector's lock:
    the quit must not hold that lock while it waits (it would wait out the connection
    timeout and log resign_pending)."""
    a, _ = active_and_standby(coordinators, Service())

    with caplog.at_level(logging.WARNING, logger="stratus.coordination"):
        a.quit_election(need_fence=True)

    assert a.state is ElectorState.INIT
    assert coordinators[0].get_candidates("ha") == ["b"]
    assert "resign_pending" not in caplog.text


def test_become_active_failure_drops_the_lock_and_keeps_the_breadcrumb(coordinators) -> None:
    class Refusing(Service):
        def become_active(self, epoch: int) -> None:
            self.calls.append("refused")
            raise RuntimeError("not ready")

    refusing, healthy = Refusing(), Service()
    a = elector(coordinators[0], "a", refusing)
    a.join_election(b"a")
    wait_until(lambda: "refused" in refusing.calls, 10, "a refused to become active")
    b = elector(coordinators[1], "b", healthy)
    b.join_election(b"b")

    wait_until(lambda: b.state is ElectorState.ACTIVE, 10, "b active")
    assert healthy.fenced == [b"a"], "a may be half-active: its breadcrumb must be fenced"
    assert a.state is not ElectorState.ACTIVE


def test_a_quit_without_zookeeper_keeps_the_breadcrumb_instead_of_failing(
    zk_hosts: str, coordinators: list[Coordinator]
) -> None:
    """A clean quit while ZooKeeper is out of reach (a health check failed because of the
    same partition) cannot delete the breadcrumb: it keeps it and returns, and the next
    active fences us, instead of raising once the session expires (which killed the
    failover controller)."""
    address, _, chroot = zk_hosts.partition("/")
    host, port = address.rsplit(":", 1)
    with TcpProxy(host, int(port)) as proxy:
        cut_off = Coordinator.standalone(
            f"127.0.0.1:{proxy.port}/{chroot}", session_timeout=SESSION
        ).start()
        try:
            b_service = Service()
            a = elector(cut_off, "a", Service())
            a.join_election(b"a")
            wait_until(lambda: a.state is ElectorState.ACTIVE, 10, "a active")
            b = elector(coordinators[1], "b", b_service)
            b.join_election(b"b")
            wait_until(lambda: b_service.calls == ["standby"], 10, "b standby")
            proxy.cut()
            wait_until(lambda: not cut_off.session.connected, 10, "a disconnected")

            a.quit_election(need_fence=False)

            wait_until(lambda: b.state is ElectorState.ACTIVE, 20, "b active")
            assert b_service.fenced == [b"a"]
        finally:
            cut_off.close()
