"""The nimbus daemon: its parts built from the configuration, and started and stopped in order.

A nimbus registers ``<root>/nimbuses/<host:port>`` (re-created after every session expiry),
serves the API from its first second (reads from any nimbus), keeps its pipeline code in
line with ZooKeeper (``CodeSync`` over the configured code distributor; the code side is
opened by ``code_wiring.open_code``), and leaves its leadership to the
``LeadershipController``: it queues through the ``LeaderElector`` only once it holds the
code of every pipeline that needs it and its ``may_lead`` hook says yes, and runs the
leader's duties while it leads. In ``nimbus.ha.mode: zkfc`` it never queues: its zkfc hands
it a term over the HA service protocol (``ha_service``), which every nimbus serves.
``stop()`` (SIGTERM) leaves the queue first, so another nimbus leads at once::

    nimbus = Nimbus(NimbusSettings.from_config(conf))
    nimbus.start()            # ZooKeeperUnavailableError / NimbusStartError on failure
    ...
    nimbus.stop()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack

from kazoo.client import KazooClient

from stratus import __version__
from stratus.api.clock import Clock
from stratus.api.errors import UnknownPipelineError
from stratus.api.records import (
    NimbusRegistration,
    PipelineRecord,
    PipelineStatus,
    WorkerHeartbeat,
)
from stratus.codedist.distributor import CodeMeta
from stratus.codedist.transfer.server import PackageServer
from stratus.coordination.coordinator import Coordinator
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import LeaderChange, RevokeReason
from stratus.nimbus.cluster_view import ClusterView
from stratus.nimbus.code_wiring import open_code
from stratus.nimbus.duties.killed import RemoveKilled
from stratus.nimbus.duties.round import DutyRound
from stratus.nimbus.duty_wiring import build_duties
from stratus.nimbus.http.api import create_app
from stratus.nimbus.http.exposure import InsecureReminder, check_exposure
from stratus.nimbus.http.listening import NimbusStartError, listen_socket
from stratus.nimbus.http.log_relay import LogRelay
from stratus.nimbus.leadership.election_queue import ElectionQueue, build_elector
from stratus.nimbus.leadership.granted_lock import GrantedLock
from stratus.nimbus.leadership.ha_service import NimbusHAService
from stratus.nimbus.leadership.health import HealthWatch
from stratus.nimbus.leadership.leader_terms import LeaderTermLog
from stratus.nimbus.leadership.leader_trail import LeaderTrail
from stratus.nimbus.leadership.leadership_controller import LeadershipController
from stratus.nimbus.leadership.readiness import CodeReadiness
from stratus.nimbus.metrics import NimbusMetrics
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.records.run_reads import RunReader
from stratus.nimbus.scheduling.assignments import AssignmentTable
from stratus.nimbus.scheduling.batch_metrics import BatchMetrics
from stratus.nimbus.scheduling.cordons import CordonTable, DrainMemory
from stratus.nimbus.scheduling.pipeline_metrics import ObservedRound, PipelineMetrics
from stratus.nimbus.scheduling.pipeline_series import PipelineSeriesStore
from stratus.nimbus.scheduling.placement import Placement
from stratus.nimbus.scheduling.series_sampler import SeriesSampler
from stratus.nimbus.service import NimbusService
from stratus.nimbus.settings import HAMode, NimbusSettings
from stratus.nimbus.submission import Submitter
from stratus.state.factory import create_state_store
from stratus.state.heartbeats import HeartbeatBoard
from stratus.trail import Actor, TrailRecorder
from stratus.web.bounds import bounded_app
from stratus.web.threaded_server import ThreadedServer
from stratus.zk.ephemeral import EphemeralNode
from stratus.zk.paths import NIMBUS_GROUP, ClusterPaths
from stratus.zk.session import ZkSession

log = logging.getLogger(__name__)


def always_may_lead() -> bool:
    return True


class Nimbus:
    """One nimbus daemon; see the module docstring.

    ``clock`` is the wall clock of the times written down (start, kill times); ``monotonic``
    times the periods and timeouts of the leadership and of the scheduling. Who may call it
    is ``settings.api.policy`` (``nimbus.auth.tokens.file``'s entries; a supervised nimbus's
    adds its controller's).
    """

    def __init__(
        self,
        settings: NimbusSettings,
        *,
        may_lead: Callable[[], bool] = always_may_lead,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        self.settings = settings
        self._may_lead = may_lead
        self._clock = clock
        self._wall = wall
        self._stopping = threading.Event()
        api = settings.api
        self.policy = api.policy
        self.insecure = check_exposure(  # True: an open API on a network, on purpose
            api.bind, authenticated=self.policy.enabled, insecure=api.insecure
        )
        self._tls = api.tls.server_context() if api.tls is not None else None
        self._sock = listen_socket(api.bind, api.port)
        self.port: int = self._sock.getsockname()[1]
        self.address = f"{api.host}:{self.port}"
        self.paths = ClusterPaths(settings.zk.root)
        self.session = ZkSession(settings.zk)
        self.history = LeaderTrail(
            TrailRecorder.from_settings(settings.history, Actor("nimbus", self.address))
        )
        self.coordinator = Coordinator(
            self.session,
            on_fence_refused=lambda: self.metrics.epoch_refusals.inc(),  # noqa: PLW0108 (built below)
            on_fenced_write=self.history.wrote,
        )
        self.elector = build_elector(
            self.coordinator,
            self.address,
            on_gain=self._elected,
            on_loss=self._revoked,
        )
        self.metrics = NimbusMetrics(
            is_leader=lambda: self.controller.accepted_term() is not None,
            epoch=lambda: self.view.leader().epoch,
            zookeeper_connected=lambda: self.session.connected,
            code_sync_rounds=lambda: self.code_sync.rounds,
            code_missing=lambda: len(self.code_sync.missing()),
            ha_state=lambda: self.ha.state(),  # noqa: PLW0108 (built later, by start)
            ha_epoch=lambda: self.ha.epoch(),  # noqa: PLW0108
        )
        self.health = HealthWatch(
            stopping=self._stopping.is_set,
            zookeeper=lambda: self.session.state.value,
            zookeeper_may_resume=self.session.may_resume,
            controller_running=lambda: self.controller.running,
            package_server_serving=self._package_server_serving,
        )
        self._registered = threading.Event()
        self._opened = ExitStack()  # what stop() closes, newest first
        self._package_server: PackageServer | None = None
        self._http: ThreadedServer | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Connect, build the parts, serve the API, register, and take part in the election.

        Every step notes what undoes it; a step that fails undoes those before it, newest
        first, so a failed start leaves no session, registration, thread or socket behind.
        """
        self._opened.callback(self.history.close)  # closed last: the last term's end is in it
        self._opened.callback(self._sock.close)
        try:
            client = self._connect()
            ops = PipelineOps(
                client,
                self.paths,
                wall=self._wall,
                max_record_bytes=self.settings.pipelines.max_record_bytes,
                versions_keep=self.settings.pipelines.versions_keep,
            )
            code = open_code(
                self.settings,
                self._opened,
                client=client,
                ops=ops,
                view=self.view,
                paths=self.paths,
                address=self.address,
                port=self.port,
                tls=self._tls,
                clock=self._clock,
            )
            self._package_server = code.server
            self.distributor = code.distributor
            self.code_sync = code.sync
            self._build_leadership(client, ops, code.submitter)
            self._go_live(client)
        except BaseException:
            self._close_opened()
            raise
        log.info("event=nimbus_started address=%s version=%s", self.address, __version__)

    def stop(self) -> None:
        """Hand leadership over at once, then stop serving and leave ZooKeeper.

        What ``start`` opened closes newest first: the leadership controller leaves the queue
        first, so another nimbus leads now; the session closes last. ZooKeeper gets
        ``zookeeper.stop.wait.secs`` at most, and nothing once it is not connected
        (``ZkSession.close_within``): a nimbus that cannot reach it cannot hand over
        anyway, and its session expires as if it had died.
        """
        if self._stopping.is_set():
            return
        self._stopping.set()
        log.info("event=nimbus_stopping address=%s", self.address)
        self.session.close_within()
        self._close_opened()

    def _close_opened(self) -> None:
        """Close what is open, newest first: a close that fails is logged, and the rest
        still close (``ExitStack`` calls every callback, then raises the last failure)."""
        try:
            self._opened.close()
        except Exception:  # closing the rest matters more
            log.exception("event=close_failed address=%s", self.address)

    # ------------------------------------------------------------------ start-up steps

    def _connect(self) -> KazooClient:
        """The session, the coordinator, the persistent parents and the watched view."""
        self.session.start()  # closes itself if it fails
        self._opened.callback(self.session.close)
        self.coordinator.start()  # stops its threads if it fails
        self._opened.callback(self.coordinator.close)
        client = self.session.client
        for parent in self.paths.all_parents():
            client.ensure_path(parent)
        self.view = ClusterView(client, self.paths)
        self.view.start()
        return client

    def _build_leadership(
        self, client: KazooClient, ops: PipelineOps, submitter: Submitter
    ) -> None:
        """The leader's duties, the leadership controller, and the API's service."""
        self.terms = LeaderTermLog(
            client,
            self.paths,
            clock=self.session.clock,
            wall=self._wall,
            session_timeout=lambda: self.session.granted_session_timeout,
        )
        store = create_state_store(self.settings.state_store, client, self.paths)
        self._opened.callback(store.close)
        board = HeartbeatBoard(store)
        assignments = AssignmentTable(client, self.paths)
        self.assignment_history = assignments.history
        cordons = CordonTable(client, self.paths)
        drains = DrainMemory()
        self.removal = RemoveKilled(
            self.view.pipelines,
            ops,
            self.distributor,
            board,
            checkpoint_root=self.settings.pipelines.checkpoint_root,
        )
        readiness = CodeReadiness(
            self.code_sync,
            may_lead=self._may_lead,
            read_pipelines=ops.read_all,
            submits_settled=submitter.settled,
            settle_timeout_secs=self.settings.leadership.monitor_freq_secs,
        )
        self.pipeline_metrics = PipelineMetrics(
            pipelines=self.view.pipelines,
            replication=lambda record: self.distributor.replication_count(
                record.name, CodeMeta(record.digest, record.size_bytes)
            ),
            leading_epoch=self._leading_epoch,
            clock=self._clock,
        )
        self.metrics.registry.register(self.pipeline_metrics)
        self.series = PipelineSeriesStore(
            step_secs=self.settings.service.series_step_secs,
            points=self.settings.service.series_points,
            clock=self._clock,
        )
        self.batch_metrics = BatchMetrics(leading_epoch=self._leading_epoch)
        self.metrics.registry.register(self.batch_metrics)
        self.sampler = SeriesSampler(
            self.series,
            Placement(assignments, board).everywhere,
            self.view.pipelines,
            leading=lambda: self._leading_epoch() is not None,
        )
        duties = build_duties(
            self.settings,
            self._opened,
            session=self.session,
            paths=self.paths,
            view=self.view,
            history=self.history,
            metrics=self.metrics,
            ops=ops,
            board=board,
            assignments=assignments,
            cordons=cordons,
            drains=drains,
            removal=self.removal,
            distributor=self.distributor,
            code_sync=self.code_sync,
            observed=self._observed,
            leading=lambda: self._leading_epoch() is not None,
            wake_round=lambda: self.controller.cluster_changed(),  # noqa: PLW0108 built below
            address=self.address,
            clock=self._clock,
            wall=self._wall,
        )
        self.lane = duties.lane
        lock = GrantedLock() if self.settings.ha.mode is HAMode.ZKFC else None
        self.controller = self._build_controller(readiness, duties.round, lock)
        self.ha = NimbusHAService(
            self.settings.ha,
            self.address,
            controller=self.controller,
            lock=lock,
            readiness=readiness,
            adopt=lambda epoch, holds: self.coordinator.adopt_term(
                NIMBUS_GROUP, self.address, epoch, holds=holds
            ),
            initialized=lambda: self._registered.is_set() and self.code_sync.rounds > 0,
            health=self.health.problems,
            stopping=self._stopping.is_set,
            may_resume=self.session.may_resume,
            on_transition=lambda state: self.metrics.ha_transitions.labels(state.value).inc(),
            clock=self._clock,
        )
        self.service = NimbusService(
            self.settings.service,
            address=self.address,
            view=self.view,
            ops=ops,
            submitter=submitter,
            placement=Placement(assignments, board, self.view),
            leadership=self.controller.accepted_term,
            on_change=self._pipeline_changed,
            wall=self._wall,
            cordons=cordons,
            drains=drains,
        )

    def _go_live(self, client: KazooClient) -> None:
        """Follow the cluster, serve the API, register, then let the controller queue."""
        self.coordinator.subscribe_leader_changes(NIMBUS_GROUP, self._leader_changed)
        self.view.set_leaders(self.coordinator.get_leaders(NIMBUS_GROUP))
        self.view.subscribe(self._cluster_changed)
        self.distributor.on_change(self._cluster_changed)
        self._opened.callback(self.code_sync.stop)
        self.code_sync.start()
        self._start_http()
        registration = EphemeralNode(
            client, self.paths.nimbus(self.address), self._registration_record().encode()
        )
        self._opened.callback(registration.close)
        registration.start()
        self._registered.set()
        self._opened.callback(self._stop_leading)
        self.controller.start()
        self._opened.callback(self.sampler.stop)
        self.sampler.start()
        if self.insecure:
            api = self.settings.api
            reminder = InsecureReminder(api.bind, every_secs=api.insecure_warn_secs)
            self._opened.callback(reminder.stop)
            reminder.start()

    # ------------------------------------------------------------------ parts

    def _build_controller(
        self, readiness: CodeReadiness, duties: DutyRound, granted: GrantedLock | None
    ) -> LeadershipController:
        """In ``zkfc`` mode the lock is granted by the HA service: the nimbus never campaigns."""
        return LeadershipController(
            granted or ElectionQueue(self.elector, self.coordinator),
            readiness,
            lambda term: self.health.note_round(duties.run(term)),
            self.settings.leadership,
            address=self.address,
            on_gained=self._term_began,
            on_lost=self._term_ended,
            on_granted=self.history.won,
            on_revoked=self.history.lost,
            clock=self._clock,
        )

    def _readiness(self) -> dict[str, bool]:
        """``/readyz``: connected to ZooKeeper, registered, and holding the code of every
        pipeline that needs it (so it may lead); whether it leads does not matter."""
        return {
            "zookeeper": self.session.connected,
            "registered": self._registered.is_set() and not self._stopping.is_set(),
            "code": not self.code_sync.missing(),
        }

    def _package_server_serving(self) -> bool | None:
        return self._package_server.serving if self._package_server is not None else None

    def _term_began(self, term: Leadership) -> None:
        """A term accepted: count it, record it in the history, observe its failover; the
        failover lane starts for it."""
        self.metrics.leadership_gained.inc()
        if self.lane is not None:
            self.lane.start(term)
        record = self.terms.began(term, self.address)
        if record is not None and record.failover_secs is not None:
            self.metrics.failover.observe(record.failover_secs)
            log.info(
                "event=leader_term_recorded epoch=%d failover_secs=%.3f",
                term.epoch,
                record.failover_secs,
            )

    def _observed(self, observed: ObservedRound) -> None:
        """What a scheduling round saw: into the metrics and the pipelines' series."""
        self.pipeline_metrics.observe(observed)
        self.batch_metrics.observe(observed)
        self.series.observe(observed.workers, observed.pipelines)

    def _leading_epoch(self) -> int | None:
        term = self.controller.accepted_term()
        return term.epoch if term is not None else None

    def _stop_leading(self) -> None:
        """Write the term's end, then leave the queue (another nimbus leads at once): the
        other way round, the successor closes the term first, as if this one had died."""
        term = self.controller.accepted_term()
        if term is not None:
            self.terms.ended(term)
        self.controller.stop()

    def _term_ended(self, _term: Leadership) -> None:
        if self.lane is not None:
            self.lane.stop()
        self.metrics.leadership_lost.inc()
        self.health.term_ended()

    def _registration_record(self) -> NimbusRegistration:
        return NimbusRegistration(
            host=self.settings.api.host,
            port=self.port,
            started=self._wall(),
            version=__version__,
            insecure=self.insecure,
        )

    def _worker_beats(self, name: str) -> list[WorkerHeartbeat]:
        """The newest heartbeats of ``name``'s workers (none once it is removed)."""
        try:
            return self.service.workers(name).workers
        except UnknownPipelineError:
            return []

    def _start_http(self) -> None:
        app = create_app(
            self.service,
            self.metrics,
            self.policy,
            ha=self.ha,
            log_relay=LogRelay(self.settings.api.client),
            zookeeper_state=lambda: self.session.state.value,
            ready=self._readiness,
            leader_terms=self.terms.read,
            assignment_history=self.assignment_history,
            pipeline_series=self.series.of,
            runs=RunReader(
                self.session.client,
                self.paths,
                history=self.assignment_history,
                live=lambda: self.view.supervisors().keys(),
                beats=self._worker_beats,
            ),
        )
        self._http = ThreadedServer(
            bounded_app(app, self.settings.http),
            self._sock,
            self.settings.http,
            self._tls,
            name="nimbus-http",
        )
        self._opened.callback(self._http.stop)
        self._http.start(lambda: NimbusStartError(f"the HTTP API did not start on {self.address}"))

    # ------------------------------------------------------------------ events

    def _elected(self, term: Leadership) -> None:
        self.controller.elected(term)

    def _revoked(self, term: Leadership, reason: RevokeReason) -> None:
        self.controller.revoked(term, reason)
        if reason is not RevokeReason.SUSPENDED:  # a suspended term may resume
            self.terms.ended(term)

    def _leader_changed(self, change: LeaderChange) -> None:
        self.metrics.leader_changes.inc()
        self.view.note_leader_change(change)
        self.controller.leader_changed(change)

    def _cluster_changed(self) -> None:
        """A watch saw pipelines, nimbuses or code holders change (kazoo's thread)."""
        if self.settings.code_watch:
            self.code_sync.request()
        self.controller.cluster_changed()

    def _pipeline_changed(self, record: PipelineRecord) -> None:
        """A submit or a kill on this nimbus: the duties look at it now, not at the next watch."""
        if record.status is PipelineStatus.KILLED:
            self.removal.note_killed(record)
        self.controller.cluster_changed()
