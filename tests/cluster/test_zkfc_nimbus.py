"""Real ``stratus zkfc`` processes beside real zkfc-mode ``stratus nimbus`` processes.

Three nimbuses in ``nimbus.ha.mode: zkfc``, each with its own ``stratus zkfc``, on the shared
real ZooKeeper. The zkfcs elect one active; kill -9 of the active nimbus alone is seen by its
zkfc, which gives the lock up (its session lives on), and another nimbus becomes active after
its zkfc fenced the old one's breadcrumb; SIGSTOP of the active nimbus alone is caught by the
health check's timeout the same way, and the frozen nimbus, woken up, neither writes nor
claims to be active. A watch on the pipeline's record is the oracle: every version of it must
carry the epoch of the term in which it was written, in order.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.client import NimbusClient
from stratus.coordination.records import SlotRecord
from stratus.ha.protocol import HAServiceClient, HAState
from stratus.local.processes import NimbusProcess, ZkfcProcess
from stratus.zk.paths import NIMBUS_GROUP, ClusterPaths, GroupPaths
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import SESSION_SECS, NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.slow

WAIT_SECS = 30.0
RPC_TIMEOUT_SECS = 1.0
REPLICATED = (
    "-c", "pipeline.min.replication.count=2",
    "-c", "pipeline.max.replication.wait.time.sec=-1",
    "-c", "nimbus.code.sync.freq.secs=1",
)  # fmt: skip


def zkfc_options(zk_connect: str, root: str) -> list[str]:
    """Fast checks (the test's ZooKeeper ticks at 100 ms) and the default fencing."""
    conf = {
        "zookeeper.servers": zk_connect,
        "zookeeper.root": root,
        "zookeeper.session.timeout.secs": str(SESSION_SECS),
        "ha.health.check.interval.secs": "0.1",
        "ha.health.rpc.timeout.secs": str(RPC_TIMEOUT_SECS),
        "ha.health.max.backoff.secs": "0.5",
        "ha.zkfc.rejoin.delay.secs": "0.5",
        "ha.fencing.graceful.timeout.secs": "1",
        "ha.zkfc.port": "0",
    }
    return [arg for key, value in conf.items() for arg in ("-c", f"{key}={value}")]


@dataclass
class Writes:
    """Every version of the pipeline's record seen by a watch: (version, epoch, status)."""

    seen: list[tuple[int, int, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, data: bytes | None, stat: ZnodeStat | None) -> None:
        if data is None or stat is None:
            return
        record = PipelineRecord.model_validate_json(data)
        with self.lock:
            self.seen.append((stat.version, record.epoch, record.status.value))

    def epochs(self) -> list[int]:
        with self.lock:
            return [epoch for _, epoch, _ in self.seen]


class ZkfcNimbuses:
    """The nimbus cluster, a zkfc beside each nimbus, and a ZooKeeper reader."""

    def __init__(
        self,
        cluster: NimbusCluster,
        zk: KazooClient,
        log_dir: Path,
        zk_connect: str,
        extra: Sequence[str] = (),
    ):
        self.cluster = cluster
        self.zk = zk
        self.group = GroupPaths(cluster.root, NIMBUS_GROUP)
        self.paths = ClusterPaths(cluster.root)
        options = [*zkfc_options(zk_connect, cluster.root), *extra]
        self.zkfcs = {
            n.address: ZkfcProcess(options, target=n.address, log_dir=log_dir)
            for n in cluster.nimbuses
        }

    def start(self) -> None:
        for zkfc in self.zkfcs.values():
            zkfc.start()
        for zkfc in self.zkfcs.values():
            zkfc.wait_ready()

    def close(self) -> None:
        for zkfc in self.zkfcs.values():
            zkfc.kill()

    def leader(self) -> SlotRecord | None:
        """The group's leader record, None while nobody holds the lock."""
        try:
            data, _ = self.zk.get(self.group.slot(0))
        except NoNodeError:  # nobody holds the lock now
            return None
        return SlotRecord.decode(data)

    def current_epoch(self) -> int:
        return int(self.zk.get(self.group.epoch(0))[1].version)

    def breadcrumb(self) -> str:
        return bytes(self.zk.get(self.group.breadcrumb)[0]).decode()

    def record(self) -> PipelineRecord:
        data, _ = self.zk.get(self.paths.pipeline("etl"))
        return PipelineRecord.model_validate_json(data)

    def status(self, nimbus: NimbusProcess) -> HAState | None:
        with HAServiceClient(nimbus.address, timeout=RPC_TIMEOUT_SECS) as service:
            try:
                return service.status().state
            except Exception:  # frozen or dead
                return None

    def wait_new_active(self, not_: str | None, skip: list[NimbusProcess]) -> SlotRecord:
        """Wait until another nimbus leads, says it is active, and every live one agrees."""
        address = self.cluster.wait_for_agreed_leader(WAIT_SECS, not_=not_, skip=skip)
        wait_until(
            lambda: self.status(self.cluster.by_address(address)) is HAState.ACTIVE,
            WAIT_SECS,
            f"{address} to say it is active",
        )
        leader = self.leader()
        assert leader is not None and leader.member_id == address
        return leader

    def zkfc_log(self, nimbus: NimbusProcess) -> str:
        return self.zkfcs[nimbus.address].log_path.read_text(errors="replace")


@pytest.fixture
def nimbuses(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ZkfcNimbuses]:
    with (
        nimbus_cluster(
            zk_server.connect_string,
            tmp_path,
            request.node.name,
            size=3,
            extra=REPLICATED,
            ha_mode="zkfc",
        ) as cluster,
        kazoo_client(zk_server.connect_string) as zk,
    ):
        pair = ZkfcNimbuses(cluster, zk, tmp_path, zk_server.connect_string)
        try:
            pair.start()
            yield pair
        finally:
            pair.close()


def test_zkfcs_fail_a_killed_then_a_frozen_nimbus_over_and_only_one_ever_writes(
    nimbuses: ZkfcNimbuses,
) -> None:
    cluster = nimbuses.cluster
    first = nimbuses.wait_new_active(not_=None, skip=[])
    assert nimbuses.current_epoch() == first.epoch
    with NimbusClient(cluster.seeds, retry_deadline=WAIT_SECS, request_timeout=5.0) as client:
        record = client.wait_replicated(client.submit("etl", valid_package("etl")).name)
    assert (record.status, record.epoch) == (PipelineStatus.ACTIVE, first.epoch)
    assert record.replication >= 2
    writes = Writes()
    nimbuses.zk.DataWatch(nimbuses.paths.pipeline("etl"), writes.record)

    # kill -9 of the active nimbus alone: its zkfc, alive with its session, gives the lock up
    killed = cluster.by_address(first.member_id)
    killed.kill()
    second = nimbuses.wait_new_active(not_=killed.address, skip=[killed])
    assert second.epoch > first.epoch
    assert nimbuses.current_epoch() == second.epoch
    assert nimbuses.zkfcs[killed.address].is_running()  # no session of its expired
    assert "need_fence=True" in nimbuses.zkfc_log(killed)
    assert f"old_active={killed.address}" in nimbuses.zkfc_log(cluster.by_address(second.member_id))
    assert nimbuses.breadcrumb() == second.member_id
    with NimbusClient(cluster.seeds, retry_deadline=WAIT_SECS, request_timeout=5.0) as client:
        assert client.deactivate("etl").status is PipelineStatus.INACTIVE
    assert nimbuses.record().epoch == second.epoch

    # SIGSTOP of the active nimbus alone: caught by the health check's timeout, and fenced
    frozen = cluster.by_address(second.member_id)
    frozen.signal(signal.SIGSTOP)
    try:
        third = nimbuses.wait_new_active(not_=frozen.address, skip=[killed, frozen])
    finally:
        frozen.signal(signal.SIGCONT)
    assert third.epoch > second.epoch
    assert "health=SERVICE_NOT_RESPONDING need_fence=True" in nimbuses.zkfc_log(frozen)
    assert f"old_active={frozen.address}" in nimbuses.zkfc_log(cluster.by_address(third.member_id))
    assert nimbuses.breadcrumb() == third.member_id

    # woken up, the old active writes nothing: refused by the epoch, then it says standby
    woken = cluster.http.post(f"{frozen.url}/api/v1/pipelines/etl/activate")
    assert not woken.is_success, woken.text
    wait_until(
        lambda: nimbuses.status(frozen) is HAState.STANDBY,
        WAIT_SECS,
        "the woken old active to say it is standby",
    )
    assert nimbuses.record().status is PipelineStatus.INACTIVE
    with NimbusClient(cluster.seeds, retry_deadline=WAIT_SECS, request_timeout=5.0) as client:
        assert client.activate("etl").status is PipelineStatus.ACTIVE
    assert nimbuses.record().epoch == third.epoch
    assert nimbuses.status(frozen) is HAState.STANDBY

    # the oracle: each write carries the epoch of the term it was made in, in order
    wait_until(lambda: len(writes.seen) >= 3, WAIT_SECS, "the watch to see every write")
    epochs = writes.epochs()
    assert epochs == sorted(epochs), writes.seen
    assert set(epochs) <= {first.epoch, second.epoch, third.epoch}, writes.seen
    assert epochs[-1] == third.epoch
