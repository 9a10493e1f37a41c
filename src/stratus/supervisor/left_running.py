"""The workers a previous supervisor left running, from the control loop's start on.

A supervisor started again is handed the workers it found running (``adoption``, as
``Adopted``); its first reconcile adopts each one its assignments (or standby placements)
still name and stops the others as orphans: SIGTERM, SIGKILL after the stop grace, their
runs closed. Used by the control loop's thread only::

    left = LeftRunning("s1", adopted, runs=runs, stop_secs=10.0)
    left.adopt(worker)                   # runs on with the process left for its assignment
    left.stop_unclaimed()                # after the first reconcile: the rest are orphans
    left.step(now)                       # each tick: reap the orphans, SIGKILL the late
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from stratus.api.clock import Clock
from stratus.api.records import RunOutcome
from stratus.supervisor.launch_protocols import RunningProcess
from stratus.supervisor.loop_messages import Adopted
from stratus.supervisor.managed_worker import ManagedWorker
from stratus.supervisor.run_outcome import RunEnd, RunRecorder

# the control loop's events: under its logger, as operators filter them
log = logging.getLogger("stratus.supervisor.control_loop")


@dataclass
class Orphan:
    """An adopted worker that no assignment names: stopped, SIGKILL at ``kill_at``; its
    run closed with ``outcome`` (None: a removal's, judged by the recorder)."""

    pipeline: str
    process: RunningProcess
    kill_at: float
    run: int | None = None
    outcome: RunOutcome | None = None
    killed: bool = False


class LeftRunning:
    """The workers left running, until adopted or gone; see the module docstring."""

    def __init__(
        self,
        supervisor: str,
        adopted: Mapping[str, Adopted],
        *,
        runs: RunRecorder,
        stop_secs: float,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self.supervisor = supervisor
        self._adoptable: dict[str, Adopted] = dict(adopted)  # not reconciled yet
        self.orphans: list[Orphan] = []  # stopped, not reaped yet
        self._runs = runs
        self._stop_secs = stop_secs
        self._clock = clock
        self._wall = wall

    def adopt(self, worker: ManagedWorker) -> None:
        """Run on with the worker a previous supervisor left for this assignment, if it
        started it (``ProcessRecord.runs``); one left for another is stopped."""
        found = self._adoptable.pop(worker.pipeline, None)
        if found is None:
            return
        if found.record.runs(worker.assignment):
            worker.adopt(found.process, found.record.token, found.run)
            log.info(
                "event=worker_adopted pipeline=%s epoch=%d supervisor=%s pid=%d monitor_pid=%d",
                worker.pipeline,
                worker.assignment.epoch,
                self.supervisor,
                found.process.pid,
                found.record.monitor.pid,
            )
            return
        self.orphan(found, "another_assignment", RunOutcome.UPDATED)

    def take_standby_workers(self) -> dict[str, Adopted]:
        """The standby workers left running, by pipeline, handed over (to be adopted, or
        orphaned)."""
        taken = {n: found for n, found in self._adoptable.items() if found.record.role == "standby"}
        for name in taken:
            del self._adoptable[name]
        return taken

    def take(self, pipeline: str) -> Adopted | None:
        """The worker left running for ``pipeline`` and not reconciled yet, handed over."""
        return self._adoptable.pop(pipeline, None)

    def stop_unclaimed(self) -> None:
        """After the first reconcile: stop every worker left running that no assignment
        of this supervisor claimed (terminate, then SIGKILL after the grace)."""
        for found in self._adoptable.values():
            self.orphan(found, "not_assigned_here")
        self._adoptable.clear()

    def orphan(self, found: Adopted, reason: str, outcome: RunOutcome | None = None) -> Orphan:
        """Stop ``found`` (SIGTERM now, SIGKILL after the grace); reaped by ``step``."""
        log.warning(
            "event=worker_not_adopted pipeline=%s epoch=%d supervisor=%s pid=%d reason=%s "
            "action=stop",
            found.record.pipeline,
            found.record.epoch,
            self.supervisor,
            found.process.pid,
            reason,
        )
        found.process.terminate()
        kill_at = self._clock() + self._stop_secs
        orphan = Orphan(found.record.pipeline, found.process, kill_at, found.run, outcome)
        self.orphans.append(orphan)
        return orphan

    def step(self, now: float) -> None:
        """Reap the orphans that exited, closing their runs; SIGKILL those past the grace."""
        for orphan in list(self.orphans):
            code = orphan.process.poll()
            if code is not None:
                self.orphans.remove(orphan)
                self._close_run(orphan.pipeline, orphan.run, orphan.outcome, code)
                log.info(
                    "event=orphan_stopped pipeline=%s supervisor=%s pid=%d",
                    orphan.pipeline,
                    self.supervisor,
                    orphan.process.pid,
                )
            elif now >= orphan.kill_at and not orphan.killed:
                orphan.killed = True
                orphan.process.kill()

    def kill_unreconciled(self) -> None:
        """At a shutdown before any reconcile: the workers never reconciled go too."""
        for found in self._adoptable.values():
            found.process.kill()
            self._close_run(found.record.pipeline, found.run, RunOutcome.STOPPED, None)
        self._adoptable.clear()

    def kill_orphans(self) -> None:
        """At the loop's end: SIGKILL every orphan now, closing its run."""
        for orphan in self.orphans:
            orphan.process.kill()
            self._close_run(orphan.pipeline, orphan.run, RunOutcome.STOPPED, None)
        self.orphans.clear()

    def _close_run(
        self, pipeline: str, run: int | None, outcome: RunOutcome | None, code: int | None
    ) -> None:
        """Close the run of a worker left running that was not adopted."""
        if run is not None:
            self._runs.close(pipeline, run, RunEnd(outcome, self._wall(), code), {})
