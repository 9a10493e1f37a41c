"""When a crashed worker is started again, and when its supervisor gives up on it.

Guarantees: a worker that crashes is restarted after ``supervisor.worker.restart.backoff.secs``,
doubling at every crash in a row up to ``MAX_BACKOFF_FACTOR`` times that; a crash after the
worker ran ``supervisor.worker.restart.reset.secs`` or longer starts a new row; the crash that
follows ``supervisor.worker.max.restarts`` restarts in a row is final (with 3: the fourth
crash in a row; with 0: the first). Pure: the caller passes the time, so a test drives it
with a fake clock::

    policy = RestartPolicy(RestartSettings(backoff_secs=1.0, max_restarts=3, reset_secs=60.0))
    policy.started(now)
    policy.crashed(now + 2.0)      # Restart(at=now + 3.0): restarted after 1 s
    ...
    policy.crashed(later)          # GiveUp(crashes=4)
"""

from __future__ import annotations

from dataclasses import dataclass

from stratus.supervisor.settings import RestartSettings

MAX_BACKOFF_FACTOR = 30  # the backoff stops doubling at 30 times its base


def backoff_delay(base_secs: float, attempt: int) -> float:
    """The wait before try ``attempt + 1`` after ``attempt`` failures in a row (attempt >= 1)."""
    return float(min(base_secs * 2 ** (max(attempt, 1) - 1), base_secs * MAX_BACKOFF_FACTOR))


@dataclass(frozen=True)
class Restart:
    """Start the worker again at ``at`` (the caller's clock)."""

    at: float
    delay_secs: float
    crashes_in_row: int


@dataclass(frozen=True)
class GiveUp:
    """Do not start the worker again until its assignment changes."""

    crashes_in_row: int


class RestartPolicy:
    """The crashes of one assignment's worker; see the module docstring."""

    def __init__(self, settings: RestartSettings) -> None:
        self.settings = settings
        self.crashes_in_row = 0
        self.restarts = 0  # restarts since the assignment: the heartbeat's ``restarts``
        self._started: float | None = None

    def started(self, now: float) -> None:
        """A worker process of this assignment started at ``now``."""
        self._started = now

    def crashed(self, now: float) -> Restart | GiveUp:
        """The worker exited without being told to (or hung and was killed) at ``now``."""
        ran = 0.0 if self._started is None else now - self._started
        self._started = None
        if ran >= self.settings.reset_secs:
            self.crashes_in_row = 0  # it ran long enough: this crash starts a new row
        self.crashes_in_row += 1
        if self.crashes_in_row > self.settings.max_restarts:
            return GiveUp(self.crashes_in_row)
        self.restarts += 1
        delay = backoff_delay(self.settings.backoff_secs, self.crashes_in_row)
        return Restart(at=now + delay, delay_secs=delay, crashes_in_row=self.crashes_in_row)
