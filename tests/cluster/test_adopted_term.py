"""A term won by one session (a failover controller) and adopted by another (its service),
on real ZooKeeper: the adoption checks the epoch and the leader record, and the adopted
term's writes are fenced by that epoch like the winner's own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stratus.coordination import Coordinator
from stratus.coordination.errors import LeadershipLostError, TermMismatchError
from stratus.coordination.leadership import Leadership
from tests.harness.zkfixtures import wait_until

SESSION = 2.0
GROUP = "service"


@pytest.fixture
def coordinators(zk_hosts: str) -> Iterator[list[Coordinator]]:
    started = [Coordinator.standalone(zk_hosts, session_timeout=SESSION).start() for _ in range(3)]
    yield started
    for coordinator in started:
        coordinator.close()


def always(_term: Leadership) -> bool:
    return True


def test_an_adopted_term_writes_under_the_won_epoch(coordinators: list[Coordinator]) -> None:
    controller, service, _ = coordinators
    won = controller.nominate(GROUP, "svc-a", timeout=10)
    term = service.adopt_term(GROUP, "svc-a", won.epoch, holds=always)
    assert term.epoch == won.epoch and term.is_leader
    with term.transaction() as tx:
        tx.create(f"{service.root}/written-by-a", b"a")
    assert service.session.client.get(f"{service.root}/written-by-a")[0] == b"a"


def test_adopting_a_term_of_another_member_or_epoch_is_refused(
    coordinators: list[Coordinator],
) -> None:
    controller, service, _ = coordinators
    won = controller.nominate(GROUP, "svc-a", timeout=10)
    with pytest.raises(TermMismatchError) as foreign:
        service.adopt_term(GROUP, "svc-b", won.epoch, holds=always)
    assert foreign.value.leader == "svc-a"
    with pytest.raises(TermMismatchError) as stale:
        service.adopt_term(GROUP, "svc-a", won.epoch - 1, holds=always)
    assert stale.value.current_epoch == won.epoch


def test_adopting_in_a_group_nobody_ever_led_is_refused(coordinators: list[Coordinator]) -> None:
    with pytest.raises(TermMismatchError, match="nobody"):
        coordinators[1].adopt_term("never-elected", "svc-a", 1, holds=always)


def test_an_adopted_term_is_fenced_once_another_member_wins(
    coordinators: list[Coordinator],
) -> None:
    first, service, second = coordinators
    won = first.nominate(GROUP, "svc-a", timeout=10)
    term = service.adopt_term(GROUP, "svc-a", won.epoch, holds=always)
    second.nominate_async(GROUP, "svc-b", lambda _t: None)
    first.unnominate(GROUP)  # svc-b's controller wins the next epoch
    path = f"{service.root}/late-write"
    wait_until(lambda: second.is_leader(GROUP), 10, "the second member to win")
    with pytest.raises(LeadershipLostError, match="epoch has moved"), term.transaction() as tx:
        tx.create(path, b"stale")
    assert service.session.client.exists(path) is None


def test_an_adopted_term_holds_only_while_its_holder_says_so(
    coordinators: list[Coordinator],
) -> None:
    controller, service, _ = coordinators
    won = controller.nominate(GROUP, "svc-a", timeout=10)
    granted = [True]
    term = service.adopt_term(GROUP, "svc-a", won.epoch, holds=lambda _t: granted[0])
    granted[0] = False
    assert not term.is_leader
    with pytest.raises(LeadershipLostError), term.transaction() as tx:
        tx.create(f"{service.root}/revoked-write", b"x")
    assert service.session.client.exists(f"{service.root}/revoked-write") is None
