"""The leader lock of a nimbus under a zkfc (``GrantedLock``), with the leadership controller
driven by hand: a granted term is acted on, a revoked one stops holding at once, and a
controller that steps down ends the grant (pure logic: fakes for the readiness and duties)."""

from __future__ import annotations

import math
from typing import cast

from kazoo.client import KazooClient

from stratus.coordination.leadership import Leadership
from stratus.coordination.records import RevokeReason
from stratus.nimbus.leadership.granted_lock import GrantedLock
from stratus.nimbus.leadership.leadership_controller import ControllerState, LeadershipController
from tests.unit.test_leadership_controller import (
    ADDRESS,
    SETTINGS,
    FakeClock,
    FakeDuties,
    FakeReadiness,
)


def granted_term(lock: GrantedLock, epoch: int) -> Leadership:
    return Leadership(
        group="nimbus",
        member_id=ADDRESS,
        slot=0,
        epoch=epoch,
        epoch_path="/stratus/groups/nimbus/epochs/0",
        slot_path="/stratus/groups/nimbus/slots/0",
        _client=cast(KazooClient, None),
        _holds=lock.holds,
        _lease_end=lambda: math.inf,
    )


def controller_with(lock: GrantedLock, readiness: FakeReadiness) -> LeadershipController:
    return LeadershipController(
        lock, readiness, FakeDuties(), SETTINGS, address=ADDRESS, clock=FakeClock()
    )


def drain(controller: LeadershipController) -> None:
    for _ in range(5):
        controller.step()


def test_a_granted_term_is_acted_on_and_a_revoked_one_stops_holding_at_once() -> None:
    lock, readiness = GrantedLock(), FakeReadiness()
    controller = controller_with(lock, readiness)
    drain(controller)  # may lead: it "joins", which writes nothing anywhere
    assert lock.in_queue() and controller.state is ControllerState.QUEUED
    term = granted_term(lock, 7)
    lock.grant(term)
    controller.elected(term)
    drain(controller)
    assert controller.accepted_term() is term
    assert lock.revoke() is term
    assert controller.accepted_term() is None  # before the controller hears of it
    controller.revoked(term, RevokeReason.RESIGNED)
    drain(controller)
    assert controller.state is ControllerState.QUEUED


def test_a_controller_that_steps_down_ends_the_grant() -> None:
    lock, readiness = GrantedLock(), FakeReadiness()
    controller = controller_with(lock, readiness)
    drain(controller)
    term = granted_term(lock, 3)
    lock.grant(term)
    readiness.lead = "missing_code(etl)"
    controller.elected(term)
    drain(controller)
    assert not lock.holds(term) and not term.is_leader
    assert controller.accepted_term() is None and readiness.fetches == 1
