"""The nimbus's leadership controller, driven by hand with fakes on each of its interfaces
and a clock in the test's hands; one test per scenario of its transition table.

What is proved: a nimbus queues only once it may lead; elected without the code it gives the
lock back and fetches; elected with it, it leads and runs the duties with its term, on every
cluster change and on its timer; a leader that finds code missing steps down; a revoked or
superseded leader stops acting; stop leaves the queue at once, even during a duty round; and
neither a raising check nor a raising duty stops the controller.
"""

from __future__ import annotations

import math
import threading
from typing import Any, cast

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from stratus.api.errors import NotLeaderError
from stratus.coordination.errors import LeadershipLostError
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import LeaderChange, RevokeReason
from stratus.nimbus.duties.round import DutyRound
from stratus.nimbus.leadership.leadership_controller import ControllerState, LeadershipController
from stratus.nimbus.metrics import NimbusMetrics
from stratus.nimbus.settings import LeadershipSettings
from tests.harness.zkfixtures import wait_until

ADDRESS = "127.0.0.1:6627"
SETTINGS = LeadershipSettings(lead_check_secs=1.0, monitor_freq_secs=5.0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakeLock:
    """The leader lock queue: joined or not."""

    def __init__(self) -> None:
        self.queued = False
        self.joins = 0
        self.leaves = 0

    def join(self) -> None:
        self.joins += 1
        self.queued = True

    def leave(self) -> None:
        self.leaves += 1
        self.queued = False

    def in_queue(self) -> bool:
        return self.queued


class FakeReadiness:
    """Answers that the test sets: None (may) or a reason (may not)."""

    def __init__(self) -> None:
        self.queue: str | None = None
        self.lead: str | Exception | None = None
        self.keep: str | Exception | None = None
        self.fetches = 0

    def to_queue(self) -> str | None:
        return self.queue

    def to_lead(self) -> str | None:
        if isinstance(self.lead, Exception):
            raise self.lead
        return self.lead

    def to_keep_leading(self) -> str | None:
        if isinstance(self.keep, Exception):
            raise self.keep
        return self.keep

    def fetch_missing(self) -> None:
        self.fetches += 1


class FakeDuties:
    def __init__(self) -> None:
        self.epochs: list[int] = []

    def __call__(self, term: Leadership) -> None:
        self.epochs.append(term.epoch)


def term(epoch: int, *, held: bool = True) -> Leadership:
    return Leadership(
        group="nimbus",
        member_id=ADDRESS,
        slot=0,
        epoch=epoch,
        epoch_path="/stratus/groups/nimbus/epochs/0",
        slot_path="/stratus/groups/nimbus/slots/0",
        _client=cast(KazooClient, None),
        _holds=lambda _t: held,
        _lease_end=lambda: math.inf,
    )


class Harness:
    def __init__(self, duties: Any = None) -> None:
        self.clock = FakeClock()
        self.lock = FakeLock()
        self.readiness = FakeReadiness()
        self.duties = duties if duties is not None else FakeDuties()
        self.gained: list[int] = []
        self.lost: list[int] = []
        self.told: list[tuple[str, int]] = []  # every grant and revocation, as it came
        self.controller = LeadershipController(
            self.lock,
            self.readiness,
            self.duties,
            SETTINGS,
            address=ADDRESS,
            on_gained=lambda t: self.gained.append(t.epoch),
            on_lost=lambda t: self.lost.append(t.epoch),
            on_granted=lambda t: self.told.append(("granted", t.epoch)),
            on_revoked=lambda t, r: self.told.append((r.value, t.epoch)),
            clock=self.clock,
        )

    def state(self) -> ControllerState:
        return self.controller.state

    def step(self) -> None:
        self.controller.step()

    def after(self, secs: float) -> None:
        self.clock.now += secs
        self.step()

    def leading(self, epoch: int = 1) -> Leadership:
        self.step()  # the first tick: queue
        won = term(epoch)
        self.controller.elected(won)
        self.step()
        assert self.state() is ControllerState.LEADING
        return won


def test_a_nimbus_queues_only_once_it_holds_the_code():
    h = Harness()
    h.readiness.queue = "missing_code(etl)"
    h.step()
    assert h.state() is ControllerState.WAITING and h.lock.joins == 0
    h.after(0.5)
    assert h.lock.joins == 0
    h.readiness.queue = None
    h.after(0.5)  # the next check, lead_check_secs after the first
    assert h.state() is ControllerState.QUEUED and h.lock.joins == 1


def test_a_nimbus_out_of_the_queue_checks_again_when_the_cluster_changes():
    h = Harness()
    h.readiness.queue = "missing_code(etl)"
    h.step()
    h.readiness.queue = None
    h.controller.cluster_changed()  # e.g. the code arrived: no need to wait for the timer
    h.step()
    assert h.state() is ControllerState.QUEUED


def test_elected_without_the_code_gives_the_lock_back_and_fetches_it():
    h = Harness()
    h.step()
    h.readiness.lead = "missing_code(etl)"  # what ZooKeeper itself says, once elected
    h.controller.elected(term(1))
    h.step()
    assert h.state() is ControllerState.WAITING
    assert h.lock.leaves == 1 and h.readiness.fetches == 1
    assert h.gained == [] and h.duties.epochs == []


def test_elected_with_the_code_leads_and_runs_the_duties_with_its_term():
    h = Harness()
    h.leading(epoch=7)
    assert h.gained == [7]
    assert h.duties.epochs == [7]
    assert h.controller.term is not None and h.controller.term.epoch == 7


def test_a_leader_runs_its_duties_on_cluster_changes_and_on_its_timer():
    h = Harness()
    h.leading(epoch=3)
    for _ in range(5):
        h.controller.cluster_changed()  # a burst of watch events makes one round
    h.step()
    h.step()
    assert h.duties.epochs == [3, 3]
    h.after(SETTINGS.monitor_freq_secs - 0.1)
    assert h.duties.epochs == [3, 3]
    h.after(0.2)
    assert h.duties.epochs == [3, 3, 3]


def test_a_leader_that_finds_code_missing_steps_down_and_queues_again_once_it_is_here():
    h = Harness()
    h.leading()
    h.readiness.keep = "missing_code(etl)"
    h.controller.cluster_changed()
    h.step()
    assert h.state() is ControllerState.WAITING
    assert h.lock.leaves == 1 and h.readiness.fetches == 1 and h.duties.epochs == [1]
    h.readiness.queue = None
    h.after(SETTINGS.lead_check_secs)
    assert h.state() is ControllerState.QUEUED and h.lock.joins == 2


def test_a_revoked_leader_stops_acting_and_leads_again_when_its_term_resumes():
    h = Harness()
    won = h.leading(epoch=4)
    h.controller.revoked(won, RevokeReason.SUSPENDED)
    h.step()
    assert h.state() is ControllerState.QUEUED and h.lost == [4]
    h.after(SETTINGS.monitor_freq_secs)
    h.controller.cluster_changed()
    h.step()
    assert h.duties.epochs == [4]  # nothing done while not leading
    h.controller.elected(won)  # the session survived: the same term resumes
    h.step()
    assert h.state() is ControllerState.LEADING and h.duties.epochs == [4, 4]


def test_every_grant_and_revocation_is_told_as_it_comes_even_one_not_acted_for():
    h = Harness()
    h.readiness.lead = "code missing"
    h.controller.elected(term(2))  # out of the queue: given back, yet the grant happened
    assert h.told == [("granted", 2)]  # told on the caller's thread, before any step
    h.step()
    h.controller.revoked(term(2), RevokeReason.RESIGNED)
    assert h.told == [("granted", 2), ("resigned", 2)]


def test_a_revocation_of_an_older_term_does_not_stop_the_current_one():
    h = Harness()
    h.leading(epoch=5)
    h.controller.revoked(term(4), RevokeReason.SESSION_LOST)
    h.step()
    assert h.state() is ControllerState.LEADING


def test_a_leader_superseded_at_a_later_epoch_stops_acting_before_its_revocation():
    h = Harness()
    h.leading(epoch=2)
    h.controller.leader_changed(LeaderChange("nimbus", 0, ADDRESS, 2))  # late news: ignored
    h.step()
    assert h.state() is ControllerState.LEADING
    h.controller.leader_changed(LeaderChange("nimbus", 0, "127.0.0.1:6628", 3))
    h.step()
    assert h.state() is ControllerState.QUEUED
    h.controller.cluster_changed()
    h.step()
    assert h.duties.epochs == [2]


def test_a_leader_whose_lease_ran_out_does_nothing_until_told():
    h = Harness()
    h.step()
    h.controller.elected(term(1, held=False))  # elected, then paused past its lease
    h.step()
    h.controller.cluster_changed()
    h.step()
    assert h.duties.epochs == []


def test_a_failing_code_check_skips_the_round_without_stepping_down():
    h = Harness()
    h.leading()
    h.readiness.keep = ConnectionLoss()
    h.controller.cluster_changed()
    h.step()
    assert h.state() is ControllerState.LEADING and h.lock.leaves == 0
    assert h.duties.epochs == [1]
    h.readiness.keep = None
    h.controller.cluster_changed()
    h.step()
    assert h.duties.epochs == [1, 1]


def test_a_grant_that_arrives_out_of_the_queue_is_given_back():
    h = Harness()
    h.readiness.queue = "may_lead_hook"
    h.step()
    h.controller.elected(term(1))
    h.step()
    assert h.state() is ControllerState.WAITING and h.lock.leaves == 1 and h.gained == []


def test_a_nimbus_dropped_from_the_queue_notices_and_queues_again():
    h = Harness()
    h.step()
    h.lock.queued = False  # a hand-back that completed after the nimbus queued again
    h.after(SETTINGS.lead_check_secs)
    assert h.state() is ControllerState.WAITING
    h.after(SETTINGS.lead_check_secs)
    assert h.state() is ControllerState.QUEUED and h.lock.joins == 2


def test_stop_leaves_the_queue_at_once_even_while_a_duty_round_runs():
    started, release = threading.Event(), threading.Event()

    def slow_duties(_term: Leadership) -> None:
        started.set()
        release.wait(10)

    h = Harness(duties=slow_duties)
    h.controller.start()
    h.controller.elected(term(1))
    wait_until(started.is_set, 5, "the first duty round")
    stopper = threading.Thread(target=h.controller.stop)
    stopper.start()
    wait_until(lambda: h.lock.leaves >= 1, 5, "the queue left during the round")
    assert not h.lock.queued
    release.set()
    stopper.join(5)
    assert h.state() is ControllerState.STOPPED and not h.lock.queued


def test_a_duty_that_raises_does_not_stop_the_controller_thread():
    calls: list[int] = []

    def duties(won: Leadership) -> None:
        calls.append(won.epoch)
        if len(calls) == 1:
            raise RuntimeError("a bug in a duty")

    h = Harness(duties=duties)
    h.controller.start()
    try:
        h.controller.elected(term(1))
        wait_until(lambda: len(calls) == 1, 5, "the first round")
        h.controller.cluster_changed()
        wait_until(lambda: len(calls) == 2, 5, "a second round after the first raised")
    finally:
        h.controller.stop()


class Duty:
    def __init__(self, name: str, *, fail_times: int = 0) -> None:
        self.name = name
        self.fail_times = fail_times
        self.runs = 0

    def run(self, _term: Leadership) -> None:
        self.runs += 1
        if self.runs <= self.fail_times:
            raise RuntimeError(f"{self.name} broke")


def test_a_duty_that_raises_is_counted_and_retried_while_the_others_still_run():
    metrics = NimbusMetrics(
        is_leader=lambda: True,
        epoch=lambda: 1,
        zookeeper_connected=lambda: True,
        code_sync_rounds=lambda: 0,
        code_missing=lambda: 0,
    )
    broken, healthy = Duty("replication", fail_times=1), Duty("scheduling")
    duties = DutyRound([broken, healthy], on_failure=metrics.duty_failed)
    metrics.declare_duties(duties.names)
    h = Harness(duties=duties.run)
    h.leading()
    assert (broken.runs, healthy.runs) == (1, 1)
    exposition = metrics.exposition().decode()
    assert 'stratus_nimbus_duty_failures_total{duty="replication"} 1.0' in exposition
    assert 'stratus_nimbus_duty_failures_total{duty="scheduling"} 0.0' in exposition
    h.controller.cluster_changed()
    h.step()
    assert (broken.runs, healthy.runs) == (2, 2)
    assert duties.run(term(1)) == []


def test_elected_while_the_code_check_itself_fails_gives_the_lock_back():
    h = Harness()
    h.step()
    h.readiness.lead = OSError("the package directory is unreadable")
    h.controller.elected(term(1))
    h.step()
    assert h.state() is ControllerState.WAITING and h.lock.leaves == 1 and h.gained == []


class Deposing(Duty):
    """A duty during which the term is lost: its lease runs out, or a write is refused."""

    def __init__(self, name: str, lost: threading.Event, error: Exception | None = None) -> None:
        super().__init__(name)
        self.lost = lost
        self.error = error

    def run(self, _term: Leadership) -> None:
        self.runs += 1
        self.lost.set()
        if self.error is not None:
            raise self.error


def test_a_term_lost_during_a_round_runs_no_further_duty_and_counts_no_failure():
    lost = threading.Event()
    held = Leadership(
        group="nimbus", member_id=ADDRESS, slot=0, epoch=1,
        epoch_path="/stratus/groups/nimbus/epochs/0", slot_path="/stratus/groups/nimbus/slots/0",
        _client=cast(KazooClient, None), _holds=lambda _t: not lost.is_set(),
        _lease_end=lambda: math.inf,
    )  # fmt: skip
    failures: list[str] = []
    deposing, later = Deposing("removal", lost), Duty("scheduling")
    assert DutyRound([deposing, later], on_failure=failures.append).run(held) == []
    assert (deposing.runs, later.runs, failures) == (1, 0, [])


def test_a_duty_refused_for_not_leading_ends_the_round_without_counting_a_failure():
    for error in (LeadershipLostError("epoch 1 is over"), NotLeaderError("not the leader")):
        failures: list[str] = []
        refused = Deposing("removal", threading.Event(), error)
        later = Duty("scheduling")
        assert DutyRound([refused, later], on_failure=failures.append).run(term(1)) == []
        assert (refused.runs, later.runs, failures) == (1, 0, [])


def test_only_a_term_the_controller_accepted_and_still_holds_is_the_one_to_act_for():
    h = Harness()
    h.step()
    h.readiness.lead = "missing_code(etl)"
    h.controller.elected(term(1))  # granted by the elector, refused by the code check
    assert h.controller.accepted_term() is None
    h.step()
    assert h.controller.accepted_term() is None
    h.readiness.lead = None
    h.readiness.queue = None
    h.after(SETTINGS.lead_check_secs)
    won = term(2)
    h.controller.elected(won)
    h.step()
    assert h.controller.accepted_term() is won
    h.readiness.keep = "missing_code(etl)"  # steps down: the term is no longer acted for
    h.controller.cluster_changed()
    h.step()
    assert h.controller.accepted_term() is None


def test_a_leading_term_whose_lease_ran_out_is_not_acted_for():
    h = Harness()
    h.step()
    lapsed = term(1, held=False)
    h.controller.elected(lapsed)
    h.step()
    assert h.state() is ControllerState.LEADING and h.controller.accepted_term() is None
