"""The chaos suite's cluster: three hosts of their own network namespace, each with a ZooKeeper
member, a nimbus and a supervisor. ``ha_mode`` is the nimbuses' ``nimbus.ha.mode``: ``supervised``
(the default: each ``stratus nimbus`` is a failover controller running its nimbus as a child; a
nimbus fault hits the child, a zkfc fault the controller), ``self``, or ``zkfc`` (a ``stratus
zkfc`` of its host beside each nimbus); pacemakers on two of them (with ``hot``, on all three: see
below), carrying every heartbeat. Every process records its history in its host's file
(``history.file``), the suite's driver in its own. The nimbuses, supervisors and zkfcs require
tokens (``tests/harness/secure_cluster.py``; the clients hold a submitter's, so the owners of each
pipeline are checked), the pacemakers digest, the ZooKeeper quorum SASL: every server that listens
on a host's address authenticates, as on a real network. One directory that every host reaches
holds the pipelines' checkpoints, input and output (``shared``). With ``walls``
(``tests/harness/worker_users.py``), each host's supervisor runs its workers as users of its own
(``supervisor.worker.run.as: pool``), on an interpreter they may run, and ``shared`` is open to
their group: ``workdir`` must then be a directory other users may pass::

    with traversable_dir() as base, walled_hosts(HOSTS, base) as walls,
         NetnsHosts(HOSTS) as hosts, ChaosCluster(hosts, base, walls=walls) as cluster:
        cluster.process(Target.NIMBUS, "h2").signal(signal.SIGKILL)
        cluster.restart(Target.NIMBUS, "h2")
        cluster.history_files()       # what the oracle reads

Every process is one the cluster can start again after a fault: ``restart`` starts what was
killed (a pacemaker starts empty) and waits until it is ready.

With ``hot`` the cluster is ready for a hot pipeline (``pipeline.standby: hot``, which the test
submits): a pacemaker on every host, since a beat counts once a majority of the pacemakers
stored it and two make a majority of all (one down or cut would lapse every beat lease); no
warm worker, to spare the cores for the active and the standby worker; and its shape lets a
plan hit the beat agent of the hot worker's supervisor (``beat_agent``). Nothing else
changes, so a cluster without ``hot`` draws and runs the plans it always did::

    with ChaosCluster(hosts, base, hot=True) as cluster:
        cluster.wait_pacemakers_warmed_up(timeout=120)   # the failover lane judges from now
        cluster.beat_agent("h2")                          # its pid, while it runs
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

import httpx

from stratus.chaos.faults import ClusterShape, Target
from stratus.local.cluster import pacemaker_options, zkfc_options
from stratus.local.processes import (
    NimbusProcess,
    PacemakerProcess,
    SupervisorProcess,
    ZkfcProcess,
    stop_all,
)
from stratus.supervisor.beat_agent import AgentRecord
from stratus.zk.auth import ServerAuth, ZkCredentials
from stratus.zk.server import ZooKeeperServer
from tests.harness.hosts_cluster import NIMBUS_PORT, SESSION_SECS, HostsCluster, options
from tests.harness.lifecycle import Started
from tests.harness.netns_hosts import NetnsHosts
from tests.harness.pipeline_cluster import cluster_options
from tests.harness.secure_cluster import ADMIN, PEER, SUBMIT, token_file
from tests.harness.worker_users import WalledHosts, share_with_group
from tests.harness.zk_acl import secret_file
from tests.harness.zkfixtures import wait_until

HOSTS = ("h1", "h2", "h3")
PACEMAKER_HOSTS = ("h1", "h2")  # without a hot pipeline; with one, every host (HOSTS)
PACEMAKER_PORT = 6699
READY_SECS = 90.0
ZK_READY_SECS = 60.0
HOT_SUPERVISOR_SETTINGS: dict[str, object] = {
    "supervisor.worker.warm": False,  # the cores go to the active and the standby worker
    "supervisor.worker.warm.memory.mb": 4096,  # room for the standby worker, whatever the host
}
PROBE_SECS = 2.0  # a pacemaker's readiness asked once
CHECK_EVERY_SECS = 2.0  # a wait for batches checks that they can still come this often
WARM_UP_SECS = 180.0  # a pacemaker's warm-up: its pulse TTL (60 s by default), with room


class Restartable(Protocol):
    """A daemon the injector signals and starts again."""

    @property
    def pid(self) -> int | None: ...

    def signal(self, signum: int) -> None: ...


class Daemon(Restartable, Protocol):
    """A stratus daemon of the cluster: also stopped, started and awaited."""

    def stop(self, timeout: float = ...) -> int | None: ...

    def start(self) -> None: ...

    def wait_ready(self, timeout: float = ...) -> None: ...


def _pairs(arguments: list[str]) -> dict[str, str]:
    """``["-c", "k=v", ...]`` as ``{k: v}``."""
    return dict(argument.partition("=")[::2] for argument in arguments[1::2])


class ChaosCluster(Started):
    """ZooKeeper, nimbuses (and zkfcs), supervisors and pacemakers on ``hosts``."""

    def __init__(
        self,
        hosts: NetnsHosts,
        workdir: Path,
        *,
        ha_mode: str = "supervised",
        walls: WalledHosts | None = None,
        hot: bool = False,
    ) -> None:
        self.hosts = hosts
        self.workdir = workdir
        self.ha_mode = ha_mode
        self.hot = hot
        self.pacemaker_hosts = HOSTS if hot else PACEMAKER_HOSTS
        zkfc = ha_mode == "zkfc"
        self.walls = walls
        self.shared = workdir / "shared"
        pacemaker_auth = {
            "pacemaker.auth.method": "digest",
            "pacemaker.auth.file": str(self._pacemaker_secrets()),
        }
        self.pacemakers = {
            name: PacemakerProcess(
                options(pacemaker_auth),
                port=PACEMAKER_PORT,
                log_dir=workdir,
                host=hosts[name].address,
                command_prefix=hosts[name].command,
            )
            for name in self.pacemaker_hosts
        }
        addresses = [pacemaker.address for pacemaker in self.pacemakers.values()]
        tokens = {
            "nimbus.auth.tokens.file": str(token_file(workdir)),
            "client.auth.token.file": str(secret_file(workdir / "peer.token", PEER)),
        }
        admin = {"client.auth.token.file": str(secret_file(workdir / "admin.token", ADMIN))}
        zookeeper_user = ZkCredentials("stratus", secrets.token_hex(16))
        zookeeper_auth = {  # the quorum admits this SASL user alone
            "zookeeper.auth.scheme": "sasl",
            "zookeeper.auth.sasl.mechanism": "DIGEST-MD5",
            "zookeeper.auth.file": str(
                secret_file(
                    workdir / "zk.secret", f"{zookeeper_user.user}:{zookeeper_user.password}"
                )
            ),
        }
        settings: dict[str, object] = {
            **tokens,
            **zookeeper_auth,
            **_pairs(cluster_options(self.shared / "checkpoints")),
            **_pairs(pacemaker_options(addresses)),
            **pacemaker_auth,
            "pipeline.min.replication.count": 2,
        }
        self.nodes = HostsCluster(
            hosts,
            workdir,
            settings=settings,
            nimbus_settings={
                "nimbus.ha.mode": ha_mode,
                "pacemaker.auth.principal": "nimbus",
                **admin,  # the leader's graceful fence of a silent supervisor needs admin
            },
            supervisor_settings=HOT_SUPERVISOR_SETTINGS if hot else {},
            host_settings={name: {"history.file": self.history_file(name)} for name in HOSTS},
            # the clients submit, kill and update as a submitter, whose pipelines they own
            client_settings={
                "client.auth.token.file": str(secret_file(workdir / "submit.token", SUBMIT))
            },
            zookeeper_auth=ServerAuth(
                required=True,
                users=(zookeeper_user,),
                superuser=ZkCredentials("super", secrets.token_hex(16)),
            ),
            worker_users=walls.users if walls else {},
            python=walls.python if walls else None,
        )
        self._children = {
            name: _SupervisedChild(nimbus) for name, nimbus in self.nodes.nimbuses.items()
        }
        self.zkfcs: dict[str, ZkfcProcess] = {}
        if zkfc:
            zkfc_settings = [
                *zkfc_options(self.nodes.zk_connect),
                *options({**tokens, **admin, **zookeeper_auth}),
            ]
            self.zkfcs = {
                name: ZkfcProcess(
                    zkfc_settings,
                    target=f"{hosts[name].address}:{NIMBUS_PORT}",
                    log_dir=workdir,
                    command_prefix=hosts[name].command,
                )
                for name in HOSTS
            }

    def _pacemaker_secrets(self) -> Path:
        """The pacemakers' digest credentials: the nimbuses', and each supervisor's (by its
        id, the host's name)."""
        path = self.workdir / "pacemaker.secrets"
        lines = [f"nimbus nimbus {secrets.token_hex(16)}"]
        lines += [f"{name} supervisor {secrets.token_hex(16)}" for name in HOSTS]
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o600)
        return path

    @property
    def shape(self) -> ClusterShape:
        """What a fault plan may hit in this cluster."""
        return ClusterShape(
            hosts=HOSTS,
            pacemakers=self.pacemaker_hosts,
            zkfc=self.ha_mode != "self",
            session_secs=SESSION_SECS,
            hot=self.hot,
        )

    def beat_agent(self, host: str) -> int | None:
        """The pid of the beat agent of ``host``'s supervisor while one runs (its supervisor
        holds a hot worker), else None."""
        record = AgentRecord.read(self.nodes.supervisors[host].local_dir)
        return record.pid if record is not None and record.alive() else None

    def pacemakers_warmed_up(self) -> bool:
        """Whether every pacemaker is past its warm-up (one pulse TTL after its start; its
        ``/readyz`` answers 200): until a majority is, the leader judges no silence from the
        beats, and a test of the failure detector would judge nothing."""
        for pacemaker in self.pacemakers.values():
            try:
                answer = httpx.get(
                    f"http://{pacemaker.address}/readyz", timeout=PROBE_SECS, trust_env=False
                )
            except httpx.HTTPError:
                return False
            if answer.status_code != 200:  # 503 while it warms up
                return False
        return True

    def wait_pacemakers_warmed_up(self, timeout: float) -> None:
        wait_until(self.pacemakers_warmed_up, timeout, "every pacemaker past its warm-up")

    def history_file(self, name: str) -> Path:
        """Where the processes of host ``name`` record their history."""
        return self.workdir / f"history-{name}.jsonl"

    def history_files(self) -> list[Path]:
        """Every history file written so far, the driver's included."""
        return sorted(self.workdir.glob("history-*.jsonl"))

    def committed_batches(self) -> int:
        """The batches committed so far (every pipeline's), as the histories say."""
        needle = b'"event":"batch_committed"'
        count = 0
        for path in self.history_files():
            with path.open("rb") as lines:
                count += sum(1 for line in lines if needle in line)
        return count

    def wait_for_batches(
        self,
        *,
        more_than: int,
        timeout: float,
        check: Callable[[], None] = lambda: None,
    ) -> None:
        """Wait until more than ``more_than`` batches were committed; ``check`` runs every
        ``CHECK_EVERY_SECS`` meanwhile and raises to end the wait at once (a pipeline that
        will never commit again: FAILED, say)."""
        checked = time.monotonic()

        def committed() -> bool:
            nonlocal checked
            if self.committed_batches() > more_than:
                return True
            if time.monotonic() - checked >= CHECK_EVERY_SECS:
                check()
                checked = time.monotonic()
            return False

        wait_until(
            committed, timeout, f"the streaming pipeline to commit a batch (more than {more_than})"
        )

    def start(self) -> None:
        # the checkpoint root is the supervisors' (they hand each pipeline's directory to its
        # worker's user); the rest of the shared directory is every worker user's
        (self.shared / "checkpoints").mkdir(parents=True, exist_ok=True)
        if self.walls is not None:
            share_with_group(self.shared, self.walls.group)
        for pacemaker in self.pacemakers.values():
            pacemaker.start()
        for pacemaker in self.pacemakers.values():
            pacemaker.wait_ready(READY_SECS)
        self.nodes.start()
        for zkfc in self.zkfcs.values():
            zkfc.start()
        for zkfc in self.zkfcs.values():
            zkfc.wait_ready(READY_SECS)
        for name in HOSTS:
            self.nodes.add_supervisor(name)

    def process(self, target: Target, host: str) -> Restartable:
        """The daemon of kind ``target`` on ``host``."""
        if target is Target.ZOOKEEPER:
            return _ZooKeeperMember(self.zookeepers[host])
        if target is Target.NIMBUS and self.ha_mode == "supervised":
            return self._children[host]
        return self._daemons(target)[host]

    def _daemons(self, target: Target) -> Mapping[str, Daemon]:
        controllers = self.nodes.nimbuses if self.ha_mode == "supervised" else self.zkfcs
        table: dict[Target, Mapping[str, Daemon]] = {
            Target.NIMBUS: self.nodes.nimbuses,
            Target.ZKFC: controllers,
            Target.SUPERVISOR: self.nodes.supervisors,
            Target.PACEMAKER: self.pacemakers,
        }
        return table[target]

    @property
    def zookeepers(self) -> dict[str, ZooKeeperServer]:
        return self.nodes.zookeepers

    def restart(self, target: Target, host: str) -> None:
        """Start the daemon again once it has exited (waiting for it), and wait until ready."""
        if target is Target.ZOOKEEPER:
            member = self.zookeepers[host]
            member.kill()  # reaps it; a member that exited by itself is gone already
            member.launch()
            member.wait_serving(ZK_READY_SECS)
            return
        if target is Target.NIMBUS and self.ha_mode == "supervised":
            self._children[host].wait_restarted(READY_SECS)  # its controller starts it again
            return
        daemon = self._daemons(target)[host]
        if isinstance(daemon, SupervisorProcess):
            # killed or stopped alone, as the fault says: its workers and its beat agent run on
            # for its next start to adopt (a stop with its workers would kill what is left)
            daemon.stop(workers=False)
        else:
            daemon.stop()  # SIGTERM (it may have been sent one already), SIGKILL after a while
        daemon.start()
        daemon.wait_ready(READY_SECS)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            for daemon in [*self.nodes.supervisors.values(), *self.zkfcs.values()]:
                daemon.signal(signal.SIGCONT)
            stop_all(list(self.zkfcs.values()))
        self.nodes.close()
        stop_all(list(self.pacemakers.values()))


class _SupervisedChild:
    """The nimbus that a supervised ``stratus nimbus`` (its failover controller) runs as its
    child: signalled by its own pid, and started again by its controller, not by the test."""

    def __init__(self, controller: NimbusProcess) -> None:
        self._controller = controller
        self._signalled: int | None = None

    @property
    def pid(self) -> int | None:
        parent = self._controller.pid
        if parent is None or not self._controller.is_running():
            return None
        children: list[int] = []
        for task in Path(f"/proc/{parent}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                children += [int(pid) for pid in task.read_text().split()]
        return children[0] if len(children) == 1 else None

    def signal(self, signum: int) -> None:
        pid = self.pid
        if pid is not None:
            self._signalled = pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def wait_restarted(self, timeout: float) -> None:
        """Wait until another child than the one signalled serves (its controller restarts a
        child that exited after a backoff); a controller that exited is started again."""
        if not self._controller.is_running():
            self._controller.stop()
            self._controller.start()
        else:
            wait_until(
                lambda: self.pid not in (None, self._signalled),
                timeout,
                f"the controller of nimbus {self._controller.address} to start its child again",
            )
        self._controller.wait_ready(timeout)


class _ZooKeeperMember:
    """A quorum member, signalled as the injector signals a daemon."""

    def __init__(self, server: ZooKeeperServer) -> None:
        self._server = server

    @property
    def pid(self) -> int | None:
        return self._server.pid

    def signal(self, signum: int) -> None:
        pid = self._server.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
