"""Rollback and restart at the API and record level: real nimbus processes on a real
ZooKeeper (the automatic rollback of a failing update, with supervisors and Spark, is in
test_safe_updates_e2e.py).

Each test is one scenario: a rollback runs the previous version with its conf and a new
generation; the kept versions' packages stay on every nimbus and older ones are collected; a
version no longer kept is a clear error that changes nothing; a FAILED pipeline restarts with
its kept package; a restart of an unknown pipeline is a clear error; a rollback leaves
the leader leading while its code moves from the kept key to the pipeline's name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from stratus.api.errors import InvalidTransitionError, UnknownPipelineError, UnknownVersionError
from stratus.api.records import AssignmentReason, PipelineRecord, PipelineStatus
from stratus.cli.main import main
from stratus.client import NimbusClient
from stratus.codedist.code_locations import parse_holder_data
from stratus.local.processes import NimbusProcess
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NimbusCluster]:
    extra = [
        "-c", "nimbus.code.sync.freq.secs=1",
        "-c", "pipeline.kill.wait.secs=0",
        "-c", "pipeline.versions.keep=3",
    ]  # fmt: skip
    logs = tmp_path_factory.mktemp("pipeline-rollback")
    with nimbus_cluster(zk_server.connect_string, logs, "pipeline-rollback", 2, extra) as running:
        running.wait_for_agreed_leader()
        yield running


@pytest.fixture
def client(cluster: NimbusCluster) -> Iterator[NimbusClient]:
    with NimbusClient(cluster.seeds, retry_deadline=30.0, request_timeout=10.0) as nimbus:
        yield nimbus


def version(note: str) -> bytes:
    return valid_package(extra={"version.txt": note})


def packages_on(nimbus: NimbusProcess) -> set[str]:
    return {p.name.removesuffix(".pkg") for p in (nimbus.local_dir / "packages").glob("*.pkg")}


def submitted(client: NimbusClient, name: str, package: bytes, **conf: Any) -> PipelineRecord:
    return client.wait_replicated(client.submit(name, package, conf).name)


def seeds(cluster: NimbusCluster) -> list[str]:
    return ["-c", f"nimbus.seeds={','.join(cluster.seeds)}"]


def test_a_rollback_runs_the_previous_version_with_its_conf_and_a_new_generation(client):
    first = submitted(client, "rb", version("1"), **{"spark.app.tier": "gold"})
    second = client.update("rb", version("2"), {"spark.app.tier": "silver"})
    assert (second.version, second.on_trial) == (2, True)

    back = client.rollback("rb")

    assert (back.version, back.digest, back.conf) == (1, first.digest, first.conf)
    assert back.generation == second.generation + 1  # what restarts the worker
    assert back.reason == "rolled back from version 2 to 1: asked by a user"
    assert back.generation_cause == AssignmentReason.ROLLED_BACK.value
    assert [kept.version for kept in back.versions] == [2, 1]  # 1 ran last
    assert not back.on_trial
    again = client.rollback("rb")  # the version that ran before 1 is 2
    assert (again.version, again.digest) == (2, second.digest)
    assert again.conf["spark.app.tier"] == "silver"


def test_an_update_after_a_rollback_gets_a_new_version_number(client):
    submitted(client, "renumber", version("r1"))
    client.update("renumber", version("r2"))
    client.rollback("renumber")
    updated = client.update("renumber", version("r3"))
    assert updated.version == 3  # 2 is taken, by the code rolled back from
    assert [kept.version for kept in updated.versions] == [2, 1, 3]


def test_a_rollback_to_a_version_no_longer_kept_is_refused_and_changes_nothing(cluster, client):
    first = submitted(client, "old", version("o1"))
    for note in ("o2", "o3", "o4"):
        current = client.update("old", version(note))
    assert [kept.version for kept in current.versions] == [2, 3, 4]

    with pytest.raises(UnknownVersionError) as caught:
        client.rollback("old", to_version=1)

    assert str(caught.value) == (
        "pipeline 'old' does not keep version 1; the versions kept are 2, 3, 4 (current 4)"
    )
    after = client.status("old")
    assert (after.version, after.generation, after.digest) == (
        4,
        current.generation,
        current.digest,
    )
    kept = {kept.digest for kept in current.versions}
    wait_until(  # the kept versions' packages on every nimbus, version 1's collected
        lambda: all(
            kept <= packages_on(n) and first.digest not in packages_on(n) for n in cluster.nimbuses
        ),
        30,
        "every nimbus to keep versions 2 to 4 and drop version 1",
    )
    cli = CliRunner().invoke(
        main, ["rollback", "old", "--to-version", "1", "--json", *seeds(cluster)]
    )
    assert cli.exit_code == 3, cli.output
    assert json.loads(cli.output)["error"] == "unknown_version"


def test_a_failed_pipeline_restarts_with_its_kept_package(cluster, client, zk_server):
    record = submitted(client, "again", version("a1"))
    path = f"{cluster.root}/pipelines/again"
    with kazoo_client(zk_server.connect_string) as zk:  # as the leader marks a worker's failure
        failed = record.model_copy(update={"status": PipelineStatus.FAILED, "reason": "boom"})
        zk.set(path, failed.encode())
        wait_until(
            lambda: (
                not zk.exists(f"{cluster.root}/code/again")
                or not zk.get_children(f"{cluster.root}/code/again")
            ),
            30,
            "the nimbuses to drop the FAILED pipeline's code under its name",
        )
        with pytest.raises(InvalidTransitionError, match="it is FAILED; restart it"):
            client.activate("again")

        restarted = client.restart("again")

        assert (restarted.status, restarted.reason) == (PipelineStatus.ACTIVE, None)
        assert restarted.generation == record.generation + 1
        assert (restarted.digest, restarted.version) == (record.digest, 1)
        every = {n.address for n in cluster.nimbuses}
        wait_until(  # from the kept copies: no upload
            lambda: (
                zk.exists(f"{cluster.root}/code/again")
                and set(zk.get_children(f"{cluster.root}/code/again")) == every
            ),
            30,
            "every nimbus to hold the restarted pipeline's code again",
        )


def test_a_rollback_leaves_the_leader_leading_while_its_code_moves_under_the_name(
    zk_server: ZooKeeperServer, tmp_path
):
    """The rolled-back version's bytes are held under its kept key until the next code sync
    round registers them under the pipeline's name: the leader's code check between the two
    must count them, or the leader steps down and the rollback's caller, and every request
    after it, gets 421 until it leads again. No watch and a sync every 600 s: only the
    leader's code check asks for that round. The update comes before any round registered
    version 1 under its kept key: that round must keep version 1's bytes."""
    extra = ["-c", "nimbus.code.watch=false", "-c", "nimbus.code.sync.freq.secs=600"]
    with nimbus_cluster(zk_server.connect_string, tmp_path, "rollback-leads", 1, extra) as alone:
        alone.wait_for_agreed_leader()
        nimbus = alone.nimbuses[0]
        term = alone.leader_seen_by(nimbus)
        assert term is not None
        with (
            NimbusClient(alone.seeds, retry_deadline=30.0, request_timeout=10.0) as client,
            kazoo_client(zk_server.connect_string) as zk,
        ):
            first = submitted(client, "steady", version("s1"))
            client.update("steady", version("s2"))
            holder = f"{alone.root}/code/steady/{nimbus.address}"

            def registered() -> str | None:
                held = parse_holder_data(zk.get(holder)[0]) if zk.exists(holder) else None
                return held.digest if held is not None else None

            wait_until(lambda: registered() not in (None, first.digest), 30, "version 2 held")

            back = client.rollback("steady")

            assert back.digest == first.digest
            wait_until(lambda: registered() == first.digest, 30, "version 1 held by name")
        assert alone.leader_seen_by(nimbus) == term  # the same leader, the same epoch


def test_a_restart_of_an_unknown_pipeline_is_a_clear_error(cluster, client):
    with pytest.raises(UnknownPipelineError, match="unknown pipeline 'nosuch'"):
        client.restart("nosuch")
    cli = CliRunner().invoke(main, ["restart", "nosuch", "--json", *seeds(cluster)])
    assert cli.exit_code == 3, cli.output
    assert json.loads(cli.output)["error"] == "unknown_pipeline"


def test_a_restart_of_an_active_pipeline_gives_it_a_new_generation(client):
    record = submitted(client, "bounce", version("b1"))
    restarted = client.restart("bounce", request_id="bounce-1")
    assert restarted.generation == record.generation + 1
    assert restarted.generation_cause == AssignmentReason.RESTARTED.value
    retried = client.restart("bounce", request_id="bounce-1")
    assert retried.generation == restarted.generation  # a retry restarts once


def test_the_api_document_names_rollback_and_restart(cluster):
    leader = cluster.by_address(cluster.wait_for_agreed_leader()).url
    document = httpx.get(f"{leader}/api/v1/openapi.json").json()
    for verb in ("rollback", "restart"):
        operation = document["paths"][f"/api/v1/pipelines/{{name}}/{verb}"]["post"]
        assert "leader only" in operation["tags"]
    schemas = document["components"]["schemas"]
    assert "to_version" in schemas["RollbackRequest"]["properties"]
    assert {"versions", "on_trial"} <= set(schemas["PipelineRecord"]["properties"])
