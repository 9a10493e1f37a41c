"""How long the fast beats take to count: the beat agent's running tally, kept in a file.

The beat agent (a process of its own) times each beat from its start to the moment a majority
of the pacemakers acknowledged it, and counts the beats that did not count; the supervisor
exposes the tally at its ``/metrics`` (``stratus_supervisor_beat_ack_seconds``, a histogram,
and ``stratus_supervisor_beats_not_counted_total``). The agent writes the tally to
``LOCAL_DIR/beat-ack.json`` at most once a second (mode 0600, atomically); the supervisor
reads it at each scrape. The counts start at 0 with each agent (a counter reset, as
Prometheus expects of a restarted process)::

    tally = BeatAckTally()
    tally.counted(0.004)                       # a beat a majority stored 4 ms after its start
    tally.not_counted()                        # one that did not count
    tally.write_if_due(path, now)              # at most once a second
    read_tally(path)                           # BeatAckTally, or None (no agent, a bad file)

Standard library only: the beat agent imports it.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path

from stratus.files import write_atomically

ACK_STATS_FILE = "beat-ack.json"
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4)  # seconds; the default lease's half is 0.4
WRITE_EVERY_SECS = 1.0
MAX_BYTES = 4096  # a tally of this module's shape is far smaller: anything larger is not one


@dataclass
class BeatAckTally:
    """Cumulative counts of the counted beats by their acknowledgement time (``BUCKETS``;
    the last count is the beats slower than every bound), their sum, and the beats that
    did not count."""

    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    sum_secs: float = 0.0
    missed: int = 0
    _written_at: float | None = None

    def counted(self, secs: float) -> None:
        """A beat a majority stored ``secs`` after its start."""
        self.buckets[bisect_left(BUCKETS, secs)] += 1
        self.sum_secs += secs

    def not_counted(self) -> None:
        """A beat that did not count (too few pacemakers stored it in time, or none answered)."""
        self.missed += 1

    @property
    def count(self) -> int:
        """The counted beats."""
        return sum(self.buckets)

    def cumulative(self) -> list[tuple[str, int]]:
        """The histogram's buckets as Prometheus counts them: ``(le, beats at most le)``,
        ``+Inf`` last."""
        bounds = [*(f"{bound:g}" for bound in BUCKETS), "+Inf"]
        running, out = 0, []
        for bound, beats in zip(bounds, self.buckets, strict=True):
            running += beats
            out.append((bound, running))
        return out

    def write_if_due(self, path: Path, now: float) -> bool:
        """Write the tally to ``path`` if a second passed since the last write (``now`` on a
        monotonic clock); whether it wrote. An ``OSError`` is the caller's to log."""
        if self._written_at is not None and now - self._written_at < WRITE_EVERY_SECS:
            return False
        data = {"buckets": self.buckets, "sum_secs": self.sum_secs, "missed": self.missed}
        write_atomically(path, json.dumps(data).encode())
        self._written_at = now
        return True


def read_tally(path: Path) -> BeatAckTally | None:
    """The tally in ``path``; None if the file is missing, too large or not a tally."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            return None
        data = json.loads(raw)
        buckets, sum_secs, missed = data["buckets"], data["sum_secs"], data["missed"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not (
        isinstance(buckets, list)
        and len(buckets) == len(BUCKETS) + 1
        and all(_count(beats) for beats in buckets)
        and _count(missed)
        and isinstance(sum_secs, int | float)
        and math.isfinite(sum_secs)
        and sum_secs >= 0
    ):
        return None
    return BeatAckTally(buckets=list(buckets), sum_secs=float(sum_secs), missed=missed)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
