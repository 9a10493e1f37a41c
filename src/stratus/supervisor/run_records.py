"""The supervisor's record of each run of a pipeline, in ZooKeeper under ``runs/``.

A run is one worker process's life on one supervisor (a crash restart is a new run). Its
record is a persistent sequential node, ``runs/<pipeline>/run-0000000007``: the sequence is
the run's number, unique across supervisors and leaders, and continuous across a kill and a
resubmit of the same name (a purge deletes the runs with the checkpoints). The supervisor
creates it just before it starts the worker (``open``), so the run's number names the
directory of its log: while connected, ZooKeeper answers that in a moment (the wait is
bounded); while it is not, ``open`` does not wait at all: the worker starts at once, with its
log where a run without a number keeps it, and the book's thread creates the record once
ZooKeeper is back, with the pid and the end noted meanwhile (``running``, ``close`` with
the number None). Every later write (the pid, the end) is a version-checked read-and-set on
that thread, so the control loop never waits for ZooKeeper, and a write that fails is tried
again until the supervisor stops (then for up to the ``stop`` timeout, and no longer once
its session is closed). Trimming to the newest ``pipeline.runs.keep`` follows each
creation and never deletes a run that may still end (open, its supervisor registered)::

    book = RunBook(client, paths, "s1", log_dir_of=..., keep=50)
    book.start()
    number = book.open(assignment, started=time.time())      # 7, or None (numbered later)
    book.running("etl", 7, pid=4242)
    book.close("etl", 7, RunEnd(RunOutcome.FINISHED, ended=..., exit_code=0), conf)
    book.stop(timeout=5.0)                                   # what is queued is written

A run whose creation was sent but not answered in time starts anyway, with its log where a
run without a number keeps it; the thread takes its number from the late answer, or looks
for the record (its supervisor and start time) before it creates it again.
"""

from __future__ import annotations

import logging
import posixpath
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    KazooException,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.interfaces import IAsyncResult
from pydantic import ValidationError

from stratus.api.clock import Clock
from stratus.api.records import Assignment, AssignmentChange, RunRecord
from stratus.api.redaction import redact_text
from stratus.api.user_exception import error_first
from stratus.supervisor.run_outcome import (
    RunEnd,
    batches_of,
    removal_outcome,
    rows_of,
    signal_name,
)
from stratus.worker.outcome import clip
from stratus.zk.paths import RUN_NODE_PREFIX, ClusterPaths, sequence_of

log = logging.getLogger(__name__)

OPEN_TIMEOUT_SECS = 5.0  # how long a start waits for its run's node
RETRY_SECS = 2.0  # after a write that failed
STOPPING_RETRY_SECS = 0.1  # the same, while the supervisor stops
RUNS_KEPT = 50
RUN_RECORD_MAX_BYTES = 16 * 1024  # a run record's encoded size, whatever a heartbeat held
SHORT_TEXT_CHARS = 256  # of a free-text field a record over the cap keeps

Change = Callable[[RunRecord], RunRecord]


@dataclass(eq=False)
class _Open:
    """A run the book's thread records once ZooKeeper answers: ``sent`` is a creation
    already sent without an answer in time; ``number`` is known once it is created."""

    record: RunRecord
    sent: IAsyncResult | None = None
    number: int | None = None
    maybe_created: bool = False  # a creation went unanswered: look for it before another


@dataclass(frozen=True)
class _Write:
    pipeline: str
    number: int | _Open  # an _Open: the run that one records, once it has its number
    change: Change | None  # None: trim the pipeline's runs


def to_trim(nodes: list[str], keep: int) -> list[str]:
    """The run nodes beyond the newest ``keep`` of ``nodes``, oldest first (the caller
    spares the open ones)."""
    ordered = sorted(nodes, key=sequence_of)
    return ordered[: max(0, len(ordered) - keep)]


def ended_record(
    record: RunRecord, end: RunEnd, conf: dict[str, Any], change: AssignmentChange | None
) -> RunRecord:
    """``record`` completed with ``end``: its outcome (a removal's judged from ``change``),
    its exit, its error with the pipeline's own exception first, redacted and bounded, and
    what its last heartbeat said (batches, rows, its Spark application)."""
    outcome = end.outcome or removal_outcome(change, record.supervisor)
    code = end.exit_code
    error = clip(redact_text(error_first(end.error), conf)) if end.error else None
    beat = end.beat
    return record.model_copy(
        update={
            "ended": end.ended,
            "outcome": outcome,
            "exit_code": code if code is not None and code >= 0 else None,
            "signal": signal_name(-code) if code is not None and code < 0 else None,
            "error": error,
            "batches": batches_of(beat),
            "rows": rows_of(beat),
            "app_id": beat.app_id if beat is not None else record.app_id,
            "spark_ui": None,  # gone with its SparkContext
        }
    )


def fitted(record: RunRecord, cap: int = RUN_RECORD_MAX_BYTES) -> RunRecord:
    """``record`` as it may be written: unchanged if it encodes within ``cap`` bytes, else
    with its free-text fields (error, Spark application, log directory) cut short and the
    cut said in its error. ValueError if even that does not fit."""
    if len(record.encode()) <= cap:
        return record
    cut = {
        field: clip(value, SHORT_TEXT_CHARS)
        for field in ("error", "app_id", "spark_ui", "log_dir")
        if isinstance(value := getattr(record, field), str)
    }
    note = f"(this run's record was over {cap} bytes: its texts are cut)"
    cut["error"] = f"{cut['error']}\n{note}" if "error" in cut else note
    shorter = record.model_copy(update=cut)
    if len(shorter.encode()) > cap:
        raise ValueError(f"run {record.run} of {record.pipeline!r} is over {cap} bytes even cut")
    return shorter


def newest_change(
    client: KazooClient, paths: ClusterPaths, pipeline: str
) -> AssignmentChange | None:
    """The pipeline's newest assignment change (the leader's ``assignment-history/``), which
    tells a move from a stop; None if it has none or it cannot be read."""
    parent = paths.assignment_history(pipeline)
    try:
        nodes = client.get_children(parent)
        raw, _ = client.get(posixpath.join(parent, max(nodes)))
        return AssignmentChange.model_validate_json(raw)
    except (KazooException, ValueError):  # ValueError: no change, or a torn record
        return None


class RunBook:
    """Writes the runs of one supervisor's workers; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        supervisor: str,
        *,
        log_dir_of: Callable[[str, int | None], Path],
        keep: int = RUNS_KEPT,
        newest_change: Callable[[str], AssignmentChange | None] = lambda _name: None,
        clock: Clock = time.monotonic,
    ) -> None:
        if keep < 1:
            raise ValueError(f"a pipeline keeps at least one run record, not {keep}")
        self._client = client
        self._paths = paths
        self._supervisor = supervisor
        self._log_dir_of = log_dir_of
        self._keep = keep
        self._newest_change = newest_change
        self._clock = clock
        self._queue: queue.SimpleQueue[_Write | _Open | None] = queue.SimpleQueue()
        self._later: dict[str, _Open] = {}  # the control loop's: each pipeline's unnumbered run
        self._thread = threading.Thread(target=self._run, name="run-records", daemon=True)
        self._stopping = threading.Event()
        self._deadline = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        """Write what is queued (for up to ``timeout`` seconds), then end the thread."""
        self._deadline = self._clock() + timeout
        self._stopping.set()
        self._queue.put(None)
        self._thread.join(timeout + 1.0)

    # ------------------------------------------------------------------ RunRecorder

    def open(self, assignment: Assignment, started: float) -> int | None:
        """The new run's number; None when ZooKeeper is not connected or did not answer in
        time: the run is recorded once it does (never waited for while not connected)."""
        pipeline = assignment.pipeline
        self._later.pop(pipeline, None)
        record = RunRecord(
            pipeline=pipeline,
            supervisor=self._supervisor,
            epoch=assignment.epoch,
            generation=assignment.generation,
            digest=assignment.digest,
            started=started,
        )
        if not self._client.connected:
            return self._open_later(_Open(record), "not_connected")
        request = self._client.create_async(
            self._paths.run_prefix(pipeline), record.encode(), sequence=True, makepath=True
        )
        try:
            path = request.get(timeout=OPEN_TIMEOUT_SECS)
        except KazooTimeoutError:
            return self._open_later(_Open(record, sent=request), "no_answer_in_time")
        except (KazooException, OSError) as exc:  # not sent, or lost with its connection
            return self._open_later(_Open(record, sent=request), repr(exc))
        number = sequence_of(posixpath.basename(path))
        log.info(
            "event=run_opened pipeline=%s epoch=%d supervisor=%s run=%d",
            assignment.pipeline,
            assignment.epoch,
            self._supervisor,
            number,
        )
        self._queue.put(_Write(assignment.pipeline, number, self._numbered(number)))
        self._queue.put(_Write(assignment.pipeline, number, None))
        return number

    def _open_later(self, later: _Open, reason: str) -> int | None:
        """Record ``later`` from the book's thread; its number's writes wait for it."""
        log.warning(
            "event=run_recorded_later pipeline=%s epoch=%d supervisor=%s reason=%s",
            later.record.pipeline,
            later.record.epoch,
            self._supervisor,
            reason,
        )
        self._later[later.record.pipeline] = later
        self._queue.put(later)
        return later.number  # None: numbered by the thread

    def running(self, pipeline: str, number: int | None, pid: int) -> None:
        """Its worker runs as ``pid`` (``number`` None: the run recorded later, if any)."""
        run = self._run_of(pipeline, number)
        if run is not None:
            self._queue.put(_Write(pipeline, run, lambda r: r.model_copy(update={"pid": pid})))

    def _run_of(
        self, pipeline: str, number: int | None, *, ending: bool = False
    ) -> int | _Open | None:
        if number is not None:
            return number
        return self._later.pop(pipeline, None) if ending else self._later.get(pipeline)

    def close(self, pipeline: str, number: int | None, end: RunEnd, conf: dict[str, Any]) -> None:
        """It ended (``number`` None: the run recorded later, if any)."""
        run = self._run_of(pipeline, number, ending=True)
        if run is None:
            return

        def ended(record: RunRecord) -> RunRecord:
            if record.ended is not None:
                return record  # a run ends once: a worker found again after its end
            change = self._newest_change(pipeline) if end.outcome is None else None
            return ended_record(record, end, conf, change)

        self._queue.put(_Write(pipeline, run, ended))

    # ------------------------------------------------------------------ the thread

    def _numbered(self, number: int) -> Change:
        def numbered(record: RunRecord) -> RunRecord:
            log_dir = self._log_dir_of(record.pipeline, number)
            return record.model_copy(update={"run": number, "log_dir": str(log_dir)})

        return numbered

    def _run(self) -> None:
        while True:
            write = self._queue.get()
            if write is None:
                return
            while not self._done(write):
                if self._stopping.is_set() and self._clock() >= self._deadline:
                    self._dropped(write, "stop_timeout")
                    break
                if self._stopping.is_set():
                    time.sleep(STOPPING_RETRY_SECS)
                else:
                    self._stopping.wait(RETRY_SECS)  # a stop tries again at once

    def _dropped(self, write: _Write | _Open, reason: str) -> None:
        pipeline = write.record.pipeline if isinstance(write, _Open) else write.pipeline
        log.warning(
            "event=run_write_dropped pipeline=%s supervisor=%s reason=%s",
            pipeline,
            self._supervisor,
            reason,
        )

    def _done(self, write: _Write | _Open) -> bool:
        """Apply ``write``; False if it should be tried again (ZooKeeper did not answer).
        A closed session fails every write for good: dropped at once."""
        try:
            if isinstance(write, _Open):
                self._create(write)
                return True
            number = write.number.number if isinstance(write.number, _Open) else write.number
            if number is None:
                self._dropped(write, "run_not_recorded")
            elif write.change is None:
                self._trim(write.pipeline)
            else:
                self._change(write.pipeline, number, write.change)
        except NoNodeError:
            return True  # trimmed or purged meanwhile: nothing to write
        except ConnectionClosedError:
            self._dropped(write, "session_closed")
            return True
        except (KazooException, KazooTimeoutError) as exc:
            log.debug("event=run_write_failed write=%r error=%r", write, exc)
            return False
        return True

    def _create(self, later: _Open) -> None:
        """Record a run the control loop started without waiting: its late answer if it
        was sent, else the record found (a creation whose answer was lost), else anew;
        then its number in it. Tried again as a whole until it succeeds."""
        record = later.record
        if later.number is None and later.sent is not None:
            try:
                later.number = sequence_of(posixpath.basename(later.sent.get(RETRY_SECS)))
            except KazooTimeoutError:
                raise  # still unanswered: waited for again
            except ConnectionClosedError:
                raise
            except KazooException:
                later.maybe_created = True  # lost with its connection: it may have landed
            later.sent = None
        if later.number is None and later.maybe_created:
            later.number = self._find(record)
            later.maybe_created = False
        if later.number is None:
            prefix = self._paths.run_prefix(record.pipeline)
            later.maybe_created = True  # until its answer says
            path = self._client.create(prefix, record.encode(), sequence=True, makepath=True)
            later.number, later.maybe_created = sequence_of(posixpath.basename(path)), False
        number = later.number
        log_dir = str(self._log_dir_of(record.pipeline, None))  # where its log was started
        self._change(
            record.pipeline,
            number,
            lambda r: r.model_copy(update={"run": number, "log_dir": log_dir}),
        )
        log.info(
            "event=run_opened pipeline=%s epoch=%d supervisor=%s run=%d late=true",
            record.pipeline,
            record.epoch,
            self._supervisor,
            number,
        )
        self._queue.put(_Write(record.pipeline, later, None))  # the trim

    def _find(self, record: RunRecord) -> int | None:
        """The number of ``record``'s run if it was created (its supervisor and start)."""
        parent = self._paths.pipeline_runs(record.pipeline)
        try:
            nodes = [n for n in self._client.get_children(parent) if n.startswith(RUN_NODE_PREFIX)]
        except NoNodeError:
            return None
        for node in sorted(nodes, key=sequence_of, reverse=True):
            try:
                raw, _ = self._client.get(posixpath.join(parent, node))
                found = RunRecord.model_validate_json(raw)
            except (NoNodeError, ValidationError):
                continue
            if found.supervisor == record.supervisor and found.started == record.started:
                return sequence_of(node)
        return None

    def _change(self, pipeline: str, number: int, change: Change) -> None:
        path = self._paths.run(pipeline, number)
        while True:
            raw, stat = self._client.get(path)
            try:
                record = RunRecord.model_validate_json(raw)
            except ValidationError:
                log.warning("event=run_record_unreadable pipeline=%s run=%d", pipeline, number)
                return
            changed = change(record)
            if changed is record:
                return
            try:
                changed = fitted(changed)
            except ValueError as exc:
                log.error(
                    "event=run_record_too_large pipeline=%s run=%d error=%s", pipeline, number, exc
                )
                return
            try:
                self._client.set(path, changed.encode(), version=stat.version)
                return
            except BadVersionError:
                continue  # written meanwhile: read it again

    def _still_open(self, record: RunRecord) -> bool:
        """Whether ``record`` is a run that may still end: open, and its supervisor this one
        or registered (a dead supervisor's open run is trimmed as an ended one)."""
        if record.ended is not None:
            return False
        if record.supervisor == self._supervisor:
            return True
        return self._client.exists(self._paths.supervisor(record.supervisor)) is not None

    def _trim(self, pipeline: str) -> None:
        parent = self._paths.pipeline_runs(pipeline)
        nodes = [n for n in self._client.get_children(parent) if n.startswith(RUN_NODE_PREFIX)]
        for node in to_trim(nodes, self._keep):
            path = posixpath.join(parent, node)
            try:
                raw, stat = self._client.get(path)
                if self._still_open(RunRecord.model_validate_json(raw)):
                    continue
                self._client.delete(path, version=stat.version)
            except (NoNodeError, BadVersionError):
                continue
            except ValidationError:
                self._client.delete(path)
