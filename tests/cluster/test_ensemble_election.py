"""Elections over a real 3-server ZooKeeper quorum while its members fail."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stratus.coordination import CoordinationEvent, Coordinator, ErrorKind
from tests.harness.zkfixtures import wait_until

pytestmark = pytest.mark.slow

SESSION = 4.0


@pytest.fixture
def pair(zk_ensemble, request) -> Iterator[tuple[Coordinator, Coordinator]]:
    root = f"/ensemble/{request.node.name}"
    a = Coordinator.standalone(
        zk_ensemble.connect_string, root=root, session_timeout=SESSION
    ).start()
    b = Coordinator.standalone(
        zk_ensemble.connect_string, root=root, session_timeout=SESSION
    ).start()
    yield a, b
    for coordinator in (a, b):
        coordinator.close()


def test_one_server_lost_elections_go_on(zk_ensemble, pair) -> None:
    a, b = pair
    a.nominate("g", "a", timeout=10)
    b.nominate_async("g", "b", lambda _t: None)
    wait_until(lambda: a.get_candidates("g") == ["a", "b"], 10, "b queued")

    zk_ensemble.servers[0].kill()
    a.unnominate("g")

    wait_until(lambda: b.is_leader("g"), SESSION * 3, "b elected with two of three servers")
    b.leadership("g").transaction().create("/two-of-three", b"b").commit()
    assert b.get_leader("g") == "b"


def test_two_servers_lost_errors_then_recovery(zk_ensemble, pair) -> None:
    a, b = pair
    errors: list[CoordinationEvent] = []
    a.subscribe_errors("g", errors.append)
    a.nominate("g", "a", timeout=10)
    b.nominate_async("g", "b", lambda _t: None)

    zk_ensemble.servers[1].kill()
    zk_ensemble.servers[2].kill()

    wait_until(
        lambda: any(e.kind is ErrorKind.CONNECTION_SUSPENDED for e in errors),
        SESSION * 2,
        "connection trouble reported",
    )
    wait_until(
        lambda: not a.is_leader("g") and not b.is_leader("g"),
        SESSION,
        "nobody believes it leads without a quorum",
    )

    zk_ensemble.servers[1].start()
    wait_until(lambda: a.is_leader("g") != b.is_leader("g"), 30, "one leader after recovery")
    leader = a if a.is_leader("g") else b
    leader.leadership("g").transaction().create("/recovered", b"").commit()
