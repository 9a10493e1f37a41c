"""The supervisor's Prometheus metrics, in a registry of its own, scraped at its endpoint's
``GET /metrics``: what every daemon shows (``stratus.web.metrics``: build info, process),
its lease and fences, and one series per worker it holds (pipelines bounded by its slots);
the machine's memory and the warm workers' (their budget, use, number, and why fewer); its
standby workers by state and the memory they hold, and, with fast beats, what is left of its
beat lease (read from ``lease.beat`` at the scrape, on the machine's monotonic clock, which
the beat agent writes it on) and how long its beats take to count (the agent's tally in
``beat-ack.json``, ``beat_ack_stats``).

Every worker series is labelled ``supervisor`` and ``pipeline`` and read at the scrape from
the supervisor's last round of heartbeats, so a worker that is gone disappears with it. The
heartbeat age compares the worker's heartbeat time with this host's wall clock: the worker
runs on this host, so no clocks of two machines are compared::

    metrics = SupervisorMetrics("s1", workers=lambda: beats, fences=lambda: lease.fences,
                                lease_held=lambda: lease.state is LeaseState.HELD)
    body = metrics.exposition()
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from stratus.api.clock import Clock
from stratus.api.records import MIB, WarmHeld, WarmMemory, WorkerHeartbeat, WorkerState
from stratus.api.standby_workers import StandbyWorkerBeat, StandbyWorkerState
from stratus.supervisor.beat_ack_stats import ACK_STATS_FILE, read_tally
from stratus.supervisor.warm_memory import Machine, read_machine
from stratus.web.metrics import CONTENT_TYPE_LATEST, CallbackCounter, daemon_registry, exposition
from stratus.worker.lease_file import read_lease

__all__ = ["CONTENT_TYPE_LATEST", "SupervisorMetrics"]

_WORKER = ["supervisor", "pipeline"]


class SupervisorMetrics(Collector):
    """Every metric of one supervisor; see the module docstring. ``standby``: the standby
    workers of its last heartbeat round; ``beat_lease``: ``lease.beat`` with fast beats
    (None: no beat lease, no series)."""

    def __init__(  # noqa: PLR0913 keyword-only: what each series reads, and the clocks
        self,
        supervisor: str,
        *,
        workers: Callable[[], Sequence[WorkerHeartbeat]],
        fences: Callable[[], int],
        lease_held: Callable[[], bool],
        warm: Callable[[], WarmMemory | None] = lambda: None,
        machine: Callable[[], Machine | None] = read_machine,
        standby: Callable[[], Sequence[StandbyWorkerBeat]] = lambda: (),
        beat_lease: Path | None = None,
        wall: Clock = time.time,
        clock: Clock = time.monotonic,
    ) -> None:
        self._supervisor = supervisor
        self._workers = workers
        self._standby = standby
        self._beat_lease = beat_lease
        self._clock = clock
        self._lease_held = lease_held
        self._warm = warm
        self._machine = machine
        self._wall = wall
        self.registry = daemon_registry("supervisor")
        CallbackCounter(
            "stratus_supervisor_fenced",
            "times the supervisor stopped its own workers (fencing): its lease lapsed, or a "
            "leader fenced it",
            fences,
            self.registry,
        )
        self.registry.register(self)

    def collect(self) -> Iterator[Metric]:
        supervisor = self._supervisor
        lease = GaugeMetricFamily(
            "stratus_supervisor_lease_held",
            "1 while a recent heartbeat write holds the lease (0: fenced or not yet written)",
            labels=["supervisor"],
        )
        lease.add_metric([supervisor], float(self._lease_held()))
        yield lease
        beats = list(self._workers())
        phases = GaugeMetricFamily(
            "stratus_supervisor_workers",
            "workers held by the supervisor, by phase",
            labels=["supervisor", "phase"],
        )
        for state in WorkerState:
            count = sum(1 for beat in beats if beat.state is state)
            phases.add_metric([supervisor, state.value.lower()], float(count))
        yield phases
        up = GaugeMetricFamily(
            "stratus_supervisor_worker_up", "1 while the worker runs its pipeline", labels=_WORKER
        )
        restarts = CounterMetricFamily(
            "stratus_supervisor_worker_restarts",
            "crashes of the worker restarted since its assignment (resets when reassigned)",
            labels=_WORKER,
        )
        batch = GaugeMetricFamily(
            "stratus_supervisor_worker_batch",
            "the newest batch id the worker's queries report (-1: none yet)",
            labels=_WORKER,
        )
        rows = CounterMetricFamily(
            "stratus_supervisor_worker_rows",
            "input rows the worker's queries read since the worker started",
            labels=_WORKER,
        )
        rate = GaugeMetricFamily(
            "stratus_supervisor_worker_rows_per_second",
            "rows per second the worker's queries processed in their last batch",
            labels=_WORKER,
        )
        age = GaugeMetricFamily(
            "stratus_supervisor_worker_heartbeat_age_seconds",
            "seconds since the worker's last heartbeat (this host's clock)",
            labels=_WORKER,
        )
        now = self._wall()
        for beat in beats:
            labels = [supervisor, beat.pipeline]
            up.add_metric(labels, float(beat.state is WorkerState.RUNNING))
            restarts.add_metric(labels, float(beat.restarts))
            batch.add_metric(labels, float(max((q.batch_id for q in beat.queries), default=-1)))
            rows.add_metric(labels, float(sum(q.rows_total for q in beat.queries)))
            rate.add_metric(labels, sum(q.processed_rows_per_second for q in beat.queries))
            age.add_metric(labels, max(0.0, now - beat.time))
        yield from (up, restarts, batch, rows, rate, age)
        yield from self._memory()
        yield from self._standby_workers()

    def _memory(self) -> Iterator[Metric]:
        """The machine's memory now, and the warm workers' as the supervisor last saw them."""
        supervisor = self._supervisor
        machine = self._machine()
        if machine is not None:
            for name, what, value in (
                ("total", "the machine's memory (the cgroup's limit where lower)", machine.total),
                ("available", "the machine's available memory", machine.available),
            ):
                gauge = GaugeMetricFamily(
                    f"stratus_supervisor_memory_{name}_bytes", what, labels=["supervisor"]
                )
                gauge.add_metric([supervisor], float(value))
                yield gauge
        warm = self._warm()
        if warm is None:
            return
        for name, what, value in (
            ("memory_budget_bytes", "memory the warm workers may use together", warm.budget_mb),
            ("memory_bytes", "memory the warm workers use (measured once up)", warm.used_mb),
        ):
            gauge = GaugeMetricFamily(
                f"stratus_supervisor_warm_{name}", what, labels=["supervisor"]
            )
            gauge.add_metric([supervisor], float(value * MIB))
            yield gauge
        workers = GaugeMetricFamily(
            "stratus_supervisor_warm_workers",
            "warm workers alive, by state (starting, ready)",
            labels=["supervisor", "state"],
        )
        workers.add_metric([supervisor, "starting"], float(warm.up - warm.ready))
        workers.add_metric([supervisor, "ready"], float(warm.ready))
        yield workers
        held = GaugeMetricFamily(
            "stratus_supervisor_warm_held",
            "1 for the reason the supervisor keeps fewer warm workers than free slots (or "
            "none), 0 for the others",
            labels=["supervisor", "reason"],
        )
        for reason in WarmHeld:
            held.add_metric([supervisor, reason.value], float(warm.held is reason))
        yield held

    def _standby_workers(self) -> Iterator[Metric]:
        """The standby workers as the last round reported them, and the beat lease now."""
        supervisor = self._supervisor
        standby = list(self._standby())
        states = GaugeMetricFamily(
            "stratus_supervisor_standby_workers",
            "standby workers the supervisor runs for hot pipelines, by state (fetching, "
            "starting, ready, refused, failed)",
            labels=["supervisor", "state"],
        )
        for state in StandbyWorkerState:
            count = sum(1 for beat in standby if beat.state is state)
            states.add_metric([supervisor, state.value.lower()], float(count))
        yield states
        memory = GaugeMetricFamily(
            "stratus_supervisor_standby_memory_bytes",
            "resident memory of the standby workers' processes (JVM included), as last measured",
            labels=["supervisor"],
        )
        held = sum(beat.rss_mb or 0 for beat in standby)
        memory.add_metric([supervisor], float(held * MIB))
        yield memory
        remaining = GaugeMetricFamily(
            "stratus_supervisor_beat_lease_remaining_seconds",
            "seconds until the beat lease ends unless a beat renews it (0: it has ended, or "
            "no beat agent runs: no hot worker or standby worker here); no series without "
            "fast beats",
            labels=["supervisor"],
        )
        if self._beat_lease is not None:  # without one, the family alone, as phi's
            ends = read_lease(self._beat_lease)
            left = 0.0 if ends is None else max(0.0, ends - self._clock())
            remaining.add_metric([supervisor], left)
        yield remaining
        yield from self._beat_acks()

    def _beat_acks(self) -> Iterator[Metric]:
        """The beat agent's tally (``beat_ack_stats``), next to ``lease.beat``: the families
        always, a series once an agent has written one."""
        acks = HistogramMetricFamily(
            "stratus_supervisor_beat_ack_seconds",
            "seconds from a fast beat's start to its acknowledgement by a majority of the "
            "pacemakers, for the beats that counted (since the beat agent started)",
            labels=["supervisor"],
        )
        missed = CounterMetricFamily(
            "stratus_supervisor_beats_not_counted",
            "fast beats that did not count: fewer than a majority of the pacemakers stored "
            "them within half the beat lease (since the beat agent started)",
            labels=["supervisor"],
        )
        lease = self._beat_lease
        tally = read_tally(lease.with_name(ACK_STATS_FILE)) if lease is not None else None
        if tally is not None:
            acks.add_metric([self._supervisor], tally.cumulative(), sum_value=tally.sum_secs)
            missed.add_metric([self._supervisor], float(tally.missed))
        yield acks
        yield missed

    def describe(self) -> Iterator[Metric]:
        return iter(())  # read at every scrape; nothing to check at registration

    def exposition(self) -> bytes:
        return exposition(self.registry)
