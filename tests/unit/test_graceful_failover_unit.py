"""The graceful failover's steps (``stratus.ha.graceful_failover``) against a fake controller.

The real thing, with real zkfcs and services, is ``tests/cluster/test_zkfc_failover.py``; these pin
the order of the steps: refuse before asking anyone, cede everyone, rejoin everyone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from stratus.ha.graceful_failover import GracefulFailover
from stratus.ha.health_monitor import HealthState
from stratus.ha.protocol import HAState, ServiceStatus
from stratus.ha.zkfc_protocol import FailoverFailedError, FailoverRefusedError

READY = ServiceStatus(state=HAState.STANDBY, ready_to_become_active=True)


@dataclass
class FakeController:
    address: str | None = "t:1"
    health: HealthState = HealthState.SERVICE_HEALTHY
    status: ServiceStatus | None = field(default_factory=lambda: READY)
    joined: bool = True
    given: HAState | None = HAState.STANDBY
    becomes_active: bool = True

    def wait_active(self, timeout: float) -> bool:
        return self.becomes_active


def failover(
    controller: FakeController,
    asked: list[tuple[str, int]],
    unreachable: str = "",
    active: str | None = None,
) -> GracefulFailover:
    def cede(endpoint: str, millis: int) -> None:
        if endpoint == unreachable:
            raise ConnectionError("refused")
        asked.append((endpoint, millis))

    others = {"a:1": "a:9", "b:1": "b:9"}
    return GracefulFailover(controller, lambda: others, cede, active=lambda: active, timeout=2.0)


def test_every_other_zkfc_cedes_then_rejoins_once_the_target_is_active() -> None:
    asked: list[tuple[str, int]] = []
    result = failover(FakeController(), asked).run()
    assert asked == [("a:9", 4000), ("b:9", 4000), ("a:9", 0), ("b:9", 0)]
    assert result.service == "t:1" and result.ceded == ["a:1", "b:1"]


def test_the_active_is_asked_last_so_no_standby_can_take_the_lock_it_gives_up() -> None:
    asked: list[tuple[str, int]] = []
    result = failover(FakeController(), asked, active="a:1").run()
    assert asked[:2] == [("b:9", 4000), ("a:9", 4000)]
    assert sorted(result.ceded) == ["a:1", "b:1"]


@pytest.mark.parametrize(
    ("controller", "why"),
    [
        (FakeController(health=HealthState.SERVICE_UNHEALTHY), "not currently healthy"),
        (FakeController(status=ServiceStatus(state=HAState.STANDBY)), "not ready"),
        (FakeController(joined=False), "not in the election"),
    ],
)
def test_an_unfit_target_refuses_before_asking_anyone(controller: FakeController, why: str) -> None:
    asked: list[tuple[str, int]] = []
    with pytest.raises(FailoverRefusedError, match=why):
        failover(controller, asked).run()
    assert asked == []


def test_an_active_target_succeeds_at_once() -> None:
    asked: list[tuple[str, int]] = []
    assert failover(FakeController(given=HAState.ACTIVE), asked).run().already_active
    assert asked == []


def test_a_target_that_does_not_become_active_lets_the_others_rejoin() -> None:
    asked: list[tuple[str, int]] = []
    with pytest.raises(FailoverFailedError, match="did not become active"):
        failover(FakeController(becomes_active=False), asked).run()
    assert asked[-2:] == [("a:9", 0), ("b:9", 0)]


def test_a_zkfc_that_cannot_cede_abandons_the_failover_and_the_ceded_rejoin() -> None:
    asked: list[tuple[str, int]] = []
    with pytest.raises(FailoverFailedError, match="b:1"):
        failover(FakeController(), asked, unreachable="b:9").run()
    assert asked == [("a:9", 4000), ("a:9", 0)]
