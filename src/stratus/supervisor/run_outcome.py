"""How a run of a pipeline ended, as its supervisor judges it: pure rules, no I/O.

A run is one worker process's life on one supervisor (``api.records.RunRecord``). Its
supervisor knows most ends by itself: the worker reported FINISHED; it crashed, hung or
could not start (FAILED); a newer worker claimed the checkpoint, or the supervisor was
fenced (FENCED); its assignment changed generation or code (UPDATED); the supervisor stops
with its workers (STOPPED). An assignment that is removed is a move or a stop, which only
the pipeline's newest assignment change tells (``removal_outcome``)::

    stop_outcome(StopReason.RESTART)                 # RunOutcome.UPDATED
    stop_outcome(StopReason.UNASSIGNED)              # None: ask removal_outcome
    removal_outcome(newest_change, "s1")             # MOVED (to another) or STOPPED
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from stratus.api.records import (
    Assignment,
    AssignmentChange,
    AssignmentReason,
    RunOutcome,
    WorkerHeartbeat,
)


class StopReason(StrEnum):
    """Why a supervisor stops a worker it runs."""

    UNASSIGNED = "unassigned"  # its assignment is gone or names another supervisor
    RESTART = "restart"  # a new generation or digest
    FENCED = "fenced"  # the supervisor's lease lapsed, or a leader fenced it
    SHUTDOWN = "shutdown"  # the supervisor stops
    HUNG = "hung"  # its heartbeat did not change for supervisor.worker.timeout.secs


_STOP_OUTCOMES = {
    StopReason.RESTART: RunOutcome.UPDATED,
    StopReason.FENCED: RunOutcome.FENCED,
    StopReason.SHUTDOWN: RunOutcome.STOPPED,
    StopReason.HUNG: RunOutcome.FAILED,
}
# an assignment removed for one of these is a move, wherever the newest change points
_MOVES = frozenset(
    {AssignmentReason.SUPERVISOR_DEAD, AssignmentReason.WORKER_SILENT, AssignmentReason.DRAINED}
)


def stop_outcome(reason: StopReason) -> RunOutcome | None:
    """The outcome of a run stopped for ``reason``; None for UNASSIGNED (``removal_outcome``)."""
    return _STOP_OUTCOMES.get(reason)


def removal_outcome(change: AssignmentChange | None, supervisor: str) -> RunOutcome:
    """A run whose assignment left ``supervisor``: MOVED if the pipeline's newest change sends
    it to another supervisor (or moves it off a dead, silent or drained one, or takes it off
    for its standby worker to run its new generation), else STOPPED."""
    if change is None:
        return RunOutcome.STOPPED
    if change.supervisor is not None and change.supervisor != supervisor:
        return RunOutcome.MOVED
    if change.supervisor is None and change.reason.new_generation:
        return RunOutcome.MOVED  # to its standby worker, once this run stopped
    return RunOutcome.MOVED if change.reason in _MOVES else RunOutcome.STOPPED


@dataclass(frozen=True)
class RunEnd:
    """What the supervisor knows of a run's end; ``outcome`` None: its assignment was
    removed, and the recorder judges it (``removal_outcome``)."""

    outcome: RunOutcome | None
    ended: float
    exit_code: int | None = None
    error: str | None = None
    beat: WorkerHeartbeat | None = None  # the worker's last heartbeat: batches, rows, Spark


class RunRecorder(Protocol):
    """Where a managed worker's runs are recorded (``run_records.RunBook``, or a fake)."""

    def open(self, assignment: Assignment, started: float) -> int | None:
        """A new run of ``assignment``'s pipeline, recorded: its number; None if it has
        none yet (recorded later) or at all (the worker starts anyway). Never waits for an
        unreachable store."""
        ...

    def running(self, pipeline: str, number: int | None, pid: int) -> None:
        """Its worker process runs (``pid``); ``number`` None: the pipeline's run that has
        no number yet, if any."""
        ...

    def close(
        self, pipeline: str, number: int | None, end: RunEnd, conf: dict[str, object]
    ) -> None:
        """It ended; ``conf`` is the pipeline's, its error is redacted against."""
        ...


class NoRecorder:
    """Records nothing: runs have no number (tests of the lifecycle alone)."""

    def open(self, assignment: Assignment, started: float) -> int | None:
        return None

    def running(self, pipeline: str, number: int | None, pid: int) -> None:
        return None

    def close(
        self, pipeline: str, number: int | None, end: RunEnd, conf: dict[str, object]
    ) -> None:
        return None


def batches_of(beat: WorkerHeartbeat | None) -> int | None:
    """The streaming batches a worker's queries committed, from its heartbeat."""
    if beat is None or not beat.queries:
        return None
    return beat.batches_total


def rows_of(beat: WorkerHeartbeat | None) -> int | None:
    return None if beat is None or not beat.queries else beat.rows_total


def signal_name(number: int) -> str:
    """The name of signal ``number`` (``SIGKILL``), or ``signal N``."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
