"""The lifecycle of one assignment's worker on a supervisor, as one state machine.

Every transition is written out in ``ManagedWorker``; the supervisor's control loop is its
only caller (one thread), and the process, the code and the clocks are injected, so tests
drive it with fakes::

    worker = ManagedWorker("s1", assignment, launcher=launcher, paths=paths, ...)
    worker.step(may_start=True)    # PREPARING -> RUNNING once its code is there
    worker.step(may_start=True)    # notices an exit, a hang, a restart that is due
    worker.stop(StopReason.UNASSIGNED)
    worker.heartbeat()             # what the supervisor publishes for it

Phases::

    PREPARING --code ready, may start--> RUNNING --exit 0 + FINISHED heartbeat--> FINISHED
    RUNNING --crash / hang kill--> BACKOFF --backoff over--> PREPARING ...
                                 \\-> FAILED (max restarts in a row: until the assignment changes)
    PREPARING --its requirements cannot be installed--> FAILED (at once, no restart)
    RUNNING --exit REFUSED (its checkpoint location is another's)--> FAILED (at once, no
            restart): until the assignment changes
    RUNNING --exit 0 + STOPPED heartbeat, unasked (a lease it runs on ended)--> PREPARING:
            no crash, no backoff
    RUNNING --exit FENCED (a newer worker claimed the checkpoint)--> FENCED: not started
            again (no crash, no backoff) until its assignment has a newer fencing token
            than the one it ran with; then PREPARING at once
    RUNNING --stop--> STOPPING --exit, or SIGKILL of the group after the grace--> STOPPED
    RUNNING --new code (an update)--> RUNNING while the new code (and its environment) is
            fetched, then its entry point imported (the preflight) --imported, or fetch
            failed--> STOPPING ... (its successor starts at once)
    RUNNING --the preflight fails--> RUNNING on the old code, the update refused
            (``refused`` in its heartbeat) until the assignment changes again
    RUNNING --its old code again (a rollback of the refused update)--> RUNNING: the same
            process, under the new assignment

Each process is a run (``run_outcome``): opened with its recorder just before the start
(its number names its log's directory), closed at its end with the outcome the transition
says (FINISHED, FAILED at a crash, FENCED, UPDATED at a restart for new code, STOPPED or a
removal's move or stop at a stop); an adopted process continues its run.

An update's new code is fetched, and its environment built, while the old worker still
runs, so the gap between the two is a stop and a start, not also a fetch and an install; a
fetch or an install that fails stops the old worker anyway (the new one reports the
error, as it did before). Before the old worker stops, the new entry point is imported in
a process of its own (``preflight``): an update that cannot import never stops a healthy
worker. A rebalance (the same code) stops it at once.
"""

from __future__ import annotations

import contextlib
import logging
import time
from enum import StrEnum

from pydantic import ValidationError

from stratus.api.clock import Clock
from stratus.api.records import (
    Assignment,
    FencingToken,
    RefusedUpdate,
    RunOutcome,
    WorkerCrash,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.api.redaction import redact_heartbeat, redact_text
from stratus.codedist.distributor import CodeMeta
from stratus.errors import StratusError
from stratus.logs import with_fields
from stratus.supervisor.code_cache import CodeFailed, CodePending, CodeState, PipelineCode
from stratus.supervisor.launch_protocols import Launcher, PreflightCheck, RunningProcess
from stratus.supervisor.preflight import PreflightPassed
from stratus.supervisor.reconcile import Held
from stratus.supervisor.requirements_env import EnvFailed
from stratus.supervisor.restart_policy import GiveUp, RestartPolicy
from stratus.supervisor.run_outcome import (
    NoRecorder,
    RunEnd,
    RunRecorder,
    StopReason,
    signal_name,
    stop_outcome,
)
from stratus.supervisor.settings import WorkerTimeouts
from stratus.supervisor.worker_process import WorkerPaths, log_tail
from stratus.worker.outcome import FENCED_EXIT, REFUSED_EXIT

log = logging.getLogger(__name__)


class Phase(StrEnum):
    PREPARING = "preparing"  # its code is fetched, or it waits to be allowed to start
    RUNNING = "running"  # its process runs
    STOPPING = "stopping"  # SIGTERM sent; SIGKILL of its group at the deadline
    BACKOFF = "backoff"  # it crashed; started again once the backoff is over
    FAILED = "failed"  # it crashed too often in a row: not started again
    FINISHED = "finished"  # a batch that returned
    FENCED = "fenced"  # a newer worker claimed the checkpoint: waits for a newer assignment
    STOPPED = "stopped"  # stopped on order


_LIVE = (Phase.RUNNING, Phase.STOPPING)  # a process runs
_DONE = (Phase.FAILED, Phase.FINISHED, Phase.FENCED)  # kept, no process, till a new assignment


class ManagedWorker:
    """One assignment's worker, across its restarts; see the module docstring."""

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        supervisor: str,
        assignment: Assignment,
        *,
        launcher: Launcher,
        paths: WorkerPaths,
        policy: RestartPolicy,
        timeouts: WorkerTimeouts,
        runs: RunRecorder | None = None,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self.supervisor = supervisor
        self.assignment = assignment
        self.phase = Phase.PREPARING
        self.successor: Assignment | None = None  # start this once stopped (a restart)
        self.retiring = False  # remove once stopped (unassigned, fenced)
        self.error: str | None = None  # the last crash
        self.last_crash: WorkerCrash | None = None  # kept across the restart that follows
        self.code_error: str | None = None  # why its code is not there (yet)
        self.refused: RefusedUpdate | None = None  # the successor whose preflight failed
        self._preflight: PreflightCheck | None = None  # the successor's, once its code is here
        self._launcher = launcher
        self._paths = paths
        self._runs = runs or NoRecorder()
        self._run: int | None = None  # the number of the run its process is, while open
        self._run_open = False  # a run is open (numbered, or to be numbered by the recorder)
        self._run_paths = paths  # its files for that run (its log in the run's directory)
        self._policy = policy
        self._timeouts = timeouts
        self._clock = clock
        self._wall = wall
        self._process: RunningProcess | None = None
        self._token: FencingToken | None = None  # the fencing token its last process ran with
        self._beat: WorkerHeartbeat | None = None  # the last one its process wrote
        self._live_beat: WorkerHeartbeat | None = None  # the last one not in a final state
        self._beat_raw: bytes | None = None
        self._beat_changed = 0.0  # when the heartbeat file last changed (clock)
        self._restart_at = 0.0
        self._stop_reason: StopReason | None = None
        self._kill_at = 0.0
        self._killed = False

    # ------------------------------------------------------------------ questions

    @property
    def pipeline(self) -> str:
        return self.assignment.pipeline

    @property
    def alive(self) -> bool:
        """Whether a process of it runs (or is being stopped)."""
        return self.phase in _LIVE

    @property
    def done(self) -> bool:
        return self.phase in _DONE

    @property
    def idle(self) -> bool:
        """No process, none to come: it can be removed or replaced now."""
        return self.phase in (*_DONE, Phase.STOPPED)

    @property
    def restarts(self) -> int:
        return self._policy.restarts

    def held(self) -> Held:
        """What the reconcile plan sees of it."""
        if self.retiring:
            return Held(None)
        return Held(self.successor or self.assignment, done=self.done)

    # ------------------------------------------------------------------ orders

    def update(self, assignment: Assignment) -> None:
        """The same run under a new stamp (a new epoch): nothing restarts."""
        self.assignment = assignment

    def replace_with(self, assignment: Assignment) -> None:
        """Stop, then run ``assignment`` (a new generation or digest) as a new worker; new
        code is made ready first, while the old worker runs (``step``)."""
        self._drop_preflight()
        if (
            self.phase is Phase.RUNNING
            and self.successor is not None
            and _same_run(assignment, self.assignment)
        ):
            self._withdraw(assignment)
            return
        self.successor = assignment
        self.retiring = False
        if self.phase is Phase.RUNNING and assignment.digest != self.assignment.digest:
            log.info(
                "event=worker_update_prefetch pipeline=%s epoch=%d supervisor=%s digest=%s",
                self.pipeline,
                assignment.epoch,
                self.supervisor,
                assignment.digest,
            )
            self._successor_ready()  # the fetch starts now
            return
        self.stop(StopReason.RESTART)

    def _withdraw(self, assignment: Assignment) -> None:
        """The update it was preparing is withdrawn (rolled back): the running process,
        which runs ``assignment``'s code and conf already, runs on under it."""
        log.info(
            "event=worker_update_withdrawn pipeline=%s epoch=%d generation=%d supervisor=%s "
            "pid=%d digest=%s",
            self.pipeline,
            assignment.epoch,
            assignment.generation,
            self.supervisor,
            self._process.pid if self._process else -1,
            assignment.digest,
        )
        self.successor = None
        self.assignment = assignment

    def _drop_preflight(self) -> None:
        """Forget the preflight of the successor (and its refusal): the successor changes."""
        if self._preflight is not None and not isinstance(self._preflight, PreflightPassed):
            self._preflight.cancel()
        self._preflight = None
        self.refused = None

    def adopt(
        self, process: RunningProcess, token: FencingToken | None, run: int | None = None
    ) -> None:
        """Run on with ``process``, a worker a previous supervisor started with ``token``
        and left running (``adoption``): RUNNING now, never started twice, its run
        (``run``) continued. Its end, if it ended meanwhile, is judged at the next step as
        any exit, and closes its run."""
        now = self._clock()
        self._run, self._run_paths = run, self._paths.for_run(run)
        self._run_open = run is not None
        self._process = process
        self._token = token
        self._policy.started(now)
        self._beat, self._live_beat, self._beat_raw, self._beat_changed = None, None, None, now
        self._killed = False
        self._enter(Phase.RUNNING, pid=process.pid, token=token, adopted=True)

    def leave(self) -> None:
        """The supervisor leaves and lets its process run on (``RunningProcess.release``)."""
        if self.phase in _LIVE and self._process is not None:
            self._process.release()

    def retire(self, reason: StopReason) -> None:
        """Stop for good; the control loop removes it once it is idle."""
        self._drop_preflight()
        self.retiring = True
        self.successor = None
        self.stop(reason)

    def stop(self, reason: StopReason) -> None:
        """Stop its process (SIGTERM now, SIGKILL after the grace); none: it is STOPPED."""
        if self.phase is Phase.RUNNING:
            self._begin_stop(reason)
        elif self.phase is Phase.STOPPING:
            self._stop_reason = reason  # an order outranks a hang kill under way
        elif self.phase in (Phase.PREPARING, Phase.BACKOFF):
            self._enter(Phase.STOPPED, reason=reason.value)

    # ------------------------------------------------------------------ the clock ticks

    def step(self, *, may_start: bool) -> None:
        """Notice what happened since the last step and act on it."""
        now = self._clock()
        if self.phase is Phase.BACKOFF and now >= self._restart_at and may_start:
            self.phase = Phase.PREPARING
        if self.phase is Phase.FENCED and self._newer_token() and may_start:
            self._enter(Phase.PREPARING, reason="newer_token", token=self.assignment.token)
        if self.phase is Phase.PREPARING and may_start:
            self._try_start(now)
        elif self.phase is Phase.RUNNING:
            if self.successor is not None and not self.retiring and self._may_switch():
                self._begin_stop(StopReason.RESTART)
                return
            self._watch(now)
        elif self.phase is Phase.STOPPING:
            self._watch_stop(now)

    def heartbeat(self) -> WorkerHeartbeat:
        """What the supervisor publishes for this worker now; its error (the worker's own, or
        its log's tail) with the secrets of its conf redacted: the cluster state store, the
        API and the CLI never see them."""
        return redact_heartbeat(self._heartbeat(), self.assignment.conf)

    def _heartbeat(self) -> WorkerHeartbeat:
        now = self._wall()
        if self.phase in _LIVE and self._live_beat is not None:
            # Its final FAILED, FINISHED or STOPPED is the supervisor's to judge once it exited.
            return self._live_beat.model_copy(update=self._stamp())
        state = {
            Phase.PREPARING: WorkerState.STARTING,
            Phase.RUNNING: WorkerState.STARTING,
            Phase.STOPPING: WorkerState.STARTING,
            Phase.BACKOFF: WorkerState.RESTARTING,
            Phase.FAILED: WorkerState.FAILED,
            Phase.FINISHED: WorkerState.FINISHED,
            Phase.STOPPED: WorkerState.STOPPED,
            Phase.FENCED: WorkerState.FENCED,
        }[self.phase]
        if self.phase is Phase.FINISHED and self._beat is not None:
            return self._beat.model_copy(update={**self._stamp(), "time": now})
        process = self._process if self.phase in _LIVE else None
        return WorkerHeartbeat(
            pipeline=self.pipeline,
            supervisor=self.supervisor,
            epoch=self.assignment.epoch,
            generation=self.assignment.generation,
            digest=self.assignment.digest,
            state=state,
            time=now,
            started=process.started_wall if process else 0.0,
            pid=process.pid if process else None,
            restarts=self.restarts,
            error=None if state is WorkerState.STOPPED else (self.code_error or self.error),
            last_crash=self.last_crash,
            refused=self.refused,
        )

    # ------------------------------------------------------------------ transitions

    def _try_start(self, now: float) -> None:
        meta = CodeMeta(self.assignment.digest, self.assignment.size_bytes, self.assignment.blake3)
        state = self._launcher.code(self.pipeline, meta)
        if isinstance(state, EnvFailed):
            # Installing again would fail the same way: no backoff, no restart loop.
            self.code_error = None
            self.error = state.error
            self._enter(Phase.FAILED, crashes_in_row=0, error=state.error)
            return
        if isinstance(state, CodeFailed):
            self.code_error = f"{state.error} (failed {state.failures} times)"
            return
        if not isinstance(state, PipelineCode):
            return  # being fetched
        self.code_error = None
        self._run = self._runs.open(self.assignment, self._wall())
        self._run_open = True
        self._run_paths = self._paths.for_run(self._run)
        try:
            process = self._launcher.spawn(self.assignment, state, self._run_paths)
        except (OSError, StratusError, ValidationError) as exc:
            self._policy.started(now)
            self._crashed(now, f"the worker could not be started: {exc}")
            return
        self._runs.running(self.pipeline, self._run, process.pid)  # None: numbered later
        self._process = process
        self._token = self.assignment.token
        self._policy.started(now)
        self._beat, self._live_beat, self._beat_raw, self._beat_changed = None, None, None, now
        self._killed = False
        self._enter(Phase.RUNNING, pid=process.pid, token=self._token)

    def _successor_ready(self) -> bool:
        """Whether the successor's code is ready or failed (not being fetched or built)."""
        return not isinstance(self._successor_code(), CodePending)

    def _successor_code(self) -> CodeState | EnvFailed:
        assert self.successor is not None
        successor = self.successor
        meta = CodeMeta(successor.digest, successor.size_bytes, successor.blake3)
        return self._launcher.code(self.pipeline, meta)

    def _may_switch(self) -> bool:
        """Whether the old worker may stop for its successor now: the successor's code is
        here and its entry point imported (or its code failed: the new worker reports it)."""
        state = self._successor_code()
        if isinstance(state, CodePending) or self.refused is not None:
            return False
        if not isinstance(state, PipelineCode):
            return True
        assert self.successor is not None
        if self._preflight is None:
            self._preflight = self._launcher.preflight(self.successor, state)
        if isinstance(self._preflight, PreflightPassed):
            return True
        result = self._preflight.poll()
        if result is None:
            return False
        if isinstance(result, PreflightPassed):
            return True
        self._refuse(self.successor, result.error)
        return False

    def _refuse(self, successor: Assignment, error: str) -> None:
        error = redact_text(error, successor.conf)
        self.refused = RefusedUpdate(
            generation=successor.generation, digest=successor.digest, error=error
        )
        log.warning(
            "event=worker_update_refused pipeline=%s epoch=%d generation=%d supervisor=%s "
            "digest=%s",
            self.pipeline,
            successor.epoch,
            successor.generation,
            self.supervisor,
            successor.digest,
            extra=with_fields(error=error.splitlines()[0] if error else None),
        )

    def _watch(self, now: float) -> None:
        assert self._process is not None
        code = self._process.poll()
        self._read_beat(now)
        if code is not None and self.successor is not None:
            # it ended while its successor's code was fetched: no restart of the old run
            self._end_run(RunOutcome.UPDATED, code)
            self._enter(Phase.STOPPED, reason=StopReason.RESTART.value, exit_code=code)
        elif code is not None:
            self._exited(code, now)
        elif now - self._beat_changed >= self._timeouts.hang_secs:
            silent = now - self._beat_changed
            log.warning(
                "event=worker_hung pipeline=%s epoch=%d supervisor=%s pid=%d silent_secs=%.1f",
                self.pipeline,
                self.assignment.epoch,
                self.supervisor,
                self._process.pid,
                silent,
            )
            self.error = (
                f"its heartbeat did not change for {silent:.0f}s "
                f"(supervisor.worker.timeout.secs={self._timeouts.hang_secs:g}): killed"
            )
            self._begin_stop(StopReason.HUNG)

    def _exited(self, code: int, now: float) -> None:
        beat = self._beat
        if code == 0 and beat is not None and beat.state is WorkerState.FINISHED:
            self._end_run(RunOutcome.FINISHED, code)
            self._enter(Phase.FINISHED, exit_code=code)
            return
        if code == FENCED_EXIT and beat is not None and beat.state is WorkerState.FENCED:
            self._end_run(RunOutcome.FENCED, code, beat.error)
            self._fenced(beat.error)
            return
        if code == 0 and beat is not None and beat.state is WorkerState.STOPPED:
            self._stopped_itself(beat.error)
            return
        if code == REFUSED_EXIT and beat is not None and beat.state is WorkerState.FAILED:
            # Starting it again would fail the same way: no backoff, no restart loop.
            self.error = redact_text(beat.error or "-", self.assignment.conf)
            self._enter(Phase.FAILED, crashes_in_row=0, exit_code=code, error=self.error)
            return
        self._crashed(now, f"the worker {_describe_exit(code)}: {self._last_error()}", code)

    def _stopped_itself(self, why: str | None) -> None:
        """Its process stopped unasked, as a stop ends (exit 0, its last heartbeat
        ``STOPPED``): a lease it runs on ended (a hot worker's beat lease, the supervisor's
        lease). Not a crash: no backoff, none counted towards
        ``supervisor.worker.max.restarts`` (a hot pipeline on a host that stalls now and
        then would otherwise end FAILED); it starts again once it may, a hot worker once the
        beat lease holds again."""
        self._end_run(RunOutcome.FENCED, 0, why)
        self._enter(Phase.PREPARING, reason="stopped_itself", why=why or "-")

    def _fenced(self, error: str | None) -> None:
        """Its process found a higher token on the checkpoint and stopped: not a crash. It
        starts again at once if its assignment has a newer token than the one it ran with
        (the pipeline came back here while it ran), else waits for one."""
        self.error = error
        self._enter(Phase.FENCED, token=self._token, error=error or "-")
        if self._newer_token():
            self._enter(Phase.PREPARING, reason="newer_token", token=self.assignment.token)

    def _newer_token(self) -> bool:
        """Whether its assignment has a newer fencing token than its last process ran with."""
        token, ran = self.assignment.token, self._token
        return token is not None and (ran is None or token.key() > ran.key())

    def _crashed(self, now: float, error: str, exit_code: int | None = None) -> None:
        error = redact_text(error, self.assignment.conf)  # it is logged and published
        self._end_run(RunOutcome.FAILED, exit_code, error)
        self.error = error
        self.last_crash = WorkerCrash(
            time=self._wall(),
            exit_code=exit_code if exit_code is not None and exit_code >= 0 else None,
            signal=signal_name(-exit_code) if exit_code is not None and exit_code < 0 else None,
            error=error,
            last_batch_id=self._beat.last_batch_id if self._beat is not None else -1,
        )
        decision = self._policy.crashed(now)
        if isinstance(decision, GiveUp):
            self._enter(Phase.FAILED, crashes_in_row=decision.crashes_in_row, error=error)
            return
        self._restart_at = decision.at
        self._enter(
            Phase.BACKOFF,
            crashes_in_row=decision.crashes_in_row,
            restart_in_secs=decision.delay_secs,
            error=error,
        )

    def _begin_stop(self, reason: StopReason) -> None:
        assert self._process is not None
        self._stop_reason = reason
        self._kill_at = self._clock() + self._timeouts.stop_secs
        self._process.terminate()
        self._enter(Phase.STOPPING, reason=reason.value, pid=self._process.pid)

    def _watch_stop(self, now: float) -> None:
        assert self._process is not None
        code = self._process.poll()
        self._read_beat(now)
        if code is None:
            if now >= self._kill_at and not self._killed:
                self._killed = True
                self._process.kill()
                log.warning(
                    "event=worker_killed pipeline=%s epoch=%d supervisor=%s pid=%d grace_secs=%g",
                    self.pipeline,
                    self.assignment.epoch,
                    self.supervisor,
                    self._process.pid,
                    self._timeouts.stop_secs,
                )
            return
        if self._stop_reason is StopReason.HUNG:
            self._crashed(now, self.error or "its heartbeat stopped changing: killed", code)
        else:
            reason = self._stop_reason or StopReason.SHUTDOWN
            self._end_run(stop_outcome(reason), code)
            self._enter(Phase.STOPPED, reason=reason.value, exit_code=code)

    def _enter(self, phase: Phase, **details: object) -> None:
        """The transition to ``phase``, logged with the details of this one as fields of
        the line (``with_fields``): an error, a pid, a delay stay values of their own."""
        self.phase = phase
        warn = (Phase.BACKOFF, Phase.FAILED, Phase.FENCED)
        level = logging.WARNING if phase in warn else logging.INFO
        log.log(
            level,
            "event=worker_%s pipeline=%s epoch=%d generation=%d supervisor=%s restarts=%d",
            phase.value,
            self.pipeline,
            self.assignment.epoch,
            self.assignment.generation,
            self.supervisor,
            self.restarts,
            extra=with_fields(**details),
        )

    def _end_run(
        self, outcome: RunOutcome | None, exit_code: int | None, error: str | None = None
    ) -> None:
        """Close its open run (``outcome`` None: its assignment was removed; the recorder
        tells a move from a stop)."""
        number, self._run = self._run, None
        if not self._run_open:
            return
        self._run_open = False
        end = RunEnd(outcome, self._wall(), exit_code, error, self._beat or self._live_beat)
        self._runs.close(self.pipeline, number, end, self.assignment.conf)

    # ------------------------------------------------------------------ its files

    def _read_beat(self, now: float) -> None:
        """Take in the heartbeat file if it changed since the last look."""
        try:
            raw = self._paths.heartbeat.read_bytes()
        except OSError:
            return
        if raw == self._beat_raw:
            return
        self._beat_raw, self._beat_changed = raw, now
        with contextlib.suppress(ValidationError):  # a torn file still is a sign of life
            self._beat = WorkerHeartbeat.model_validate_json(raw)
            if not self._beat.state.final:
                self._live_beat = self._beat

    def _last_error(self) -> str:
        """The worker's own error (its last heartbeat), else the tail of its log."""
        if self._beat is not None and self._beat.error:
            return self._beat.error
        return log_tail(self._run_paths.log) or "it wrote no error and no log"

    def _stamp(self) -> dict[str, object]:
        """The fields the supervisor vouches for in a heartbeat its worker wrote."""
        return {
            "pipeline": self.pipeline,
            "supervisor": self.supervisor,
            "epoch": self.assignment.epoch,
            "generation": self.assignment.generation,
            "digest": self.assignment.digest,
            "restarts": self.restarts,
            "last_crash": self.last_crash,
            "refused": self.refused,
        }


def _same_run(one: Assignment, other: Assignment) -> bool:
    """Whether two assignments run the same code with the same conf."""
    return one.digest == other.digest and one.conf == other.conf


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal_name(-code)}"
    return f"exited with code {code}"
