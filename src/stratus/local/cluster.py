"""A whole stratus cluster on this machine, as real processes: what ``stratus local`` runs.

One ZooKeeper, three ``stratus nimbus`` and two ``stratus supervisor`` processes (by default),
with short timeouts so that failures show in seconds; with ``state_store="pacemaker"`` two
``stratus pacemaker`` processes too, which carry every heartbeat. ``close()`` stops them all
(SIGTERM, then SIGKILL), and the supervisors stop their workers; the workers of a
supervisor that had to be killed first are killed by their ``process.json`` proof
(``processes.kill_left_workers``), so none outlives the cluster. Ctrl-C cannot cut
``close()`` short: an interrupted stop would leave processes behind. Each nimbus runs under
its own failover controller (``nimbus.ha.mode: supervised``, the default: ``stratus nimbus``
runs the nimbus as its child); with ``ha_mode="zkfc"`` each has a ``stratus zkfc`` beside it,
also a child process of ours; with ``ha_mode="self"`` the nimbuses elect themselves::

    cluster = LocalCluster(workdir, console)             # or nimbuses=1 (bench/reassign.py)
    cluster = LocalCluster(workdir, console, state_store="pacemaker")   # and two pacemakers
    cluster.start()
    cluster.seeds            # for a NimbusClient
    cluster.client_auth      # and how it reaches the nimbuses
    cluster.leader_term()    # the leader record: who, which epoch, since when
    cluster.close()

With ``secure=True`` (``stratus local --secure``) the cluster requires what a cluster on a
network does (``stratus.local.secure``): tokens, TLS, and ZooKeeper authentication with
ACLs, under zkfcs too; ``start`` prints how a client connects. ``user`` are the user's
settings, which every daemon gets on top of the cluster's own (``stratus.local.user_settings``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kazoo.exceptions import NoNodeError
from rich.console import Console

from stratus.coordination.records import SlotRecord
from stratus.ha.protocol import HAServiceClient
from stratus.local.processes import (
    NimbusProcess,
    PacemakerProcess,
    SupervisorProcess,
    ZkfcProcess,
    stop_all,
)
from stratus.local.secure import LocalSecurity
from stratus.local.user_settings import UserSettings
from stratus.security.client_auth import NO_AUTH, ClientAuth
from stratus.zk.auth import ZkAuth
from stratus.zk.ensemble import ZooKeeperEnsemble
from stratus.zk.paths import NIMBUS_GROUP, GroupPaths
from stratus.zk.ports import pick_free_port
from stratus.zk.server import ZooKeeperServer
from stratus.zk.session import ZkSession, ZkSettings

NIMBUSES = 3
SUPERVISORS = 2
SLOTS = 2
SESSION_TIMEOUT_SECS = 3.0
SUPERVISOR_TIMEOUT_SECS = 4.0
TASK_TIMEOUT_SECS = 90.0
PACEMAKERS = 2
PULSE_TTL_SECS = 120.0  # above every leader timeout (checked at load), so also the warm-up
HA_MODES = ("supervised", "self", "zkfc")  # nimbus.ha.mode; the first is the default


@dataclass(frozen=True)
class NimbusLeader:
    """The leader record of the nimbus group: who leads, in which epoch, since when
    (ZooKeeper's creation time of the record, wall clock, in seconds)."""

    address: str
    epoch: int
    since: float


def demo_options(zookeeper: str, checkpoints: Path) -> list[str]:
    """Settings of every daemon of the local cluster: detection in seconds, fencing first."""
    return [
        "-c", f"zookeeper.servers={zookeeper}",
        "-c", f"zookeeper.session.timeout.secs={SESSION_TIMEOUT_SECS}",
        "-c", f"nimbus.supervisor.timeout.secs={SUPERVISOR_TIMEOUT_SECS}",
        "-c", "nimbus.monitor.freq.secs=0.5",
        "-c", f"nimbus.task.timeout.secs={TASK_TIMEOUT_SECS}",
        "-c", "supervisor.fence.timeout.secs=2",
        "-c", "supervisor.worker.stop.secs=1.5",
        "-c", "supervisor.worker.timeout.secs=60",
        "-c", "worker.heartbeat.frequency.secs=0.5",
        "-c", "pipeline.spark.master=local[1]",
        "-c", f"pipeline.checkpoint.root={checkpoints}",
    ]  # fmt: skip


def pacemaker_options(addresses: list[str]) -> list[str]:
    """Heartbeats in the pacemakers at ``addresses``, pulses outliving the leader's timeouts."""
    return [
        "-c", "cluster.state.store=pacemaker",
        "-c", f"pacemaker.servers={','.join(addresses)}",
        "-c", f"pacemaker.pulse.ttl.secs={PULSE_TTL_SECS}",
        "-c", "pacemaker.client.timeout.secs=1",  # below the fence timeout (2 s)
    ]  # fmt: skip


def controller_options() -> list[str]:
    """Settings of each failover controller of the local cluster (a supervised nimbus's, or a
    zkfc's): a dead nimbus is seen within a check, a frozen one after a one-second timeout;
    the default fencing (graceful, then epoch), with a short graceful timeout: a frozen old
    active on another host would cost one of them before the epoch fences it."""
    return [
        "-c", "ha.health.check.interval.secs=0.2",
        "-c", "ha.health.rpc.timeout.secs=1",
        "-c", "ha.health.max.backoff.secs=1",
        "-c", "ha.zkfc.rejoin.delay.secs=0.5",
        "-c", "ha.fencing.graceful.timeout.secs=0.25",
    ]  # fmt: skip


def zkfc_options(zookeeper: str) -> list[str]:
    """Settings of each ``stratus zkfc`` of the local cluster (``--ha zkfc``)."""
    return [
        "-c", f"zookeeper.servers={zookeeper}",
        "-c", f"zookeeper.session.timeout.secs={SESSION_TIMEOUT_SECS}",
        *controller_options(),
        "-c", "ha.zkfc.port=0",  # three zkfcs on one host: a free endpoint port each
    ]  # fmt: skip


class LocalCluster:
    """ZooKeeper, the nimbuses and the supervisors of ``stratus local``."""

    def __init__(
        self,
        workdir: Path,
        console: Console,
        *,
        tick_time_ms: int = 200,
        nimbuses: int = NIMBUSES,
        supervisors: int = SUPERVISORS,
        state_store: str = "zookeeper",
        secure: bool = False,
        ha_mode: str = HA_MODES[0],
        supervisor_options: Sequence[str] = (),
        user: UserSettings | None = None,
        zookeeper_members: int = 1,
    ) -> None:
        """``supervisor_options``: more ``-c key=value`` options of every supervisor (a
        benchmark's ``supervisor.worker.warm=false``); ``user``: the user's settings, which
        every daemon gets on top of the cluster's tuning (``stratus.local.user_settings``);
        ``zookeeper_members``: 1, a standalone server, or more, an ensemble on loopback (a
        benchmark's quorum loss)."""
        if ha_mode not in HA_MODES:
            raise ValueError(f"ha_mode must be one of {', '.join(HA_MODES)}, not {ha_mode!r}")
        self.console = console
        self.workdir = workdir
        self.counts = (nimbuses, supervisors)
        self.state_store = state_store
        self.security = LocalSecurity.create(workdir / "security") if secure else None
        self.ha_mode = ha_mode
        self.supervisor_options = list(supervisor_options)
        self.user = user or UserSettings()
        auth = self.security.zookeeper_server_auth() if self.security else None
        self.zookeeper: ZooKeeperServer | ZooKeeperEnsemble = (
            ZooKeeperServer(  # a throw-away directory: no fsync
                workdir / "zookeeper",
                port=0,
                tick_time_ms=tick_time_ms,
                force_sync=False,
                auth=auth,
            )
            if zookeeper_members == 1
            else ZooKeeperEnsemble(
                workdir / "zookeeper",
                size=zookeeper_members,
                tick_time_ms=tick_time_ms,
                force_sync=False,
                auth=auth,
            )
        )
        self.nimbuses: list[NimbusProcess] = []
        self.supervisors: list[SupervisorProcess] = []
        self.pacemakers: list[PacemakerProcess] = []
        self.zkfcs: list[ZkfcProcess] = []

    def start(self) -> None:
        with self.console.status("starting ZooKeeper"):
            self.zookeeper.start()
        self.console.print(f"ZooKeeper serving at [bold]{self.zookeeper.connect_string}[/]")
        if self.user.values:
            self.console.print(f"every daemon gets your {', '.join(sorted(self.user.values))}")
        if self.user.ignored:
            self.console.print(
                f"kept the local cluster's own {', '.join(self.user.ignored)}: "
                "your values for them are not used"
            )
        settings = self.user.write(self.workdir / "user-settings.yaml")
        options = demo_options(self.zookeeper.connect_string, self.workdir / "checkpoints")
        if self.state_store == "pacemaker":
            options += self._start_pacemakers(settings)
        daemons = self.security.daemon_auth() if self.security else NO_AUTH
        if self.security is not None:
            options += self.security.daemon_options()
        nimbuses, supervisors = self.counts
        own = self.security.nimbus_options() if self.security is not None else []
        controllers = controller_options() if self.ha_mode == "supervised" else []
        nimbus_options = self.user.options(
            settings, [*options, *own, *controllers, "-c", f"nimbus.ha.mode={self.ha_mode}"]
        )
        self.user.check(settings, nimbus_options)
        self.nimbuses = [
            NimbusProcess(nimbus_options, port=pick_free_port(), log_dir=self.workdir, auth=daemons)
            for _ in range(nimbuses)
        ]
        if self.ha_mode == "zkfc":
            zkfc_settings = zkfc_options(self.zookeeper.connect_string)
            if self.security is not None:
                zkfc_settings += [*self.security.daemon_options(), *self.security.zkfc_options()]
            self.zkfcs = [
                ZkfcProcess(
                    self.user.options(settings, zkfc_settings),
                    target=nimbus.address,
                    log_dir=self.workdir,
                )
                for nimbus in self.nimbuses
            ]
        # Endpoints on loopback, where nimbuses reach them (and --secure's certificate names)
        supervisor_options = self.user.options(
            settings,
            [*options, "-c", "supervisor.http.bind.host=127.0.0.1", *self.supervisor_options],
        )
        self.user.check(settings, supervisor_options)
        self.supervisors = [
            SupervisorProcess(
                supervisor_options, id=f"supervisor-{n}", slots=SLOTS, log_dir=self.workdir
            )
            for n in range(1, supervisors + 1)
        ]
        zkfcs = {"zkfc": " (each under a zkfc)", "supervised": " (each under its controller)"}.get(
            self.ha_mode, ""
        )
        with self.console.status(
            f"starting {nimbuses} nimbuses{zkfcs} and {supervisors} supervisors"
        ):
            processes: list[NimbusProcess | ZkfcProcess | SupervisorProcess] = [
                *self.nimbuses,
                *self.zkfcs,
                *self.supervisors,
            ]
            for process in processes:
                process.start()
            for process in processes:
                process.wait_ready()
        self.console.print(f"{nimbuses} nimbuses{zkfcs} serving: {', '.join(self.seeds)}")
        ids = ", ".join(s.id for s in self.supervisors)
        self.console.print(f"{supervisors} supervisors running: {ids} ({SLOTS} slots each)")
        self.console.print(f"logs: {self.workdir}")
        if self.security is not None:
            self.console.print(
                "secured: bearer tokens, TLS (CA "
                f"{self.security.ca}), ZooKeeper SASL authentication with ACLs and a quota; "
                "a client connects with:"
            )
            for line in self.security.client_lines(self.seeds):
                self.console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)

    @property
    def client_auth(self) -> ClientAuth:
        """How a client of this cluster reaches its nimbuses (the admin's token if secured)."""
        return self.security.admin_auth() if self.security else NO_AUTH

    def _start_pacemakers(self, settings: Path) -> list[str]:
        """Start the pacemakers (with the user's settings, written at ``settings``); the
        options that send every daemon's heartbeats to them."""
        self.pacemakers = [
            PacemakerProcess(
                self.user.options(settings, []), port=pick_free_port(), log_dir=self.workdir
            )
            for _ in range(PACEMAKERS)
        ]
        with self.console.status(f"starting {PACEMAKERS} pacemakers"):
            for pacemaker in self.pacemakers:
                pacemaker.start()
            for pacemaker in self.pacemakers:
                pacemaker.wait_ready()
        addresses = [pacemaker.address for pacemaker in self.pacemakers]
        self.console.print(f"{PACEMAKERS} pacemakers serving: {', '.join(addresses)}")
        return pacemaker_options(addresses)

    @property
    def seeds(self) -> list[str]:
        return [nimbus.address for nimbus in self.nimbuses]

    def nimbus_at(self, address: str) -> NimbusProcess:
        return next(nimbus for nimbus in self.nimbuses if nimbus.address == address)

    def serving_pid(self, address: str) -> int:
        """The pid of the process that serves the nimbus at ``address``: the child of its
        controller when supervised (from its HA status), else the process we started."""
        process = self.nimbus_at(address)
        if self.ha_mode != "supervised":
            assert process.pid is not None
            return process.pid
        with HAServiceClient(address, self.client_auth, timeout=5.0) as service:
            pid = service.status().pid
        if pid is None:
            raise RuntimeError(f"the nimbus at {address} does not say its pid")
        return pid

    def supervisor(self, sid: str) -> SupervisorProcess:
        return next(supervisor for supervisor in self.supervisors if supervisor.id == sid)

    def leader_term(self) -> NimbusLeader | None:
        """The nimbus group's leader record as ZooKeeper holds it; None while nobody leads."""
        auth = self.security.zookeeper_auth() if self.security else ZkAuth()
        with ZkSession(ZkSettings(self.zookeeper.connect_string, auth=auth)) as session:
            try:
                data, stat = session.client.get(GroupPaths(session.root, NIMBUS_GROUP).slot(0))
            except NoNodeError:
                return None
        record = SlotRecord.decode(data)
        return NimbusLeader(record.member_id, record.epoch, stat.ctime / 1000.0)

    def close(self) -> None:
        """Supervisors first (they stop their workers), then zkfcs (they would fence the
        nimbuses stopping under them), then nimbuses, then the pacemakers, then ZooKeeper."""
        with interrupts_ignored():
            stop_all(self.supervisors)
            stop_all(self.zkfcs)
            stop_all(self.nimbuses)
            stop_all(self.pacemakers)
            self.zookeeper.stop()


INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def interrupts_ignored() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP are ignored inside (in the main thread: elsewhere Python
    delivers no signal anyway), and their handlers restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in INTERRUPTS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
