"""Code replication between nimbuses, and leadership only with all the code (Storm's design).

Real ``stratus nimbus`` processes on one real ZooKeeper, killed with real signals; their
disks are the directories under ``tmp_path``, wiped or corrupted by the tests as a failed
disk or a flipped bit would.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable

import blake3
import httpx
import pytest

from stratus.api.errors import UnknownPipelineError
from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.client import NimbusClient
from stratus.local.processes import NimbusProcess
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.slow

SHORT_SYNC = ("-c", "nimbus.code.sync.freq.secs=1")
LONG_SYNC = ("-c", "nimbus.code.sync.freq.secs=600")  # only the watch can replicate in time


def client_for(cluster: NimbusCluster) -> NimbusClient:
    return NimbusClient(cluster.seeds, retry_deadline=30.0, request_timeout=10.0)


def packages_on(nimbus: NimbusProcess) -> set[str]:
    """The digests of the packages on a nimbus's disk."""
    return {p.name.removesuffix(".pkg") for p in (nimbus.local_dir / "packages").glob("*.pkg")}


def has_code(nimbus: NimbusProcess, *digests: str) -> Callable[[], bool]:
    return lambda: set(digests) <= packages_on(nimbus)


def has_no_code(nimbus: NimbusProcess, digest: str) -> Callable[[], bool]:
    return lambda: digest not in packages_on(nimbus)


def synced_past(nimbus: NimbusProcess, rounds: float) -> Callable[[], bool]:
    """Whether the nimbus's code sync has run at least ``rounds`` rounds."""
    return lambda: sync_rounds(nimbus) >= rounds


def holders(zk_connect: str, root: str, name: str) -> set[str]:
    """The nimbuses registered in ZooKeeper as holding ``name``'s code."""
    with kazoo_client(zk_connect) as zk:
        path = f"{root}/code/{name}"
        return set(zk.get_children(path)) if zk.exists(path) else set()


def status_of(cluster: NimbusCluster, name: str) -> PipelineRecord:
    """``name``'s record from whichever nimbus the client asks, once that one's view shows
    the submit (a standby's watch may lag the leader that took it)."""
    records: list[PipelineRecord] = []

    def seen() -> bool:
        with client_for(cluster) as client:
            try:
                records.append(client.status(name))
            except UnknownPipelineError:
                return False
        return True

    wait_until(seen, 10, f"a nimbus's view to show {name}")
    return records[-1]


def sync_rounds(nimbus: NimbusProcess) -> float:
    text = httpx.get(f"{nimbus.url}/metrics", timeout=5.0).text
    rounds = "stratus_nimbus_code_sync_rounds_total "
    line = next(x for x in text.splitlines() if x.startswith(rounds))
    return float(line.split()[1])


def replication_conf(required: int, wait: int) -> dict[str, int]:
    return {
        "pipeline.min.replication.count": required,
        "pipeline.max.replication.wait.time.sec": wait,
    }


@pytest.fixture
def zk(zk_server: ZooKeeperServer) -> str:
    return zk_server.connect_string


def test_spec_scenario_leader_dies_with_its_disk_and_the_survivors_sync_from_each_other(
    zk, tmp_path, request
):
    """Storm's scenario: 4 pipelines, 3 nimbuses, replication 2; each survivor lacks 2 pipelines."""
    with nimbus_cluster(zk, tmp_path, request.node.name, extra=SHORT_SYNC) as cluster:
        leader = cluster.by_address(cluster.wait_for_agreed_leader())
        first, second = [n for n in cluster.nimbuses if n is not leader]
        names = ["p1", "p2", "p3", "p4"]
        with client_for(cluster) as client:
            digests = {
                name: client.wait_replicated(
                    client.submit(name, valid_package(name), replication_conf(2, -1)).name
                ).digest
                for name in names
            }
        for nimbus in cluster.nimbuses:
            wait_until(has_code(nimbus, *digests.values()), 20, "replicas")
        # The state of that scenario: first holds p1, p2; second holds p3, p4.
        for nimbus in (first, second):
            nimbus.stop()
        for name, nimbus in (("p3", first), ("p4", first), ("p1", second), ("p2", second)):
            (nimbus.local_dir / "packages" / f"{digests[name]}.pkg").unlink()
        leader.kill()
        shutil.rmtree(leader.local_dir)  # the disk is gone for good
        first.start()
        second.start()
        first.wait_ready()
        second.wait_ready()

        new = cluster.wait_for_agreed_leader(timeout=60, not_=leader.address, skip=[leader])
        assert new in (first.address, second.address)
        for nimbus in (first, second):
            wait_until(has_code(nimbus, *digests.values()), 20, "all code")
        with client_for(cluster) as client:
            records = {r.name: r for r in client.list_pipelines()}
    assert sorted(records) == names  # nothing resubmitted, nothing lost
    assert all(r.status is PipelineStatus.ACTIVE for r in records.values())
    assert {name: r.digest for name, r in records.items()} == digests
    for nimbus in (first, second):
        for digest in digests.values():
            data = (nimbus.local_dir / "packages" / f"{digest}.pkg").read_bytes()
            assert hashlib.sha256(data).hexdigest() == digest


def test_min_replication_3_of_3_waits_for_the_stopped_standby_then_activates(zk, tmp_path, request):
    with nimbus_cluster(zk, tmp_path, request.node.name) as cluster:
        leader = cluster.by_address(cluster.wait_for_agreed_leader())
        down, up = [n for n in cluster.nimbuses if n is not leader]
        down.stop()
        with client_for(cluster) as client:
            record = client.submit("triple", valid_package("triple"), replication_conf(3, -1))
            assert record.status is PipelineStatus.PENDING
            wait_until(lambda: status_of(cluster, "triple").replication == 2, 20, "2 copies")
            assert status_of(cluster, "triple").status is PipelineStatus.PENDING
            assert record.digest in packages_on(up)

            down.start()
            down.wait_ready()
            done = client.wait_replicated("triple")
    assert done.status is PipelineStatus.ACTIVE
    assert (done.replication, done.replication_required, done.reason) == (3, 3, None)
    assert record.digest in packages_on(down)


def test_a_wait_limit_activates_the_pipeline_at_the_limit_and_says_so(zk, tmp_path, request):
    with nimbus_cluster(zk, tmp_path, request.node.name) as cluster:
        leader = cluster.by_address(cluster.wait_for_agreed_leader())
        for nimbus in cluster.nimbuses:
            if nimbus is not leader:
                nimbus.stop()
        with client_for(cluster) as client:
            record = client.submit("limited", valid_package("limited"), replication_conf(3, 2))
            assert record.status is PipelineStatus.PENDING
            done = client.wait_replicated("limited")
    assert done.status is PipelineStatus.ACTIVE
    assert done.replication == 1
    assert done.updated - record.submitted >= 2
    assert done.reason is not None
    assert "wait limit" in done.reason
    assert "1 of the 3" in done.reason


def test_the_watch_replicates_at_once_without_the_background_sync(zk, tmp_path, request):
    with (
        nimbus_cluster(zk, tmp_path, request.node.name, extra=LONG_SYNC) as cluster,
        client_for(cluster) as client,
    ):
        record = client.submit("watched", valid_package("watched"), replication_conf(3, -1))
        done = client.wait_replicated("watched")
    assert done.status is PipelineStatus.ACTIVE
    assert done.replication == 3
    assert all(record.digest in packages_on(n) for n in cluster.nimbuses)


def fetched_from(nimbus: NimbusProcess, name: str) -> set[str]:
    """The addresses a nimbus's log says it fetched ``name``'s code from."""
    marker = f"event=code_fetched pipeline={name} "
    lines = [line for line in nimbus.log_tail(2000).splitlines() if marker in line]
    return {part.removeprefix("nodes=") for line in lines for part in line.split()[1:]
            if part.startswith("nodes=")}  # fmt: skip


def checked_by(nimbus: NimbusProcess, name: str) -> set[str]:
    """The checks (``blake3``, ``sha256``) a nimbus's log says its copies of ``name`` passed."""
    marker = f"event=code_fetched pipeline={name} "
    lines = [line for line in nimbus.log_tail(2000).splitlines() if marker in line]
    return {part.removeprefix("check=") for line in lines for part in line.split()[1:]
            if part.startswith("check=")}  # fmt: skip


@pytest.mark.parametrize("package_server", [True, False], ids=["package-server", "api"])
def test_standbys_fetch_from_the_package_servers_the_holders_registered(
    zk, tmp_path, request, package_server
):
    extra = LONG_SYNC if package_server else (*LONG_SYNC, "-c", "nimbus.code.port=-1")
    with (
        nimbus_cluster(zk, tmp_path, request.node.name, extra=extra) as cluster,
        client_for(cluster) as client,
    ):
        package = valid_package("served", payload_bytes=3_000_000)
        client.submit("served", package, replication_conf(3, -1))
        done = client.wait_replicated("served")
        with kazoo_client(zk) as zk_client:
            path = f"{cluster.root}/code/served"
            registered = {
                name: json.loads(zk_client.get(f"{path}/{name}")[0])
                for name in zk_client.get_children(path)
            }
        sources = [fetched_from(n, "served") for n in cluster.nimbuses]
        checks = [checked_by(n, "served") for n in cluster.nimbuses]
    assert done.replication == 3
    assert done.blake3 == blake3.blake3(package).hexdigest()  # recorded by the leader at submit
    assert sorted(checks, key=len) == [set(), {"blake3"}, {"blake3"}]  # each standby's copy
    served_from = {data.get("served_from") for data in registered.values()}
    fetched = set().union(*sources)
    assert sum(1 for s in sources if s) == 2  # the two standbys fetched, the leader did not
    if package_server:
        assert None not in served_from and not served_from & set(registered)
        assert fetched <= served_from
    else:
        assert served_from == {None}
        assert fetched <= set(registered)


def test_a_corrupted_replica_is_detected_by_its_digest_and_replaced(zk, tmp_path, request):
    with nimbus_cluster(zk, tmp_path, request.node.name, extra=SHORT_SYNC) as cluster:
        leader = cluster.by_address(cluster.wait_for_agreed_leader())
        standby = next(n for n in cluster.nimbuses if n is not leader)
        with client_for(cluster) as client:
            record = client.submit("fragile", valid_package("fragile", payload_bytes=100_000))
        wait_until(lambda: record.digest in packages_on(standby), 20, "the standby's replica")
        replica = standby.local_dir / "packages" / f"{record.digest}.pkg"
        good = replica.read_bytes()
        corrupted = bytearray(good)
        corrupted[len(corrupted) // 2] ^= 0xFF
        replica.write_bytes(bytes(corrupted))

        def replaced() -> bool:
            return replica.exists() and replica.read_bytes() == good

        wait_until(replaced, 20, "the corrupted replica replaced by a good copy")
        wait_until(
            lambda: standby.address in holders(zk, cluster.root, "fragile"), 10, "registered"
        )
    assert f"event=package_corrupt digest={record.digest}" in standby.log_tail(400)


def test_killed_code_is_removed_from_every_nimbus_and_never_fetched_again(zk, tmp_path, request):
    with nimbus_cluster(zk, tmp_path, request.node.name, extra=SHORT_SYNC) as cluster:
        with client_for(cluster) as client:
            record = client.wait_replicated(
                client.submit("doomed", valid_package("doomed"), replication_conf(3, -1)).name
            )
            client.kill("doomed", wait_secs=60)  # the record stays KILLED for a minute
        for nimbus in cluster.nimbuses:
            wait_until(has_no_code(nimbus, record.digest), 20, "code removed")
        wait_until(lambda: not holders(zk, cluster.root, "doomed"), 10, "registrations gone")
        rounds = {n.address: sync_rounds(n) for n in cluster.nimbuses}
        for nimbus in cluster.nimbuses:  # two more background rounds on every nimbus
            wait_until(synced_past(nimbus, rounds[nimbus.address] + 2), 20, "syncs")
        assert status_of(cluster, "doomed").status is PipelineStatus.KILLED
    assert all(record.digest not in packages_on(n) for n in cluster.nimbuses)
    assert holders(zk, cluster.root, "doomed") == set()


def test_code_lost_on_every_nimbus_fails_that_pipeline_and_a_nimbus_leads(zk, tmp_path, request):
    """STORM-3664: without this, no nimbus would ever lead again."""
    extra = (*SHORT_SYNC, "-c", "nimbus.code.lost.fail.secs=3")
    with nimbus_cluster(zk, tmp_path, request.node.name, extra=extra) as cluster:
        with client_for(cluster) as client:
            lost = client.submit("lost", valid_package("lost"))
            kept = client.submit("kept", valid_package("kept"))
        # every copy made before any is lost: the first one killed may hold the only one yet
        for nimbus in cluster.nimbuses:
            wait_until(has_code(nimbus, lost.digest), 20, "replicas")
        for nimbus in cluster.nimbuses:
            nimbus.kill()
            (nimbus.local_dir / "packages" / f"{lost.digest}.pkg").unlink()
        for nimbus in cluster.nimbuses:
            nimbus.start()
        for nimbus in cluster.nimbuses:
            nimbus.wait_ready()
        cluster.wait_for_agreed_leader(timeout=60)
        wait_until(lambda: status_of(cluster, "lost").status is PipelineStatus.FAILED, 30, "FAILED")
        failed = status_of(cluster, "lost")
        still = status_of(cluster, "kept")
    assert failed.reason is not None
    assert "no live nimbus" in failed.reason
    assert still.status is PipelineStatus.ACTIVE
    assert still.digest == kept.digest


def test_no_nimbus_leads_without_the_code_until_a_holder_returns(zk, tmp_path, request):
    """The gate: nimbuses whose disks lost a package do not lead while only a dead one has it."""
    with nimbus_cluster(zk, tmp_path, request.node.name, extra=SHORT_SYNC) as cluster:
        holder = cluster.by_address(cluster.wait_for_agreed_leader())
        with client_for(cluster) as client:
            record = client.wait_replicated(
                client.submit("needed", valid_package("needed"), replication_conf(3, -1)).name
            )
        others = [n for n in cluster.nimbuses if n is not holder]
        for nimbus in others:
            nimbus.stop()
            (nimbus.local_dir / "packages" / f"{record.digest}.pkg").unlink()
        holder.kill()
        for nimbus in others:
            nimbus.start()
            nimbus.wait_ready()
        rounds = {n.address: sync_rounds(n) for n in others}
        for nimbus in others:  # several sync rounds, and still nobody may lead
            wait_until(synced_past(nimbus, rounds[nimbus.address] + 3), 20, "syncs")
        assert {getattr(cluster.leader_seen_by(n), "address", "?") for n in others} == {None}

        holder.start()
        holder.wait_ready()
        new = cluster.by_address(cluster.wait_for_agreed_leader(timeout=30))
        assert record.digest in packages_on(new)
        for nimbus in others:
            wait_until(has_code(nimbus, record.digest), 20, "fetched again")


def test_submit_reports_the_replication_reached(zk, tmp_path, request):
    with (
        nimbus_cluster(zk, tmp_path, request.node.name, size=2) as cluster,
        client_for(cluster) as client,
    ):
        plain = client.submit("plain", valid_package("plain"))
        pair = client.wait_replicated(
            client.submit("pair", valid_package("pair"), replication_conf(2, -1)).name
        )
    assert (plain.status, plain.replication, plain.replication_required) == (
        PipelineStatus.ACTIVE,
        1,
        1,
    )
    assert (pair.status, pair.replication, pair.replication_required) == (
        PipelineStatus.ACTIVE,
        2,
        2,
    )


def test_shared_storage_submit_failover_kill_and_lost_code(zk, tmp_path, request):
    """The same contract on one fsspec store: no copies between nimbuses, no /code znodes."""
    shared = tmp_path / "shared"
    logs = tmp_path / "logs"
    logs.mkdir()
    extra = (
        *SHORT_SYNC,
        "-c", "nimbus.code.distributor=shared",
        "-c", f"nimbus.code.shared.url=file://{shared}",
        "-c", "nimbus.code.lost.fail.secs=2",
    )  # fmt: skip
    with nimbus_cluster(zk, logs, request.node.name, extra=extra) as cluster:
        with client_for(cluster) as client:
            record = client.wait_replicated(
                client.submit("shared", valid_package("shared"), replication_conf(3, -1)).name
            )
            doomed = client.submit("doomed", valid_package("doomed"))
        stored = shared / "packages" / f"{record.digest}.pkg"
        assert hashlib.sha256(stored.read_bytes()).hexdigest() == record.digest
        assert (record.status, record.replication) == (PipelineStatus.ACTIVE, 3)
        assert holders(zk, cluster.root, "shared") == set()
        assert all(packages_on(n) == set() for n in cluster.nimbuses)

        old = cluster.wait_for_agreed_leader()
        cluster.by_address(old).kill()
        cluster.wait_for_agreed_leader(not_=old, skip=[cluster.by_address(old)])
        with client_for(cluster) as client:
            assert client.status("shared").status is PipelineStatus.ACTIVE
            client.kill("doomed", wait_secs=0)
            wait_until(
                lambda: not (shared / "packages" / f"{doomed.digest}.pkg").exists(),
                20,
                "the killed pipeline's object purged",
            )
            stored.unlink()  # the store lost the object: the pipeline cannot run anywhere
            wait_until(
                lambda: client.status("shared").status is PipelineStatus.FAILED, 30, "FAILED"
            )
            assert "no live nimbus" in (client.status("shared").reason or "")
