"""The phi accrual failure detector: how suspicious a supervisor's silence is, given its rhythm.

One fixed timeout treats every host alike: short enough to fail a calm host over fast, it
suspects a loaded host whose beats come late; long enough for the loaded host, it slows every
failover. The phi accrual detector (Hayashibara et al.; Akka's and Cassandra's) learns each
supervisor's rhythm instead, from a window of the intervals between its last beats, and turns
a silence into phi = -log10(the chance that a beat still comes after a silence this long):
phi 8 is one chance in 10^8. A host whose beats jitter gets a wider distribution, hence more
time, without a key for it.

Akka's variant: a normal distribution whose mean is the window's mean plus an acceptable pause
(``nimbus.detector.pause.ms``, for the pauses no window sees often enough, such as a garbage
collection) and whose standard deviation is at least ``nimbus.detector.min.std.ms`` (a calm
window's near zero would make phi leap); phi by the logistic approximation of the normal
distribution; a window seeded with one interval, the one the caller expects, so that a
supervisor heard once is judged from it. As in Akka, an interval that ends once phi passed the
threshold is an outage, not a sample of the rhythm, and is not recorded.

Phi alone suspects no one: a supervisor is suspected when phi reaches
``nimbus.detector.threshold`` **and** its silence reaches its **floor**, the silence after which
its hot workers have surely stopped themselves (the caller computes it from what the
supervisor runs with: beat lease + beat stop + worker poll + a margin). On a calm host phi
passes the threshold well before the floor, so the floor decides; on a jittery one phi
decides, later::

    windows = {"s1": PhiWindow(settings.detector, seed_secs=0.1, since=now)}
    windows["s1"].heard(at)                 # a new beat of s1, seen at `at` on the leader's clock
    suspicions(windows, now, floors)        # frozenset({"s1"}) once s1 is silent enough
    phis(windows, now)                      # {"s1": 12.3}: each supervisor's phi, for a metric
    if blind(last_read_at, read_at, settings.detector.poll_secs):
        restart(windows, read_at)           # the store did not answer for that long: afresh

No clock of its own: every call is given the time, on one monotonic clock. Not thread-safe:
one thread (the leader's failover lane) owns the windows.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping

from stratus.nimbus.settings import DetectorSettings

BLIND_AFTER_POLLS = 3  # good reads further apart than this many polls, the store silent between

_LN10 = math.log(10.0)


class PhiWindow:
    """One supervisor's last inter-arrival intervals, on the caller's monotonic clock.

    ``since`` is when the caller began to watch it (its silence counts from there until it is
    heard); ``seed_secs`` the interval the caller expects between two beats, which the window
    holds alone until the supervisor's own intervals arrive and push it out.
    """

    def __init__(self, settings: DetectorSettings, *, seed_secs: float, since: float) -> None:
        if not seed_secs > 0:
            raise ValueError(
                f"a phi window's seed interval must be more than 0 seconds, not {seed_secs!r}: "
                "pass the interval expected between two beats"
            )
        self.settings = settings
        self._seed = seed_secs
        self._intervals: deque[float] = deque(maxlen=settings.window)
        self._sum = 0.0
        self._squares = 0.0
        self._heard: float | None = None  # the last beat heard since the last restart
        self._since = since  # the start of the silence: the last beat heard, or the restart
        self._record(seed_secs)

    def heard(self, at: float) -> None:
        """A new beat, seen at ``at``: record the interval since the last one (unless phi had
        passed the threshold by then: an outage) and restart the silence.

        The first beat after a restart records nothing: the time since the restart is no
        interval between two beats. ``ValueError`` if ``at`` goes back in time."""
        if at < self._since:
            raise ValueError(
                f"a beat heard at {at!r} is older than the window's last event at "
                f"{self._since!r}: pass times of one monotonic clock, in order"
            )
        if self._heard is not None and self.phi(at) < self.settings.threshold:
            self._record(at - self._heard)
        self._heard = self._since = at

    def restart(self, at: float) -> None:
        """Forget every interval but the seed and count the silence from ``at``: after the
        reader was blind, or at the start of a term, nothing seen before says anything."""
        self._intervals.clear()
        self._sum = self._squares = 0.0
        self._record(self._seed)
        self._heard = None
        self._since = at

    def silence(self, now: float) -> float:
        """Seconds from the last beat heard (or the last restart) to ``now``; never below 0."""
        return max(0.0, now - self._since)

    def mean_secs(self) -> float:
        """The window's mean interval, the acceptable pause not included."""
        return self._sum / len(self._intervals)

    def std_secs(self) -> float:
        """The window's standard deviation, at least ``nimbus.detector.min.std.ms``."""
        mean = self.mean_secs()
        variance = max(0.0, self._squares / len(self._intervals) - mean * mean)
        return max(math.sqrt(variance), self.settings.min_std_secs)

    def phi(self, now: float) -> float:
        """How suspicious the silence at ``now`` is: -log10 of the chance of a beat later."""
        return phi_of(
            self.silence(now),
            mean=self.mean_secs() + self.settings.pause_secs,
            std=self.std_secs(),
        )

    def _record(self, interval: float) -> None:
        if len(self._intervals) == self._intervals.maxlen:
            oldest = self._intervals[0]
            self._sum -= oldest
            self._squares -= oldest * oldest
        self._intervals.append(interval)
        self._sum += interval
        self._squares += interval * interval


def phi_of(silence: float, *, mean: float, std: float) -> float:
    """-log10 of the chance that a beat of a normal distribution (``mean``, ``std``) comes
    after ``silence``, by the logistic approximation of its tail (Akka's):
    P(later) = 1 / (1 + e^z), z = y (1.5976 + 0.070566 y^2), y = (silence - mean) / std.

    Written as log10(1 + e^z) so that neither a long silence nor a short one overflows."""
    y = (silence - mean) / std
    z = y * (1.5976 + 0.070566 * y * y)
    if z > 0:
        return (z + math.log1p(math.exp(-z))) / _LN10
    return math.log1p(math.exp(z)) / _LN10


def phis(windows: Mapping[str, PhiWindow], now: float) -> dict[str, float]:
    """Each supervisor's phi at ``now``."""
    return {supervisor: window.phi(now) for supervisor, window in windows.items()}


def suspected(window: PhiWindow, now: float, floor: float) -> bool:
    """Whether the supervisor is suspected at ``now``: silent for at least ``floor`` seconds
    and with phi at least the threshold. The floor keeps a calm host from being suspected
    before its hot workers have surely stopped; phi keeps a jittery one from being suspected
    as soon as the floor has passed."""
    if window.silence(now) < floor:
        return False
    return window.phi(now) >= window.settings.threshold


def suspicions(
    windows: Mapping[str, PhiWindow], now: float, floors: Mapping[str, float]
) -> frozenset[str]:
    """The supervisors suspected at ``now``; ``floors`` holds each one's floor in seconds.

    ``ValueError`` naming the supervisors whose floor is missing: a floor comes from what a
    supervisor runs with, and no default fits every supervisor."""
    missing = sorted(windows.keys() - floors.keys())
    if missing:
        raise ValueError(
            f"no floor for supervisors {', '.join(missing)}: pass the silence below which each "
            "watched supervisor is never suspected (its beat lease, beat stop and worker poll, "
            "plus a margin)"
        )
    return frozenset(
        supervisor
        for supervisor, window in windows.items()
        if suspected(window, now, floors[supervisor])
    )


def restart(windows: Mapping[str, PhiWindow], at: float) -> None:
    """Restart every window at ``at`` (``PhiWindow.restart``): the reader was blind, or a new
    term begins, and no silence may count what the reader could not see."""
    for window in windows.values():
        window.restart(at)


def blind(previous_read: float, read: float, poll_secs: float) -> bool:
    """Whether two successful reads of the beats, begun at ``previous_read`` and ``read``,
    are more than ``BLIND_AFTER_POLLS`` polls apart: blindness, if the store did not answer
    the reads between them (the caller knows), since the supervisors' beats may not have
    counted either."""
    return read - previous_read > BLIND_AFTER_POLLS * poll_secs
