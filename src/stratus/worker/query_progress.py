"""Progress and failures of an app's Structured Streaming queries, for the heartbeats.

A ``StreamingQueryListener`` registered before the pipeline's function runs feeds a
``QueryTracker``: Spark posts one progress event per completed micro-batch (idle triggers
are separate events, ignored here), so ``rows_total`` is the sum of the input rows of the
batches that completed since this worker started. A batch is counted once: an event whose
batch id is not above the last one counted for that query adds nothing. A batch that a
crash interrupted is not counted (its progress was never posted), and Spark runs it again
after a restart, where it is counted by the new worker.

Each progress also carries how long the last batch took (Spark's
``durationMs.triggerExecution``), how far its event-time watermark is behind the batch's
start (``timestamp`` minus ``eventTime.watermark``, both the driver's clock; none for a
query without a watermark), and the trigger interval the pipeline declares
(``pipeline.trigger.interval.secs``): what the nimbus charts and alerts on when a stream
falls behind::

    tracker = QueryTracker(trigger_interval_secs=spec.trigger_interval_secs)
    spark.streams.addListener(tracker_listener(tracker))
    tracker.snapshot()      # [QueryProgress(name='counts', batch_id=3, rows_total=120, ...)]
    tracker.failure()       # None, or "streaming query 'counts' (<id>) failed: ..."

The first batch each query commits in this process is logged with Spark's phases of it
(``durationMs``: ``latestOffset``, ``queryPlanning``, ``addBatch``, ``walCommit``, ...;
``event=first_batch``): after a failover that batch restores the state and takes the outage's
backlog, and its phases say where its time goes.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from stratus.api.records import QueryProgress
from stratus.worker.outcome import without_stack

log = logging.getLogger(__name__)


@dataclass
class _Query:
    id: str
    name: str | None
    batch_id: int = -1
    num_input_rows: int = 0
    input_rows_per_second: float = 0.0
    processed_rows_per_second: float = 0.0
    rows_total: int = 0
    failure: str | None = None
    trigger_interval_secs: float | None = None
    batch_duration_secs: float | None = None
    watermark_lag_secs: float | None = None

    def progress(self) -> QueryProgress:
        return QueryProgress(
            name=self.name,
            id=self.id,
            batch_id=self.batch_id,
            num_input_rows=self.num_input_rows,
            input_rows_per_second=self.input_rows_per_second,
            processed_rows_per_second=self.processed_rows_per_second,
            rows_total=self.rows_total,
            batch_duration_secs=self.batch_duration_secs,
            trigger_interval_secs=self.trigger_interval_secs,
            watermark_lag_secs=self.watermark_lag_secs,
        )


class QueryTracker:
    """Every query seen since the worker started, in start order; thread-safe (Spark's
    listener thread writes, the heartbeat thread and the main thread read)."""

    def __init__(
        self,
        on_batch: Callable[[QueryProgress], None] | None = None,
        *,
        trigger_interval_secs: float | None = None,
    ) -> None:
        """``on_batch`` hears of every batch counted (once each), outside the lock;
        ``trigger_interval_secs`` is the pipeline's, carried by every query's progress."""
        self._trigger = trigger_interval_secs
        self._lock = threading.Lock()
        self._queries: dict[str, _Query] = {}
        self._on_batch = on_batch

    def started(self, query_id: str, name: str | None) -> None:
        """A query (re)started: a failure of its earlier run no longer counts."""
        with self._lock:
            query = self._queries.setdefault(query_id, self._new(query_id, name))
            query.name = name
            query.failure = None

    def progressed(  # noqa: PLR0913 keyword-only: one progress event's fields
        self,
        query_id: str,
        *,
        name: str | None,
        batch_id: int,
        num_input_rows: int,
        input_rows_per_second: float,
        processed_rows_per_second: float,
        batch_duration_secs: float | None = None,
        watermark_lag_secs: float | None = None,
        phases: Mapping[str, int] | None = None,
    ) -> None:
        """One completed micro-batch of the query; ``phases``, Spark's ``durationMs`` of it,
        are logged for the query's first batch in this process."""
        with self._lock:
            query = self._queries.setdefault(query_id, self._new(query_id, name))
            if batch_id <= query.batch_id:
                return  # counted already
            first = query.batch_id < 0
            query.name = name
            query.batch_id = batch_id
            query.num_input_rows = num_input_rows
            query.input_rows_per_second = _finite(input_rows_per_second)
            query.processed_rows_per_second = _finite(processed_rows_per_second)
            query.rows_total += num_input_rows
            query.batch_duration_secs = batch_duration_secs
            query.watermark_lag_secs = watermark_lag_secs
            progress = query.progress()
        if first:
            log.info(
                "event=first_batch query=%s batch_id=%d rows=%d phases_ms=%s",
                name or query_id,
                batch_id,
                num_input_rows,
                ",".join(f"{phase}:{ms}" for phase, ms in sorted((phases or {}).items())) or "-",
            )
        if self._on_batch is not None:
            self._on_batch(progress)

    def terminated(self, query_id: str, exception: str | None) -> None:
        """The query ended: stopped (``exception`` None) or failed."""
        with self._lock:
            query = self._queries.setdefault(query_id, self._new(query_id, None))
            if exception:
                label = f"{query.name!r} ({query_id})" if query.name else query_id
                query.failure = f"streaming query {label} failed: {without_stack(exception)}"

    def snapshot(self) -> list[QueryProgress]:
        """The last progress of every query, in the order they started."""
        with self._lock:
            return [query.progress() for query in self._queries.values()]

    def failure(self) -> str | None:
        """The error of the first query whose last run failed, if any."""
        with self._lock:
            return next((q.failure for q in self._queries.values() if q.failure), None)

    def _new(self, query_id: str, name: str | None) -> _Query:
        return _Query(query_id, name, trigger_interval_secs=self._trigger)


def tracker_listener(tracker: QueryTracker) -> StreamingQueryListener:
    """A listener that feeds ``tracker``; register it before any query starts."""

    class _TrackerListener(StreamingQueryListener):  # method names are Spark's
        def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802
            tracker.started(str(event.id), event.name)

        def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802
            progress = event.progress
            tracker.progressed(
                str(progress.id),
                name=progress.name,
                batch_id=progress.batchId,
                num_input_rows=progress.numInputRows,
                input_rows_per_second=progress.inputRowsPerSecond,
                processed_rows_per_second=progress.processedRowsPerSecond,
                batch_duration_secs=batch_duration_secs(progress.durationMs),
                watermark_lag_secs=watermark_lag_secs(progress.timestamp, progress.eventTime),
                phases=progress.durationMs,
            )

        def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802
            pass  # no batch ran

        def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802
            tracker.terminated(str(event.id), event.exception)

    return _TrackerListener()


def _finite(value: float) -> float:
    """Spark reports NaN rates for a batch of zero duration; a heartbeat carries 0."""
    return value if math.isfinite(value) else 0.0


def batch_duration_secs(duration_ms: Mapping[str, int]) -> float | None:
    """The batch's whole duration (``triggerExecution``), seconds; None if Spark gave none."""
    millis = duration_ms.get("triggerExecution")
    return None if millis is None else millis / 1000.0


def watermark_lag_secs(timestamp: str, event_time: Mapping[str, str]) -> float | None:
    """The batch's start minus its watermark, seconds (never below 0); None for a query
    without a watermark, or before its first (Spark reports the epoch then)."""
    watermark = event_time.get("watermark")
    if not watermark:
        return None
    mark = _instant(watermark)
    if mark <= 0:
        return None
    return max(0.0, _instant(timestamp) - mark)


def _instant(iso: str) -> float:
    """Spark's progress time (``2026-01-01T00:00:00.000Z``) as epoch seconds."""
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
