"""Per-pipeline time series kept in memory by every nimbus, from the worker heartbeats it
reads: input and processed rows per second, the batch duration against the trigger
interval, and the watermark's lag, over the last hour, for the web UI's charts.

Memory is bounded: a ring of ``points`` per pipeline (one point per ``step_secs``: 360 of
10 s, an hour), at most ``max_pipelines`` pipelines (the first seen are kept; a pipeline
past the cap has no series), and a pipeline no longer in the cluster loses its series at
the next observation. Nothing is persisted: a nimbus that starts charts from then on (a
standby that becomes leader keeps the points it had). The leader observes at each
scheduling round (the heartbeats it reads anyway); a standby reads the heartbeats itself
every step (``series_sampler.py``)::

    series = PipelineSeriesStore()
    series.observe(round.workers, round.pipelines)   # every round; one point per step
    series.of("etl")                                 # PipelineSeries, oldest point first
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping

from stratus.api.clock import Clock
from stratus.api.records import WorkerHeartbeat, WorkerState
from stratus.api.series import PipelineSeries, SeriesPoint

STEP_SECS = 10.0  # one point per step
POINTS = 360  # per pipeline: an hour of 10 s steps
MAX_PIPELINES = 500  # pipelines with a series; the others have none


class PipelineSeriesStore:
    """The rings of every pipeline; thread-safe (rounds write, API requests read)."""

    def __init__(
        self,
        *,
        step_secs: float = STEP_SECS,
        points: int = POINTS,
        max_pipelines: int = MAX_PIPELINES,
        clock: Clock = time.monotonic,
    ) -> None:
        self.step_secs = step_secs
        self._points = points
        self._max_pipelines = max_pipelines
        self._clock = clock
        self._lock = threading.Lock()
        self._rings: dict[str, deque[SeriesPoint]] = {}
        self._last: dict[str, float] = {}  # pipeline -> monotonic time of its newest point

    def observe(self, workers: Mapping[str, WorkerHeartbeat], pipelines: Iterable[str]) -> None:
        """One look at the heartbeats (pipeline -> its current worker's): a point for each
        pipeline whose newest point is a step old; the series of pipelines gone dropped."""
        now = self._clock()
        present = set(pipelines)
        with self._lock:
            for name in [name for name in self._rings if name not in present]:
                del self._rings[name], self._last[name]
            for name, beat in sorted(workers.items()):
                point = point_of(beat)
                if name in present and point is not None:
                    self._add(name, point, now)

    def of(self, name: str) -> PipelineSeries:
        """The pipeline's points, oldest first (none for a pipeline never observed)."""
        with self._lock:
            points = list(self._rings.get(name, ()))
        return PipelineSeries(pipeline=name, step_secs=self.step_secs, points=points)

    def tracked(self) -> int:
        """How many pipelines have a series."""
        with self._lock:
            return len(self._rings)

    def _add(self, name: str, point: SeriesPoint, now: float) -> None:
        ring = self._rings.get(name)
        if ring is None:
            if len(self._rings) >= self._max_pipelines:
                return
            ring = self._rings[name] = deque(maxlen=self._points)
        elif now - self._last[name] < self.step_secs or ring[-1].at == point.at:
            return  # within the step, or the same heartbeat again
        ring.append(point)
        self._last[name] = now


def point_of(beat: WorkerHeartbeat) -> SeriesPoint | None:
    """The point a running worker's heartbeat gives, from its queries that completed a
    batch (None for a worker not running, or before any batch completed)."""
    queries = [q for q in beat.queries if q.batch_id >= 0]
    if beat.state is not WorkerState.RUNNING or not queries:
        return None
    return SeriesPoint(
        at=beat.time,
        input_rows_per_second=sum(q.input_rows_per_second for q in queries),
        processed_rows_per_second=sum(q.processed_rows_per_second for q in queries),
        batch_duration_secs=_largest(q.batch_duration_secs for q in queries),
        trigger_interval_secs=_largest(q.trigger_interval_secs for q in queries),
        watermark_lag_secs=_largest(q.watermark_lag_secs for q in queries),
    )


def _largest(values: Iterable[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return max(known) if known else None
