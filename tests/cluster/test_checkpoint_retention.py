"""Kept checkpoints expire after ``pipeline.checkpoint.retention.secs``, on a real ZooKeeper.

The leader's removal of killed pipelines (``RemoveKilled``) and the retention duty
(``ExpireKeptCheckpoints``) run against a real ZooKeeper and a real checkpoint root on disk,
with the wall clock and the monotonic clock in the test's hands. What is proved: a kill
without ``purge`` keeps the checkpoints until the retention is over and then the leader
records their purge, carried out as a kill --purge's (``CarryOutPurges``: here by the
leader, which can write this root), of that pipeline's directory alone; a pipeline
submitted again meanwhile keeps them for good; a retention of 0 keeps them forever;
checkpoints kept under another root are left alone; a purging kill leaves nothing to
expire; a submit of the name while the expiry's purge is pending is refused. One scenario
runs a real nimbus process with a retention of one second.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from stratus.api.errors import PurgePendingError
from stratus.client import NimbusClient
from stratus.codedist.distributor import CodeDistributor
from stratus.codedist.package_store import StoredPackage
from stratus.coordination.coordinator import Coordinator
from stratus.nimbus.duties.checkpoint_retention import SCAN_SECS, ExpireKeptCheckpoints
from stratus.nimbus.duties.killed import RemoveKilled
from stratus.nimbus.duties.purges import CarryOutPurges, PurgeOrders
from stratus.nimbus.records.kept_checkpoints import KeptCheckpoints
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.records.purge_plan import PurgeBy
from stratus.nimbus.records.replication_policy import ReplicationPolicy
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.zk.paths import ClusterPaths
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import wait_until

PATHS = ClusterPaths("/stratus")
ONE_COPY = ReplicationPolicy(required=1, wait_secs=60)
RETENTION = 3600.0


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class NoPurge:
    """The code distributor's side of a removal, which these tests do not look at."""

    def purge(self, digest: str) -> None:
        pass


class Leader:
    """A leader's pipeline operations, its removal duty and its retention duty."""

    def __init__(self, coordinator: Coordinator, root: Path, retention: float) -> None:
        client = coordinator.session.client
        for parent in PATHS.all_parents():
            client.ensure_path(parent)
        self.client = client
        self.root = root
        self.wall = Clock(1_000_000.0)
        self.clock = Clock(100.0)
        self.ops = PipelineOps(client, PATHS, wall=self.wall)
        self.term = coordinator.nominate("nimbus", "leader", timeout=10)
        board = HeartbeatBoard(ZooKeeperStateStore(client, PATHS.heartbeats))
        self.removal = RemoveKilled(
            dict,
            self.ops,
            cast(CodeDistributor, NoPurge()),
            board,
            checkpoint_root=str(root),
        )
        self.retention = ExpireKeptCheckpoints(
            self.ops,
            checkpoint_root=str(root),
            retention_secs=retention,
            wall=self.wall,
            clock=self.clock,
        )
        self.purges = CarryOutPurges(
            PurgeOrders(client, PATHS),
            checkpoint_root=str(root),
            by=PurgeBy.AUTO,
            here="nimbus test",
            live=dict,
            wall=self.wall,
        )

    def expire(self) -> None:
        """A round of the retention duty, then of the purges duty."""
        self.retention.run(self.term)
        self.purges.run(self.term)

    def submit(self, name: str) -> Path:
        """Submit ``name`` and give it checkpoints on disk; its directory."""
        self.ops.submit(
            self.term, name, {}, f"r-{name}-{self.wall.now}", StoredPackage("d" * 64, 10),
            replication=ONE_COPY,
        )  # fmt: skip
        offsets = self.root / name / "query" / "offsets"
        offsets.mkdir(parents=True, exist_ok=True)
        (offsets / "0").write_text("v1\n")
        return self.root / name

    def kill_and_remove(self, name: str, *, purge: bool = False) -> None:
        self.removal.note_killed(self.ops.kill(self.term, name, 0, purge=purge))
        self.removal.run(self.term)
        self.purges.run(self.term)
        assert not self.client.exists(PATHS.pipeline(name))

    def later(self, secs: float) -> None:
        """Both clocks move on; the retention duty's next scan is due."""
        self.wall.now += secs
        self.clock.now += max(secs, SCAN_SECS)

    def marker(self, name: str) -> bool:
        return self.client.exists(PATHS.kept_checkpoint(name)) is not None


@pytest.fixture
def coordinator(zk_hosts: str) -> Iterator[Coordinator]:
    coordinator = Coordinator.standalone(zk_hosts, session_timeout=4.0).start()
    try:
        yield coordinator
    finally:
        coordinator.close()


@pytest.fixture
def leader(coordinator: Coordinator, tmp_path: Path) -> Leader:
    return Leader(coordinator, tmp_path / "checkpoints", RETENTION)


def test_kept_checkpoints_are_deleted_by_the_leader_once_the_retention_is_over(
    leader: Leader,
) -> None:
    checkpoints = leader.submit("etl")
    neighbour = leader.submit("report")
    leader.kill_and_remove("etl")
    assert checkpoints.is_dir() and leader.marker("etl")  # kept by the kill

    leader.later(RETENTION - 1)
    leader.expire()
    assert checkpoints.is_dir()  # not yet

    leader.later(2)
    leader.expire()
    assert not checkpoints.exists()
    assert not leader.marker("etl")
    assert neighbour.is_dir()  # only the expired pipeline's own directory
    assert leader.root.is_dir()


def test_a_pipeline_submitted_again_keeps_its_checkpoints_past_the_retention(
    leader: Leader,
) -> None:
    checkpoints = leader.submit("etl")
    leader.kill_and_remove("etl")
    leader.later(RETENTION / 2)
    leader.submit("etl")  # resumes from the kept checkpoints
    assert not leader.marker("etl")

    leader.later(RETENTION * 2)
    leader.expire()
    assert (checkpoints / "query" / "offsets" / "0").is_file()

    leader.kill_and_remove("etl")  # killed again: the retention starts from this removal
    marker = leader.ops.kept_checkpoints()["etl"]
    assert marker.removed == leader.wall.now
    leader.later(RETENTION - 1)
    leader.expire()
    assert checkpoints.is_dir()


def test_a_retention_of_zero_keeps_checkpoints_forever(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    leader = Leader(coordinator, tmp_path / "checkpoints", 0.0)
    checkpoints = leader.submit("etl")
    leader.kill_and_remove("etl")
    leader.later(10 * 365 * 86400.0)
    leader.expire()
    assert checkpoints.is_dir()
    assert leader.marker("etl")  # a retention set later still finds when it was removed


def test_checkpoints_kept_under_another_root_are_left_alone(leader: Leader) -> None:
    checkpoints = leader.submit("etl")
    marker = KeptCheckpoints(root="/elsewhere", removed=leader.wall.now)
    leader.client.create(PATHS.kept_checkpoint("etl"), marker.model_dump_json().encode())
    leader.client.delete(PATHS.pipeline("etl"))  # as if removed under that other root

    leader.later(RETENTION * 2)
    leader.expire()
    assert checkpoints.is_dir()  # the same name under this root is not what was kept
    assert not leader.marker("etl")


def test_a_purging_kill_deletes_the_checkpoints_and_leaves_nothing_to_expire(
    leader: Leader,
) -> None:
    checkpoints = leader.submit("etl")
    leader.kill_and_remove("etl", purge=True)
    assert not checkpoints.exists()
    assert not leader.marker("etl")


def test_a_submit_of_the_name_is_refused_while_the_expirys_purge_is_pending(
    leader: Leader,
) -> None:
    checkpoints = leader.submit("etl")
    leader.kill_and_remove("etl")
    leader.later(RETENTION + 1)
    kept = leader.ops.kept_checkpoints()["etl"]
    assert leader.ops.expire_kept(leader.term, "etl", kept)  # recorded, not yet carried out
    assert not leader.marker("etl") and leader.client.exists(PATHS.purge("etl"))

    with pytest.raises(PurgePendingError, match=r"purge of its checkpoints .*etl.* is pending"):
        leader.submit("etl")
    assert checkpoints.is_dir() and not leader.client.exists(PATHS.pipeline("etl"))

    leader.purges.run(leader.term)
    assert not checkpoints.exists() and not leader.client.exists(PATHS.purge("etl"))
    leader.submit("etl")  # a new life, from nothing
    assert leader.client.exists(PATHS.pipeline("etl"))


def test_a_nimbus_given_a_retention_deletes_the_checkpoints_a_kill_kept(
    zk_hosts: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = tmp_path / "checkpoints"
    extra = [
        "-c", "pipeline.kill.wait.secs=0",
        "-c", f"pipeline.checkpoint.root={root}",
        "-c", "pipeline.checkpoint.retention.secs=1",
    ]  # fmt: skip
    with (
        nimbus_cluster(zk_hosts, tmp_path, request.node.name, 1, extra) as cluster,
        NimbusClient(cluster.seeds, retry_deadline=30) as client,
    ):
        client.submit("etl", valid_package("etl"), {})
        client.submit("report", valid_package("report"), {})
        for name in ("etl", "report"):
            (root / name / "offsets").mkdir(parents=True)
        client.kill("etl", wait_secs=0)  # not purged: kept, for the retention only
        wait_until(lambda: not (root / "etl").exists(), 30, "the kept checkpoints to expire")
        assert (root / "report" / "offsets").is_dir()  # a running pipeline's are not touched
