"""A daemon's stop is bounded whatever ZooKeeper does: gone, or frozen and silent.

Real ``stratus nimbus`` and supervisor processes (the latter with the stand-in worker of
``test_supervisor``) on a ZooKeeper of the test's own, real signals. Each wait
is bounded generously (a stop used to take more than a minute without ZooKeeper): the
tests prove that the process exits cleanly, never how fast.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from stratus.api.records import WorkerState
from stratus.local.processes import NimbusProcess
from stratus.supervisor.daemon import STOP_WITH_WORKERS
from stratus.zk.ports import pick_free_port
from stratus.zk.server import ZooKeeperServer
from tests.cluster.test_adoption import supervisor_run
from tests.cluster.test_supervisor import Cluster
from tests.harness.nimbus_cluster import SESSION_SECS
from tests.harness.zkfixtures import (
    descendants,
    kazoo_client,
    left_behind,
    process_gone,
    wait_until,
)

pytestmark = pytest.mark.slow  # ZooKeeper servers of their own, stopped and frozen

STOP_BOUND_SECS = 20.0  # generous: what is proven is an exit, not its speed


def started_nimbus(
    zk: ZooKeeperServer, tmp_path: Path, session_secs: float = SESSION_SECS
) -> NimbusProcess:
    nimbus = NimbusProcess(
        [
            "-c", f"zookeeper.servers={zk.connect_string}",
            "-c", f"zookeeper.session.timeout.secs={session_secs}",
            "-c", "nimbus.ha.mode=self",
            "-c", "nimbus.ui.series.step.secs=0.5",  # a standby's sampler reads ZooKeeper
        ],
        port=pick_free_port(),
        log_dir=tmp_path,
    )  # fmt: skip
    nimbus.start()
    nimbus.wait_ready()
    return nimbus


def log_has(nimbus: NimbusProcess, needle: str) -> bool:
    return needle in nimbus.log_tail(10_000)


def retries_after(nimbus: NimbusProcess, needle: str) -> int:
    """kazoo's failed reconnections logged after ``needle``: as a standby again, its series
    sampler has read ZooKeeper (every 0.5 s) by the fifth, and waits for an answer."""
    _, found, after = nimbus.log_tail(10_000).partition(needle)
    return after.count("Connection dropped") if found else 0


def test_a_nimbus_whose_zookeeper_stopped_exits_on_ctrl_c(
    zk_restartable: ZooKeeperServer, tmp_path: Path
) -> None:
    """Its reads waited for ZooKeeper to come back, and its stop joined them: now a stop
    without ZooKeeper ends the session at once, which fails every such wait. SIGINT (a
    terminal's Ctrl-C) stops it as SIGTERM does."""
    nimbus = started_nimbus(zk_restartable, tmp_path)
    try:
        wait_until(lambda: log_has(nimbus, "to=leading"), 20, "the nimbus to lead")
        zk_restartable.stop()
        wait_until(lambda: retries_after(nimbus, "event=leadership_lost") >= 5, 20, "retries")
        nimbus.signal(signal.SIGINT)
        assert nimbus.wait(STOP_BOUND_SECS) == 0, nimbus.log_tail()
        assert "reason=not_connected" in nimbus.log_tail(10_000)
    finally:
        nimbus.kill()


@pytest.fixture
def zk_long_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """A server of the test's own that grants sessions of up to 40 s (ticks of 2 s): kazoo
    notices a frozen server only after two thirds of the session timeout."""
    server = ZooKeeperServer(
        tmp_path_factory.mktemp("zk-long"), tick_time_ms=2000, force_sync=False
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_nimbus_whose_zookeeper_froze_exits_on_sigterm(
    zk_long_sessions: ZooKeeperServer, tmp_path: Path
) -> None:
    """A frozen server holds the connection open and answers nothing, which kazoo notices
    only after 20 s of a 30 s session; the stop gives it zookeeper.stop.wait.secs (5 s),
    then ends the session and every wait on it."""
    zk = zk_long_sessions
    nimbus = started_nimbus(zk, tmp_path, session_secs=30)
    pid = zk.pid
    assert pid is not None
    try:
        wait_until(lambda: log_has(nimbus, "to=leading"), 20, "the nimbus to lead")
        os.kill(pid, signal.SIGSTOP)
        nimbus.signal(signal.SIGTERM)
        assert nimbus.wait(STOP_BOUND_SECS) == 0, nimbus.log_tail()
        assert "reason=time_up" in nimbus.log_tail(10_000)
    finally:
        os.kill(pid, signal.SIGCONT)
        nimbus.kill()


# ---------------------------------------------------------------------- supervisors


@pytest.fixture
def own_cluster(zk_long_sessions: ZooKeeperServer, tmp_path: Path) -> Iterator[Cluster]:
    with kazoo_client(zk_long_sessions.connect_string) as zk:
        yield Cluster(zk, zk_long_sessions.connect_string, tmp_path)


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    with kazoo_client(zk_hosts) as zk:
        yield Cluster(zk, zk_hosts, tmp_path)


def two_running_workers(cluster: Cluster) -> list[int]:
    """etl and etl2 assigned to s1 and running: their pids."""
    for name in ("etl", "etl2"):
        cluster.assign(cluster.code.upload(name), name)
    pids = [cluster.wait_for_worker(WorkerState.RUNNING, name).pid for name in ("etl", "etl2")]
    return [pid for pid in pids if pid is not None]


def test_a_supervisor_stopped_with_its_workers_while_zookeeper_is_frozen_leaves_none(
    own_cluster: Cluster, zk_long_sessions: ZooKeeperServer
) -> None:
    """Its last heartbeat, its run records and its unregistration each waited on ZooKeeper
    in turn; now the workers stop together, without ZooKeeper, and what follows gets
    zookeeper.stop.wait.secs in all: it exits by itself, its workers gone."""
    zk_pid = zk_long_sessions.pid
    assert zk_pid is not None
    with supervisor_run(own_cluster, **{"zookeeper.session.timeout.secs": 30.0}) as run:
        run.start()
        assert len(two_running_workers(own_cluster)) == 2
        assert run.group is not None
        started = descendants(run.group.pid)  # the workers and their monitors
        os.kill(zk_pid, signal.SIGSTOP)
        try:
            run.signal(STOP_WITH_WORKERS)
            run.signal(signal.SIGTERM)
            assert run.group.wait(STOP_BOUND_SECS) == 0, run.log.read_text()[-3000:]
        finally:
            os.kill(zk_pid, signal.SIGCONT)
        assert left_behind(started) == []


def test_ctrl_c_stops_a_supervisor_and_leaves_its_workers_running_as_sigterm_does(
    cluster: Cluster,
) -> None:
    """A terminal's Ctrl-C is SIGINT to its whole foreground process group: the supervisor
    leaves, and its workers, each in a session of its own with its monitor, never hear it."""
    with supervisor_run(cluster) as run:
        run.start()
        pids = two_running_workers(cluster)
        assert run.group is not None
        run.group.signal_group(signal.SIGINT)
        assert run.group.wait(STOP_BOUND_SECS) == 0, run.log.read_text()[-3000:]
        assert not any(process_gone(pid) for pid in pids)
        last = cluster.supervisor_beat()
        assert last is not None and last.stopping and last.running == ["etl", "etl2"]
