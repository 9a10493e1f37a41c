"""What the control loop does to its standby workers: start, stop, promote, adopt.

The reconcile's plan (``reconcile.plan_with_standby``) names the standby actions; this
performs them on the supervisor's ``StandbyWorkers``. A PROMOTE hands a READY standby
worker's process to a new ``ManagedWorker`` under a new run, as the pipeline's worker; it
waits, as a worker's start does, while the supervisor's lease does not hold or the read was
begun before it was regained, and while the beat lease does not hold (``hot_workers``). At
the first reconcile, the standby workers a previous supervisor left running are adopted when
their placement still names this supervisor with the same generation and code. Used by the
control loop's thread only::

    actions = StandbyActions("s1", standby, launcher=..., new_worker=..., ...)
    actions.adopt_left(left.take_standby_workers(), desired, placed, era, orphan=left.orphan)
    promoted = actions.act(action, era)   # a ManagedWorker when a PROMOTE went through
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping

from stratus.api.clock import Clock
from stratus.api.records import Assignment, RunOutcome
from stratus.api.standby_workers import StandbyWorkerPlacement
from stratus.errors import StratusError
from stratus.supervisor.loop_messages import Adopted
from stratus.supervisor.managed_worker import ManagedWorker
from stratus.supervisor.reconcile import StandbyAction, StandbyKind
from stratus.supervisor.restart_policy import RestartPolicy
from stratus.supervisor.run_logs import make_run_dir, write_run_number
from stratus.supervisor.run_outcome import RunRecorder
from stratus.supervisor.settings import LoopSettings
from stratus.supervisor.standby_worker import (
    ManagedStandbyWorker,
    StandbyLauncher,
    StandbyWorkers,
)
from stratus.supervisor.worker_process import WorkerPaths

# the control loop's events: under its logger, as operators filter them
log = logging.getLogger("stratus.supervisor.control_loop")


class StandbyActions:
    """Performs the standby workers' actions; see the module docstring."""

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        supervisor: str,
        standby: StandbyWorkers,
        *,
        launcher: StandbyLauncher,
        paths_of: Callable[[str], WorkerPaths],
        settings: LoopSettings,
        runs: RunRecorder,
        new_worker: Callable[[Assignment], ManagedWorker],
        promotion_waits: Callable[[Assignment | None], str | None],
        read_soon: Callable[[], None],
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self.supervisor = supervisor
        self.standby = standby
        self._launcher = launcher
        self._paths_of = paths_of
        self._settings = settings
        self._runs = runs
        self._new_worker = new_worker
        self._promotion_waits = promotion_waits
        self._read_soon = read_soon
        self._clock = clock
        self._wall = wall

    def act(self, action: StandbyAction, era: int | None) -> ManagedWorker | None:
        """Perform ``action``; the pipeline's new worker when a promotion went through."""
        name = action.pipeline
        log.info(
            "event=reconcile action=%s pipeline=%s epoch=%s supervisor=%s",
            action.kind.value,
            name,
            action.placement.epoch if action.placement else "-",
            self.supervisor,
        )
        if action.kind is StandbyKind.START_STANDBY:
            assert action.placement is not None
            if era is not None:  # a read without it starts none
                self.standby.workers[name] = self._new_standby(action.placement, era)
        elif action.kind is StandbyKind.STOP_STANDBY:
            self.standby.workers[name].stop()
        elif (waits := self._promotion_waits(action.assignment)) is not None:
            # a promotion starts the pipeline's worker: it waits for the lease, and for the
            # beat lease (a hot worker's), each regain asking for the next read
            log.info(
                "event=standby_worker_promotion_waits pipeline=%s supervisor=%s reason=%s",
                name,
                self.supervisor,
                waits,
            )
        else:
            assert action.assignment is not None
            return self._promote(self.standby.workers[name], action.assignment)
        return None

    def adopt_left(
        self,
        left: Mapping[str, Adopted],
        desired: Mapping[str, Assignment],
        placed: Mapping[str, StandbyWorkerPlacement],
        era: int | None,
        *,
        orphan: Callable[[Adopted, str, RunOutcome], object],
    ) -> None:
        """Adopt, READY, each standby worker a previous supervisor ``left`` whose placement
        still names this supervisor with the same generation and code (or whose pipeline was
        assigned here meanwhile with them: it is promoted next); ``orphan`` the others."""
        for name, found in left.items():
            record = found.record
            placement = placed.get(name) or _placement_of(desired.get(name))
            fits = (
                placement is not None
                and era is not None
                and (placement.generation, placement.digest) == (record.generation, record.digest)
            )
            if fits and era is not None and placement is not None:
                standby = self._new_standby(placement, era)
                if standby.adopt(found.process):  # type: ignore[arg-type]  # a WorkerProcess
                    self.standby.workers[name] = standby
                    continue
            orphan(found, "standby_worker_not_placed_here", RunOutcome.STOPPED)

    def stop_all(self) -> None:
        """Stop every standby worker (they claim nothing; a later read starts them again)."""
        for standby in self.standby:
            standby.stop()

    def _new_standby(self, placement: StandbyWorkerPlacement, era: int) -> ManagedStandbyWorker:
        return ManagedStandbyWorker(
            self.supervisor,
            placement,
            launcher=self._launcher,
            paths=self._paths_of(placement.pipeline),
            era=era,
            policy=RestartPolicy(self._settings.restart),
            timeouts=self._settings.timeouts,
            clock=self._clock,
            wall=self._wall,
        )

    def _promote(
        self, standby: ManagedStandbyWorker, assignment: Assignment
    ) -> ManagedWorker | None:
        """The READY standby worker becomes the pipeline's worker: its promote.json written,
        its process adopted by a new ``ManagedWorker`` under a new run. A promotion that
        cannot be written stops it; the next read starts the worker as for any assignment."""
        name = assignment.pipeline
        try:
            process = standby.promote(assignment)
        except (OSError, StratusError, ValueError) as exc:
            log.error(
                "event=standby_worker_not_promoted pipeline=%s epoch=%d supervisor=%s error=%r",
                name,
                assignment.epoch,
                self.supervisor,
                exc,
            )
            standby.stop()
            return None
        if process is None:  # its code is being looked up: the next read promotes it
            self._read_soon()
            return None
        del self.standby.workers[name]
        worker = self._new_worker(assignment)
        run = self._runs.open(assignment, self._wall())
        self._runs.running(name, run, process.pid)
        _link_run_log(self._paths_of(name), run)
        worker.adopt(process, assignment.token, run)
        log.info(
            "event=standby_worker_promoted pipeline=%s epoch=%d generation=%d supervisor=%s "
            "pid=%d token=%s run=%s",
            name,
            assignment.epoch,
            assignment.generation,
            self.supervisor,
            process.pid,
            assignment.token,
            run if run is not None else "-",
        )
        return worker


def _placement_of(assignment: Assignment | None) -> StandbyWorkerPlacement | None:
    """The placement an adopted standby worker serves when its pipeline was assigned here
    (promoted) while no supervisor ran: the assignment's pipeline, code and conf."""
    if assignment is None:
        return None
    return StandbyWorkerPlacement(
        pipeline=assignment.pipeline,
        supervisor=assignment.supervisor,
        epoch=assignment.epoch,
        generation=assignment.generation,
        digest=assignment.digest,
        size_bytes=assignment.size_bytes,
        blake3=assignment.blake3,
        conf=assignment.conf,
        placed=assignment.assigned,
    )


def _link_run_log(paths: WorkerPaths, run: int | None) -> None:
    """A promoted standby worker's run: its number recorded (a supervisor started again
    adopts it with it), and its log, which its monitor writes where a standby worker's goes
    (``<dir>/worker.log``), linked into the run's directory (a hard link: the same file,
    whatever later starts rename): its log, up to the first rotation, is the run's."""
    if run is None:  # numbered later: its log stays beside the spec
        return
    with contextlib.suppress(OSError):
        write_run_number(paths.directory, run)
        make_run_dir(paths.directory, run)
        os.link(paths.log, paths.for_run(run).log)
