"""A whole stratus cluster for the end-to-end tests: nimbuses and supervisors as real processes
on the shared real ZooKeeper, pipelines on real Spark, short timeouts so that failures are
detected in seconds.

A supervisor may reach ZooKeeper through a ``TcpProxy`` of its own, so that a test can cut it
off. Every process is killed when the test ends.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

from kazoo.client import KazooClient

from stratus.api.records import PipelineRecord, PipelineStatus, PipelineWorkers, WorkerHeartbeat
from stratus.client import NimbusClient
from stratus.local.processes import SupervisorProcess
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.zk.paths import ClusterPaths
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.tcp_proxy import TcpProxy
from tests.harness.zkfixtures import wait_until

SPARK_START_SECS = 120.0  # a worker's Spark start on a loaded 2-core machine, with room


def cluster_options(checkpoints: Path) -> list[str]:
    """Timeouts for tests: a dead supervisor is moved in about 4 s, fencing at 2 s."""
    return [
        "-c", "nimbus.supervisor.timeout.secs=4",
        "-c", "nimbus.task.timeout.secs=60",
        "-c", "nimbus.monitor.freq.secs=0.5",
        "-c", "supervisor.fence.timeout.secs=2",
        "-c", "supervisor.worker.stop.secs=1.5",
        "-c", "supervisor.worker.timeout.secs=50",
        "-c", "supervisor.worker.restart.backoff.secs=0.2",
        "-c", "worker.heartbeat.frequency.secs=0.5",
        "-c", "pipeline.spark.master=local[1]",
        "-c", f"pipeline.checkpoint.root={checkpoints}",
    ]  # fmt: skip


class PipelineCluster:
    """Nimbuses, supervisors, a client; helpers that wait on what the workers report."""

    def __init__(self, nimbuses: NimbusCluster, zk_connect: str, log_dir: Path) -> None:
        self.nimbuses = nimbuses
        self._zk_connect = zk_connect
        self.log_dir = log_dir
        self.supervisors: dict[str, SupervisorProcess] = {}
        self.proxies: dict[str, TcpProxy] = {}
        self.client = NimbusClient(nimbuses.seeds, retry_deadline=60)
        self._zk = KazooClient(hosts=zk_connect)
        self._zk.start()
        heartbeats = ClusterPaths(nimbuses.root).heartbeats
        self.board = HeartbeatBoard(ZooKeeperStateStore(self._zk, heartbeats))

    def add_supervisor(
        self,
        sid: str,
        *,
        slots: int = 2,
        proxied: bool = False,
        command_prefix: Sequence[str] = (),
    ) -> None:
        options = list(self.nimbuses.options)
        if proxied:
            address, slash, chroot = self._zk_connect.split(",")[0].partition("/")
            host, port = address.rsplit(":", 1)
            proxy = self.proxies[sid] = TcpProxy(host, int(port)).__enter__()
            options += ["-c", f"zookeeper.servers=127.0.0.1:{proxy.port}{slash}{chroot}"]
        supervisor = SupervisorProcess(
            options, id=sid, slots=slots, log_dir=self.log_dir, command_prefix=command_prefix
        )
        supervisor.start()
        supervisor.wait_ready()
        self.supervisors[sid] = supervisor

    def workers(self, name: str) -> PipelineWorkers:
        return self.client.workers(name)

    def running_on(self, name: str) -> WorkerHeartbeat | None:
        """The heartbeat of the worker of the current assignment, once it runs."""
        workers = self.workers(name)
        beat = workers.on_assigned()
        if beat is None or workers.assignment is None:
            return None
        same_run = beat.generation == workers.assignment.generation
        return beat if same_run and beat.state.value == "RUNNING" and beat.app_id else None

    def beat_in_zookeeper(self, name: str, supervisor: str) -> WorkerHeartbeat | None:
        """A worker's heartbeat read from ZooKeeper itself: it needs no nimbus up."""
        return self.board.workers().get(name, {}).get(supervisor)

    def wait_running(
        self, name: str, *, not_on: str | None = None, timeout: float = SPARK_START_SECS
    ) -> WorkerHeartbeat:
        found: list[WorkerHeartbeat] = []

        def running() -> bool:
            beat = self.running_on(name)
            if beat is None or beat.supervisor == not_on:
                return False
            found[:] = [beat]
            return True

        wait_until(running, timeout, f"pipeline {name} to run (not on {not_on})")
        return found[0]

    def wait_status(
        self, name: str, status: PipelineStatus, timeout: float = 120
    ) -> PipelineRecord:
        wait_until(lambda: self.client.status(name).status is status, timeout, f"{name} {status}")
        return self.client.status(name)

    def close(self) -> None:
        for supervisor in self.supervisors.values():
            supervisor.signal(signal.SIGKILL)
            supervisor.kill()
        for proxy in self.proxies.values():
            proxy.close()
        self.client.close()
        self._zk.stop()
        self._zk.close()


@contextlib.contextmanager
def pipeline_cluster(
    zk_hosts: str,
    tmp_path: Path,
    test_name: str,
    *,
    nimbuses: int = 1,
    supervisors: Sequence[str] = ("s1", "s2"),
    proxied: Sequence[str] = (),
    extra: Sequence[str] = (),
    nimbus_prefix: Sequence[str] = (),
) -> Iterator[PipelineCluster]:
    """The cluster; ``extra`` options (``-c key=value`` pairs) for every daemon of it, and a
    ``nimbus_prefix`` that every nimbus is run through (``DaemonProcess``)."""
    options = [*cluster_options(tmp_path / "checkpoints"), *extra]
    with nimbus_cluster(
        zk_hosts, tmp_path, test_name, size=nimbuses, extra=options, command_prefix=nimbus_prefix
    ) as cluster:
        pipelines = PipelineCluster(cluster, zk_hosts, tmp_path)
        try:
            for sid in supervisors:
                pipelines.add_supervisor(sid, proxied=sid in proxied)
            yield pipelines
        finally:
            pipelines.close()
