"""The leader's phi accrual failure detector, driven by an injected clock.

Beats arrive every 100 ms as a supervisor's fast beats do; each supervisor's floor is the
default one of a hot pipeline's supervisor (beat lease 0.8 + beat stop 0.1 + worker poll 0.02
+ margin 0.1 = 1.02 s).
"""

from __future__ import annotations

import math
import re
from statistics import NormalDist

import pytest

from stratus.config import load_config
from stratus.errors import ConfigError
from stratus.nimbus.failover.phi import (
    PhiWindow,
    blind,
    phi_of,
    phis,
    restart,
    suspicions,
)
from stratus.nimbus.settings import DetectorSettings, NimbusSettings
from tests.harness.supervisor_fakes import FakeClock

SETTINGS = DetectorSettings(
    threshold=8.0, window=200, pause_secs=0.3, min_std_secs=0.05, poll_secs=0.1
)
BEAT = 0.1  # seconds between two beats: the seed of every window
FLOOR = 1.02


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def watch(clock: FakeClock, settings: DetectorSettings = SETTINGS) -> PhiWindow:
    return PhiWindow(settings, seed_secs=BEAT, since=clock())


def beat(
    clock: FakeClock, windows: dict[str, PhiWindow], intervals: dict[str, list[float]]
) -> None:
    """Drive every supervisor through its intervals, in one timeline: each beat is heard at its
    own time; the clock ends at the latest beat."""
    start = clock()
    events = []
    for supervisor, gaps in intervals.items():
        at = start
        for gap in gaps:
            at += gap
            events.append((at, supervisor))
    for at, supervisor in sorted(events):
        clock.now = at
        windows[supervisor].heard(at)


def test_a_calm_supervisor_is_suspected_only_once_its_floor_has_passed(
    clock: FakeClock,
) -> None:
    windows = {"s1": watch(clock)}
    beat(clock, windows, {"s1": [BEAT] * 250})
    last = clock()

    clock.now = last + FLOOR - 0.01  # phi alone would have suspected it at 0.66 s
    assert windows["s1"].phi(clock()) >= SETTINGS.threshold
    assert suspicions(windows, clock(), {"s1": FLOOR}) == frozenset()

    clock.now = last + FLOOR + 0.01
    assert suspicions(windows, clock(), {"s1": FLOOR}) == {"s1"}


def test_jitter_buys_a_loaded_host_time(clock: FakeClock) -> None:
    windows = {"calm": watch(clock), "loaded": watch(clock)}
    # the loaded host's beats come 100 or 500 ms apart: mean 0.3 s, deviation 0.2 s
    beat(clock, windows, {"calm": [BEAT] * 600, "loaded": [0.1, 0.5] * 100})
    floors = {"calm": FLOOR, "loaded": FLOOR}
    assert windows["calm"].std_secs() == SETTINGS.min_std_secs
    assert windows["loaded"].std_secs() == pytest.approx(0.2)

    silent_from = clock()  # both beat last 60 s after the start
    clock.now = silent_from + 1.1
    assert suspicions(windows, clock(), floors) == {"calm"}
    assert windows["loaded"].phi(clock()) < SETTINGS.threshold

    clock.now = silent_from + 1.7  # its verdict: 0.3 + 0.3 + 5.23 x 0.2 = 1.65 s
    assert suspicions(windows, clock(), floors) == {"calm", "loaded"}


def test_a_blind_reader_restarts_every_window(clock: FakeClock) -> None:
    windows = {"calm": watch(clock), "loaded": watch(clock)}
    beat(clock, windows, {"calm": [BEAT] * 200, "loaded": [0.1, 0.5] * 100})
    floors = {"calm": FLOOR, "loaded": FLOOR}

    last_read = clock()
    assert not blind(last_read, last_read + 0.25, SETTINGS.poll_secs)  # 2.5 polls: a slow read
    assert blind(last_read, last_read + 0.35, SETTINGS.poll_secs)
    clock.advance(5.0)  # the leader paused: its next read comes 5 s later
    assert blind(last_read, clock(), SETTINGS.poll_secs)
    assert suspicions(windows, clock(), floors) == {"calm", "loaded"}  # what not to believe

    restart(windows, clock())
    read = clock()
    assert suspicions(windows, read + 0.9, floors) == frozenset()  # silences restarted
    # and what each learnt is forgotten: the loaded host is judged from the seed again
    assert windows["loaded"].mean_secs() == BEAT
    assert windows["loaded"].std_secs() == SETTINGS.min_std_secs
    assert suspicions(windows, read + 1.1, floors) == {"calm", "loaded"}


def test_a_supervisor_heard_once_is_judged_from_its_seed(clock: FakeClock) -> None:
    fast = PhiWindow(SETTINGS, seed_secs=0.1, since=clock())
    slow = PhiWindow(SETTINGS, seed_secs=0.5, since=clock())
    windows = {"fast": fast, "slow": slow}
    fast.heard(clock())
    slow.heard(clock())
    floors = {"fast": 0.0, "slow": 0.0}  # phi alone decides here

    # seed 0.1: mean 0.1 + pause 0.3, deviation at its least (0.05): phi 8 at 0.66 s
    assert suspicions(windows, clock() + 0.6, floors) == frozenset()
    assert suspicions(windows, clock() + 0.7, floors) == {"fast"}
    assert suspicions(windows, clock() + 1.1, floors) == {"fast", "slow"}


def test_a_supervisor_never_heard_is_silent_since_the_watch_began(clock: FakeClock) -> None:
    windows = {"s1": watch(clock)}  # a new term: s1 was dead before it began
    clock.advance(FLOOR - 0.01)
    assert suspicions(windows, clock(), {"s1": FLOOR}) == frozenset()
    clock.advance(0.02)
    assert suspicions(windows, clock(), {"s1": FLOOR}) == {"s1"}


def test_an_outage_is_not_learnt_as_the_rhythm(clock: FakeClock) -> None:
    windows = {"s1": watch(clock)}
    beat(clock, windows, {"s1": [BEAT] * 50})
    clock.advance(10.0)  # suspected long ago, now back
    windows["s1"].heard(clock())
    assert windows["s1"].mean_secs() == pytest.approx(BEAT)
    assert windows["s1"].std_secs() == SETTINGS.min_std_secs
    # a late beat that phi did not yet suspect is learnt
    clock.advance(0.5)
    windows["s1"].heard(clock())
    assert windows["s1"].mean_secs() > BEAT


def test_the_first_beat_after_a_restart_is_no_interval(clock: FakeClock) -> None:
    windows = {"s1": watch(clock)}
    beat(clock, windows, {"s1": [0.3] * 5})
    restart(windows, clock())
    clock.advance(0.4)
    windows["s1"].heard(clock())
    assert windows["s1"].mean_secs() == BEAT
    clock.advance(0.2)
    windows["s1"].heard(clock())
    assert windows["s1"].mean_secs() == pytest.approx((BEAT + 0.2) / 2)


def test_the_window_keeps_only_its_last_intervals(clock: FakeClock) -> None:
    small = DetectorSettings(
        threshold=8.0, window=4, pause_secs=0.3, min_std_secs=0.05, poll_secs=0.1
    )
    windows = {"s1": watch(clock, small)}
    beat(clock, windows, {"s1": [0.3] * 10 + [0.2] * 4})
    assert windows["s1"].mean_secs() == pytest.approx(0.2)
    assert windows["s1"].std_secs() == small.min_std_secs


def test_phi_is_akkas_logistic_approximation_of_the_normal_tail() -> None:
    normal = NormalDist(mu=0.4, sigma=0.05)
    for silence in (0.3, 0.4, 0.45, 0.5, 0.55):  # up to three deviations past the mean
        exact = -math.log10(1 - normal.cdf(silence))
        assert phi_of(silence, mean=0.4, std=0.05) == pytest.approx(exact, abs=0.05)
    assert phi_of(0.4, mean=0.4, std=0.05) == pytest.approx(math.log10(2))


def test_neither_a_long_nor_a_short_silence_overflows() -> None:
    assert phi_of(3600.0, mean=0.4, std=0.05) > 1e9
    assert phi_of(0.0, mean=3600.0, std=0.05) == 0.0


def test_each_supervisors_phi_is_exposed_and_grows_with_its_silence(clock: FakeClock) -> None:
    windows = {"s1": watch(clock), "s2": watch(clock)}
    beat(clock, windows, {"s1": [BEAT] * 20, "s2": [BEAT] * 10})  # s2 went silent 1 s ago
    now = phis(windows, clock())
    later = phis(windows, clock() + 0.1)
    assert now.keys() == {"s1", "s2"}
    assert now["s1"] < 1 < SETTINGS.threshold < now["s2"]
    assert later["s1"] > now["s1"] and later["s2"] > now["s2"]


def test_a_supervisor_without_a_floor_is_refused(clock: FakeClock) -> None:
    windows = {"s1": watch(clock), "s2": watch(clock)}
    with pytest.raises(ValueError, match="no floor for supervisors s2"):
        suspicions(windows, clock(), {"s1": FLOOR})


def test_a_beat_from_the_past_and_a_seed_of_zero_are_refused(clock: FakeClock) -> None:
    window = watch(clock)
    window.heard(clock())
    with pytest.raises(ValueError, match="older than the window's last event"):
        window.heard(clock() - 1)
    with pytest.raises(ValueError, match="seed interval must be more than 0"):
        PhiWindow(SETTINGS, seed_secs=0, since=clock())


def test_the_detector_keys_reach_its_settings_in_seconds() -> None:
    defaults = NimbusSettings.from_config(load_config(environ={})).detector
    assert defaults == SETTINGS
    conf = load_config(
        overrides=["nimbus.detector.pause.ms=1000", "nimbus.detector.window=2"], environ={}
    )
    detector = NimbusSettings.from_config(conf).detector
    assert (detector.pause_secs, detector.window) == (1.0, 2)


@pytest.mark.parametrize(
    "override",
    [
        "nimbus.detector.threshold=0",
        "nimbus.detector.window=1",
        "nimbus.detector.pause.ms=-1",
        "nimbus.detector.min.std.ms=0",
        "nimbus.detector.poll.ms=0",
    ],
)
def test_a_detector_key_out_of_bounds_is_refused_by_name(override: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(override.partition("=")[0])):
        load_config(overrides=[override], environ={})
