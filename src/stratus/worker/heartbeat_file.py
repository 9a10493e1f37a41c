"""The worker's heartbeat file: written at once, every interval, at each change, and last.

A thread of its own writes it, so the supervisor hears from the worker while Spark starts
(which takes seconds) and while the pipeline's function runs. States only move forward:
STARTING → RUNNING → one final state (FINISHED, STOPPED or FAILED), written once, after
which nothing else is written::

    reporter = HeartbeatReporter(spec)
    reporter.start()                           # STARTING, now and every interval
    reporter.running(app_id="local-1700000000000")
    reporter.report_queries(tracker.snapshot)  # per-query progress in every heartbeat
    reporter.finish(Outcome.stopped())         # the final heartbeat; the thread ends
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from stratus.api.clock import Clock
from stratus.api.records import QueryProgress, WorkerHeartbeat, WorkerState
from stratus.worker.outcome import Outcome
from stratus.worker.spec import WorkerSpec, write_heartbeat

log = logging.getLogger(__name__)


def _no_queries() -> list[QueryProgress]:
    return []


class HeartbeatReporter:
    """Owns the worker's reported status; every write goes through its lock."""

    def __init__(
        self,
        spec: WorkerSpec,
        *,
        wall: Clock = time.time,
        pid: int | None = None,
    ) -> None:
        self._spec = spec
        self._wall = wall  # heartbeats carry wall-clock times: other machines read them
        self._pid = os.getpid() if pid is None else pid
        self._started = wall()
        self._lock = threading.Lock()
        self._state = WorkerState.STARTING
        self._app_id: str | None = None
        self._spark_ui: str | None = None
        self._runs = 0
        self._error: str | None = None
        self._outcome: Outcome | None = None
        self._queries: Callable[[], list[QueryProgress]] = _no_queries
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat_until_done, name="heartbeat", daemon=True)

    @property
    def state(self) -> WorkerState:
        return self._state

    @property
    def outcome(self) -> Outcome | None:
        """The outcome of the final heartbeat; None before it."""
        return self._outcome

    def start(self) -> None:
        """Write the STARTING heartbeat now, then one every ``heartbeat_interval_secs``."""
        self._beat()
        self._thread.start()

    def running(self, app_id: str | None = None, spark_ui: str | None = None) -> None:
        """The pipeline runs (a function called, an sdp run started); ``spark_ui`` is its
        SparkContext's ``uiWebUrl``, if its UI is on."""
        with self._lock:
            if self._state is WorkerState.STARTING:
                self._state = WorkerState.RUNNING
            self._app_id = app_id or self._app_id
            self._spark_ui = spark_ui or self._spark_ui
        self._beat()

    def runs_completed(self, runs: int) -> None:
        """sdp: how many updates completed so far."""
        with self._lock:
            self._runs = runs
        self._beat()

    def report_queries(self, source: Callable[[], list[QueryProgress]]) -> None:
        """Every later heartbeat carries ``source()``: the streaming queries' progress."""
        with self._lock:
            self._queries = source

    def finish(self, outcome: Outcome) -> None:
        """Write the final heartbeat (only the first call does) and end the thread."""
        self._finish_if(outcome, lambda state: not state.final)

    def finish_if_starting(self, outcome: Outcome) -> bool:
        """Like ``finish``, but only while STARTING (nothing ran yet); whether it did."""
        return self._finish_if(outcome, lambda state: state is WorkerState.STARTING)

    def _finish_if(self, outcome: Outcome, allowed: Callable[[WorkerState], bool]) -> bool:
        with self._lock:
            if not allowed(self._state):
                return False
            self._state = outcome.state
            self._error = outcome.error
            self._outcome = outcome
            self._write_locked()
        self._done.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()
        return True

    def _beat_until_done(self) -> None:
        while not self._done.wait(self._spec.heartbeat_interval_secs):
            self._beat()

    def _beat(self) -> None:
        with self._lock:
            if not self._state.final:
                self._write_locked()

    def _write_locked(self) -> None:
        try:
            queries = self._queries()
        except Exception:
            log.exception("event=progress_unavailable")
            queries = []
        try:
            write_heartbeat(self._spec.heartbeat_path, self._heartbeat(queries))
        except OSError as exc:
            log.warning(
                "event=heartbeat_not_written path=%s error=%r",
                self._spec.heartbeat_path,
                exc,
            )

    def _heartbeat(self, queries: list[QueryProgress]) -> WorkerHeartbeat:
        spec = self._spec
        return WorkerHeartbeat(
            pipeline=spec.pipeline,
            supervisor=spec.supervisor,
            epoch=spec.epoch,
            generation=spec.generation,
            digest=spec.digest,
            state=self._state,
            time=self._wall(),
            started=self._started,
            pid=self._pid,
            app_id=self._app_id,
            spark_ui=None if self._state.final else self._spark_ui,  # its UI ends with it
            queries=queries,
            runs=self._runs,
            error=self._error,
        )
