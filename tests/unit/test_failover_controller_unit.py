"""The failover controller's decisions: ``plan`` alone, and the controller against fakes."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from stratus.coordination.active_standby import ActiveStandbyCallbacks
from stratus.ha.failover_controller import (
    Action,
    ControllerSettings,
    FailoverController,
    Snapshot,
    plan,
)
from stratus.ha.fencing import FenceTarget
from stratus.ha.health_monitor import HealthState
from stratus.ha.protocol import HAState, RequestSource, ServiceStatus, TransitionFailedError
from tests.harness.zkfixtures import wait_until

READY = ServiceStatus(state=HAState.STANDBY, ready_to_become_active=True, address="h:1")
NOT_READY = ServiceStatus(state=HAState.STANDBY, ready_to_become_active=False, address="h:1")
SUSPENDED = NOT_READY.model_copy(update={"term_suspended": True})


def snap(health: HealthState, *, status=READY, joined=False, given=None, now=0.0, nb=0.0):
    return Snapshot(health, status, joined, given, now, nb)


@pytest.mark.parametrize(
    ("snapshot", "action"),
    [
        (snap(HealthState.SERVICE_HEALTHY), Action.JOIN),
        (snap(HealthState.SERVICE_HEALTHY, joined=True), Action.NONE),
        (snap(HealthState.SERVICE_HEALTHY, now=1.0, nb=2.0), Action.WAIT),
        (snap(HealthState.SERVICE_HEALTHY, status=NOT_READY), Action.NONE),
        (snap(HealthState.SERVICE_HEALTHY, status=None), Action.NONE),
        (snap(HealthState.SERVICE_HEALTHY, status=NOT_READY, joined=True), Action.QUIT_CLEAN),
        (
            snap(HealthState.SERVICE_HEALTHY, status=NOT_READY, joined=True, given=HAState.ACTIVE),
            Action.QUIT_FENCE,
        ),
        (
            snap(HealthState.SERVICE_HEALTHY, status=SUSPENDED, joined=True, given=HAState.ACTIVE),
            Action.NONE,
        ),
        (snap(HealthState.SERVICE_HEALTHY, status=SUSPENDED, joined=True), Action.QUIT_CLEAN),
        (snap(HealthState.SERVICE_UNHEALTHY, joined=True), Action.QUIT_FENCE),
        (snap(HealthState.SERVICE_NOT_RESPONDING, joined=True), Action.QUIT_FENCE),
        (snap(HealthState.INITIALIZING, joined=True), Action.QUIT_CLEAN),
        (snap(HealthState.SERVICE_UNHEALTHY), Action.NONE),
    ],
)
def test_plan(snapshot: Snapshot, action: Action) -> None:
    assert plan(snapshot) is action


@dataclass
class FakeElector:
    calls: list[str] = field(default_factory=list)

    def join_election(self, app_data: bytes) -> None:
        self.calls.append(f"join {app_data.decode()}")

    def quit_election(self, need_fence: bool) -> None:
        self.calls.append(f"quit fence={need_fence}")


@dataclass
class FakeService:
    address: str = "h:1"
    refuse_active: bool = False
    epochs: list[int] = field(default_factory=list)

    def transition_to_active(self, epoch: int, source: RequestSource = RequestSource.ZKFC):
        if self.refuse_active:
            raise TransitionFailedError("cannot", self.address, "transition_failed")
        self.epochs.append(epoch)
        return ServiceStatus(state=HAState.ACTIVE, epoch=epoch)

    def transition_to_standby(self, source: RequestSource = RequestSource.ZKFC):
        return ServiceStatus(state=HAState.STANDBY)


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def controller(service: FakeService, elector: FakeElector, clock: Clock, fenced: list[str]):
    made: list[str] = []

    def make(_callbacks: ActiveStandbyCallbacks, member: str) -> FakeElector:
        made.append(member)
        return elector

    def fence(target: FenceTarget) -> bool:
        fenced.append(target.address)
        return True

    c = FailoverController(
        service,
        fence,
        ControllerSettings(rejoin_delay=60.0),
        make_elector=make,
        clock=clock,
    )
    c.start()
    return c, made


def settle(c: FailoverController) -> None:
    """Wait until the event thread has run everything posted so far."""
    assert c.flush(5)


def joined_controller(service: FakeService, elector: FakeElector, clock: Clock):
    """A controller whose service reported healthy and ready: it joined the election."""
    c, _ = controller(service, elector, clock, [])
    c.service_status(READY)
    c.enter_health_state(HealthState.SERVICE_HEALTHY)
    settle(c)
    return c


def test_healthy_joins_unhealthy_quits_with_fencing_and_active_carries_the_epoch() -> None:
    service, elector, clock = FakeService(), FakeElector(), Clock()
    fenced: list[str] = []
    c, made = controller(service, elector, clock, fenced)
    c.service_status(READY)
    c.enter_health_state(HealthState.SERVICE_HEALTHY)
    settle(c)
    assert made == ["h:1"] and elector.calls == ["join h:1"]
    c.become_active(7)
    assert service.epochs == [7] and c.given is HAState.ACTIVE
    c.enter_health_state(HealthState.SERVICE_UNHEALTHY)
    settle(c)
    assert elector.calls == ["join h:1", "quit fence=True"]
    assert c.fence_old_active(b"other:2") and fenced == ["other:2"]
    c.stop()


def test_a_failed_transition_to_active_raises_to_the_elector() -> None:
    service, elector, clock = FakeService(refuse_active=True), FakeElector(), Clock()
    c, _ = controller(service, elector, clock, [])
    with pytest.raises(TransitionFailedError):
        c.become_active(7)
    assert c.given is None
    c.stop()


def test_two_reports_of_a_wrong_state_quit_and_rejoin_only_after_the_delay() -> None:
    service, elector, clock = FakeService(), FakeElector(), Clock()
    c = joined_controller(service, elector, clock)
    c.become_standby()
    active = ServiceStatus(state=HAState.ACTIVE, ready_to_become_active=True, address="h:1")
    c.service_status(active)  # once: may cross a transition
    settle(c)
    assert elector.calls == ["join h:1"]
    c.service_status(active)
    settle(c)
    assert elector.calls == ["join h:1", "quit fence=True"]
    c.service_status(READY)  # healthy again, but within the rejoin delay
    settle(c)
    assert elector.calls == ["join h:1", "quit fence=True"]
    clock.now = 61.0
    c.service_status(READY)
    settle(c)
    assert elector.calls == ["join h:1", "quit fence=True", "join h:1"]
    c.stop()


def test_an_active_service_standing_by_for_its_suspended_session_is_left_be() -> None:
    """Standby with ``term_suspended``: its ZooKeeper connection dropped and the term comes
    back with it. A plain standby report, the same number of times, is a mismatch."""
    service, elector, clock = FakeService(), FakeElector(), Clock()
    c = joined_controller(service, elector, clock)
    c.become_active(7)
    for _ in range(5):
        c.service_status(SUSPENDED)
    settle(c)
    assert elector.calls == ["join h:1"] and c.given is HAState.ACTIVE
    c.service_status(READY)
    c.service_status(READY)
    settle(c)
    assert elector.calls == ["join h:1", "quit fence=True"]
    c.stop()


def test_a_not_ready_service_never_joins() -> None:
    service, elector, clock = FakeService(), FakeElector(), Clock()
    c, _ = controller(service, elector, clock, [])
    c.service_status(NOT_READY)
    c.enter_health_state(HealthState.SERVICE_HEALTHY)
    settle(c)
    assert elector.calls == []
    c.stop()


def test_a_failed_health_monitor_is_fatal() -> None:
    c, _ = controller(FakeService(), FakeElector(), Clock(), [])
    c.enter_health_state(HealthState.HEALTH_MONITOR_FAILED)
    wait_until(c.failed.is_set, 5, "the controller failed")
    assert c.failure is not None and "health monitor" in str(c.failure)
    c.stop()


def test_an_activation_that_crossed_a_quit_does_not_check_the_state_later() -> None:
    service, elector, clock = FakeService(), FakeElector(), Clock()
    c, _ = controller(service, elector, clock, [])
    c.service_status(READY)
    c.enter_health_state(HealthState.SERVICE_HEALTHY)
    c.enter_health_state(HealthState.SERVICE_UNHEALTHY)
    settle(c)
    assert elector.calls == ["join h:1", "quit fence=True"]
    c.become_active(7)  # the elector had called it just before the quit reached it
    assert service.epochs == [7] and c.given is None
    c.stop()


def test_cede_active_stands_down_without_a_fence_and_stays_out_until_told() -> None:
    service, elector, clock = FakeService(), FakeElector(), Clock()
    c = joined_controller(service, elector, clock)
    c.become_active(3)
    assert c.wait_active(0)

    assert c.cede_active(60.0, timeout=5) is True  # it was active: it went standby
    assert elector.calls == ["join h:1", "quit fence=False"]  # its breadcrumb goes: no fence
    assert c.given is None and not c.wait_active(0)
    c.service_status(READY)  # healthy and ready, but ceded for 60 s
    settle(c)
    assert elector.calls == ["join h:1", "quit fence=False"]

    assert c.cede_active(0.0, timeout=5) is False  # a cede of 0 ends the wait: rejoin now
    assert elector.calls == ["join h:1", "quit fence=False", "join h:1"]
    c.stop()


@pytest.mark.parametrize(
    ("made_active", "health", "killed"),
    [
        (True, HealthState.SERVICE_NOT_RESPONDING, True),
        (True, HealthState.SERVICE_UNHEALTHY, False),  # it answers: the graceful fence works
        (False, HealthState.SERVICE_NOT_RESPONDING, False),  # a standby is nobody's to fence
    ],
    ids=["active-silent", "active-unhealthy", "standby-silent"],
)
def test_a_supervised_active_that_stops_answering_is_killed_before_the_quit(
    made_active: bool, health: HealthState, killed: bool
) -> None:
    service, elector, order = FakeService(), FakeElector(), []

    def kill() -> bool:
        order.append("kill")
        return True

    elector.calls = order  # one list: the kill and the quit, in the order they happened
    c = FailoverController(
        service,
        lambda _target: True,
        ControllerSettings(rejoin_delay=60.0),
        make_elector=lambda _callbacks, _member: elector,
        kill_unresponsive=kill,
        clock=Clock(),
    )
    c.start()
    c.service_status(READY)
    c.enter_health_state(HealthState.SERVICE_HEALTHY)
    settle(c)
    if made_active:
        c.become_active(3)
    c.enter_health_state(health)
    settle(c)
    assert order == ["join h:1", *(["kill"] if killed else []), "quit fence=True"]
    c.stop()
