"""Records across releases (docs/upgrades.md): a field this release does not know, written by
a newer one, survives the leader's rewrite of the record and stays out of the API's answers;
the records stratus 0.1.0 wrote (real bytes of a 0.1.0 cluster, in ``fixtures/records-0.1.0``,
as ``tests/cluster/test_upgrade.py`` snapshots them) are read by this release and written back with
every field they had.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stratus.api.purges import PurgeCause, PurgeOrder
from stratus.api.records import (
    Assignment,
    AssignmentChange,
    LeaderTerm,
    NimbusRegistration,
    PendingUpdate,
    PipelineRecord,
    PipelineStatus,
    SupervisorHeartbeat,
    SupervisorSummary,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.coordination.coordinator import Coordinator
from stratus.nimbus.duties.purges import PurgeOrders
from stratus.zk.paths import ClusterPaths
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

OLD_RECORDS = Path(__file__).parent.parent / "fixtures" / "records-0.1.0"
FROM_A_NEWER_RELEASE = {"placement_hint": {"zone": "b", "weight": 3}, "record_note": "kept"}
RECORD: dict[str, Any] = {
    "name": "p",
    "status": "ACTIVE",
    "digest": "ab" * 32,
    "size_bytes": 10,
    "submitted": 1.0,
    "updated": 2.0,
    "epoch": 3,
}


# ---------------------------------------------------------------------------- pure logic


def test_an_unknown_field_is_kept_through_a_change_and_written_back() -> None:
    raw = json.dumps({**RECORD, **FROM_A_NEWER_RELEASE}).encode()
    record = PipelineRecord.model_validate_json(raw)

    changed = record.model_copy(update={"status": PipelineStatus.INACTIVE, "epoch": 4})
    stored = json.loads(changed.encode())

    assert stored["status"] == "INACTIVE" and stored["epoch"] == 4
    assert {key: stored[key] for key in FROM_A_NEWER_RELEASE} == FROM_A_NEWER_RELEASE
    assert PipelineRecord.model_validate_json(changed.encode()).unknown_fields == (
        FROM_A_NEWER_RELEASE
    )


def test_an_unknown_field_of_a_pending_update_is_kept_inside_the_record() -> None:
    update = {"digest": "cd" * 32, "size_bytes": 5, "requested": 1.0, "canary": True}
    record = PipelineRecord.model_validate_json(json.dumps({**RECORD, "update": update}))
    assert record.update is not None

    noted = record.model_copy(
        update={"update": record.update.model_copy(update={"replication": 2})}
    )

    assert json.loads(noted.encode())["update"]["canary"] is True
    assert json.loads(noted.encode())["update"]["replication"] == 2


def test_an_unknown_field_of_a_kept_version_is_kept_inside_the_record() -> None:
    kept = {"version": 1, "digest": "ab" * 32, "size_bytes": 10, "applied": 1.0, "signed": "x"}
    record = PipelineRecord.model_validate_json(json.dumps({**RECORD, "versions": [kept]}))

    rewritten = json.loads(record.model_copy(update={"on_trial": True}).encode())

    assert rewritten["versions"][0]["signed"] == "x"
    assert rewritten["on_trial"] is True


def test_a_record_without_kept_versions_reads_as_before() -> None:
    record = PipelineRecord.model_validate_json(json.dumps(RECORD))
    assert (record.versions, record.on_trial, record.generation_offset) == ([], False, 0)
    assert record.generation == record.rebalances + record.version - 1


def test_a_field_this_release_knows_wins_over_an_unknown_one_of_the_same_record() -> None:
    record = PipelineRecord.model_validate_json(json.dumps({**RECORD, "extra": 1}))
    assert json.loads(record.model_copy(update={"epoch": 9}).encode())["epoch"] == 9


def test_unknown_fields_are_not_in_the_api_view_of_a_record() -> None:
    """An answer shows this release's fields alone: its redaction of secrets knows no other."""
    secret = {"future_credentials": {"password": "hunter2"}}
    record = PipelineRecord.model_validate_json(json.dumps({**RECORD, **secret}))
    assert "future_credentials" not in record.model_dump_json()
    assert "future_credentials" not in record.model_dump()
    assert "future_credentials" in record.encode().decode()


def test_a_leader_term_keeps_an_unknown_field_when_its_end_is_written() -> None:
    term = LeaderTerm.model_validate_json(
        json.dumps({"epoch": 2, "nimbus": "h:1", "started_at": 1.0, "zone": "b"})
    )
    ended = term.model_copy(update={"ended_at": 5.0, "ended_by": "leader"})
    assert json.loads(ended.encode())["zone"] == "b"


def test_an_older_writers_record_takes_the_defaults_of_the_fields_it_did_not_write() -> None:
    record = PipelineRecord.model_validate_json(json.dumps(RECORD))
    assert record.blake3 is None and record.user_keys is None and record.owner is None
    assert record.version == 1 and record.requests == [] and record.unknown_fields == {}


# ---------------------------------------------------------------------------- 0.1.0's bytes

OLD_MODELS: dict[str, type[Any]] = {  # by the file name's prefix: the znode's parent
    "pipelines_": PipelineRecord,
    "assignments_": Assignment,
    "leader-terms_": LeaderTerm,
    "nimbuses_": NimbusRegistration,
    "supervisors_": SupervisorSummary,
    "heartbeats_supervisors_": SupervisorHeartbeat,
    "heartbeats_workers_": WorkerHeartbeat,
    "assignment-history_": AssignmentChange,
}


def old_records() -> list[Path]:
    return sorted(OLD_RECORDS.glob("*.json"))


def model_of(path: Path) -> type[Any]:
    prefixes = sorted(OLD_MODELS, key=len, reverse=True)  # heartbeats_workers_ before ...
    return OLD_MODELS[next(prefix for prefix in prefixes if path.name.startswith(prefix))]


def test_the_fixtures_hold_every_kind_of_record_0_1_0_wrote() -> None:
    assert {model_of(path) for path in old_records()} == set(OLD_MODELS.values())


@pytest.mark.parametrize("path", old_records(), ids=lambda path: path.stem)
def test_a_record_written_by_0_1_0_is_read_and_written_back_whole(path: Path) -> None:
    data = path.read_bytes()
    record = model_of(path).model_validate_json(data)
    assert json.loads(data).items() <= json.loads(record.encode()).items()


def test_a_running_worker_of_0_1_0_reads_as_running_with_its_query() -> None:
    (path,) = (p for p in old_records() if p.name.startswith("heartbeats_workers_"))
    beat = WorkerHeartbeat.model_validate_json(path.read_bytes())
    assert beat.state is WorkerState.RUNNING and beat.pid and beat.app_id
    assert [query.name for query in beat.queries] == ["window_counts"]


# ---------------------------------------------------------------------------- the leader


@pytest.fixture
def cluster(zk_server: ZooKeeperServer, tmp_path: Path) -> Iterator[NimbusCluster]:
    with nimbus_cluster(zk_server.connect_string, tmp_path, "record-compat", size=1) as running:
        yield running


def test_the_leaders_rewrite_keeps_the_fields_a_newer_release_wrote(
    cluster: NimbusCluster, zk_server: ZooKeeperServer
) -> None:
    """A record of a newer release, its unknown fields at the top and in its pending update,
    deactivated by this release's leader: INACTIVE, every unknown field still there, and none
    of them in the API's answer."""
    url = cluster.by_address(cluster.wait_for_agreed_leader()).url
    created = httpx.post(
        f"{url}/api/v1/pipelines", data={"name": "newer"}, files={"package": valid_package()}
    )
    assert created.status_code == 201, created.text
    wait_until(lambda: status_of(url, "newer") == "ACTIVE", 30, "newer ACTIVE")
    path = ClusterPaths(cluster.root).pipeline("newer")
    update = {"digest": "cd" * 32, "size_bytes": 5, "requested": 1.0, "canary": True}
    with kazoo_client(zk_server.connect_string) as zk:
        data, stat = zk.get(path)
        newer = {**json.loads(data), **FROM_A_NEWER_RELEASE, "update": update}
        zk.set(path, json.dumps(newer).encode(), version=stat.version)

        answer = httpx.post(f"{url}/api/v1/pipelines/newer/deactivate")
        assert answer.status_code == 200, answer.text

        stored = json.loads(zk.get(path)[0])
    assert stored["status"] == "INACTIVE"
    assert {key: stored[key] for key in FROM_A_NEWER_RELEASE} == FROM_A_NEWER_RELEASE
    assert stored["update"]["canary"] is True
    shown = httpx.get(f"{url}/api/v1/pipelines/newer").json()
    assert not set(FROM_A_NEWER_RELEASE) & set(shown)
    assert "canary" not in shown["update"]


def test_the_leaders_write_of_a_purge_order_keeps_what_a_newer_release_wrote(
    zk_hosts: str,
) -> None:
    """A purge order is read and written back at every step of the purge: the fields a newer
    release wrote into it, at the top and in its failed attempts, stay."""
    coordinator = Coordinator.standalone(zk_hosts, session_timeout=4.0).start()
    try:
        client = coordinator.session.client
        paths = ClusterPaths("/stratus")
        for parent in paths.all_parents():
            client.ensure_path(parent)
        term = coordinator.nominate("nimbus", "leader", timeout=10)
        order = PurgeOrder(
            pipeline="p", root="/checkpoints", cause=PurgeCause.KILL, requested=1.0, epoch=0
        )
        attempt = {"by": "supervisor s1", "attempt": 1, "error": "denied", "uid": 1001}
        newer = {**json.loads(order.encode()), "priority": "high", "failed": [attempt]}
        client.create(paths.purge("p"), json.dumps(newer).encode())
        orders = PurgeOrders(client, paths)

        read, version = orders.orders()["p"]
        assert orders.write(term, read.model_copy(update={"attempt": 2}), version)

        stored = json.loads(client.get(paths.purge("p"))[0])
        assert stored["attempt"] == 2 and stored["epoch"] == term.epoch
        assert stored["priority"] == "high" and stored["failed"] == [attempt]
    finally:
        coordinator.close()


def status_of(url: str, name: str) -> str | None:
    answer = httpx.get(f"{url}/api/v1/pipelines/{name}")
    return str(answer.json()["status"]) if answer.status_code == 200 else None


def test_pending_update_alone_keeps_its_unknown_fields() -> None:
    update = PendingUpdate.model_validate_json(
        json.dumps({"digest": "cd" * 32, "size_bytes": 5, "requested": 1.0, "canary": True})
    )
    assert update.unknown_fields == {"canary": True}
