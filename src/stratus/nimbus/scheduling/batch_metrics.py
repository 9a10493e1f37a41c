"""Prometheus series of how each stream keeps up, from the heartbeats the leader reads:
the duration of its micro-batches (a histogram), its trigger interval, its watermark's lag
and its input rate (the processed rate is ``stratus_pipeline_rows_per_second``).

Leader only, as the other heartbeat series (``pipeline_metrics.py``): each round's
observation is handed here. A batch is observed once, when a heartbeat shows a batch id of
a query above the last one seen; a batch that began and ended between two reads of the
heartbeats is not seen (the worker heartbeats every ``worker.heartbeat.frequency.secs``,
the leader reads every ``nimbus.monitor.freq.secs``). Labelled ``pipeline`` only: a
pipeline moved to another supervisor keeps its histogram. Pipelines gone lose their series;
at most ``max_pipelines`` are tracked::

    batches = BatchMetrics(leading_epoch=...)
    registry.register(batches)
    batches.observe(observed_round)          # the scheduling duty's on_observed
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from stratus.nimbus.scheduling.pipeline_metrics import ObservedRound
from stratus.nimbus.scheduling.pipeline_series import MAX_PIPELINES, point_of

BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


@dataclass
class _Durations:
    """One pipeline's histogram, and the last batch id seen of each of its queries."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0
    seen: dict[str, int] = field(default_factory=dict)

    def observe(self, query: str, batch_id: int, secs: float) -> None:
        if batch_id <= self.seen.get(query, -1):
            return
        self.seen[query] = batch_id
        self.counts[bisect.bisect_left(BUCKETS, secs)] += 1
        self.total += secs

    def buckets(self) -> list[tuple[str, float]]:
        cumulative, running = [], 0
        for bound, count in zip([*map(str, BUCKETS), "+Inf"], self.counts, strict=True):
            running += count
            cumulative.append((bound, float(running)))
        return cumulative


class BatchMetrics(Collector):
    """The collector; see the module docstring."""

    def __init__(
        self, *, leading_epoch: Callable[[], int | None], max_pipelines: int = MAX_PIPELINES
    ) -> None:
        self._leading_epoch = leading_epoch
        self._max_pipelines = max_pipelines
        self._lock = threading.Lock()
        self._durations: dict[str, _Durations] = {}
        self._last: ObservedRound | None = None

    def observe(self, observed: ObservedRound) -> None:
        """The leader's latest round: new batches into the histograms."""
        with self._lock:
            self._last = observed
            for name in [n for n in self._durations if n not in observed.pipelines]:
                del self._durations[name]
            for name, beat in observed.workers.items():
                durations = self._durations_of(name)
                if durations is None:
                    continue
                for query in beat.queries:
                    if query.batch_duration_secs is not None:
                        durations.observe(query.id, query.batch_id, query.batch_duration_secs)

    def collect(self) -> Iterator[Metric]:
        histogram = HistogramMetricFamily(
            "stratus_pipeline_batch_duration_seconds",
            "duration of the micro-batches its worker ran, each seen once (leader only)",
            labels=["pipeline"],
        )
        trigger = GaugeMetricFamily(
            "stratus_pipeline_trigger_interval_seconds",
            "the trigger interval the pipeline declares (leader only)",
            labels=["pipeline"],
        )
        lag = GaugeMetricFamily(
            "stratus_pipeline_watermark_lag_seconds",
            "its last batch's start minus its event-time watermark (leader only)",
            labels=["pipeline"],
        )
        rate = GaugeMetricFamily(
            "stratus_pipeline_input_rows_per_second",
            "rows per second its worker read in the last batch (leader only)",
            labels=["pipeline"],
        )
        with self._lock:
            last, durations = self._last, dict(self._durations)
            for name, each in sorted(durations.items()):
                histogram.add_metric([name], each.buckets(), each.total)
        if last is not None and last.epoch == self._leading_epoch():
            for name, beat in sorted(last.workers.items()):
                point = point_of(beat)
                if point is None:
                    continue
                rate.add_metric([name], point.input_rows_per_second)
                if point.trigger_interval_secs is not None:
                    trigger.add_metric([name], point.trigger_interval_secs)
                if point.watermark_lag_secs is not None:
                    lag.add_metric([name], point.watermark_lag_secs)
            yield from (histogram, trigger, lag, rate)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # read at every scrape; nothing to check at registration

    def _durations_of(self, name: str) -> _Durations | None:
        if name not in self._durations and len(self._durations) >= self._max_pipelines:
            return None
        return self._durations.setdefault(name, _Durations())
