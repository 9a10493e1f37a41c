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

Its parts, each one concept: a leader's fences, of the supervisor or of some pipelines,
refused when older than an epoch seen (``leader_fences``); the hot workers' gate on the
beat lease (``hot_workers``); the standby workers' start, stop, promotion and adoption
(``standby_actions``); the workers a previous supervisor left running (``left_running``);
the lease's end handed to the workers through the lease file (``lease_handover``); the
warm workers kept to the free slots (``warm_keeping``); what it takes from the supervisor's
other parts (``loop_protocols``).
A leader's fence (``FenceOrder``, posted by the endpoint) takes the lease away and stops
every worker as a lapse does. Neither stops a standby worker: it runs nothing of the
pipeline's and claims nothing, and its promotion waits, as a worker's start does, for the
lease and a read begun after it was regained; so a supervisor whose ZooKeeper session was
cut for a moment (its member died) still holds a READY standby worker when a leader promotes
it.

Each tick: fence if the lease lapsed; apply the newest read (epoch filter, then the plan);
keep the beat agent, retiring the hot workers if the beat lease ended; step every worker
and standby worker; replace or remove those that stopped; keep the warm workers to the free
slots (if any are kept) within the spare budget the standby workers take first; offer a
heartbeat round.

The standby workers placed here (``standby_worker``) come with the same read; a PROMOTE
hands a READY one's process to a new ``ManagedWorker`` as the pipeline's worker.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from stratus.api.clock import Clock
from stratus.api.records import (
    Assignment,
    SupervisorHeartbeat,
)
from stratus.supervisor.assignment_reader import AssignmentsRead, ReadFailed
from stratus.supervisor.beat_keeper import BeatKeeper
from stratus.supervisor.heartbeat_lease import HeartbeatLease
from stratus.supervisor.heartbeat_publisher import HeartbeatRound
from stratus.supervisor.hot_workers import HotWorkers
from stratus.supervisor.leader_fences import LeaderFences
from stratus.supervisor.lease_handover import LeaseHandover
from stratus.supervisor.left_running import LeftRunning
from stratus.supervisor.loop_messages import (
    Adopted,
    FenceOrder,
    HeartbeatWritten,
    Message,
    OutageProven,
    PipelineFenceOrder,
    Shutdown,
)
from stratus.supervisor.loop_protocols import CodeLauncher, WarmKeeper, WorkerPathsFactory
from stratus.supervisor.managed_worker import ManagedWorker
from stratus.supervisor.reconcile import (
    Action,
    ActionKind,
    assignments_for,
    plan_with_standby,
    stale_assignments,
    standby_workers_for,
    vanished_placements_kept,
)
from stratus.supervisor.restart_policy import RestartPolicy
from stratus.supervisor.run_outcome import NoRecorder, RunRecorder, StopReason
from stratus.supervisor.settings import LoopSettings
from stratus.supervisor.standby_actions import StandbyActions
from stratus.supervisor.standby_worker import (
    StandbyWorkers,
)
from stratus.supervisor.warm_keeping import WarmKeeping
from stratus.supervisor.warm_memory import Budget

log = logging.getLogger(__name__)

SHUTDOWN_MARGIN_SECS = 2.0  # past the stop grace, how long a shutdown waits for exits


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
        self._hot = HotWorkers(supervisor, beats, request_read=request_read)
        self._beat_lease = beats.advertised() if beats is not None else None
        self._clock = clock
        self._wall = wall
        self._handover = LeaseHandover(lease_file)  # the workers stop at its end
        self._inbox: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self.workers: dict[str, ManagedWorker] = {}
        self._seen_epochs: dict[str, int] = {}
        self._last_read: float | None = None  # start of the newest read applied
        self._next_read = 0.0
        self._waiting: list[str] = []  # assigned here, no free slot
        self._read_failures = 0  # in a row
        self._shutting_down = False
        self._shutdown_posted = threading.Event()  # any thread: start nothing more
        self._fences = LeaderFences(supervisor, stop_secs=settings.timeouts.stop_secs)
        # left running by a previous supervisor: adopted by the first reconcile, or stopped
        self._left = LeftRunning(
            supervisor,
            adopted or {},
            runs=self._runs,
            stop_secs=settings.timeouts.stop_secs,
            clock=clock,
            wall=wall,
        )
        self._stop_workers = True  # at the end of the loop (Shutdown.workers)
        # standby workers placed here (``standby_worker``); none without a spare budget
        self.standby = standby or StandbyWorkers(Budget(0, "no spare budget"))
        self._warm = WarmKeeping(warm, self.standby, slots=slots)
        self._standby_actions = StandbyActions(
            supervisor,
            self.standby,
            launcher=launcher,
            paths_of=paths_of,
            settings=settings,
            runs=self._runs,
            new_worker=self._new_worker,
            promotion_waits=self._promotion_waits,
            read_soon=self._read_soon,
            clock=clock,
            wall=wall,
        )
        self._seen_placements: dict[str, int] = {}  # epochs of placements, as _seen_epochs
        self._vanished: frozenset[str] = frozenset()  # placements one read lacked, kept

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
        self._fences.answer(self.workers, self._left)

    def tick(self) -> None:
        """One round of the loop (messages already applied)."""
        now = self._clock()
        if self._lease.check(now):
            self._fence()
        # before any worker starts
        self._handover.hand(self._lease.ends_at(), since=self._lease.held_since)
        if now >= self._next_read:
            self._next_read = now + self._settings.reconcile_secs
            self._request_read()
        may_start = self._lease.may_start(self._last_read) and not self._shutting_down
        hot_may_start = self._hot.keep(
            now,
            self.workers,
            last_read=self._last_read,
            lease=self._lease.state,
            stopping=self._shutdown_posted.is_set(),
            holds_standby=bool(self.standby.workers),
        )
        for worker in list(self.workers.values()):
            hot = self._hot.is_hot(worker.assignment)
            allowed = may_start and (hot_may_start or not hot)
            worker.step(may_start=allowed and not self._shutdown_posted.is_set())
        standby_gone = len(self.standby.workers)
        self.standby.step(may_start=may_start and not self._shutdown_posted.is_set())
        if len(self.standby.workers) < standby_gone and self._waiting:
            self._request_read()  # an assignment may wait for its standby worker's exit
        self._left.step(now)
        self._sweep()
        self._fences.answer(self.workers, self._left)
        round_ = self.heartbeat_round()
        self._warm.keep(round_, self.workers, stopping=self._shutdown_posted.is_set())
        self._offer(round_)

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
            if not self._fences.refuses(message, self._seen_epochs):
                self._fences.fence_pipelines(message, self.workers, self._left)
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
        self._retire_all()

    def _retire_all(self) -> None:
        """Fenced: retire every worker. The standby workers stay: they run and claim nothing,
        and a promotion waits for the lease again (``_promotion_waits``)."""
        for worker in self.workers.values():
            if not worker.done:
                worker.retire(StopReason.FENCED)

    def _promotion_waits(self, assignment: Assignment | None) -> str | None:
        """Why a promotion to ``assignment`` waits, or None: it may go. It starts the
        pipeline's worker, so it waits as a start does for the lease and a read begun after
        the lease was (re)gained (``lease_not_held``; the regain asks for that read), and a
        hot one also for the beat lease (``beat_lease_not_held``). Asked while the read being
        applied is ``_last_read``."""
        if not self._lease.may_start(self._last_read):
            return "lease_not_held"
        if self._hot.promotion_waits(assignment, self._last_read):
            return "beat_lease_not_held"
        return None

    def _fence_ordered(self, order: FenceOrder) -> None:
        """A leader fences this supervisor: refuse an older term than one seen; else take
        the lease away and stop every worker, answering once none is left."""
        if self._fences.refuses(order, self._seen_epochs):
            return
        order.stopped = sorted(name for name, w in self.workers.items() if w.alive)
        self._lease.revoke(self._clock())
        log.warning(
            "event=fenced supervisor=%s epoch=%d pipelines=%s by=leader stop_secs=%g",
            self.supervisor,
            order.epoch,
            ",".join(order.stopped) or "-",
            self._settings.timeouts.stop_secs,
        )
        self._retire_all()
        self._fences.obeyed(order)

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
        desired = self._fences.admit(desired)  # a pipeline fenced waits for a newer token
        self._hot.assigned(desired)
        placed, self._seen_placements = standby_workers_for(
            self.supervisor, read.placements, self._seen_placements
        )
        if self._shutting_down:
            return
        self._standby_actions.adopt_left(
            self._left.take_standby_workers(), desired, placed, read.era, orphan=self._left.orphan
        )
        held = {name: worker.held() for name, worker in self.workers.items()}
        standby = {name: worker.held() for name, worker in self.standby.workers.items()}
        placed, self._vanished = vanished_placements_kept(placed, standby, desired, self._vanished)
        if self._vanished:
            self._read_soon()  # the second read that confirms them gone
        decided = plan_with_standby(desired, held, self.slots, placed, standby)
        for action in decided.actions:
            self._act(action)
        for standby_action in decided.standby:
            promoted = self._standby_actions.act(standby_action, read.era)
            if promoted is not None:
                self.workers[standby_action.pipeline] = promoted
        self._left.stop_unclaimed()
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
            self._left.adopt(self.workers[name])
        elif action.kind is ActionKind.STOP:
            self.workers[name].retire(StopReason.UNASSIGNED)
        elif action.kind is ActionKind.RESTART:
            assert assignment is not None
            self.workers[name].replace_with(assignment)
        else:
            assert assignment is not None
            self.workers[name].update(assignment)

    def _read_soon(self) -> None:
        """Read the assignments again within a tick (a promotion waits for its code)."""
        self._next_read = min(self._next_read, self._clock() + self._settings.tick_secs)

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
                beat_lease=self._beat_lease,
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
        self._warm.stop()
        self._hot.leave()
        for worker in self.workers.values():
            worker.leave()
        for standby in self.standby:
            standby.leave()
        self._left.kill_orphans()

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
        self._standby_actions.stop_all()
        self._warm.stop()
        self._left.kill_unreconciled()  # left running, never reconciled: they go too
        self._left.kill_orphans()
        deadline = self._clock() + self._settings.timeouts.stop_secs + SHUTDOWN_MARGIN_SECS
        while self._any_alive() and self._clock() < deadline:
            for worker in self.workers.values():
                worker.step(may_start=False)
            self.standby.step(may_start=False)
            time.sleep(min(self._settings.tick_secs, 0.05))
        still_running = sorted(name for name, worker in self.workers.items() if worker.alive)
        self._hot.stop()  # after the hot workers' graceful stop, not before
        log.info(
            "event=workers_stopped supervisor=%s still_running=%s",
            self.supervisor,
            ",".join(still_running) or "-",
        )
