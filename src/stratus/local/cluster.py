"""A whole stratus cluster on this machine, as real processes: what ``stratus local`` runs.

One ZooKeeper, three ``stratus nimbus`` and two ``stratus supervisor`` processes (by default),
with short timeouts so that failures show in seconds; with ``state_store="pacemaker"`` two
``stratus pacemaker`` processes too, which carry every heartbeat. ``close()`` stops them all
(SIGTERM, then SIGKILL), and the supervisors stop their workers. Ctrl-C cannot cut
``close()`` short: an interrupted stop would leave processes behind::

    cluster = LocalCluster(workdir, console)             # or nimbuses=1 (bench/reassign.py)
    cluster = LocalCluster(workdir, console, state_store="pacemaker")   # and two pacemakers
    cluster.start()
    cluster.seeds            # for a NimbusClient
    cluster.client_auth      # and how it reaches the nimbuses
    cluster.close()

With ``secure=True`` (``stratus local --secure``) the cluster requires what a cluster on a
network does (``stratus.local.secure``): tokens, TLS, and ZooKeeper authentication with
ACLs; ``start`` prints how a client connects.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console

from stratus.local.processes import (
    NimbusProcess,
    PacemakerProcess,
    SupervisorProcess,
    stop_all,
)
from stratus.local.secure import LocalSecurity
from stratus.security.client_auth import NO_AUTH, ClientAuth
from stratus.zk.ports import pick_free_port
from stratus.zk.server import ZooKeeperServer

NIMBUSES = 3
SUPERVISORS = 2
SLOTS = 2
SESSION_TIMEOUT_SECS = 3.0
SUPERVISOR_TIMEOUT_SECS = 4.0
TASK_TIMEOUT_SECS = 90.0
PACEMAKERS = 2
PULSE_TTL_SECS = 120.0  # above every leader timeout (checked at load), so also the warm-up


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
    ) -> None:
        self.console = console
        self.workdir = workdir
        self.counts = (nimbuses, supervisors)
        self.state_store = state_store
        self.security = LocalSecurity.create(workdir / "security") if secure else None
        self.zookeeper = ZooKeeperServer(  # a throw-away directory: no fsync
            workdir / "zookeeper",
            port=0,
            tick_time_ms=tick_time_ms,
            force_sync=False,
            auth=self.security.zookeeper_server_auth() if self.security else None,
        )
        self.nimbuses: list[NimbusProcess] = []
        self.supervisors: list[SupervisorProcess] = []
        self.pacemakers: list[PacemakerProcess] = []

    def start(self) -> None:
        with self.console.status("starting ZooKeeper"):
            self.zookeeper.start()
        self.console.print(f"ZooKeeper serving at [bold]{self.zookeeper.connect_string}[/]")
        options = demo_options(self.zookeeper.connect_string, self.workdir / "checkpoints")
        if self.state_store == "pacemaker":
            options += self._start_pacemakers()
        daemons = self.security.daemon_auth() if self.security else NO_AUTH
        if self.security is not None:
            options += self.security.daemon_options()
        nimbuses, supervisors = self.counts
        self.nimbuses = [
            NimbusProcess(options, port=pick_free_port(), log_dir=self.workdir, auth=daemons)
            for _ in range(nimbuses)
        ]
        self.supervisors = [
            SupervisorProcess(options, id=f"supervisor-{n}", slots=SLOTS, log_dir=self.workdir)
            for n in range(1, supervisors + 1)
        ]
        with self.console.status(f"starting {nimbuses} nimbuses and {supervisors} supervisors"):
            processes: list[NimbusProcess | SupervisorProcess] = [*self.nimbuses, *self.supervisors]
            for process in processes:
                process.start()
            for process in processes:
                process.wait_ready()
        self.console.print(f"{nimbuses} nimbuses serving: {', '.join(self.seeds)}")
        ids = ", ".join(s.id for s in self.supervisors)
        self.console.print(f"{supervisors} supervisors running: {ids} ({SLOTS} slots each)")
        self.console.print(f"logs: {self.workdir}")
        if self.security is not None:
            self.console.print(
                "secured: bearer tokens, TLS (CA "
                f"{self.security.ca}), ZooKeeper digest authentication with ACLs; "
                "a client connects with:"
            )
            for line in self.security.client_lines(self.seeds):
                self.console.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)

    @property
    def client_auth(self) -> ClientAuth:
        """How a client of this cluster reaches its nimbuses (the admin's token if secured)."""
        return self.security.admin_auth() if self.security else NO_AUTH

    def _start_pacemakers(self) -> list[str]:
        """Start the pacemakers; the options that send every daemon's heartbeats to them."""
        self.pacemakers = [
            PacemakerProcess([], port=pick_free_port(), log_dir=self.workdir)
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

    def supervisor(self, sid: str) -> SupervisorProcess:
        return next(supervisor for supervisor in self.supervisors if supervisor.id == sid)

    def close(self) -> None:
        """Supervisors first (they stop their workers), then nimbuses, then the pacemakers,
        then ZooKeeper."""
        with interrupts_ignored():
            stop_all(self.supervisors)
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
