"""The supervisor's restart policy alone (``supervisor/restart_policy.py``): backoff that
doubles, giving up, and a new row after a long run; driven by a fake clock."""

from __future__ import annotations

from stratus.supervisor.restart_policy import GiveUp, Restart, RestartPolicy
from stratus.supervisor.settings import RestartSettings
from tests.harness.supervisor_fakes import RESTART_SETTINGS, FakeClock


def test_the_backoff_doubles_at_every_crash_in_a_row() -> None:
    clock = FakeClock()
    policy = RestartPolicy(RESTART_SETTINGS)
    delays = []
    for _ in range(3):
        policy.started(clock())
        clock.advance(2.0)
        decision = policy.crashed(clock())
        assert isinstance(decision, Restart)
        assert decision.at == clock() + decision.delay_secs
        delays.append(decision.delay_secs)
    assert delays == [1.0, 2.0, 4.0]
    assert policy.restarts == 3


def test_the_backoff_stops_doubling_at_thirty_times_its_base() -> None:
    clock = FakeClock()
    policy = RestartPolicy(RestartSettings(backoff_secs=1.0, max_restarts=100, reset_secs=60.0))
    delays = []
    for _ in range(8):
        policy.started(clock())
        decision = policy.crashed(clock())
        assert isinstance(decision, Restart)
        delays.append(decision.delay_secs)
    assert delays == [1, 2, 4, 8, 16, 30, 30, 30]


def test_the_supervisor_gives_up_after_max_restarts_crashes_in_a_row() -> None:
    clock = FakeClock()
    policy = RestartPolicy(RESTART_SETTINGS)
    decisions = []
    for _ in range(4):
        policy.started(clock())
        clock.advance(1.0)
        decisions.append(policy.crashed(clock()))
    assert [type(d) for d in decisions] == [Restart, Restart, Restart, GiveUp]
    assert decisions[-1] == GiveUp(crashes_in_row=4)


def test_no_restart_at_all_with_max_restarts_zero() -> None:
    policy = RestartPolicy(RestartSettings(backoff_secs=1.0, max_restarts=0, reset_secs=60.0))
    policy.started(0.0)
    assert isinstance(policy.crashed(1.0), GiveUp)


def test_a_crash_after_running_long_enough_starts_a_new_row() -> None:
    clock = FakeClock()
    policy = RestartPolicy(RESTART_SETTINGS)
    for _ in range(3):
        policy.started(clock())
        clock.advance(1.0)
        policy.crashed(clock())
    policy.started(clock())
    clock.advance(RESTART_SETTINGS.reset_secs)
    decision = policy.crashed(clock())
    assert isinstance(decision, Restart)
    assert decision.crashes_in_row == 1
    assert decision.delay_secs == RESTART_SETTINGS.backoff_secs
    assert policy.restarts == 4  # the count since the assignment goes on


# ---------------------------------------------------------------------- the lease
