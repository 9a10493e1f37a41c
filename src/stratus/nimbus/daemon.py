"""The nimbus daemon: registration, leadership gating, the HTTP API, and a graceful stop.

A nimbus registers ``<root>/nimbuses/<host:port>`` (re-created after every session expiry),
serves the API from its first second (reads from any nimbus), keeps its pipeline code in
line with ZooKeeper (``CodeSync`` over the configured code distributor), and queues for
leadership through the ``LeaderElector`` only once it holds the code of every pipeline that
needs it (SPEC 000) and its ``may_lead`` hook says yes. Elected while either says no (the
check on election reads ZooKeeper itself), it gives the lock back at once, syncs, and
queues again later; a leader that finds code missing steps down the same way. ``stop()``
(SIGTERM) leaves the queue first, so another nimbus leads at once instead of after the
session timeout::

    nimbus = Nimbus(conf)
    nimbus.start()            # ZooKeeperUnavailableError / NimbusStartError on failure
    ...
    nimbus.stop()
"""

from __future__ import annotations

import logging
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import uvicorn
from kazoo.exceptions import KazooException

from stratus import __version__
from stratus.api.records import NimbusRegistration
from stratus.codedist.code_sync import CodeSync
from stratus.codedist.distributor import CodeDistributor
from stratus.codedist.factory import create_distributor
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.server import PackageServer
from stratus.config import StratusConfig
from stratus.coordination.coordinator import Coordinator
from stratus.coordination.leader_elector import LeaderElector
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import LeaderChange, RevokeReason
from stratus.errors import StratusError
from stratus.nimbus.api import create_app
from stratus.nimbus.assignments import AssignmentTable
from stratus.nimbus.cluster_view import ClusterView
from stratus.nimbus.metrics import NimbusMetrics
from stratus.nimbus.pipeline_ops import PipelineOps
from stratus.nimbus.scheduling_duty import SchedulingDuty
from stratus.nimbus.service import NimbusService
from stratus.state.factory import create_state_store
from stratus.state.heartbeats import HeartbeatBoard
from stratus.zk.ephemeral import EphemeralNode
from stratus.zk.paths import ClusterPaths
from stratus.zk.session import ZkSession
from stratus.zk_config import zk_settings

log = logging.getLogger(__name__)

NIMBUS_GROUP = "nimbus"
HTTP_START_TIMEOUT_SECS = 10.0
HTTP_STOP_TIMEOUT_SECS = 5.0


class NimbusStartError(StratusError):
    """The nimbus could not start: its port is taken, its directory unusable, and so on."""


def always_may_lead() -> bool:
    return True


class Nimbus:
    """One nimbus daemon; see the module docstring."""

    def __init__(
        self,
        conf: StratusConfig,
        *,
        may_lead: Callable[[], bool] = always_may_lead,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.conf = conf
        self._may_lead = may_lead
        self._clock = clock
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sock = _listen(conf.nimbus_host, conf.nimbus_port)
        self.port: int = self._sock.getsockname()[1]
        self.address = f"{conf.nimbus_host}:{self.port}"
        self.paths = ClusterPaths(conf.zookeeper_root)
        self.session, self.coordinator, self.elector = self._build_election()
        self.metrics = NimbusMetrics(
            is_leader=self.elector.is_leader,
            epoch=lambda: self.view.leader().epoch,
            zookeeper_connected=lambda: self.session.connected,
            code_sync_rounds=lambda: self.code_sync.rounds,
            code_missing=lambda: len(self.code_sync.missing()),
        )
        self._registration: EphemeralNode | None = None
        self._package_server: PackageServer | None = None
        self._http: uvicorn.Server | None = None
        self._http_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        try:
            self.session.start()
            self.coordinator.start()
        except BaseException:
            self.session.close()
            self._sock.close()
            raise
        client = self.session.client
        for parent in self.paths.all_parents():
            client.ensure_path(parent)
        self.view = ClusterView(client, self.paths)
        self.view.start()
        self.coordinator.subscribe_leader_changes(NIMBUS_GROUP, self._leader_changed)
        self.view.set_leaders(self.coordinator.get_leaders(NIMBUS_GROUP))
        self.ops = PipelineOps(client, self.paths, clock=self._clock)
        incoming = self._package_store()
        self._start_package_server(incoming)
        self.distributor = self._build_distributor(incoming)
        self.code_sync = CodeSync(
            self.distributor,
            self.view.pipelines,
            self.ops.read,
            freq_secs=self.conf.nimbus_code_sync_freq_secs,
            lost_fail_secs=self.conf.nimbus_code_lost_fail_secs,
        )
        self.board = HeartbeatBoard(create_state_store(self.conf, client, self.paths))
        self.assignments = AssignmentTable(client, self.paths)
        self.scheduling = SchedulingDuty(
            ops=self.ops,
            assignments=self.assignments,
            board=self.board,
            conf=self.conf,
            clock=self._clock,
        )
        self.service = self._build_service(incoming)
        self.view.subscribe(self._cluster_changed)
        self.distributor.on_change(self._cluster_changed)
        self.code_sync.start()
        self._start_http()
        self._registration = EphemeralNode(
            client, self.paths.nimbus(self.address), self._registration_record().encode()
        )
        self._registration.start()
        self._spawn("leadership-gate", self._gate_leadership)
        self._spawn("leader-duties", self._run_leader_duties)
        log.info("event=nimbus_started address=%s version=%s", self.address, __version__)

    def stop(self) -> None:
        """Hand leadership over at once, then stop serving and leave ZooKeeper."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self.service.duties_due.set()
        log.info("event=nimbus_stopping address=%s", self.address)
        self.elector.remove_from_leader_lock_queue()  # the hand-over: another nimbus leads now
        self.code_sync.stop()
        for thread in self._threads:
            thread.join(timeout=HTTP_STOP_TIMEOUT_SECS)
        self._stop_http()
        if self._registration is not None:
            self._registration.close()
        self.distributor.close()
        if self._package_server is not None:
            self._package_server.close()
        self.coordinator.close()
        self.session.close()

    # ------------------------------------------------------------------ parts

    def _build_election(self) -> tuple[ZkSession, Coordinator, LeaderElector]:
        """This nimbus's ZooKeeper session, and the election of group ``nimbus`` over it."""
        session = ZkSession(zk_settings(self.conf))
        coordinator = Coordinator(session)
        elector = LeaderElector(
            coordinator, self.address, group=NIMBUS_GROUP, on_gain=self._gained, on_loss=self._lost
        )
        return session, coordinator, elector

    def _package_store(self) -> PackageStore:
        """The store that receives uploads (and, with the local distributor, keeps code)."""
        local_dir = Path(
            self.conf.nimbus_local_dir
            or Path(tempfile.gettempdir()) / f"stratus-nimbus-{self.conf.nimbus_host}-{self.port}"
        )
        try:
            store = PackageStore(
                local_dir / "packages", max_bytes=self.conf.nimbus_max_upload_bytes
            )
        except OSError as exc:
            raise NimbusStartError(
                f"cannot use nimbus.local.dir {local_dir}: {exc.strerror}"
            ) from None
        store.remove_leftovers()
        return store

    def _start_package_server(self, store: PackageStore) -> None:
        """Serve the store's packages with sendfile, if code is copied between nimbuses."""
        if self.conf.nimbus_code_distributor != "local" or self.conf.nimbus_code_port < 0:
            return
        try:
            self._package_server = PackageServer(
                store, self.conf.nimbus_host, self.conf.nimbus_code_port
            )
        except OSError as exc:
            raise NimbusStartError(
                f"cannot serve packages on {self.conf.nimbus_host}:{self.conf.nimbus_code_port} "
                f"(nimbus.code.port): {exc.strerror}"
            ) from None
        self._package_server.start()

    def _build_distributor(self, store: PackageStore) -> CodeDistributor:
        distributor = create_distributor(
            self.conf,
            client=self.session.client,
            paths=self.paths,
            address=self.address,
            store=store,
            live_nimbuses=lambda: len(self.view.nimbuses()),
            served_from=self._package_server.address if self._package_server else None,
        )
        try:
            distributor.prepare()
        except StratusError as exc:
            raise NimbusStartError(f"cannot start the code distributor: {exc}") from None
        return distributor

    def _build_service(self, incoming: PackageStore) -> NimbusService:
        return NimbusService(
            address=self.address,
            view=self.view,
            ops=self.ops,
            incoming=incoming,
            distributor=self.distributor,
            elector=self.elector,
            scheduling=self.scheduling,
            assignments=self.assignments,
            board=self.board,
            conf=self.conf,
            clock=self._clock,
        )

    def _registration_record(self) -> NimbusRegistration:
        return NimbusRegistration(
            host=self.conf.nimbus_host, port=self.port, started=self._clock(), version=__version__
        )

    def _start_http(self) -> None:
        config = uvicorn.Config(
            create_app(self.service, self.metrics),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._http = uvicorn.Server(config)
        self._spawn("http", lambda: self._serve_http(self._http))
        deadline = time.monotonic() + HTTP_START_TIMEOUT_SECS
        while not self._http.started:
            if time.monotonic() > deadline:
                raise NimbusStartError(f"the HTTP API did not start on {self.address}")
            time.sleep(0.01)

    def _serve_http(self, server: uvicorn.Server | None) -> None:
        assert server is not None
        server.run(sockets=[self._sock])

    def _stop_http(self) -> None:
        if self._http is not None:
            self._http.should_exit = True
        if self._http_thread is not None:
            self._http_thread.join(timeout=HTTP_STOP_TIMEOUT_SECS)
        self._sock.close()

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=f"nimbus-{name}", daemon=True)
        thread.start()
        if name == "http":
            self._http_thread = thread
        else:
            self._threads.append(thread)

    # ------------------------------------------------------------------ leadership

    def _gate_leadership(self) -> None:
        """Queue for leadership whenever this nimbus is out of the queue and may lead."""
        while not self._stopping.is_set():
            if not self.coordinator.is_candidate(NIMBUS_GROUP) and self._may_queue():
                try:
                    self.elector.add_to_leader_lock_queue()
                    log.info("event=queued address=%s", self.address)
                except (StratusError, KazooException) as exc:
                    log.warning("event=queue_failed address=%s error=%s", self.address, exc)
            self._stopping.wait(self.conf.nimbus_lead_check_secs)

    def _may_queue(self) -> bool:
        """Whether this nimbus may queue: its hook agrees and it holds all the code it sees."""
        if not self._may_lead():
            return False
        missing = self.code_sync.missing()
        if missing:
            log.debug("event=not_queuing address=%s missing_code=%s", self.address, missing)
        return not missing

    def _gained(self, term: Leadership) -> None:
        if self._stopping.is_set():
            return
        reason = self._reason_not_to_lead()
        if reason is not None:
            log.warning(
                "event=leadership_declined address=%s epoch=%d reason=%s",
                self.address,
                term.epoch,
                reason,
            )
            self._step_down()
            return
        self.metrics.leadership_gained.inc()
        log.info("event=leadership_gained address=%s epoch=%d", self.address, term.epoch)
        self.service.duties_due.set()

    def _reason_not_to_lead(self) -> str | None:
        """Why this newly elected nimbus must not lead, checked against ZooKeeper itself."""
        if not self._may_lead():
            return "may_lead_hook"
        try:
            missing = self.code_sync.missing(self.service.read_pipelines())
        except (StratusError, KazooException) as exc:
            return f"cannot_read_pipelines({exc!r})"
        return f"missing_code({','.join(missing)})" if missing else None

    def _step_down(self) -> None:
        """Give the lock back, fetch what is missing, and let the gate queue again later."""
        self.elector.remove_from_leader_lock_queue()
        self.code_sync.request()

    def _lost(self, term: Leadership, reason: RevokeReason) -> None:
        self.metrics.leadership_lost.inc()
        log.warning(
            "event=leadership_lost address=%s epoch=%d reason=%s",
            self.address,
            term.epoch,
            reason.value,
        )

    def _leader_changed(self, change: LeaderChange) -> None:
        self.metrics.leader_changes.inc()
        self.view.note_leader_change(change)

    def _cluster_changed(self) -> None:
        """A watch saw pipelines, nimbuses or code holders change (kazoo's thread)."""
        if self.conf.nimbus_code_watch:
            self.code_sync.request()
        self.service.duties_due.set()

    def _run_leader_duties(self) -> None:
        while not self._stopping.is_set():
            self.service.duties_due.wait(self.conf.nimbus_monitor_freq_secs)
            self.service.duties_due.clear()
            term = self.elector.leadership
            if self._stopping.is_set():
                return
            if term is None:
                continue
            try:
                missing = self.service.run_duties(term, self.code_sync)
            except (StratusError, KazooException) as exc:
                log.warning("event=leader_duties_failed address=%s error=%s", self.address, exc)
                continue
            if missing:
                log.warning(
                    "event=stepping_down address=%s epoch=%d missing_code=%s",
                    self.address,
                    term.epoch,
                    ",".join(missing),
                )
                self._step_down()


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so, and
    # without it every keep-alive response waits 40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise NimbusStartError(
            f"nimbus cannot listen on {host}:{port}: {exc.strerror}; "
            "choose another nimbus.port or stop what uses it"
        ) from None
    sock.listen(1024)
    return sock
