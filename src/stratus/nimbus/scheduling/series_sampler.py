"""A standby's own look at the worker heartbeats, every step, for its pipeline series.

The leader feeds its series from each scheduling round (it reads every heartbeat anyway);
a standby runs no round, so this thread reads the assignments and the heartbeats itself
(one read of each store, as the web UI's overview) once per series step, and skips the
read while this nimbus leads. A read that fails (a store out of reach) is logged and the
next step tries again: the chart shows a hole::

    sampler = SeriesSampler(series, placement.everywhere, view.pipelines, leading=...)
    sampler.start(); ...; sampler.stop()
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from stratus.api.errors import UnavailableError
from stratus.api.records import PipelineRecord, PipelineWorkers, WorkerHeartbeat
from stratus.nimbus.scheduling.pipeline_series import PipelineSeriesStore

log = logging.getLogger(__name__)

STOP_WAIT_SECS = 2.0  # a stop's wait for a read under way (the session's end fails it)


class SeriesSampler:
    """The thread; see the module docstring."""

    def __init__(
        self,
        series: PipelineSeriesStore,
        read: Callable[[], Mapping[str, PipelineWorkers]],
        pipelines: Callable[[], Mapping[str, PipelineRecord]],
        *,
        leading: Callable[[], bool],
    ) -> None:
        self._series = series
        self._read = read
        self._pipelines = pipelines
        self._leading = leading
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="series-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling; a read under way is not waited for past ``STOP_WAIT_SECS``."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=STOP_WAIT_SECS)

    def sample(self) -> None:
        """One look: the current worker of every placed pipeline into the series."""
        try:
            placed = self._read()
        except UnavailableError as exc:
            log.info("event=series_not_sampled error=%r", exc)
            return
        self._series.observe(current_workers(placed), self._pipelines())

    def _sample_safely(self) -> None:
        try:
            self.sample()
        except Exception:  # the boundary: a chart's hole, never a dead thread
            log.exception("event=series_not_sampled")

    def _run(self) -> None:
        while not self._stopped.wait(self._series.step_secs):
            if not self._leading():
                self._sample_safely()


def current_workers(placed: Mapping[str, PipelineWorkers]) -> dict[str, WorkerHeartbeat]:
    """Each assigned pipeline's heartbeat from the worker of its assignment (the same
    supervisor and generation), as the leader's round picks it."""
    current = {}
    for name, where in placed.items():
        assignment = where.assignment
        if assignment is None:
            continue
        for beat in where.workers:
            if (
                beat.supervisor == assignment.supervisor
                and beat.generation == assignment.generation
            ):
                current[name] = beat
    return current
