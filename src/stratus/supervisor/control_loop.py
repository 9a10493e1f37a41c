"""The supervisor's control loop: the one thread that owns every worker, the lease and the epochs.

Events are messages to this one owner (Hadoop's style, ``loop_messages.py``): reads of the
assignments, heartbeat writes that renewed the lease, and the order to shut down all arrive
through ``post``; the loop's own tick notices worker exits, hangs, due restarts and a lapsed
lease. It never calls ZooKeeper or the state store, so nothing can hold it up while they are
unreachable, and fencing happens on time::

    loop = ControlLoop("s1", slots=4, launcher=launcher, lease=HeartbeatLease(6.0), ...)
    threading.Thread(target=loop.run).start()
    loop.post(AssignmentsRead(started, assignments))
    loop.post(HeartbeatWritten(started))
    loop.post(SHUTDOWN)               # stops every worker (LEAVE: leaves them running);
                                      # loop.final_round() after

A leader's fence (``FenceOrder``, posted by the endpoint) takes the lease away and stops
every worker as a lapse does; the order is answered once no worker process is left, or
refused at once when its epoch is older than the newest this supervisor has seen (an
assignment's, or an earlier fence's): a deposed leader stops nothing. A leader's pipeline
fence (``PipelineFenceOrder``) stops the named pipelines' workers only, under the same epoch
rule, and holds each back until an assignment with a newer fencing token
(``pipeline_fence``); the lease and the other workers stay.

With the pacemaker store, the loop keeps a beat agent (``BeatKeeper``) while it holds a
hot worker (the worker of a pipeline with a standby worker) and its lease: a hot worker
starts only while the beat lease holds, on a read of the assignments that began after the
beat lease was last gained, and is retired as at a fence once the beat lease has ended.

Each tick: fence if the lease lapsed; apply the newest read (epoch filter, then the plan);
keep the beat agent, retiring the hot workers if the beat lease ended; step every worker
and standby worker; replace or remove those that stopped; keep the warm workers to the free
slots (if any are kept) within the spare budget the standby workers take first; offer a
heartbeat round.

The standby workers placed here (``standby_worker``) come with the same read; a PROMOTE
hands a READY one's process to a new ``ManagedWorker`` as the pipeline's worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from stratus.api.clock import Clock
from stratus.api.echo import clip
from stratus.api.records import (
    Assignment,
    FencingToken,
    RunOutcome,
    SupervisorHeartbeat,
    WorkerState,
)
from stratus.api.standby_workers import StandbyWorkerPlacement, wants_standby_worker
from stratus.errors import StratusError
from stratus.supervisor.assignment_reader import AssignmentsRead, ReadFailed
from stratus.supervisor.beat_keeper import BeatChange, BeatKeeper
from stratus.supervisor.heartbeat_lease import HeartbeatLease, LeaseState
from stratus.supervisor.heartbeat_publisher import HeartbeatRound
from stratus.supervisor.launch_protocols import Launcher, RunningProcess
from stratus.supervisor.loop_messages import (
    Adopted,
    FenceOrder,
    HeartbeatWritten,
    Message,
    OutageProven,
    PipelineFenceOrder,
    Shutdown,
)
from stratus.supervisor.managed_worker import ManagedWorker, Phase
from stratus.supervisor.pipeline_fence import PipelineHolds, newest
from stratus.supervisor.reconcile import (
    Action,
    ActionKind,
    StandbyAction,
    StandbyKind,
    assignments_for,
    plan_with_standby,
    stale_assignments,
    standby_workers_for,
)
from stratus.supervisor.restart_policy import RestartPolicy
from stratus.supervisor.run_logs import make_run_dir, write_run_number
from stratus.supervisor.run_outcome import NoRecorder, RunEnd, RunRecorder, StopReason
from stratus.supervisor.settings import LoopSettings
from stratus.supervisor.standby_worker import (
    ManagedStandbyWorker,
    StandbyLauncher,
    StandbyWorkers,
)
from stratus.supervisor.warm_memory import Budget, WarmInputs, WarmPlan
from stratus.supervisor.worker_process import WorkerPaths
from stratus.worker.lease_file import write_lease

log = logging.getLogger(__name__)

SHUTDOWN_MARGIN_SECS = 2.0  # past the stop grace, how long a shutdown waits for exits


@dataclass
class _Orphan:
    """An adopted worker that no assignment names: stopped, SIGKILL at ``kill_at``; its
    run closed with ``outcome`` (None: a removal's, judged by the recorder)."""

    pipeline: str
    process: RunningProcess
    kill_at: float
    run: int | None = None
    outcome: RunOutcome | None = None
    killed: bool = False


@dataclass(frozen=True, eq=False)
class _PipelineFence:
    """A pipeline fence obeyed: answered once these workers and orphans are gone."""

    order: PipelineFenceOrder
    workers: tuple[ManagedWorker, ...]
    orphans: tuple[_Orphan, ...]


class CodeLauncher(Launcher, StandbyLauncher, Protocol):
    """A launcher that also keeps the code of the digests still needed, and starts and
    promotes standby workers."""

    def retain(self, digests: Set[str]) -> None: ...


class WarmKeeper(Protocol):
    """The warm workers (``WarmPool``): kept to a number, stopped with the supervisor."""

    def keep(
        self,
        wanted: int,
        *,
        pipelines_starting: bool = False,
        plan: Callable[[WarmInputs], WarmPlan] = ...,
    ) -> None: ...

    def stop(self) -> None: ...


class WorkerPathsFactory(Protocol):
    def __call__(self, pipeline: str) -> WorkerPaths: ...


class ControlLoop:
    """Owns the workers of one supervisor; see the module docstring."""

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        supervisor: str,
        slots: int,
        *,
        launcher: CodeLauncher,
        paths_of: WorkerPathsFactory,
        lease: HeartbeatLease,
        settings: LoopSettings,
        request_read: Callable[[], None],
        offer: Callable[[HeartbeatRound], None],
        warm: WarmKeeper | None = None,
        lease_file: Path | None = None,
        adopted: Mapping[str, Adopted] | None = None,
        runs: RunRecorder | None = None,
        beats: BeatKeeper | None = None,
        standby: StandbyWorkers | None = None,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self.supervisor = supervisor
        self.slots = slots
        self._runs = runs or NoRecorder()
        self._launcher = launcher
        self._paths_of = paths_of
        self._lease = lease
        self._settings = settings
        self._request_read = request_read
        self._offer = offer
        self._warm = warm
        self._beats = beats  # the pacemaker store: hot workers run on the beat lease
        self._hot_assigned = False  # the newest read assigns a hot pipeline here
        self._hot_may_start = False  # the last tick's: hot workers may start (or be promoted)
        self._clock = clock
        self._wall = wall
        self._lease_file = lease_file
        self._handed: float | None = None  # the lease's end last written to lease_file
        self._hand_failed = False
        self._inbox: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self.workers: dict[str, ManagedWorker] = {}
        self._seen_epochs: dict[str, int] = {}
        self._last_read: float | None = None  # start of the newest read applied
        self._next_read = 0.0
        self._waiting: list[str] = []  # assigned here, no free slot
        self._read_failures = 0  # in a row
        self._shutting_down = False
        self._shutdown_posted = threading.Event()  # any thread: start nothing more
        self._fence_epoch = 0  # the newest epoch of a leader's fence obeyed
        self._fence_orders: list[FenceOrder] = []  # obeyed, waiting for the workers' exits
        self._pipeline_fences: list[_PipelineFence] = []  # obeyed, waiting for those exits
        self._holds = PipelineHolds(supervisor)  # pipelines fenced: held till a newer token
        # left running by a previous supervisor: adopted by the first reconcile, or stopped
        self._adoptable: dict[str, Adopted] = dict(adopted or {})
        self._orphans: list[_Orphan] = []
        self._stop_workers = True  # at the end of the loop (Shutdown.workers)
        # standby workers placed here (``standby_worker``); none without a spare budget
        self.standby = standby or StandbyWorkers(Budget(0, "no spare budget"))
        self._seen_placements: dict[str, int] = {}  # epochs of placements, as _seen_epochs

    # ------------------------------------------------------------------ other threads' side

    def post(self, message: Message) -> None:
        """Hand the loop a message; never blocks (kazoo's thread may call it). A shutdown
        also stops the tick under way from starting any further worker: a start may take
        seconds (its monitor's), and the stop waits behind the tick."""
        if isinstance(message, Shutdown):
            self._shutdown_posted.set()
        self._inbox.put(message)

    def heartbeat_written(self, started: float) -> None:
        self.post(HeartbeatWritten(started))

    def outage_proven(self, started: float) -> None:
        self.post(OutageProven(started))

    # ------------------------------------------------------------------ the loop

    def run(self) -> None:
        """Run until ``SHUTDOWN`` (every worker is stopped when it returns) or ``LEAVE``
        (every worker runs on)."""
        while not self._shutting_down:
            try:
                self._drain()
                self.tick()
            except Exception:  # the loop must live on: fencing depends on it
                log.exception("event=control_loop_error supervisor=%s", self.supervisor)
                time.sleep(self._settings.tick_secs)
        if self._stop_workers:
            self._stop_all()
        else:
            self._leave_all()
        self._answer_fence_orders()
        self._answer_pipeline_fences()

    def tick(self) -> None:
        """One round of the loop (messages already applied)."""
        now = self._clock()
        if self._lease.check(now):
            self._fence()
        self._hand_lease()
        if now >= self._next_read:
            self._next_read = now + self._settings.reconcile_secs
            self._request_read()
        may_start = self._lease.may_start(self._last_read) and not self._shutting_down
        hot_may_start = self._hot_may_start = self._keep_beats(now)
        for worker in list(self.workers.values()):
            hot = self._beats is not None and _hot(worker.assignment)
            allowed = may_start and (hot_may_start or not hot)
            worker.step(may_start=allowed and not self._shutdown_posted.is_set())
        standby_gone = len(self.standby.workers)
        self.standby.step(may_start=may_start and not self._shutdown_posted.is_set())
        if len(self.standby.workers) < standby_gone and self._waiting:
            self._request_read()  # an assignment may wait for its standby worker's exit
        self._step_orphans(now)
        self._sweep()
        self._answer_fence_orders()
        self._answer_pipeline_fences()
        round_ = self.heartbeat_round()
        if self._warm is not None and not self._shutdown_posted.is_set():
            self._warm.keep(
                self.free_for_warm(),
                pipelines_starting=self._starting(round_),
                plan=self.standby.plan,
            )
        else:
            self.standby.plan_alone()
        self._offer(round_)

    def _starting(self, round_: HeartbeatRound) -> bool:
        """Whether a pipeline's worker process runs and has not said RUNNING yet (its JVM
        is starting: no warm worker starts beside it)."""
        return any(
            worker.alive and round_.workers[name].state is WorkerState.STARTING
            for name, worker in self.workers.items()
        )

    def _hand_lease(self) -> None:
        """Write the lease's end to ``lease_file`` when it changed, before any worker starts:
        the workers stop themselves once it has passed (``stratus.worker.lease_file``), so a
        supervisor that stops running cannot leave them running past its lease."""
        if self._lease_file is None:
            return
        ends = self._lease.ends_at()
        if ends is None and self._handed is None:
            return  # never held: a previous supervisor's lease stands until the first renewal
        until = ends or 0.0
        if until == self._handed:
            return
        try:
            write_lease(self._lease_file, until)
        except OSError as exc:  # the workers see no newer lease and stop: safe, and loud
            if not self._hand_failed:
                log.error("event=lease_file_not_written path=%s error=%r", self._lease_file, exc)
            self._hand_failed = True
            return
        self._handed = until
        self._hand_failed = False

    def free_for_warm(self) -> int:
        """How many warm workers fit: slots whose pipeline has no process (a pipeline about
        to start keeps its slot's warm worker, which it may be handed), nor a standby worker."""
        standby = sum(w.held().takes_slot for w in self.standby)
        return max(0, self.slots - sum(w.alive for w in self.workers.values()) - standby)

    def _drain(self) -> None:
        """Apply every message waiting, after waiting up to one tick for the first."""
        try:
            message = self._inbox.get(timeout=self._settings.tick_secs)
        except queue.Empty:
            return
        while True:
            self._apply(message)
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _apply(self, message: Message) -> None:
        if isinstance(message, AssignmentsRead):
            self._reconcile(message)
        elif isinstance(message, ReadFailed):
            self._read_failed(message)
        elif isinstance(message, HeartbeatWritten):
            self._renewed(message.started)
        elif isinstance(message, OutageProven):
            self._lease.outage_proven(probe_started=message.started, now=self._clock())
        elif isinstance(message, FenceOrder):
            self._fence_ordered(message)
        elif isinstance(message, PipelineFenceOrder):
            self._fence_pipelines(message)
        else:
            self._shutting_down = True
            self._stop_workers = message.workers

    def _read_failed(self, failure: ReadFailed) -> None:
        """Keep the workers as they are and read again after one heartbeat period."""
        self._read_failures += 1
        level = logging.WARNING if self._read_failures == 1 else logging.DEBUG
        log.log(
            level,
            "event=assignments_unreadable supervisor=%s failures=%d error=%s",
            self.supervisor,
            self._read_failures,
            failure.error,
        )
        self._next_read = min(self._next_read, self._clock() + self._settings.heartbeat_secs)

    # ------------------------------------------------------------------ the lease

    def _renewed(self, started: float) -> None:
        if self._lease.renewed(write_started=started, now=self._clock()):
            log.info(
                "event=lease_held supervisor=%s fences=%d action=read_assignments",
                self.supervisor,
                self._lease.fences,
            )
            self._request_read()  # start nothing before a read newer than the lease

    def _fence(self) -> None:
        """The lease lapsed: stop every worker now; start none before a fresh read."""
        running = sorted(name for name, w in self.workers.items() if w.alive)
        log.warning(
            "event=fenced supervisor=%s pipelines=%s fence_timeout_secs=%g stop_secs=%g",
            self.supervisor,
            ",".join(running) or "-",
            self._lease.timeout_secs,
            self._settings.timeouts.stop_secs,
        )
        for worker in self.workers.values():
            if not worker.done:
                worker.retire(StopReason.FENCED)
        self._stop_standby_workers()

    def _stop_standby_workers(self) -> None:
        """Stop every standby worker (they claim nothing; a later read starts them again)."""
        for standby in self.standby:
            standby.stop()

    def _keep_beats(self, now: float) -> bool:
        """Keep the beat agent while a hot worker or a standby worker is held or assigned
        here (started only while the lease holds), none otherwise; retire every hot worker
        running once the beat lease has ended. Whether hot workers may start on the newest
        read. A standby worker keeps the agent so that its promotion finds the beat lease
        already held: starting the agent then would cost the failover its start and a read."""
        beats = self._beats
        if beats is None:
            return True
        if self._last_read is not None and not self._shutdown_posted.is_set():
            held = (w for w in self.workers.values() if w.alive or not w.retiring)
            standby = bool(self.standby.workers)
            hot = self._hot_assigned or standby or any(_hot(w.assignment) for w in held)
            if not hot:
                beats.keep(False)
            elif self._lease.state is LeaseState.HELD:
                beats.keep(True)
            else:  # start none without a lease; one running exits once the lease file ended
                beats.keep(None)
        change = beats.observe(now)
        if change is BeatChange.REGAINED:
            log.info("event=beat_lease_held supervisor=%s action=read_assignments", self.supervisor)
            self._request_read()  # start no hot worker before a read newer than the lease
        lapsed = [
            worker
            for worker in self.workers.values()
            if _hot(worker.assignment) and worker.phase is Phase.RUNNING
        ]
        if lapsed and not beats.held(now):
            log.warning(
                "event=beat_lease_lapsed supervisor=%s pipelines=%s action=retire",
                self.supervisor,
                ",".join(sorted(w.pipeline for w in lapsed)),
            )
            for worker in lapsed:
                worker.retire(StopReason.FENCED)
        return beats.may_start(self._last_read)

    def _fence_ordered(self, order: FenceOrder) -> None:
        """A leader fences this supervisor: refuse an older term than one seen; else take
        the lease away and stop every worker, answering once none is left."""
        newest = self._newest_epoch()
        if order.epoch < newest:
            log.warning(
                "event=fence_refused supervisor=%s epoch=%d seen_epoch=%d reason=stale_epoch",
                self.supervisor,
                order.epoch,
                newest,
            )
            order.refuse(newest)
            return
        self._fence_epoch = order.epoch
        order.stopped = sorted(name for name, w in self.workers.items() if w.alive)
        self._lease.revoke(self._clock())
        log.warning(
            "event=fenced supervisor=%s epoch=%d pipelines=%s by=leader stop_secs=%g",
            self.supervisor,
            order.epoch,
            ",".join(order.stopped) or "-",
            self._settings.timeouts.stop_secs,
        )
        for worker in self.workers.values():
            if not worker.done:
                worker.retire(StopReason.FENCED)
        self._stop_standby_workers()
        self._fence_orders.append(order)

    def _newest_epoch(self) -> int:
        """The newest epoch this supervisor has seen: an assignment's or a fence's."""
        return max([self._fence_epoch, *self._seen_epochs.values()])

    def _answer_fence_orders(self) -> None:
        """Answer the fences obeyed once no worker process is left."""
        if self._fence_orders and not any(w.alive for w in self.workers.values()):
            for order in self._fence_orders:
                order.done()
            self._fence_orders.clear()

    # ------------------------------------------------------------------ a pipeline fence

    def _fence_pipelines(self, order: PipelineFenceOrder) -> None:
        """A leader fences some pipelines here, to run them elsewhere: refuse an older term
        than one seen; else stop their workers (and those a previous supervisor left
        running), hold each back until an assignment with a newer token, and answer once
        their processes are gone. The lease and every other worker stay."""
        newest_epoch = self._newest_epoch()
        if order.epoch < newest_epoch:
            log.warning(
                "event=pipeline_fence_refused supervisor=%s epoch=%d seen_epoch=%d "
                "pipelines=%s reason=stale_epoch",
                self.supervisor,
                order.epoch,
                newest_epoch,
                clip(",".join(sorted(order.pipelines))),
            )
            order.refuse(newest_epoch)
            return
        self._fence_epoch = order.epoch
        workers: list[ManagedWorker] = []
        orphans: list[_Orphan] = []
        for name in sorted(order.pipelines):
            token: FencingToken | None = None
            worker = self.workers.get(name)
            if worker is not None:
                token = worker.assignment.token
                if worker.alive:
                    order.stopped.append(name)
                if not worker.retiring:  # one being stopped already keeps its reason
                    worker.retire(StopReason.FENCED)
                workers.append(worker)
            found = self._adoptable.pop(name, None)
            if found is not None:  # left running by a previous supervisor, not adopted yet
                token = newest(token, found.record.token)
                self._orphan(found, "pipeline_fenced", RunOutcome.FENCED)
                order.stopped.append(name)
            orphans += [orphan for orphan in self._orphans if orphan.pipeline == name]
            self._holds.hold(name, token)
        log.warning(
            "event=pipelines_fenced supervisor=%s epoch=%d pipelines=%s stopped=%s by=leader "
            "stop_secs=%g",
            self.supervisor,
            order.epoch,
            clip(",".join(sorted(order.pipelines))),
            clip(",".join(order.stopped)) or "-",
            self._settings.timeouts.stop_secs,
        )
        self._pipeline_fences.append(_PipelineFence(order, tuple(workers), tuple(orphans)))

    def _answer_pipeline_fences(self) -> None:
        """Answer each pipeline fence obeyed once the processes it stopped are gone."""
        orphans_left = {id(orphan) for orphan in self._orphans}
        for fence in list(self._pipeline_fences):
            if any(w.alive for w in fence.workers) or any(
                id(orphan) in orphans_left for orphan in fence.orphans
            ):
                continue
            fence.order.done()
            self._pipeline_fences.remove(fence)

    # ------------------------------------------------------------------ reconciling

    def _reconcile(self, read: AssignmentsRead) -> None:
        if self._last_read is not None and read.started < self._last_read:
            return  # an older read than one applied already
        self._last_read = read.started
        self._read_failures = 0
        for name, old in stale_assignments(read.assignments, self._seen_epochs).items():
            log.warning(
                "event=stale_assignment_ignored pipeline=%s epoch=%d seen_epoch=%d supervisor=%s",
                name,
                old.epoch,
                self._seen_epochs[name],
                self.supervisor,
            )
        desired, self._seen_epochs = assignments_for(
            self.supervisor, read.assignments, self._seen_epochs
        )
        desired = self._holds.admit(desired)  # a pipeline fenced waits for a newer token
        self._hot_assigned = any(_hot(assignment) for assignment in desired.values())
        placed, self._seen_placements = standby_workers_for(
            self.supervisor, read.placements, self._seen_placements
        )
        if self._shutting_down:
            return
        self._adopt_standby_workers(desired, placed, read.era)
        held = {name: worker.held() for name, worker in self.workers.items()}
        standby = {name: worker.held() for name, worker in self.standby.workers.items()}
        decided = plan_with_standby(desired, held, self.slots, placed, standby)
        for action in decided.actions:
            self._act(action)
        for standby_action in decided.standby:
            self._act_standby(standby_action, read.era)
        self._stop_unclaimed()
        self._note_waiting(decided.waiting)
        digests = {a.digest for a in desired.values()}
        digests |= {w.assignment.digest for w in self.workers.values()}
        digests |= {w.placement.digest for w in self.standby}
        self._launcher.retain(digests)

    def _act(self, action: Action) -> None:
        name, assignment = action.pipeline, action.assignment
        log.info(
            "event=reconcile action=%s pipeline=%s epoch=%s supervisor=%s",
            action.kind.value,
            name,
            assignment.epoch if assignment else "-",
            self.supervisor,
        )
        if action.kind is ActionKind.START:
            assert assignment is not None
            self.workers[name] = self._new_worker(assignment)
            self._adopt(self.workers[name])
        elif action.kind is ActionKind.STOP:
            self.workers[name].retire(StopReason.UNASSIGNED)
        elif action.kind is ActionKind.RESTART:
            assert assignment is not None
            self.workers[name].replace_with(assignment)
        else:
            assert assignment is not None
            self.workers[name].update(assignment)

    def _act_standby(self, action: StandbyAction, era: int | None) -> None:
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
        elif self._waits_for_beat_lease(action.assignment):
            # a promoted worker is a hot worker: it runs only under a held beat lease, and
            # the beat agent is kept from this read on; its regain asks for the next read
            log.info(
                "event=standby_worker_promotion_waits pipeline=%s supervisor=%s "
                "reason=beat_lease_not_held",
                name,
                self.supervisor,
            )
        else:
            assert action.assignment is not None
            self._promote(self.standby.workers[name], action.assignment)

    def _waits_for_beat_lease(self, assignment: Assignment | None) -> bool:
        """Whether a hot promotion waits: asked of the read being applied, not of the last
        tick's (that read may be the one begun after the beat lease was regained, which
        nothing but the next periodic read would otherwise follow)."""
        hot = assignment is not None and _hot(assignment)
        return self._beats is not None and hot and not self._beats.may_start(self._last_read)

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

    def _promote(self, standby: ManagedStandbyWorker, assignment: Assignment) -> None:
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
            return
        if process is None:  # its code is being looked up: the next read promotes it
            self._next_read = min(self._next_read, self._clock() + self._settings.tick_secs)
            return
        del self.standby.workers[name]
        worker = self._new_worker(assignment)
        run = self._runs.open(assignment, self._wall())
        self._runs.running(name, run, process.pid)
        _link_run_log(self._paths_of(name), run)
        worker.adopt(process, assignment.token, run)
        self.workers[name] = worker
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

    def _note_waiting(self, waiting: list[str]) -> None:
        if waiting and waiting != self._waiting:
            log.warning(
                "event=no_free_slot supervisor=%s slots=%d waiting=%s",
                self.supervisor,
                self.slots,
                ",".join(waiting),
            )
        self._waiting = waiting

    def _new_worker(self, assignment: Assignment) -> ManagedWorker:
        return ManagedWorker(
            self.supervisor,
            assignment,
            launcher=self._launcher,
            paths=self._paths_of(assignment.pipeline),
            policy=RestartPolicy(self._settings.restart),
            timeouts=self._settings.timeouts,
            runs=self._runs,
            clock=self._clock,
            wall=self._wall,
        )

    # ------------------------------------------------------------------ adoption

    def _adopt(self, worker: ManagedWorker) -> None:
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
        self._orphan(found, "another_assignment", RunOutcome.UPDATED)

    def _adopt_standby_workers(
        self,
        desired: Mapping[str, Assignment],
        placed: Mapping[str, StandbyWorkerPlacement],
        era: int | None,
    ) -> None:
        """At the first reconcile: adopt, READY, each standby worker a previous supervisor
        left whose placement still names this supervisor with the same generation and code
        (or whose pipeline was assigned here meanwhile with them: it is promoted next);
        stop the others."""
        for name, found in list(self._adoptable.items()):
            if found.record.role != "standby":
                continue
            del self._adoptable[name]
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
            self._orphan(found, "standby_worker_not_placed_here", RunOutcome.STOPPED)

    def _stop_unclaimed(self) -> None:
        """After the first reconcile: stop every worker left running that no assignment
        of this supervisor claimed (terminate, then SIGKILL after the grace)."""
        for found in self._adoptable.values():
            self._orphan(found, "not_assigned_here")
        self._adoptable.clear()

    def _orphan(self, found: Adopted, reason: str, outcome: RunOutcome | None = None) -> None:
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
        kill_at = self._clock() + self._settings.timeouts.stop_secs
        orphan = _Orphan(found.record.pipeline, found.process, kill_at, found.run, outcome)
        self._orphans.append(orphan)

    def _step_orphans(self, now: float) -> None:
        for orphan in list(self._orphans):
            code = orphan.process.poll()
            if code is not None:
                self._orphans.remove(orphan)
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

    def _sweep(self) -> None:
        """Replace the workers that stopped for a restart; remove those stopped for good."""
        freed = False
        for name, worker in list(self.workers.items()):
            if not worker.idle:
                continue
            if worker.successor is not None:
                self.workers[name] = self._new_worker(worker.successor)
            elif worker.retiring:
                del self.workers[name]
                freed = True
                log.info("event=worker_removed pipeline=%s supervisor=%s", name, self.supervisor)
        if freed and self._waiting:
            self._request_read()  # a slot is free for a pipeline that waits

    # ------------------------------------------------------------------ heartbeats

    def heartbeat_round(self, *, stopping: bool = False) -> HeartbeatRound:
        """What the supervisor publishes now."""
        running = sorted(name for name, w in self.workers.items() if w.alive and not w.retiring)
        return HeartbeatRound(
            supervisor=SupervisorHeartbeat(
                id=self.supervisor,
                time=self._wall(),
                slots=self.slots,
                running=running,  # after a stop with the workers: none alive, none listed
                stopping=stopping,
                standby_workers=[] if stopping else self.standby.beats(),
            ),
            workers={name: w.heartbeat() for name, w in self.workers.items()},
            used=sum(w.held().takes_slot for w in self.workers.values()),
        )

    # ------------------------------------------------------------------ shutting down

    def _any_alive(self) -> bool:
        return any(w.alive for w in self.workers.values()) or any(w.alive for w in self.standby)

    def _leave_all(self) -> None:
        """Leave every worker running (the supervisor stops and comes back, or the workers
        stop at the end of the lease they were handed); the warm workers stop."""
        log.info(
            "event=leaving_workers supervisor=%s pipelines=%s",
            self.supervisor,
            ",".join(sorted(n for n, w in self.workers.items() if w.alive)) or "-",
        )
        if self._warm is not None:
            self._warm.stop()
        if self._beats is not None:
            self._beats.leave()
        for worker in self.workers.values():
            worker.leave()
        for standby in self.standby:
            standby.leave()
        self._stop_orphans_now()

    def _stop_orphans_now(self) -> None:
        for orphan in self._orphans:
            orphan.process.kill()
            self._close_run(orphan.pipeline, orphan.run, RunOutcome.STOPPED, None)
        self._orphans.clear()

    def _close_run(
        self, pipeline: str, run: int | None, outcome: RunOutcome | None, code: int | None
    ) -> None:
        """Close the run of a worker left running that was not adopted."""
        if run is not None:
            self._runs.close(pipeline, run, RunEnd(outcome, self._wall(), code), {})

    def _stop_all(self) -> None:
        """Stop every worker at once (SIGTERM, SIGKILL after the grace) and wait for their
        exits; the warm workers, the orphans and the workers never reconciled go too."""
        log.info(
            "event=stopping_workers supervisor=%s pipelines=%s",
            self.supervisor,
            ",".join(sorted(n for n, w in self.workers.items() if w.alive)) or "-",
        )
        for worker in self.workers.values():  # first: their grace runs from now, together
            worker.stop(StopReason.SHUTDOWN)
        self._stop_standby_workers()
        if self._warm is not None:
            self._warm.stop()
        for found in self._adoptable.values():  # left running, never reconciled: they go too
            found.process.kill()
            self._close_run(found.record.pipeline, found.run, RunOutcome.STOPPED, None)
        self._adoptable.clear()
        self._stop_orphans_now()
        deadline = self._clock() + self._settings.timeouts.stop_secs + SHUTDOWN_MARGIN_SECS
        while self._any_alive() and self._clock() < deadline:
            for worker in self.workers.values():
                worker.step(may_start=False)
            self.standby.step(may_start=False)
            time.sleep(min(self._settings.tick_secs, 0.05))
        left = sorted(name for name, worker in self.workers.items() if worker.alive)
        if self._beats is not None:  # after the hot workers' graceful stop, not before
            self._beats.stop()
        log.info(
            "event=workers_stopped supervisor=%s still_running=%s",
            self.supervisor,
            ",".join(left) or "-",
        )


def _hot(assignment: Assignment) -> bool:
    """Whether ``assignment``'s worker is a hot worker: its pipeline has a standby worker."""
    return wants_standby_worker(assignment.conf)


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
