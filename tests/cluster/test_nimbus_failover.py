"""Nimbus failover with real processes killed by real signals: the scenarios of the issue.

Three ``stratus nimbus`` processes share one real ZooKeeper; a session lasts 2 s.
"""

from __future__ import annotations

import functools
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from kazoo.exceptions import NoNodeError

from stratus.api.records import (
    AssignmentHistory,
    PipelineRecord,
    PipelineStatus,
    SupervisorSummary,
)
from stratus.client import NimbusClient
from stratus.zk.paths import ClusterPaths
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.slow

FAILOVERS = 10

# Two copies of every acknowledged pipeline: with one, the leader killed right after a submit
# may hold the only copy, and no other nimbus may lead until it is back.
REPLICATED = (
    "-c",
    "pipeline.min.replication.count=2",
    "-c",
    "pipeline.max.replication.wait.time.sec=-1",
)


@pytest.fixture
def cluster(zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest):
    extra = getattr(request, "param", REPLICATED)
    with nimbus_cluster(zk_server.connect_string, tmp_path, request.node.name, extra=extra) as c:
        yield c


def client_for(cluster: NimbusCluster, deadline: float = 30.0) -> NimbusClient:
    return NimbusClient(cluster.seeds, retry_deadline=deadline, request_timeout=5.0)


def records_in_zookeeper(zk_connect: str, root: str) -> dict[str, tuple[PipelineRecord, int]]:
    """Every pipeline record with its znode version, read from ZooKeeper itself."""
    found = {}
    with kazoo_client(zk_connect) as zk:
        for name in zk.get_children(f"{root}/pipelines"):
            try:
                raw, stat = zk.get(f"{root}/pipelines/{name}")
            except NoNodeError:
                continue  # a killed pipeline removed by the leader since the listing
            found[name] = (PipelineRecord.model_validate_json(raw), stat.version)
    return found


def test_kill_9_of_the_leader_the_next_leader_only_call_succeeds_on_the_new_leader(
    cluster, zk_server
):
    with client_for(cluster) as client:
        client.wait_replicated(client.submit("steady", valid_package("steady")).name)
        old = cluster.wait_for_agreed_leader()
        cluster.by_address(old).kill()
        record = client.deactivate("steady")  # no user action: the client finds the new leader
    assert record.status is PipelineStatus.INACTIVE
    new = cluster.wait_for_agreed_leader(not_=old)
    assert record.epoch == cluster.leader_seen_by(cluster.by_address(new)).epoch
    for nimbus in cluster.nimbuses:
        if nimbus.is_running():
            summary = cluster.summary(nimbus)
            assert [f"{n.host}:{n.port}" for n in summary.nimbuses if n.is_leader] == [new]
            assert old not in [f"{n.host}:{n.port}" for n in summary.nimbuses]
    zk_record, _ = records_in_zookeeper(zk_server.connect_string, cluster.root)["steady"]
    assert zk_record.status is PipelineStatus.INACTIVE


class SubmitKillLoop:
    """A client that submits and kills pipelines in a loop, noting what was acknowledged."""

    def __init__(self, cluster: NimbusCluster) -> None:
        self.client = client_for(cluster, deadline=30.0)
        self.acked: dict[str, PipelineRecord] = {}  # submitted and acknowledged
        self.killed: set[str] = set()  # kill acknowledged
        self.failures: list[BaseException] = []
        self.stop = threading.Event()

    def progressed_past(self, acked: int) -> bool:
        return len(self.acked) > acked or bool(self.failures)

    def run(self) -> None:
        index = 0
        try:
            while not self.stop.is_set():
                name = f"p{index}"
                self.client.submit(name, valid_package(name))
                self.acked[name] = self.client.wait_replicated(name)
                if index % 2:
                    self.client.kill(name, wait_secs=0)
                    self.killed.add(name)
                index += 1
        except BaseException as exc:
            self.failures.append(exc)
        finally:
            self.client.close()


def test_submit_and_kill_in_a_loop_while_the_leader_is_killed_10_times(cluster, zk_server):
    loop = SubmitKillLoop(cluster)
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(loop.run)
        for round_ in range(FAILOVERS):
            acked_before = len(loop.acked)
            wait_until(
                functools.partial(loop.progressed_past, acked_before),
                30,
                f"round {round_}: a submit acknowledged",
            )
            old = cluster.wait_for_agreed_leader()
            victim = cluster.by_address(old)
            victim.kill()
            cluster.wait_for_agreed_leader(not_=old)
            victim.start()
            victim.wait_ready()
        loop.stop.set()
        running.result(timeout=60)
    assert not loop.failures, loop.failures
    assert len(loop.acked) > FAILOVERS
    stored = records_in_zookeeper(zk_server.connect_string, cluster.root)
    for name, record in loop.acked.items():
        if name in loop.killed:
            assert name not in stored or stored[name][0].status is PipelineStatus.KILLED
            continue
        assert name in stored, f"acknowledged pipeline {name} was lost"
        assert stored[name][0].request_id == record.request_id  # created once, by that submit
        assert stored[name][0].status is PipelineStatus.ACTIVE
    assert set(stored) <= set(loop.acked), "a pipeline nobody was told about exists"


def unread_connections(port: int) -> int:
    """Established connections to ``port`` with request bytes nobody has read yet."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        rx_queue = int(fields[4].split(":")[1], 16)
        if local_port == port and fields[3] == "01" and rx_queue > 0:
            count += 1
    return count


def frozen_request(url: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{url}{path}", timeout=60.0, **kwargs)


def history_of(url: str, name: str) -> AssignmentHistory:
    return AssignmentHistory.model_validate_json(
        httpx.get(f"{url}/api/v1/pipelines/{name}/history").content
    )


def test_a_zombie_leader_changes_nothing_and_registers_again(cluster, zk_server):
    paths = ClusterPaths(cluster.root)
    with client_for(cluster) as client, kazoo_client(zk_server.connect_string) as zk:
        # a supervisor that exists only as a registration: "target" is assigned to it
        zk.create(paths.supervisor("s-reg"), SupervisorSummary(id="s-reg", slots=1).encode(),
                  ephemeral=True)  # fmt: skip
        client.wait_replicated(client.submit("target", valid_package("target")).name)
        wait_until(lambda: zk.exists(paths.assignment("target")), 20, "target assigned")
        zombie = cluster.by_address(cluster.wait_for_agreed_leader())
        zombie.signal(signal.SIGSTOP)
        new = cluster.wait_for_agreed_leader(not_=zombie.address, skip=[zombie])
        client.deactivate("target")  # the new leader acts meanwhile
        wait_until(lambda: not zk.exists(paths.assignment("target")), 20, "target unassigned")
    new_epoch = cluster.leader_seen_by(cluster.by_address(new)).epoch
    history = history_of(cluster.by_address(new).url, "target")
    assert (history.changes[0].reason.value, history.changes[0].epoch) == ("deactivated", new_epoch)
    assert history.changes[-1].reason.value == "placed" and history.changes[-1].epoch < new_epoch
    snapshot = records_in_zookeeper(zk_server.connect_string, cluster.root)
    with ThreadPoolExecutor(2) as pool:
        # Requests that reach the zombie while it is frozen; it handles them when it wakes.
        killing = pool.submit(frozen_request, zombie.url, "/api/v1/pipelines/target/kill")
        activating = pool.submit(frozen_request, zombie.url, "/api/v1/pipelines/target/activate")
        wait_until(lambda: unread_connections(zombie.port) >= 2, 10, "both requests at the zombie")
        zombie.signal(signal.SIGCONT)
        answers = [killing.result(), activating.result()]
    for answer in answers:
        assert answer.status_code == 421, answer.text
        assert answer.json()["leader"] in (new, None)
    assert records_in_zookeeper(zk_server.connect_string, cluster.root) == snapshot
    assert history_of(cluster.by_address(new).url, "target") == history  # nothing recorded
    # Its session expired while it was frozen: it registers again, as a standby.
    wait_until(
        lambda: (
            sorted(f"{n.host}:{n.port}" for n in cluster.summary(cluster.by_address(new)).nimbuses)
            == sorted(cluster.seeds)
        ),
        20,
        "the zombie registered again",
    )
    assert cluster.wait_for_agreed_leader() == new


@pytest.mark.parametrize("cluster", [["-c", "zookeeper.session.timeout.secs=30"]], indirect=True)
def test_sigterm_hands_leadership_over_at_once_not_after_the_session_timeout(cluster):
    old = cluster.by_address(cluster.wait_for_agreed_leader())
    old.signal(signal.SIGTERM)
    # A crashed leader would block the others for the 30 s session; a clean stop does not.
    new = cluster.wait_for_agreed_leader(timeout=10, not_=old.address, skip=[old])
    assert new != old.address
    assert old.stop() == 0


def test_leader_only_calls_through_a_client_that_only_knows_a_standby(cluster):
    leader = cluster.wait_for_agreed_leader()
    standby = next(a for a in cluster.seeds if a != leader)
    with NimbusClient([standby], retry_deadline=10) as client:
        record = client.submit("via-standby", valid_package("via-standby"))
        assert record.status is PipelineStatus.PENDING  # until a second nimbus holds the code
        assert client.wait_replicated("via-standby").status is PipelineStatus.ACTIVE
        assert client.known_leader == leader
