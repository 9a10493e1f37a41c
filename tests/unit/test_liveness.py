"""The leader's liveness memory, driven by a fake clock."""

from __future__ import annotations

import pytest

from stratus.nimbus.scheduling.liveness import Liveness


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def liveness(clock: FakeClock) -> Liveness:
    return Liveness(clock=clock)


def test_a_heartbeat_that_keeps_changing_is_never_silent(
    clock: FakeClock, liveness: Liveness
) -> None:
    for beat in range(10):
        liveness.observe("s1", beat)
        clock.advance(3)
    assert liveness.silent_for("s1") == 3


def test_a_heartbeat_that_stops_changing_grows_silent(clock: FakeClock, liveness: Liveness) -> None:
    liveness.observe("s1", 41.5)
    clock.advance(4)
    liveness.observe("s1", 41.5)  # read again, unchanged: no renewal
    clock.advance(7)
    assert liveness.silent_for("s1") == 11


def test_the_writers_clock_does_not_matter_only_a_change(
    clock: FakeClock, liveness: Liveness
) -> None:
    liveness.observe("s1", 9e9)  # a heartbeat time far in the future
    clock.advance(5)
    liveness.observe("s1", 1.0)  # then one far in the past: still a change
    assert liveness.silent_for("s1") == 0


def test_a_key_never_observed_counts_from_the_start(clock: FakeClock, liveness: Liveness) -> None:
    clock.advance(12)
    assert liveness.silent_for("never") == 12
    assert liveness.keys() == set()


def test_after_a_reset_nothing_is_silent_before_a_whole_timeout_of_the_new_term(
    clock: FakeClock, liveness: Liveness
) -> None:
    liveness.observe("s1", "frozen")
    clock.advance(100)  # silent for long in the previous term
    assert liveness.silent_for("s1") == 100
    liveness.reset()  # leadership gained again
    assert liveness.silent_for("s1") == 0
    assert liveness.silent_for("unseen") == 0
    clock.advance(4)
    liveness.observe("s1", "frozen")  # the same stale heartbeat, first seen in this term
    clock.advance(5)
    assert liveness.silent_for("s1") == 5
    assert liveness.silent_for("unseen") == 9


def test_reset_forgets_every_key(liveness: Liveness) -> None:
    liveness.observe("a", 1)
    liveness.observe("b", 1)
    liveness.reset()
    assert liveness.keys() == set()


def test_forget_drops_one_key(clock: FakeClock, liveness: Liveness) -> None:
    liveness.observe("a", 1)
    liveness.observe("b", 1)
    clock.advance(3)
    liveness.forget("a")
    liveness.forget("unknown")
    assert liveness.keys() == {"b"}
    liveness.observe("a", 1)  # seen again: a change, as for a new key
    assert liveness.silent_for("a") == 0


def test_tokens_may_be_any_hashable_value(clock: FakeClock, liveness: Liveness) -> None:
    liveness.observe("worker/etl", ("s1", 5.0, None))
    clock.advance(2)
    liveness.observe("worker/etl", ("s1", 5.0, None))
    assert liveness.silent_for("worker/etl") == 2
    liveness.observe("worker/etl", ("s1", 5.0, 6.0))
    assert liveness.silent_for("worker/etl") == 0


def test_a_clock_that_goes_back_never_gives_a_negative_silence(clock: FakeClock) -> None:
    liveness = Liveness(clock=clock)
    liveness.observe("s1", 1)
    clock.advance(-5)
    assert liveness.silent_for("s1") == 0
