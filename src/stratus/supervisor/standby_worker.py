"""The supervisor's side of a standby worker: one placement's process, from its code to its
promotion, as one state machine; and the supervisor's standby workers with their memory.

The control loop owns them (one thread); the launcher, the clocks and the memory readers are
injected, so tests drive them with fakes::

    standby = ManagedStandbyWorker("s2", placement, launcher=launcher, paths=paths, era=era, ...)
    standby.step(may_start=True)     # FETCHING -> (the spare budget admits it) -> STARTING
    standby.step(may_start=True)     # STARTING -> READY once standby.json names its process
    process = standby.promote(assignment)   # promote.json written: the pipeline's worker now
    standby.stop()                   # SIGTERM: it exits 0 with nothing claimed
    standby.beat()                   # what the supervisor's heartbeat reports of it

Stages::

    FETCHING --code and environment ready, the spare budget admits it, may start--> STARTING
    FETCHING --the spare budget or the machine's reserve refuses it--> REFUSED (with the
             reason; asked again at every measurement, STARTING once it fits)
    FETCHING --its requirements cannot be installed--> FAILED
    STARTING --standby.json names its process, for its generation and code--> READY
    STARTING, READY --exit--> BACKOFF --backoff over--> FETCHING ...
                            \\-> FAILED (more exits in a row than supervisor.worker.max.restarts,
                                 or its checkpoint location is another's: at once)
    READY --promote--> PROMOTED: promote.json written, the process handed to a ManagedWorker
    any --stop--> STOPPING --exit, or SIGKILL of its group after the grace--> STOPPED

A standby worker runs under a monitor as any worker, in the pipeline's worker directory
(``<local>/workers/<pipeline>``, which a pipeline's own worker on this supervisor would use:
the control loop never runs both). Its monitor holds no lifeline: a supervisor started again
adopts it READY (``adopt``) while its placement still names this supervisor with the same
generation and code, and stops it otherwise.

``StandbyWorkers`` holds the supervisor's standby workers by pipeline and the spare budget
they share with the warm workers (``warm_memory.plan_spares``): standby workers first, each
counted at its measured resident memory (monitor, worker and JVM) once READY, at the
estimate before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from enum import StrEnum
from typing import Protocol

from stratus.api.clock import Clock
from stratus.api.records import MIB, Assignment
from stratus.api.redaction import redact_text
from stratus.api.standby_workers import (
    StandbyWorkerBeat,
    StandbyWorkerPlacement,
    StandbyWorkerState,
)
from stratus.codedist.distributor import CodeMeta
from stratus.errors import StratusError
from stratus.files import write_atomically
from stratus.logs import with_fields
from stratus.supervisor.adoption import ProcessRecord
from stratus.supervisor.code_cache import CodeFailed, CodeState, PipelineCode
from stratus.supervisor.launch_protocols import RunningProcess
from stratus.supervisor.reconcile import HeldStandby
from stratus.supervisor.requirements_env import EnvFailed
from stratus.supervisor.restart_policy import GiveUp, RestartPolicy
from stratus.supervisor.run_outcome import signal_name
from stratus.supervisor.settings import WorkerTimeouts
from stratus.supervisor.warm_memory import (
    MEASURE_SECS,
    STANDBY_ESTIMATE_BYTES,
    Budget,
    Machine,
    SpareInputs,
    WarmInputs,
    WarmPlan,
    groups_rss,
    plan_spares,
    read_machine,
)
from stratus.supervisor.worker_monitor import PROCESS_FILE
from stratus.supervisor.worker_process import WorkerPaths, log_tail
from stratus.worker.outcome import REFUSED_EXIT
from stratus.worker.promotion import read_standby_ready

log = logging.getLogger(__name__)


class Stage(StrEnum):
    FETCHING = "fetching"  # its code and environment are fetched, or it waits for memory
    REFUSED = "refused"  # the spare budget or the machine's reserve has no room for it
    STARTING = "starting"  # its process imports the code and starts its session
    READY = "ready"  # standby.json names its process: it can be promoted
    BACKOFF = "backoff"  # it exited; started again once the backoff is over
    FAILED = "failed"  # it exited too often in a row: not started again
    STOPPING = "stopping"  # SIGTERM sent; SIGKILL of its group at the deadline
    STOPPED = "stopped"  # stopped on order
    PROMOTED = "promoted"  # handed to a ManagedWorker: no longer a standby worker


_LIVE = (Stage.STARTING, Stage.READY, Stage.STOPPING)  # a process runs
_REPORTED = {
    Stage.FETCHING: StandbyWorkerState.FETCHING,
    Stage.REFUSED: StandbyWorkerState.REFUSED,
    Stage.STARTING: StandbyWorkerState.STARTING,
    Stage.BACKOFF: StandbyWorkerState.STARTING,  # with its last exit as the error
    Stage.READY: StandbyWorkerState.READY,
    Stage.FAILED: StandbyWorkerState.FAILED,
}


class StandbyProcess(RunningProcess, Protocol):
    """A standby worker's process under its monitor (``WorkerProcess``, or a fake)."""

    record: ProcessRecord


class StandbyLauncher(Protocol):
    """What a standby worker needs from its supervisor (``launcher.WorkerLauncher``)."""

    def code(self, pipeline: str, meta: CodeMeta) -> CodeState | EnvFailed: ...

    def spawn_standby(
        self, placement: StandbyWorkerPlacement, code: PipelineCode, paths: WorkerPaths, era: int
    ) -> RunningProcess: ...

    def promote(self, assignment: Assignment, code: PipelineCode, paths: WorkerPaths) -> None: ...


class ManagedStandbyWorker:
    """One placement's standby worker, across its restarts; see the module docstring."""

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, clocks
        self,
        supervisor: str,
        placement: StandbyWorkerPlacement,
        *,
        launcher: StandbyLauncher,
        paths: WorkerPaths,
        era: int,
        policy: RestartPolicy,
        timeouts: WorkerTimeouts,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self.supervisor = supervisor
        self.placement = placement
        self.stage = Stage.FETCHING
        self.since = wall()
        self.error: str | None = None  # why REFUSED or FAILED, or its last exit
        self.rss: int | None = None  # bytes, measured once READY
        self.process: StandbyProcess | None = None
        self._launcher = launcher
        self._paths = paths
        self._era = era
        self._policy = policy
        self._timeouts = timeouts
        self._clock = clock
        self._wall = wall
        self._code: PipelineCode | None = None
        self._restart_at = 0.0
        self._kill_at = 0.0
        self._killed = False

    # ------------------------------------------------------------------ questions

    @property
    def pipeline(self) -> str:
        return self.placement.pipeline

    @property
    def alive(self) -> bool:
        """Whether a process of it runs (or is being stopped)."""
        return self.stage in _LIVE

    @property
    def idle(self) -> bool:
        """No process, none to come: it can be removed."""
        return self.stage in (Stage.STOPPED, Stage.PROMOTED)

    @property
    def asking(self) -> bool:
        """Whether it waits for the spare budget's admission (its code is here)."""
        return self._code is not None and self.stage in (Stage.FETCHING, Stage.REFUSED)

    @property
    def admitted(self) -> bool:
        """Whether it counts in the spare budget: its process runs, or is about to again."""
        return self.stage in (Stage.STARTING, Stage.READY, Stage.BACKOFF)

    def held(self) -> HeldStandby:
        """What the reconcile plan sees of it."""
        if self.stage in (Stage.STOPPING, Stage.STOPPED, Stage.PROMOTED):
            return HeldStandby(None, takes_slot=self.alive)
        ready = self.stage is Stage.READY
        return HeldStandby(self.placement, ready=ready, takes_slot=self.stage != Stage.FAILED)

    def beat(self) -> StandbyWorkerBeat | None:
        """What the supervisor's heartbeat reports of it; None once it stops or is promoted."""
        state = _REPORTED.get(self.stage)
        if state is None:
            return None
        live = self.process is not None and self.alive
        return StandbyWorkerBeat(
            pipeline=self.pipeline,
            generation=self.placement.generation,
            digest=self.placement.digest,
            state=state,
            since=self.since,
            pid=self.process.pid if live and self.process is not None else None,
            rss_mb=self.rss // MIB if self.rss is not None and live else None,
            error=self.error if state is not StandbyWorkerState.READY else None,
        )

    # ------------------------------------------------------------------ orders

    def admit(self, may_start: bool) -> None:
        """The spare budget has room: start its process (when the lease allows a start)."""
        if not self.asking or not may_start:
            return
        assert self._code is not None
        try:
            process = self._launcher.spawn_standby(
                self.placement, self._code, self._paths, self._era
            )
        except (OSError, StratusError, ValueError) as exc:
            self._policy.started(self._clock())
            self._exited(f"it could not be started: {exc}", None)
            return
        self.process = process  # type: ignore[assignment]  # a WorkerProcess: it has its record
        self._policy.started(self._clock())
        self.rss, self._killed = None, False
        self.error = None
        self._enter(Stage.STARTING, pid=process.pid)

    def refuse(self, reason: str) -> None:
        """No room in the spare budget (or the machine's reserve): REFUSED, with ``reason``."""
        if self.stage is Stage.REFUSED and self.error == reason:
            return
        self.error = reason
        self._enter(Stage.REFUSED, reason=reason)

    def stop(self) -> None:
        """Stop its process (SIGTERM: it exits 0, nothing claimed; SIGKILL after the grace);
        none: STOPPED now."""
        if self.stage in (Stage.STARTING, Stage.READY) and self.process is not None:
            self._kill_at = self._clock() + self._timeouts.stop_secs
            self.process.terminate()
            self._enter(Stage.STOPPING, pid=self.process.pid)
        elif self.stage not in (Stage.STOPPING, Stage.STOPPED, Stage.PROMOTED):
            self._enter(Stage.STOPPED)

    def promote(self, assignment: Assignment) -> RunningProcess | None:
        """Write its ``promote.json`` (the active worker's spec of ``assignment``, its token
        included) and give its process up: the pipeline's worker from now on. It must be
        READY (``reconcile.promotable``). None, and nothing done, while its code is not at
        hand yet (one adopted READY: its code is looked up again)."""
        assert self.stage is Stage.READY and self.process is not None
        if self._code is None:
            self._fetch()
        if self._code is None or self.stage is not Stage.READY:
            return None
        # its record first: a supervisor started again adopts it as the pipeline's worker
        record = self.process.record.model_copy(
            update={
                "role": "active",
                "epoch": assignment.epoch,
                "generation": assignment.generation,
                "token": assignment.token,
                "digest": assignment.digest,
            }
        )
        write_atomically(self._paths.directory / PROCESS_FILE, record.model_dump_json().encode())
        self.process.record = record
        self._launcher.promote(assignment, self._code, self._paths)
        self._enter(Stage.PROMOTED, pid=self.process.pid, token=assignment.token)
        return self.process

    def adopt(self, process: StandbyProcess) -> bool:
        """Run on with ``process``, a standby worker a previous supervisor left: READY if its
        ``standby.json`` names it for this placement's generation and code (True); else
        nothing is adopted (False)."""
        if not self._ready_file_names(process):
            return False
        self.process = process
        self._policy.started(self._clock())
        self._enter(Stage.READY, pid=process.pid, adopted=True)
        return True

    def leave(self) -> None:
        """The supervisor leaves and lets its process run on (adopted by its next start)."""
        if self.alive and self.process is not None:
            self.process.release()

    # ------------------------------------------------------------------ the clock ticks

    def step(self, *, may_start: bool) -> None:
        """Notice what happened since the last step and act on it."""
        now = self._clock()
        if self.stage is Stage.BACKOFF and now >= self._restart_at and may_start:
            self._enter(Stage.FETCHING)
        if self.stage in (Stage.FETCHING, Stage.READY) and self._code is None:
            self._fetch()  # an adopted READY one too: its promotion writes the spec
        if self.stage in (Stage.STARTING, Stage.READY):
            self._watch()
        elif self.stage is Stage.STOPPING:
            self._watch_stop(now)

    def _fetch(self) -> None:
        placement = self.placement
        meta = CodeMeta(placement.digest, placement.size_bytes, placement.blake3)
        state = self._launcher.code(self.pipeline, meta)
        if isinstance(state, EnvFailed):
            self.error = state.error
            if self.stage is Stage.READY:  # an adopted one whose environment is gone
                self.stop()
                return
            self._enter(Stage.FAILED, error=state.error)
        elif isinstance(state, CodeFailed):
            self.error = f"{state.error} (failed {state.failures} times)"
        elif isinstance(state, PipelineCode):
            self._code = state
            if self.stage is Stage.FETCHING:
                self.error = None

    def _watch(self) -> None:
        assert self.process is not None
        code = self.process.poll()
        if code is not None:
            if code == REFUSED_EXIT:  # its checkpoint location is another's: it would again
                self.error = redact_text(self._last_error(), self.placement.conf)
                self._enter(Stage.FAILED, exit_code=code, error=self.error)
                return
            self._exited(f"it {_describe_exit(code)}: {self._last_error()}", code)
            return
        if self.stage is Stage.STARTING and self._ready_file_names(self.process):
            self._enter(Stage.READY, pid=self.process.pid)

    def _ready_file_names(self, process: RunningProcess) -> bool:
        """Whether ``standby.json`` names ``process``, alive, for this generation and code."""
        ready = read_standby_ready(self._paths.work)
        return (
            ready is not None
            and ready.pid == process.pid
            and ready.generation == self.placement.generation
            and ready.digest == self.placement.digest
            and process.poll() is None
        )

    def _exited(self, error: str, code: int | None) -> None:
        error = redact_text(error, self.placement.conf)
        self.error = error
        self.process, self.rss = None, None
        decision = self._policy.crashed(self._clock())
        if isinstance(decision, GiveUp):
            self._enter(Stage.FAILED, exit_code=code, crashes_in_row=decision.crashes_in_row)
            return
        self._restart_at = decision.at
        self._code = None  # fetched again: the cache may have dropped it meanwhile
        self._enter(
            Stage.BACKOFF,
            exit_code=code,
            crashes_in_row=decision.crashes_in_row,
            restart_in_secs=decision.delay_secs,
            error=error,
        )

    def _watch_stop(self, now: float) -> None:
        assert self.process is not None
        code = self.process.poll()
        if code is not None:
            self._enter(Stage.STOPPED, exit_code=code)
        elif now >= self._kill_at and not self._killed:
            self._killed = True
            self.process.kill()
            log.warning(
                "event=standby_worker_killed pipeline=%s supervisor=%s pid=%d grace_secs=%g",
                self.pipeline,
                self.supervisor,
                self.process.pid,
                self._timeouts.stop_secs,
            )

    def _enter(self, stage: Stage, **details: object) -> None:
        """The transition to ``stage``, logged with its details as fields of the line."""
        if stage is not self.stage or stage is Stage.READY:
            self.since = self._wall()
        self.stage = stage
        warn = stage in (Stage.REFUSED, Stage.BACKOFF, Stage.FAILED)
        level = logging.WARNING if warn else logging.INFO
        log.log(
            level,
            "event=standby_worker_%s pipeline=%s epoch=%d generation=%d supervisor=%s",
            stage.value,
            self.pipeline,
            self.placement.epoch,
            self.placement.generation,
            self.supervisor,
            extra=with_fields(**details),
        )

    def _last_error(self) -> str:
        return log_tail(self._paths.log) or "it wrote no error and no log"


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal_name(-code)}"
    return f"exited with code {code}"


# ---------------------------------------------------------------------------------------------
# The supervisor's standby workers and the spare budget


class StandbyWorkers:
    """The standby workers of one supervisor, by pipeline, and the spare budget they share
    with its warm workers. Used by the control loop's thread only."""

    def __init__(
        self,
        budget: Budget,
        *,
        machine: Callable[[], Machine | None] = read_machine,
        rss: Callable[[Iterable[int]], dict[int, int]] = groups_rss,
        clock: Clock = time.monotonic,
    ) -> None:
        self.budget = budget
        self.workers: dict[str, ManagedStandbyWorker] = {}
        self._read_machine = machine
        self._read_rss = rss
        self._clock = clock
        self._machine: Machine | None = None
        self._next_measure = 0.0
        self._estimate = STANDBY_ESTIMATE_BYTES
        self._may_start = False

    def __iter__(self) -> Iterator[ManagedStandbyWorker]:
        return iter(list(self.workers.values()))

    def step(self, *, may_start: bool) -> None:
        """Step every standby worker; remove those stopped or promoted; measure their memory
        (at most every ``MEASURE_SECS``)."""
        self._may_start = may_start
        for worker in self:
            worker.step(may_start=may_start)
            if worker.idle:
                del self.workers[worker.pipeline]
        now = self._clock()
        if now >= self._next_measure:
            self._measure(now)

    def plan(self, warm: WarmInputs) -> WarmPlan:
        """The spare budget's decision (``plan_spares``): admit the standby workers that ask
        and fit, refuse the others with the reason; the warm workers' plan in what is left.
        The warm pool calls it with its own inputs; without one, ``plan_alone``."""
        if warm.machine is None:
            warm = WarmInputs(
                warm.wanted, warm.costs, warm.starting, warm.budget, warm.estimate, self._machine
            )
        asking = [worker for worker in self if worker.asking]
        admitted = [worker for worker in self if worker.admitted]
        costs = [self._estimate if w.rss is None else w.rss for w in admitted]
        spares = plan_spares(SpareInputs(costs, len(asking), self._estimate, warm))
        for worker in asking[: spares.admitted]:
            worker.admit(self._may_start)
        for worker in asking[spares.admitted :]:
            worker.refuse(spares.refused or "no room in the spare budget")
        return spares.warm

    def plan_alone(self) -> None:
        """``plan`` for a supervisor without warm workers: the whole budget is theirs."""
        if any(worker.asking for worker in self):
            self.plan(WarmInputs(0, (), 0, self.budget.bytes, self._estimate, self._machine))

    def beats(self) -> list[StandbyWorkerBeat]:
        return [beat for worker in self if (beat := worker.beat()) is not None]

    def counts(self) -> tuple[int, int]:
        """How many standby workers run, and their memory (measured, else estimated), MiB."""
        live = [worker for worker in self if worker.admitted]
        used = sum(self._estimate if w.rss is None else w.rss for w in live)
        return len(live), used // MIB

    def _measure(self, now: float) -> None:
        self._next_measure = now + MEASURE_SECS
        self._machine = self._read_machine()
        ready = [w for w in self if w.stage is Stage.READY and w.process is not None]
        if not ready:
            return
        pids = {w.process.record.monitor.pid for w in ready if w.process is not None}
        pids |= {w.process.pid for w in ready if w.process is not None}
        groups = self._read_rss(pids)
        for worker in ready:
            assert worker.process is not None
            monitor = worker.process.record.monitor.pid
            worker.rss = groups.get(monitor, 0) + groups.get(worker.process.pid, 0)
        self._estimate = max(w.rss for w in ready if w.rss is not None)
