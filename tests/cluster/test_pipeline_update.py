"""Updates that keep a pipeline's state, at the API and record level: real nimbus processes on
a real ZooKeeper (the Spark end-to-end test of an update is in test_pipelines_e2e.py).

Each test is one scenario: an update waits for its code's replication, then switches the
record to the new code in one fenced write; an invalid package changes nothing; a retried
update or rebalance (same request id) changes nothing twice; one update at a time; a kill
keeps the pipeline's checkpoints and a kill with purge deletes them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from stratus.api.errors import UpdateInProgressError
from stratus.api.locations import CHECKPOINT_ROOT_KEY
from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.api.redaction import REDACTED
from stratus.cli.main import main
from stratus.client import NimbusClient
from stratus.codedist.errors import InvalidPackageError
from stratus.local.processes import NimbusProcess
from stratus.nimbus.records.staged_updates import updated_conf
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="module")
def cluster(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory, checkpoints: Path
) -> Iterator[NimbusCluster]:
    extra = [
        "-c", "nimbus.code.sync.freq.secs=1",
        "-c", "pipeline.kill.wait.secs=0",
        "-c", f"pipeline.checkpoint.root={checkpoints}",
        "-c", "pipeline.checkpoint.purge.by=nimbus",  # no supervisor: the nimbuses can write
    ]  # fmt: skip
    logs = tmp_path_factory.mktemp("pipeline-update")
    with nimbus_cluster(zk_server.connect_string, logs, "pipeline-update", extra=extra) as running:
        running.wait_for_agreed_leader()
        yield running


@pytest.fixture
def client(cluster: NimbusCluster) -> Iterator[NimbusClient]:
    with NimbusClient(cluster.seeds, retry_deadline=30.0, request_timeout=10.0) as nimbus:
        yield nimbus


def replication_conf(required: int) -> dict[str, int]:
    return {
        "pipeline.min.replication.count": required,
        "pipeline.max.replication.wait.time.sec": -1,
    }


def version(note: str) -> bytes:
    """A valid package whose bytes (and so digest) differ with ``note``."""
    return valid_package(extra={"version.txt": note})


def packages_on(nimbus: NimbusProcess) -> set[str]:
    return {p.name.removesuffix(".pkg") for p in (nimbus.local_dir / "packages").glob("*.pkg")}


def registrations(zk: Any, cluster: NimbusCluster, key: str) -> dict[str, str]:
    """The nimbuses registered as holding code under ``key``, and the digest each names."""
    path = f"{cluster.root}/code/{key}"
    if not zk.exists(path):
        return {}
    return {
        holder: json.loads(zk.get(f"{path}/{holder}")[0])["digest"]
        for holder in zk.get_children(path)
    }


def leader_url(cluster: NimbusCluster) -> str:
    return cluster.by_address(cluster.wait_for_agreed_leader()).url


def submitted(client: NimbusClient, name: str, package: bytes, **conf: Any) -> PipelineRecord:
    return client.wait_replicated(client.submit(name, package, conf).name)


def test_an_update_waits_for_its_code_on_every_nimbus_then_switches_the_record(
    cluster, client, zk_server
):
    old = submitted(client, "upd", version("1"), **replication_conf(3))
    leader = cluster.by_address(cluster.wait_for_agreed_leader())
    down = next(n for n in cluster.nimbuses if n is not leader)
    down.stop()
    try:
        staged = client.update("upd", version("2"), replication_conf(3), request_id="upd-2")
        assert staged.update is not None
        assert (staged.version, staged.digest) == (1, old.digest)  # still the old code
        wait_until(
            lambda: (u := client.status("upd").update) is not None and u.replication == 2,
            20,
            "the update's code on the two running nimbuses",
        )
        assert client.status("upd").digest == old.digest  # short of 3: not applied
    finally:
        down.start()
        down.wait_ready()
    done = client.wait_updated(staged)

    new_digest = staged.update.digest
    assert (done.version, done.digest, done.update) == (2, new_digest, None)
    assert done.generation == old.generation + 1  # what restarts the worker
    assert "upd-2" in done.requests
    assert (done.status, done.replication, done.submitted) == (
        PipelineStatus.ACTIVE,
        3,
        old.submitted,
    )
    every = {n.address for n in cluster.nimbuses}
    with kazoo_client(zk_server.connect_string) as zk:
        wait_until(
            lambda: registrations(zk, cluster, "upd") == dict.fromkeys(every, new_digest),
            20,
            "every nimbus to hold the new code under the pipeline's name",
        )
        wait_until(lambda: not registrations(zk, cluster, "upd.update"), 20, "the staged key to go")

    def every_disk() -> list[set[str]]:
        return [packages_on(n) for n in cluster.nimbuses]

    with kazoo_client(zk_server.connect_string) as zk:  # the old version is kept to roll back to
        wait_until(
            lambda: registrations(zk, cluster, "upd.v1") == dict.fromkeys(every, old.digest),
            20,
            "every nimbus to keep the old code under its kept key",
        )
    assert [kept.version for kept in done.versions] == [1, 2]
    assert all({old.digest, new_digest} <= held for held in every_disk())


def test_an_invalid_package_is_refused_and_the_pipeline_keeps_its_code(cluster, client):
    before = submitted(client, "keep", version("k1"))
    not_a_zip = httpx.post(
        f"{leader_url(cluster)}/api/v1/pipelines/keep/update",
        data={"request_id": "bad-1"},
        files={"package": b"not a zip at all"},
    )
    assert (not_a_zip.status_code, not_a_zip.json()["error"]) == (422, "invalid_package")
    with pytest.raises(InvalidPackageError):  # the client checks as the nimbus does
        client.update("keep", b"PK\x05\x06" + bytes(18))
    unknown = httpx.post(
        f"{leader_url(cluster)}/api/v1/pipelines/nosuch/update",
        files={"package": version("x")},
    )
    assert (unknown.status_code, unknown.json()["error"]) == (404, "unknown_pipeline")

    after = client.status("keep")
    assert (after.digest, after.version, after.update, after.updated) == (
        before.digest,
        1,
        None,
        before.updated,
    )


def test_a_retried_update_with_the_same_request_id_changes_nothing_twice(cluster, client):
    submitted(client, "retry", version("r1"))
    first = client.update("retry", version("r2"), request_id="retry-2")
    assert (first.version, first.update) == (2, None)  # one copy is enough: applied at once

    again = client.update("retry", version("r2"), request_id="retry-2")
    other_bytes = client.update("retry", version("r3"), request_id="retry-2")

    assert again.version == other_bytes.version == 2
    assert again.digest == other_bytes.digest == first.digest
    assert client.status("retry").updated == first.updated  # no write at all
    third = client.update("retry", version("r3"), request_id="retry-3")
    assert third.version == 3


def test_an_update_keeps_the_conf_the_user_set_and_takes_the_new_manifests_defaults(
    cluster, client
):
    first = {"spark.m": 1, "spark.b": 1, "spark.dropped": 1, "spark.dropped.set": 1}
    package = valid_package(extra={"version.txt": "f1"}, conf=first)
    submitted(client, "conf", package, **{"spark.a": 1, "spark.b": 0, "spark.dropped.set": 0})
    client.rebalance("conf", {"spark.c": 1})
    second = {"spark.m": 2, "spark.b": 2, "spark.d": 2, "spark.n": 2}
    package = valid_package(extra={"version.txt": "f2"}, conf=second)

    done = client.wait_updated(client.update("conf", package, {"spark.d": 3}))

    assert done.version == 2
    assert {k: v for k, v in done.conf.items() if k.startswith("spark.")} == {
        "spark.a": 1,  # the submit's, kept
        "spark.b": 0,  # the submit's, kept over the new manifest's default
        "spark.c": 1,  # the rebalance's, kept
        "spark.d": 3,  # the update's own, over the manifest's
        "spark.m": 2,  # never set by the user: the new manifest's
        "spark.n": 2,  # new in the manifest
        "spark.dropped.set": 0,  # dropped from the manifest, but the user set it
    }  # and spark.dropped, only ever the old manifest's, is gone
    third = valid_package(extra={"version.txt": "f3"}, conf={"spark.m": 3, "spark.d": 4})

    again = client.wait_updated(client.update("conf", third))  # no conf: all kept

    assert {k: v for k, v in again.conf.items() if k.startswith("spark.")} == {
        "spark.a": 1,
        "spark.b": 0,
        "spark.c": 1,
        "spark.d": 3,  # the first update's, kept
        "spark.m": 3,
        "spark.dropped.set": 0,
    }


def test_an_updated_record_older_than_user_keys_counts_its_whole_conf_as_the_users():
    conf, user_keys = updated_conf(
        {"spark.a": 1, "spark.b": 1, CHECKPOINT_ROOT_KEY: "/old"},
        None,  # a record written before the user's keys were remembered
        {"spark.b": 2, "spark.n": 2},
        {"spark.u": 3},
    )

    assert conf == {"spark.a": 1, "spark.b": 1, "spark.n": 2, "spark.u": 3}
    assert user_keys == ["spark.a", "spark.b", "spark.u"]


def test_an_update_sent_a_redacted_secret_keeps_the_pipelines_value():
    key = "spark.hadoop.fs.s3a.secret.key"
    conf, user_keys = updated_conf({key: "s3cr3t-value"}, [key], {}, {key: REDACTED})

    assert (conf, user_keys) == ({key: "s3cr3t-value"}, [key])


def test_one_update_at_a_time(cluster, client):
    submitted(client, "one", version("o1"))
    waiting = client.update("one", version("o2"), replication_conf(4))  # 3 nimbuses: waits
    assert waiting.update is not None

    with pytest.raises(UpdateInProgressError, match="waiting for its code to reach 4"):
        client.update("one", version("o3"))
    killed = client.kill("one", wait_secs=0)
    assert killed is not None and killed.status is PipelineStatus.KILLED


def test_a_retried_rebalance_with_the_same_request_id_changes_nothing_twice(cluster, client):
    submitted(client, "reb", version("b1"))
    first = client.rebalance("reb", {"spark.sql.shuffle.partitions": 3}, request_id="reb-1")
    again = client.rebalance("reb", {"spark.sql.shuffle.partitions": 3}, request_id="reb-1")
    other = client.rebalance("reb", {"spark.sql.shuffle.partitions": 5}, request_id="reb-2")

    assert (first.rebalances, again.rebalances, other.rebalances) == (1, 1, 2)
    assert other.conf["spark.sql.shuffle.partitions"] == 5


def test_kill_keeps_the_checkpoints_and_kill_purge_deletes_them(cluster, client, checkpoints):
    names = ("kept", "purged", "purged-later")
    for name in names:
        submitted(client, name, version(name))
        (checkpoints / name / "query" / "commits").mkdir(parents=True)

    client.kill("kept", wait_secs=0)
    client.kill("purged", wait_secs=0, purge=True)
    client.kill("purged-later", wait_secs=600)
    again = client.kill("purged-later", wait_secs=0, purge=True)  # a second kill adds purge

    assert again is not None and again.purge
    wait_until(lambda: not set(names) & {r.name for r in client.list_pipelines()}, 30, "removal")
    assert (checkpoints / "kept" / "query" / "commits").is_dir()
    wait_until(lambda: not (checkpoints / "purged").exists(), 30, "the purged checkpoints to go")
    wait_until(lambda: not (checkpoints / "purged-later").exists(), 30, "the later purge")


def test_the_api_document_names_update_purge_and_the_request_ids(cluster):
    document = httpx.get(f"{leader_url(cluster)}/api/v1/openapi.json").json()
    update = document["paths"]["/api/v1/pipelines/{name}/update"]["post"]
    schemas = document["components"]["schemas"]

    assert "leader only" in update["tags"]
    assert {"200", "202"} <= set(update["responses"])
    assert "purge" in schemas["KillRequest"]["properties"]
    assert "request_id" in schemas["RebalanceRequest"]["properties"]
    assert {"version", "update", "requests", "purge"} <= set(
        schemas["PipelineRecord"]["properties"]
    )


def test_a_new_leader_finishes_an_update_the_old_one_staged(zk_server, tmp_path, request):
    """The update waits in the record, not in the leader's memory: a leader killed before
    the update applies leaves the pipeline on its old code, and its successor applies it."""
    extra = ["-c", "nimbus.code.sync.freq.secs=1"]
    with (
        nimbus_cluster(zk_server.connect_string, tmp_path, request.node.name, extra=extra) as nimbi,
        NimbusClient(nimbi.seeds, retry_deadline=60.0, request_timeout=10.0) as client,
    ):
        old = submitted(client, "moved", version("m1"), **replication_conf(3))
        leader = nimbi.by_address(nimbi.wait_for_agreed_leader())
        down = next(n for n in nimbi.nimbuses if n is not leader)
        down.stop()
        conf = {"pipeline.min.replication.count": 3, "pipeline.max.replication.wait.time.sec": 4}
        staged = client.update("moved", version("m2"), conf, request_id="moved-2")
        assert staged.update is not None
        wait_until(
            lambda: (u := client.status("moved").update) is not None and u.replication == 2,
            20,
            "the update's code on the leader and the running standby",
        )

        leader.kill()
        new_leader = nimbi.wait_for_agreed_leader(timeout=60, not_=leader.address, skip=[leader])
        down.start()
        down.wait_ready()
        done = client.wait_updated(staged)

    assert new_leader != leader.address
    assert (done.version, done.update) == (2, None)
    assert done.digest == staged.update.digest != old.digest
    assert done.epoch > old.epoch  # written by the new term
    assert done.reason is not None and "wait limit" in done.reason  # 2 live copies of 3


def test_the_cli_updates_shows_the_version_and_kills_with_purge(cluster, client, tmp_path):
    submitted(client, "cli", version("c1"))
    new_package = tmp_path / "cli-v2.zip"
    new_package.write_bytes(version("c2"))
    seeds = ["-c", f"nimbus.seeds={','.join(cluster.seeds)}"]

    update = ["update", "cli", str(new_package), "--no-wait", "--json", *seeds]  # no supervisor
    updated = CliRunner().invoke(main, update)
    assert updated.exit_code == 0, updated.output
    assert PipelineRecord.model_validate_json(updated.output).version == 2

    def status_shows_version_2() -> bool:  # a standby's view may lag the write (nimbus.md)
        shown = CliRunner().invoke(main, ["status", "cli", *seeds])
        assert shown.exit_code == 0, shown.output
        return re.search(r"version\s+│?\s*2", shown.output) is not None

    wait_until(status_shows_version_2, 10, "stratus status to show version 2")

    killed = CliRunner().invoke(main, ["kill", "cli", "--wait", "0", "--purge", "--json", *seeds])
    assert killed.exit_code == 0, killed.output
    assert '"purge": true' in killed.output
