"""A worker's trail: its start, each micro-batch its streaming queries commit, its stop.

The lines the reliability oracle reads to prove that two workers of one pipeline never
processed at once (``stratus.trail``). One line per batch, written from Spark's listener
thread as the batch's progress arrives: a ``write`` of a few hundred bytes, nothing a batch
would notice::

    trail = WorkerTrail.open(spec)
    trail.started()
    tracker = QueryTracker(on_batch=trail.batch_committed)
    trail.stopped(outcome.state)
"""

from __future__ import annotations

import threading

from stratus.api.records import QueryProgress, WorkerState
from stratus.trail import (
    BATCH_COMMITTED,
    WORKER_STARTED,
    WORKER_STOPPED,
    Actor,
    TrailRecorder,
)
from stratus.worker.spec import WorkerSpec


class WorkerTrail:
    """Records one worker's events, each naming its pipeline, epoch and generation."""

    def __init__(self, recorder: TrailRecorder, spec: WorkerSpec) -> None:
        self._recorder = recorder
        self._ids = {
            "pipeline": spec.pipeline,
            "epoch": spec.epoch,
            "generation": spec.generation,
            "supervisor": spec.supervisor,
        }
        self._stopped = False
        self._lock = threading.Lock()  # the main thread and a stop's grace timer may race

    @classmethod
    def open(cls, spec: WorkerSpec) -> WorkerTrail:
        """The trail of ``spec``'s worker, into its ``history_file``, or the descriptor
        ``history_fd`` it inherited (a worker of another user), or nowhere."""
        actor = Actor("worker", spec.pipeline)
        if spec.history_fd is not None:
            return cls(TrailRecorder.inherited(spec.history_fd, actor), spec)
        return cls(TrailRecorder.open(spec.history_file, actor), spec)

    def started(self) -> None:
        self._recorder.record(WORKER_STARTED, **self._ids)

    def batch_committed(self, progress: QueryProgress) -> None:
        """A micro-batch of a streaming query completed (its progress was posted)."""
        self._recorder.record(
            BATCH_COMMITTED,
            **self._ids,
            query=progress.name or progress.id,
            batch_id=progress.batch_id,
            rows=progress.num_input_rows,
            duration_secs=progress.batch_duration_secs,
        )

    def stopped(self, state: WorkerState | None) -> None:
        """The worker processes nothing more (recorded once, whichever path stops it)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._recorder.record(
            WORKER_STOPPED, **self._ids, state=state.value if state is not None else None
        )
