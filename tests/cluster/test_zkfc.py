"""The failover controller's test plan (Hadoop's TestZKFailoverController), with real processes.

Each node is a real dummy HA service process (``dummy_ha_service``) beside a real
``stratus zkfc`` process, on a real ZooKeeper. The services append every transition to one
shared file and hold a shared lock while active, so a moment with two active services is
recorded as a ``conflict`` and fails the test (``no_two_actives``).
"""

from __future__ import annotations

import resource
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from stratus.zk.paths import GroupPaths
from tests.harness.tls_certs import TestCa
from tests.harness.zkfc_cluster import SESSION, WAIT, ZkfcCluster
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.slow

STOP_WAIT = 5.0  # generous: a zkfc with nothing slow to stop exits well within it


@pytest.fixture
def make_cluster(zk_hosts: str, tmp_path: Path) -> Iterator[type[ZkfcCluster]]:
    started: list[ZkfcCluster] = []

    def make(names: list[str] | None = None, **kwargs: object) -> ZkfcCluster:
        cluster = ZkfcCluster(zk_hosts, tmp_path, names or ["a", "b"], **kwargs)  # type: ignore[arg-type]
        started.append(cluster)
        return cluster

    yield make  # type: ignore[misc]
    for cluster in started:
        cluster.stop()
        assert cluster.conflicts() == [], "two services were active at once"


def a_active_b_standby(cluster: ZkfcCluster) -> None:
    """Start a's zkfc first so a wins, then b's: b must be told to be standby."""
    cluster.start_service("a")
    cluster.start_service("b")
    cluster.start_zkfc("a")
    cluster.wait_active("a")
    cluster.start_zkfc("b")
    wait_until(lambda: "join_election" in cluster.zkfc_log("b"), WAIT, "b joined")
    wait_until(lambda: "service_standby" in cluster.zkfc_log("b"), WAIT, "b made standby")


def test_automatic_failover_on_bad_health_back_and_forth(make_cluster) -> None:
    cluster = make_cluster()
    a_active_b_standby(cluster)
    assert f"zkfc: managing {cluster.nodes['a'].address} in group svc" in cluster.zkfc_log("a")

    cluster.control("a", healthy=False)
    cluster.wait_active("b")
    assert cluster.state("a") == "standby"  # fenced gracefully by b's zkfc

    cluster.control("a", healthy=True)
    cluster.control("b", healthy=False)
    cluster.wait_active("a")
    assert cluster.state("b") == "standby"

    epochs = cluster.active_epochs()
    assert epochs == sorted(epochs) and len(set(epochs)) == 3  # a term per activation


def test_failover_when_the_active_zkfc_dies(make_cluster) -> None:
    cluster = make_cluster()
    a_active_b_standby(cluster)

    cluster.kill_zkfc("a")  # its session expires after SESSION seconds
    cluster.wait_active("b", timeout=WAIT + SESSION)
    assert cluster.state("a") == "standby"  # the healthy old active went standby gracefully

    cluster.start_zkfc("a")  # a comes back: standby, b stays active
    wait_until(lambda: "service_standby" in cluster.zkfc_log("a"), WAIT, "a standby again")
    assert cluster.actives() == ["b"]

    cluster.kill_zkfc("b")  # and back
    cluster.wait_active("a", timeout=WAIT + SESSION)
    assert cluster.state("b") == "standby"


def test_a_frozen_active_is_failed_over_and_killed_by_the_process_fence(make_cluster) -> None:
    cluster = make_cluster()  # fencing: graceful, process
    a_active_b_standby(cluster)

    cluster.nodes["a"].service.send_signal(signal.SIGSTOP)  # answers nothing, holds its lock
    cluster.wait_active("b")
    assert cluster.nodes["a"].service.wait(WAIT) == -signal.SIGKILL  # graceful could not work
    assert "SERVICE_NOT_RESPONDING" in cluster.zkfc_log("a")


def test_no_failover_to_an_unhealthy_node(make_cluster) -> None:
    cluster = make_cluster()
    a_active_b_standby(cluster)

    cluster.control("b", healthy=False)
    wait_until(lambda: "quit_election" in cluster.zkfc_log("b"), WAIT, "b quit")
    cluster.control("a", healthy=False)
    wait_until(lambda: "quit_election" in cluster.zkfc_log("a"), WAIT, "a quit")
    # Nobody is in the election: b was never made active, a was never fenced.
    assert "fence_old_active" not in cluster.zkfc_log("b")
    assert [e for e in cluster.events() if e[1] == "b" and e[0] == "active"] == []

    cluster.control("b", healthy=True)  # b may take over now, fencing a first
    cluster.wait_active("b")
    assert "fence_old_active" in cluster.zkfc_log("b")


def test_becoming_active_fails_and_the_old_active_comes_back(make_cluster) -> None:
    cluster = make_cluster()
    a_active_b_standby(cluster)
    cluster.control("b", fail_active=True)

    cluster.control("a", healthy=False)
    wait_until(
        lambda: ("refused_active", "b") in [e[:2] for e in cluster.events()], WAIT, "b refused"
    )
    cluster.control("a", healthy=True)
    cluster.wait_active("a")  # b dropped the lock; a won it back and was made active again
    assert [e for e in cluster.events() if e[1] == "b" and e[0] == "active"] == []


def test_fencing_fails_nobody_is_active_then_fencing_works(make_cluster, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    fence = (
        f"shell(echo x >> {shared}/fence-attempts; test -e {shared}/fence-ok && "
        f"kill -9 $(cat {shared}/$STRATUS_FENCE_TARGET_PORT.pid) && "
        f"flock -w 10 {shared}/active.lock true)"
    )  # fenced once the killed service has let go of the shared resource, not before
    cluster = make_cluster(fencing=fence)
    a_active_b_standby(cluster)

    cluster.kill_zkfc("a")  # a's service stays active and healthy: b must fence it first
    attempts = shared / "fence-attempts"
    wait_until(
        lambda: attempts.exists() and len(attempts.read_text().split()) >= 3,
        WAIT + SESSION,
        "three failed fence attempts",
    )
    assert cluster.actives() == ["a"]  # b was not made active while a could not be fenced

    (shared / "fence-ok").touch()
    cluster.wait_active("b")
    assert cluster.nodes["a"].service.wait(WAIT) == -signal.SIGKILL


def test_a_service_reporting_a_wrong_state_twice_is_failed_over(make_cluster) -> None:
    cluster = make_cluster()
    a_active_b_standby(cluster)

    cluster.control("a", report="standby")  # a says standby though its zkfc made it active
    cluster.wait_active("b")
    assert "service_state_mismatch" in cluster.zkfc_log("a")

    cluster.control("a", report=None)  # a behaves again: it rejoins, as standby
    wait_until(lambda: cluster.zkfc_log("a").count("join_election") >= 2, WAIT, "a rejoined")
    assert cluster.actives() == ["b"]


def test_zookeeper_down_and_back_within_the_session_changes_nothing(
    zk_restartable, tmp_path: Path
) -> None:
    session = 15.0  # room for the ZooKeeper JVM to restart on a loaded 2-core machine
    cluster = ZkfcCluster(
        zk_restartable.connect_string,
        tmp_path,
        ["a", "b"],
        extra={"zookeeper.session.timeout.secs": str(session)},
    )
    try:
        a_active_b_standby(cluster)
        epochs = set(cluster.active_epochs())

        zk_restartable.stop()
        wait_until(lambda: "neutral_mode" in cluster.zkfc_log("a"), session, "a neutral")
        assert cluster.actives() == ["a"]  # no state change while ZooKeeper is away
        zk_restartable.start()

        # a's term resumes (the elector says active again), with the same epoch: same session
        wait_until(lambda: cluster.zkfc_log("a").count("event=active ") >= 2, session, "a resumed")
        assert cluster.actives() == ["a"]
        assert set(cluster.active_epochs()) == epochs
        assert "fence_old_active" not in cluster.zkfc_log("b")
        assert [e for e in cluster.events() if e[0] in ("standby", "conflict")] == []
    finally:
        cluster.stop()


def test_the_zkfc_presents_the_client_token_over_tls(make_cluster, tmp_path: Path) -> None:
    ca = TestCa(tmp_path)
    issued = ca.issue("service", ip="127.0.0.1")
    service_args = ["--token", "s3cret", "--cert", str(issued.cert), "--key", str(issued.key)]
    cluster = make_cluster(
        service_args=service_args,
        scheme="https",
        extra={"client.auth.token": "s3cret", "client.tls.ca": str(ca.cert)},
    )
    a_active_b_standby(cluster)
    cluster.control("a", healthy=False)
    cluster.wait_active("b")  # health checks, transitions and the graceful fence, all over TLS


def test_the_zkfc_raises_its_open_files_limit_to_the_hard_limit(make_cluster) -> None:
    """Started with a low soft limit, as many systems start a process, it runs with the hard one."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard open-files limit ({hard}) leaves nothing to raise")
    cluster = make_cluster(["a"])
    cluster.start_service("a")
    cluster.start_zkfc("a", open_files=256)
    cluster.wait_active("a")
    zkfc = cluster.nodes["a"].zkfc
    assert zkfc is not None
    soft, _ = resource.prlimit(zkfc.pid, resource.RLIMIT_NOFILE)
    assert soft == (hard if hard != resource.RLIM_INFINITY else 1024 * 1024)


def test_sigterm_makes_the_active_zkfc_leave_its_election_and_exit(make_cluster, zk_hosts) -> None:
    cluster = make_cluster(["a"])
    cluster.start_service("a")
    cluster.start_zkfc("a")
    cluster.wait_active("a")
    zkfc = cluster.nodes["a"].zkfc
    assert zkfc is not None

    zkfc.terminate()
    try:
        code = zkfc.wait(STOP_WAIT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the zkfc still ran {STOP_WAIT:g} s after SIGTERM:\n{cluster.zkfc_log('a')}")
    assert code == 0
    log = cluster.zkfc_log("a")
    assert "event=resigned" in log and "resign_pending" not in log  # it left, not timed out
    paths = GroupPaths("/stratus", "svc")
    with kazoo_client(zk_hosts) as client:
        assert client.get_children(paths.candidates) == []
        assert client.get_children(paths.slots) == []
        assert client.get_children(paths.zkfcs) == []


def test_the_oracle_catches_two_actives_when_fencing_is_skipped(zk_hosts, tmp_path) -> None:
    """``epoch`` trusts the service to fence its own writes; the dummy does not, so with it
    alone the old active is never stopped and the shared lock records the conflict."""
    cluster = ZkfcCluster(zk_hosts, tmp_path, ["a", "b"], fencing="epoch")
    try:
        a_active_b_standby(cluster)
        cluster.kill_zkfc("a")
        wait_until(lambda: cluster.conflicts() != [], WAIT + SESSION, "the conflict")
        assert sorted(cluster.actives()) == ["a", "b"]
    finally:
        cluster.stop()
