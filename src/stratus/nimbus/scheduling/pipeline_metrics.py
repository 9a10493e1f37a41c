"""Per-pipeline metrics of a nimbus: what every nimbus reads, and what the leader observes.

Every nimbus shows, from its watch-fed view (no ZooKeeper read per scrape), each pipeline's
status and how many nimbuses hold its code against how many it needs. Only the leader shows
the series that need heartbeats (up, restarts, batch, rows, heartbeat age): its scheduling
duty reads every heartbeat each round anyway, and hands its observation here
(``observe``); a standby would have to read the state store at every scrape to show the
same. A series is labelled ``pipeline`` (and ``supervisor`` where a worker's count resets
with its supervisor); pipelines are bounded by the cluster, so cardinality is bounded::

    metrics = PipelineMetrics(pipelines=view.pipelines, replication=..., leading=...)
    registry.register(metrics)
    duty = SchedulingDuty(..., on_observed=metrics.observe)

The heartbeat age is the leader's own: seconds since it saw the worker's heartbeat change
(``Liveness``), never a comparison of two machines' wall clocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from stratus.api.clock import Clock
from stratus.api.records import PipelineRecord, PipelineStatus, WorkerHeartbeat, WorkerState


@dataclass(frozen=True)
class ObservedRound:
    """What one scheduling round saw: every pipeline record, the heartbeat of the worker
    running each assigned pipeline (if any), and how long each has been silent."""

    epoch: int
    pipelines: Mapping[str, PipelineRecord]
    workers: Mapping[str, WorkerHeartbeat]  # pipeline -> its current worker's heartbeat
    silent_secs: Mapping[str, float]  # pipeline -> seconds since its heartbeat changed
    taken_at: float = field(default=0.0)  # the leader's monotonic clock


class PipelineMetrics(Collector):
    """The collector of per-pipeline series; see the module docstring."""

    def __init__(
        self,
        *,
        pipelines: Callable[[], Mapping[str, PipelineRecord]],
        replication: Callable[[PipelineRecord], int],
        leading_epoch: Callable[[], int | None],
        clock: Clock = time.monotonic,
    ) -> None:
        self._pipelines = pipelines
        self._replication = replication
        self._leading_epoch = leading_epoch
        self._clock = clock
        self._last: ObservedRound | None = None

    def observe(self, observed: ObservedRound) -> None:
        """The leader's latest round (any thread: one reference swap)."""
        self._last = observed

    def collect(self) -> Iterator[Metric]:
        yield from self._from_view()
        yield from self._from_round()

    def describe(self) -> Iterator[Metric]:
        return iter(())  # read at every scrape; nothing to check at registration

    def _from_view(self) -> Iterator[Metric]:
        status = GaugeMetricFamily(
            "stratus_pipeline_status",
            "1 for the pipeline's status (PENDING, ACTIVE, INACTIVE, FAILED, FINISHED, KILLED)",
            labels=["pipeline", "status"],
        )
        held = GaugeMetricFamily(
            "stratus_pipeline_replication",
            "nimbuses that hold the pipeline's code now",
            labels=["pipeline"],
        )
        required = GaugeMetricFamily(
            "stratus_pipeline_replication_required",
            "nimbuses that must hold its code (pipeline.min.replication.count)",
            labels=["pipeline"],
        )
        for name, record in sorted(self._pipelines().items()):
            for each in PipelineStatus:
                status.add_metric([name, each.value], float(record.status is each))
            if record.status.needs_code:
                held.add_metric([name], float(self._replication(record)))
                required.add_metric([name], float(record.replication_required))
        yield from (status, held, required)

    def _from_round(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "stratus_pipeline_up",
            "1 while the pipeline's worker runs it (leader only; 0 for a pipeline that should "
            "run and does not)",
            labels=["pipeline"],
        )
        labels = ["pipeline", "supervisor"]
        restarts = CounterMetricFamily(
            "stratus_pipeline_restarts",
            "crashes of its worker restarted since the assignment (leader only)",
            labels=labels,
        )
        batch = GaugeMetricFamily(
            "stratus_pipeline_batch",
            "the newest batch id its worker's queries report, -1 before the first (leader only)",
            labels=labels,
        )
        rows = CounterMetricFamily(
            "stratus_pipeline_rows",
            "input rows its worker read since it started (leader only)",
            labels=labels,
        )
        rate = GaugeMetricFamily(
            "stratus_pipeline_rows_per_second",
            "rows per second its worker processed in the last batch (leader only)",
            labels=labels,
        )
        age = GaugeMetricFamily(
            "stratus_pipeline_heartbeat_age_seconds",
            "seconds since the leader saw the worker's heartbeat change (leader only)",
            labels=labels,
        )
        last = self._last
        if last is not None and last.epoch == self._leading_epoch():
            since = max(0.0, self._clock() - last.taken_at)
            for name, record in sorted(last.pipelines.items()):
                beat = last.workers.get(name)
                running = beat is not None and beat.state is WorkerState.RUNNING
                if record.status is PipelineStatus.ACTIVE or running:
                    up.add_metric([name], float(running))
                if beat is None:
                    continue
                worker = [name, beat.supervisor]
                restarts.add_metric(worker, float(beat.restarts))
                batch.add_metric(worker, float(max((q.batch_id for q in beat.queries), default=-1)))
                rows.add_metric(worker, float(sum(q.rows_total for q in beat.queries)))
                rate.add_metric(worker, sum(q.processed_rows_per_second for q in beat.queries))
                age.add_metric(worker, last.silent_secs.get(name, 0.0) + since)
        yield from (up, restarts, batch, rows, rate, age)
