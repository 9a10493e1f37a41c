"""How long a pipeline took to run (again), step by step, as its own records tell.

A pipeline starts on a supervisor in four steps, each visible through the nimbus API
(``NimbusClient.workers``): the leader writes its assignment, the supervisor starts a worker
process, Spark runs the pipeline, and a micro-batch commits. ``follow_start`` polls until all
four happened and returns a ``PipelineStart``: the time of each step, taken from the records
themselves rather than from when a poll saw them, so that the poll's period and the heartbeat
relay do not add to the steps::

    began = time.time()
    supervisor.signal(signal.SIGKILL)                  # the supervisor running "counts"
    start = follow_start(client, "counts", began=began, away_from="s1", after_batch=41)
    start.phases()   # {"detection": 4.3, "scheduling": 0.2, "spark": 14.1, "first_batch": 2.0}
    start.total      # kill -9 to the first batch committed on the new supervisor

The marks are wall-clock times (``time.time()``) written by the leader, the supervisor and the
worker, so they compare only between processes of one machine (``stratus local``, the
benchmarks). Each is:

=============  ==============================================================================
mark           from
=============  ==============================================================================
assigned       ``Assignment.assigned``: the leader's clock when it planned the assignment
               (just before its fenced write), of the first assignment away from ``away_from``
worker         the earliest ``started`` of the new worker's heartbeats: the supervisor's clock
               when it spawned the process (in the heartbeats it builds while the worker has
               written none), else the worker's when its heartbeat reporter started
running        ``time`` of the first RUNNING heartbeat with a Spark app id
first batch    ``time`` of the first heartbeat whose queries' last batch id is above
               ``after_batch``: the worker wrote it after that batch committed
=============  ==============================================================================

The worker writes a heartbeat at RUNNING and then every ``worker.heartbeat.frequency.secs``,
so the last two marks are late by at most that period.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from stratus.api.clock import Clock
from stratus.api.records import PipelineWorkers, WorkerHeartbeat, WorkerState
from stratus.client import NimbusClient
from stratus.errors import PipelineStartError

POLL_SECS = 0.2  # below the supervisors' heartbeat period, so no heartbeat goes unseen
TIMEOUT_SECS = 300.0  # Spark start-ups on a loaded 2-core machine take their time

PHASES = {  # each step, until what happened
    "detection": "→ the leader wrote the new assignment",
    "scheduling": "→ the supervisor started the worker process",
    "spark": "→ Spark ran the pipeline (RUNNING, app id)",
    "first_batch": "→ the first new batch committed",
}


@dataclass(frozen=True)
class PipelineStart:
    """When each step of one start of ``pipeline`` on ``supervisor`` happened (wall clock)."""

    pipeline: str
    supervisor: str
    began: float  # the failure, or the submit, that the start follows
    assigned: float
    worker_started: float
    running: float
    first_batch: float
    app_id: str
    batch_id: int  # the first batch committed by the new worker

    def phases(self) -> dict[str, float]:
        """Seconds of each step, keyed as ``PHASES``, in order."""
        marks = (self.began, self.assigned, self.worker_started, self.running, self.first_batch)
        return {name: marks[i + 1] - marks[i] for i, name in enumerate(PHASES)}

    @property
    def total(self) -> float:
        """From the failure (or submit) to the first batch committed."""
        return self.first_batch - self.began

    @property
    def from_assignment(self) -> float:
        """From the assignment to the first batch committed: the start alone."""
        return self.first_batch - self.assigned


class StartTracker:
    """Reads successive ``PipelineWorkers`` of one pipeline and keeps the marks it finds.

    Only the assignment to a supervisor other than ``away_from``, and heartbeats of that
    supervisor's worker started after ``began``, count: the old worker's heartbeats, and
    those a previous life of the new supervisor left, are older. A FAILED new worker ends the
    wait with ``PipelineStartError``.
    """

    def __init__(self, pipeline: str, *, began: float, away_from: str | None, after_batch: int):
        self.pipeline = pipeline
        self.began = began
        self.away_from = away_from
        self.after_batch = after_batch
        self._supervisor: str | None = None
        self._assigned: float | None = None
        self._worker_started: float | None = None
        self._running: tuple[float, str] | None = None  # time, app id
        self._first_batch: tuple[float, int] | None = None  # time, batch id

    def observe(self, workers: PipelineWorkers) -> PipelineStart | None:
        """Take the marks ``workers`` shows; the start once every mark is known."""
        assignment = workers.assignment
        if assignment is None or assignment.supervisor == self.away_from:
            return None
        if assignment.supervisor != self._supervisor:  # the first move, or a move again
            self._supervisor, self._worker_started = assignment.supervisor, None
            self._running = self._first_batch = None
        self._assigned = assignment.assigned
        for beat in workers.workers:
            if beat.supervisor == self._supervisor and self._new(beat):
                self._observe_beat(beat)
        return self._start()

    def _new(self, beat: WorkerHeartbeat) -> bool:
        return beat.pid is not None and beat.started >= self.began

    def _observe_beat(self, beat: WorkerHeartbeat) -> None:
        if beat.state is WorkerState.FAILED:
            raise PipelineStartError(
                f"pipeline {self.pipeline}: its worker on {beat.supervisor} FAILED: {beat.error}"
            )
        if self._worker_started is None or beat.started < self._worker_started:
            self._worker_started = beat.started
        if beat.state is not WorkerState.RUNNING or not beat.app_id:
            return
        if self._running is None:
            self._running = (beat.time, beat.app_id)
        batch = beat.last_batch_id
        if self._first_batch is None and batch > self.after_batch:
            self._first_batch = (beat.time, batch)

    def _start(self) -> PipelineStart | None:
        if (
            self._supervisor is None
            or self._assigned is None
            or self._worker_started is None
            or self._running is None
            or self._first_batch is None
        ):
            return None
        return PipelineStart(
            pipeline=self.pipeline,
            supervisor=self._supervisor,
            began=self.began,
            assigned=self._assigned,
            worker_started=self._worker_started,
            running=self._running[0],
            first_batch=self._first_batch[0],
            app_id=self._running[1],
            batch_id=self._first_batch[1],
        )


def follow_start(  # noqa: PLR0913 keyword-only options
    client: NimbusClient,
    pipeline: str,
    *,
    began: float,
    away_from: str | None = None,
    after_batch: int = -1,
    on_poll: Callable[[], object] = lambda: None,
    timeout: float = TIMEOUT_SECS,
    poll_secs: float = POLL_SECS,
    clock: Clock = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> PipelineStart:
    """Poll ``client.workers(pipeline)`` until the pipeline ran a batch above ``after_batch``
    on a supervisor other than ``away_from``; ``on_poll`` is called after every poll.

    ``began`` is the wall-clock time of the failure or submit the start follows. Raises
    ``PipelineStartError`` if the new worker FAILED or ``timeout`` passed first.
    """
    tracker = StartTracker(pipeline, began=began, away_from=away_from, after_batch=after_batch)
    deadline = clock() + timeout
    while (start := tracker.observe(client.workers(pipeline))) is None:
        on_poll()
        if clock() >= deadline:
            where = f"away from {away_from}" if away_from else "on a supervisor"
            raise PipelineStartError(
                f"pipeline {pipeline}: no batch above {after_batch} committed {where} "
                f"within {timeout:g}s"
            )
        sleep(poll_secs)
    on_poll()
    return start
