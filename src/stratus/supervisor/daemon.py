"""The supervisor daemon: runs the pipelines the leader assigns to it, one worker each.

A supervisor registers ``<root>/supervisors/<id>`` (re-created after every session expiry),
watches ``<root>/assignments``, and runs a worker process for each assignment naming it, up
to ``supervisor.slots``. It needs ZooKeeper only: with every nimbus down, its pipelines keep
running. Threads, each with one job:

- the control loop owns every worker, the lease and the epochs (``ControlLoop``);
- the assignment reader reads ``<root>/assignments`` when a watch, the loop's timer or a
  reconnection asks (``AssignmentReader``);
- the heartbeat publisher writes the loop's heartbeats every ``worker.heartbeat.frequency.secs``
  and renews the lease (``HeartbeatPublisher``);
- while the session is down, the outage watch proves (or not) that ZooKeeper has no quorum,
  so that the workers ride out an outage of ZooKeeper (``OutageWatch``);
- a small pool fetches code (``CodeCache``);
- the endpoint serves its workers' logs, its health and its metrics over HTTP(S), at the
  address its registration advertises (``SupervisorEndpoint``, unless
  ``supervisor.http.port`` is -1).

::

    supervisor = Supervisor(SupervisorSettings.from_config(conf))
    supervisor.start()       # ZooKeeperUnavailableError / DuplicateSupervisorError / ...
    ...
    supervisor.stop()        # workers run on, a last heartbeat lists them, unregistered
    supervisor.stop(workers=True)  # workers STOPPED, a last heartbeat with stopping=True

A start takes the local directory (``local_dir``: one supervisor process per directory),
refuses one of another supervisor id or cluster, and hands the workers a previous supervisor
left running to the control loop before its first reconcile, which adopts those its
assignments still name (``supervisor.worker.adopt``; off: it kills them). It chooses its warm
workers (``warm_start``) and, with ``supervisor.zookeeper.outage: ride``, its outage watch.
Each step notes what undoes it on one stack (``contextlib.ExitStack``): a failed start and a
stop close what is open newest first, and a close that fails is logged while the rest still
close.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path

from kazoo.client import KazooClient

from stratus import __version__
from stratus.api.clock import Clock
from stratus.api.records import (
    Assignment,
    ClusterIdentity,
    RunOutcome,
    SupervisorSummary,
    WarmMemory,
    WorkerHeartbeat,
)
from stratus.api.standby_workers import StandbyWorkerBeat, StandbyWorkerPlacement
from stratus.codedist.distributor import CodeDistributor
from stratus.codedist.factory import create_distributor
from stratus.codedist.package_store import PackageStore
from stratus.errors import StratusError
from stratus.state.factory import create_state_store
from stratus.state.heartbeats import HeartbeatBoard
from stratus.supervisor.assignment_reader import AssignmentReader
from stratus.supervisor.beat_keeper import beat_keeper
from stratus.supervisor.code_cache import CodeCache
from stratus.supervisor.control_loop import SHUTDOWN_MARGIN_SECS, ControlLoop
from stratus.supervisor.endpoint import Fencing, SupervisorEndpoint, WorkerLog, check_reachable
from stratus.supervisor.errors import SupervisorStartError
from stratus.supervisor.heartbeat_lease import HeartbeatLease, LeaseState
from stratus.supervisor.heartbeat_publisher import HeartbeatPublisher, HeartbeatRound
from stratus.supervisor.last_heartbeat import FINAL_HEARTBEAT_SECS, hand_last_lease, publish_last
from stratus.supervisor.launcher import WorkerLauncher
from stratus.supervisor.local_dir import TakenDir, take_local_dir
from stratus.supervisor.loop_messages import (
    LEAVE,
    SHUTDOWN,
    Adopted,
    FenceOrder,
    PipelineFenceOrder,
)
from stratus.supervisor.metrics import SupervisorMetrics
from stratus.supervisor.outage_watch import (
    PROBE_TIMEOUT_SECS,
    OutageWatch,
    outage_mode,
    outage_verdict,
)
from stratus.supervisor.purges import start_purger
from stratus.supervisor.registration import SessionRecord, SupervisorRegistration
from stratus.supervisor.requirements_env import RequirementEnvs
from stratus.supervisor.run_as import UserPool, user_pool_at_start
from stratus.supervisor.run_logs import kept_runs, pick_kept, run_over
from stratus.supervisor.run_outcome import RunEnd
from stratus.supervisor.run_records import RunBook, newest_change
from stratus.supervisor.settings import SupervisorSettings
from stratus.supervisor.standby_worker import StandbyWorkers
from stratus.supervisor.warm_pool import WarmPool
from stratus.supervisor.warm_start import WarmStart, choose_warm, spare_budget, with_standby
from stratus.supervisor.worker_log import RunLog
from stratus.supervisor.worker_monitor import EXIT_FILE
from stratus.supervisor.worker_process import (
    MonitorSettings,
    WorkerPaths,
    default_worker_command,
)
from stratus.worker.spec import WorkerSpec
from stratus.zk.paths import ClusterPaths
from stratus.zk.quorum_probe import ensemble_config
from stratus.zk.session import SessionChange, SessionState, ZkSession
from stratus.zk.watched import WatchedChildren

log = logging.getLogger(__name__)

CLAIM_MARGIN_SECS = 2.0  # past the session timeout, how long a dead holder's node is waited for
STOP_WITH_WORKERS = signal.SIGUSR1  # ``stratus supervisor``: stop the workers too, then leave
SESSION_FILE = "session"  # the ZooKeeper session of the supervisor's registration


class Supervisor:
    """One supervisor daemon; see the module docstring."""

    def __init__(
        self,
        settings: SupervisorSettings,
        *,
        worker_command: Sequence[str] | None = None,
        warm_command: Sequence[str] | None = None,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self.settings = settings
        self.id = self.settings.id
        self.host = self.settings.host
        self.slots = self.settings.slots
        self.local_dir = self.settings.local_dir
        self.paths = ClusterPaths(self.settings.zk.root)
        self.cluster = ClusterIdentity.of(self.settings.zk.hosts, self.settings.zk.root)
        self._session_record = SessionRecord(self.local_dir / SESSION_FILE)
        self._stop_workers = not self.settings.adopt  # at stop(), unless it says otherwise
        self._worker_command = worker_command
        self._warm_command = warm_command  # a test's stand-in warm worker
        self._warm = WarmStart()  # the warm workers, or why there are none, once chosen
        self._clock = clock
        self._wall = wall
        self._stopped = threading.Event()
        self._opened = ExitStack()  # what stop() closes, newest first
        self._loop_thread: threading.Thread | None = None
        self._last_round: HeartbeatRound | None = None  # what the endpoint's metrics show
        self.endpoint: SupervisorEndpoint | None = None
        self.session = ZkSession(self.settings.zk)
        self.lease = HeartbeatLease(  # the control loop owns it
            self.settings.fence_timeout_secs, ride_back_secs=self.settings.ride_back_secs
        )
        self._registered = threading.Event()
        self._outage_watch: OutageWatch | None = None  # with ride, made at start

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Connect, register, and start running what is assigned here."""
        if self.settings.http.enabled:
            check_reachable(self.settings.http, self.id)  # before anything is connected
        taken = take_local_dir(
            self.local_dir,
            self.id,
            self.cluster,
            adopt=self.settings.adopt,
            separate_users=self.settings.users.separate,
        )
        self._opened.callback(taken.lock.release)  # the last thing stop() closes
        try:
            users = self._user_pool()  # before anything is opened: a refusal leaves nothing
            self.session.start()
            self._opened.callback(self.session.close)
            self._start_parts(taken, users)
        except BaseException:
            self._close_opened()
            raise
        log.info(
            "event=supervisor_started supervisor=%s host=%s slots=%d local_dir=%s version=%s",
            self.id,
            self.host,
            self.slots,
            self.local_dir,
            __version__,
        )

    def stop(self, *, workers: bool | None = None) -> None:
        """Leave ZooKeeper: unregister after a last heartbeat that says ``stopping``. With
        ``workers`` (or once ``stop_workers_too`` was called, or with
        ``supervisor.worker.adopt`` false) every worker is stopped first; otherwise the
        workers run on, the last heartbeat lists them and renews their lease one last time:
        a supervisor started again on this local directory adopts them, else they stop
        themselves at the lease's end and the leader moves their pipelines after
        ``nimbus.supervisor.timeout.secs``. The workers stop in parallel, without ZooKeeper
        (SIGTERM, SIGKILL after ``supervisor.worker.stop.secs``); what follows through
        ZooKeeper gets ``zookeeper.stop.wait.secs`` at most, and nothing while it is not
        connected (``ZkSession.close_within``)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        stop_workers = self._stop_workers if workers is None else workers or not self.settings.adopt
        log.info(
            "event=supervisor_stopping supervisor=%s workers=%s",
            self.id,
            "stop" if stop_workers else "run_on",
        )
        if self._loop_thread is not None:
            self.control.post(SHUTDOWN if stop_workers else LEAVE)
            self._loop_thread.join(timeout=self.settings.loop.timeouts.stop_secs + 10.0)
        self.session.close_within()  # what follows waits on ZooKeeper only while it answers
        if self._loop_thread is not None:
            self.publisher.stop(timeout=FINAL_HEARTBEAT_SECS)
            self._publish_last(renew=not stop_workers)
        self._close_opened()
        log.info("event=supervisor_stopped supervisor=%s", self.id)

    def stop_workers_too(self) -> None:
        """Make the coming ``stop()`` stop every worker: the whole cluster goes away."""
        self._stop_workers = True

    def healthy(self) -> bool:
        """Whether the control loop runs (it owns the workers; nothing fences without it)."""
        return self._loop_thread is not None and self._loop_thread.is_alive()

    # ------------------------------------------------------------------ parts

    def _user_pool(self) -> UserPool | None:
        """The users workers run as (None: the supervisor's own, said in a warning)."""
        return user_pool_at_start(
            self.settings.users,
            self.id,
            workers_dir=self.local_dir / "workers",
            interpreter=Path((self._worker_command or default_worker_command())[0]),
            checkpoint_root=self.settings.spec.checkpoint_root,
        )

    def _start_parts(self, taken: TakenDir, users: UserPool | None) -> None:
        client = self.session.client
        for parent in self.paths.all_parents():
            client.ensure_path(parent)
        store = create_state_store(self.settings.state_store, client, self.paths, owner=self.id)
        self._opened.callback(store.close)
        self.board = HeartbeatBoard(store)
        self._start_endpoint()
        self._outage_watch = self._new_outage_watch()
        self._register()
        cache = CodeCache(
            self._code_distributor(),
            self.local_dir / "code",
            self.settings.code.limits,
            backoff_secs=self.settings.code.retry_secs,
            clock=self._clock,
            workers_pass=self.settings.users.separate,
        )
        self._opened.callback(cache.close)
        envs = RequirementEnvs(self.local_dir / "envs", self.settings.deps)
        self._opened.callback(envs.close)
        warm = self._warm_pool()
        launcher = WorkerLauncher(
            self.settings.spec,
            self.id,
            cache,
            envs=envs,
            command=self._worker_command,
            log=self.settings.log,
            warm=warm,
            users=users,
            monitor=self._monitor_settings(),
        )
        self._start_run_book(client, taken.killed_runs)
        self._spare_budget = spare_budget(self.settings)
        self._build_loop(launcher, warm, taken.adopted(users, self.id))
        self._opened.callback(start_purger(client, self.paths, self.settings, users).close)
        self._start_threads()

    def _start_run_book(self, client: KazooClient, killed_runs: Mapping[str, int | None]) -> None:
        """The writer of this supervisor's run records (``run_records``); it closes the runs
        of the workers killed at the start."""
        paths = self.paths
        self.runs = RunBook(
            client,
            paths,
            self.id,
            log_dir_of=lambda pipeline, run: self._worker_paths(pipeline).for_run(run).log.parent,
            keep=self.settings.runs_keep,
            newest_change=lambda pipeline: newest_change(client, paths, pipeline),
            clock=self._clock,
        )
        self.runs.start()
        self._opened.callback(self.runs.stop, FINAL_HEARTBEAT_SECS)
        for pipeline, run in killed_runs.items():  # supervisor.worker.adopt false
            if run is not None:
                self.runs.close(pipeline, run, RunEnd(RunOutcome.STOPPED, self._wall()), {})

    def _start_endpoint(self) -> None:
        if not self.settings.http.enabled:
            return
        endpoint = SupervisorEndpoint(
            self.settings.http,
            self.id,
            logs_of=self._worker_log,
            healthy=self.healthy,
            metrics=SupervisorMetrics(
                self.id,
                workers=self._worker_beats,
                fences=lambda: self.lease.fences,
                lease_held=self._lease_held,
                warm=self.warm_memory,
                standby=self._standby_beats,
                beat_lease=self.settings.beat.lease_path if self.settings.beat else None,
                wall=self._wall,
                clock=self._clock,
            ),
            ready=self._readiness,
            fencing=Fencing(
                order=self._fence_ordered,
                pipelines=self._pipelines_fence_ordered,
                wait_secs=self.settings.loop.timeouts.stop_secs + SHUTDOWN_MARGIN_SECS,
            ),
        )
        self._opened.callback(endpoint.stop)
        endpoint.start()
        self.endpoint = endpoint

    def _worker_log(self, pipeline: str, run: int | None, previous: bool) -> WorkerLog:
        """Where the log of ``pipeline``'s run ``run`` is here (None: the newest kept, or
        with ``previous`` the one before it), and the conf it is redacted against (the
        newest spec's: the manifest's and the assignment's). A follow of it ends once the
        run is over."""
        paths = self._worker_paths(pipeline)
        kept = kept_runs(paths.directory)
        try:
            conf = WorkerSpec.read(paths.spec).conf
        except (OSError, ValueError):
            conf = {}
        picked = pick_kept(kept, run, previous=previous)
        if picked is None:  # a run without a number, or one of an older release
            files = [] if kept else RunLog(paths.log, self.settings.log).files(previous=previous)
            return WorkerLog(files=files, newest=paths.log, conf=conf)
        newest = paths.for_run(picked).log
        return WorkerLog(
            files=RunLog(newest, self.settings.log).files(previous=False),
            newest=newest,
            conf=conf,
            run=picked,
            superseded=lambda: run_over(paths.directory, picked, EXIT_FILE),
        )

    def _fence_ordered(self, epoch: int) -> FenceOrder:
        """A leader's fence, handed to the control loop (the endpoint waits for its verdict)."""
        order = FenceOrder(epoch)
        self.control.post(order)
        return order

    def _pipelines_fence_ordered(self, epoch: int, pipelines: frozenset[str]) -> PipelineFenceOrder:
        """A leader's pipeline fence, handed to the control loop (the endpoint waits)."""
        order = PipelineFenceOrder(epoch, pipelines)
        self.control.post(order)
        return order

    def _worker_beats(self) -> list[WorkerHeartbeat]:
        round_ = self._last_round
        return [] if round_ is None else list(round_.workers.values())

    def _standby_beats(self) -> list[StandbyWorkerBeat]:
        round_ = self._last_round
        return [] if round_ is None else list(round_.supervisor.standby_workers)

    def _lease_held(self) -> bool:
        return self.lease.state is LeaseState.HELD

    def _readiness(self) -> dict[str, bool]:
        """Ready: connected to ZooKeeper, registered there, and the state store took a
        heartbeat write recently (the lease is held only then)."""
        return {
            "zookeeper": self.session.connected,
            "registered": self._registered.is_set(),
            "state_store": self._lease_held(),
        }

    def _register(self) -> None:
        endpoint = self.endpoint
        outage = outage_verdict(self._outage_watch)
        summary = SupervisorSummary(
            id=self.id,
            host=self.host,
            slots=self.slots,
            used=0,
            started=self._wall(),
            endpoint=endpoint.address if endpoint is not None else None,
            endpoint_tls=endpoint.tls if endpoint is not None else False,
            zookeeper_outage=outage["mode"],
            ride_unavailable=outage["unavailable"],
            beat_lease=self.settings.beat.advertised() if self.settings.beat else None,
        )
        self.registration = SupervisorRegistration(
            self.session.client,
            self.paths,
            summary,
            heartbeats=self.board.supervisors,
            wait_secs=self.settings.zk.session_timeout + CLAIM_MARGIN_SECS,
            dead_session=self._session_record.read(),  # its supervisor is dead: we hold the lock
        )
        self.registration.claim()
        self._session_record.write(self.session.session_id)
        self._opened.callback(self.registration.close)
        self._registered.set()
        self.registration.update_outage(
            **outage_verdict(self._outage_watch)
        )  # a check since, if any

    def _code_distributor(self) -> CodeDistributor:
        """A consumer of code: it fetches, and never registers as a holder."""
        try:
            store = PackageStore(
                self.local_dir / "packages", max_bytes=self.settings.code.max_package_bytes
            )
            distributor = create_distributor(
                self.settings.code.distributor,
                client=self.session.client,
                paths=self.paths,
                address=f"supervisor/{self.id}",
                store=store,
                live_nimbuses=lambda: 0,
            )
            distributor.prepare()
        except (OSError, StratusError) as exc:
            raise SupervisorStartError(f"cannot start the code distributor: {exc}") from None
        self._opened.callback(distributor.close)
        return distributor

    def _warm_pool(self) -> WarmPool | None:
        """The warm workers (``warm_start``), stopped with the supervisor."""
        self._warm = choose_warm(
            self.settings,
            self.id,
            self.local_dir / "warm",
            command=self._warm_command,
            monitor=self._monitor_settings(),
        )
        pool = self._warm.pool
        if pool is not None:
            self._opened.callback(pool.stop)  # the loop stops it; this, if the loop never ran
        return pool

    @property
    def warm(self) -> WarmPool | None:
        """The warm workers, with ``supervisor.worker.warm``, once started."""
        return self._warm.pool

    def warm_memory(self) -> WarmMemory | None:
        """The warm workers and their memory, as the registration shows them (any thread);
        the standby workers of the last heartbeat round counted in."""
        memory, round_ = self._warm.memory(), self._last_round
        if memory is None or round_ is None:
            return memory
        return with_standby(memory, self._spare_budget, round_.supervisor.standby_workers)

    def _show_warm(self) -> None:
        """After a heartbeat round: the registration shows the warm workers' memory."""
        memory = self.warm_memory()
        if memory is not None:
            self.registration.update_warm(memory)

    def _monitor_settings(self) -> MonitorSettings:
        """Who the workers' monitors say they belong to, and whether the supervisor holds
        their stdin as a lifeline (``supervisor.worker.adopt`` false)."""
        return MonitorSettings(self.id, self.cluster, lifeline=not self.settings.adopt)

    def _build_loop(
        self, launcher: WorkerLauncher, warm: WarmPool | None, adopted: dict[str, Adopted]
    ) -> None:
        settings = self.settings
        self.control = ControlLoop(
            self.id,
            self.slots,
            launcher=launcher,
            paths_of=self._worker_paths,
            lease=self.lease,
            settings=settings.loop,
            request_read=self._request_read,
            offer=self._offer,
            warm=warm,
            lease_file=settings.spec.lease_path,
            adopted=adopted,
            runs=self.runs,
            beats=beat_keeper(settings),
            standby=StandbyWorkers(self._spare_budget, clock=self._clock),
            clock=self._clock,
            wall=self._wall,
        )
        self.reader = AssignmentReader(
            self.session.client, self.paths, deliver=self.control.post, clock=self._clock
        )
        self.publisher = HeartbeatPublisher(
            self.board,
            self.id,
            interval_secs=settings.loop.heartbeat_secs,
            on_written=self.control.heartbeat_written,
            on_used=self.registration.update_used,
            may_renew=self._may_renew_lease(),
            warm_ready=warm.ready_count if warm is not None else None,
            after_round=self._show_warm,
            clock=self._clock,
        )

    def _may_renew_lease(self) -> Callable[[], bool]:
        """What a heartbeat round needs besides its write to renew the lease: with the
        ZooKeeper store nothing (the write went through ZooKeeper); with pacemakers, a
        connected ZooKeeper session (``HeartbeatPublisher``)."""
        if self.settings.state_store.kind == "zookeeper":
            return lambda: True
        return lambda: self.session.connected

    def _worker_paths(self, pipeline: str) -> WorkerPaths:
        return WorkerPaths.of(self.local_dir, pipeline)

    def _request_read(self) -> None:
        self.reader.request()

    def _offer(self, round_: HeartbeatRound) -> None:
        self._last_round = round_
        self.publisher.offer(round_)

    def _start_threads(self) -> None:
        client = self.session.client
        self.reader.start()
        self._opened.callback(self.reader.close)
        WatchedChildren(client, self.paths.assignments, Assignment, self.reader.request).start()
        placements = self.paths.standby_workers
        WatchedChildren(client, placements, StandbyWorkerPlacement, self.reader.request).start()
        self.session.add_listener(self._connection_changed)
        self._opened.callback(self.session.remove_listener, self._connection_changed)
        self.publisher.start()
        watch = self._outage_watch
        if watch is not None:
            watch.start()
            self._opened.callback(watch.stop)
        self._loop_thread = threading.Thread(
            target=self.control.run, name="supervisor-control", daemon=True
        )
        self._loop_thread.start()

    def _new_outage_watch(self) -> OutageWatch | None:
        """With ``supervisor.zookeeper.outage: ride``, the watch, its list of members
        checked against the ensemble's own once already (a mismatch warns now, at start)."""
        if not self.settings.ride_outages:
            return None
        watch = OutageWatch(
            self.id,
            self.settings.zk,
            connected=lambda: self.session.connected,
            on_proven=self._outage_proven,
            interval_secs=self.settings.loop.heartbeat_secs,
            read_config=lambda: ensemble_config(self.session.client, PROBE_TIMEOUT_SECS),
            on_membership=self._membership_checked,
            clock=self._clock,
        )
        watch.check_membership()
        return watch

    def _outage_proven(self, started: float) -> None:
        """The outage watch's thread: a proof, for the control loop (made after the watch)."""
        self.control.outage_proven(started)

    def _membership_checked(self, unavailable: str | None) -> None:
        """The outage watch's thread: the verdict changed, the registration shows it."""
        if self._registered.is_set():  # else the registration is written with it
            self.registration.update_outage(outage_mode(unavailable), unavailable)

    def _connection_changed(self, change: SessionChange) -> None:
        """kazoo's thread: only ask for a read once connected again (must not block)."""
        if change.state is SessionState.CONNECTED:
            self.reader.request()
            if not change.resumed:  # a new session: the next start must know it
                self._session_record.write(self.session.session_id)

    def _publish_last(self, *, renew: bool) -> None:
        """The last heartbeat round (``last_heartbeat``); with ``renew``, a successful
        write renews the workers' lease."""
        final = self.control.heartbeat_round(stopping=True)
        started = self._clock()
        may_renew = self._may_renew_lease()()
        if publish_last(self.publisher.publish, final, supervisor=self.id) and may_renew and renew:
            hand_last_lease(self.lease, started, self.settings.spec.lease_path, clock=self._clock)

    def _close_opened(self) -> None:
        """Close what is open, newest first: a close that fails is logged, and the rest
        still close (``ExitStack`` calls every callback, then raises the last failure)."""
        try:
            self._opened.close()
        except Exception:  # closing the rest matters more
            log.exception("event=close_failed supervisor=%s", self.id)
