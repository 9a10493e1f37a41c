"""The records of standby workers: read across releases both ways, bounded, and kept apart
from the records that run a pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from stratus.api.errors import InvalidConfError
from stratus.api.pipeline_conf import validate_pipeline_conf
from stratus.api.records import (
    Assignment,
    AssignmentChange,
    AssignmentReason,
    ClusterIdentity,
    FencingToken,
    SupervisorHeartbeat,
    SupervisorSummary,
)
from stratus.api.standby_workers import (
    MAX_REFUSALS,
    BeatLease,
    StandbyWorkerPlacement,
    StandbyWorkerRefusal,
    StandbyWorkerState,
    wants_standby_worker,
)
from stratus.supervisor.adoption import ProcessRecord
from stratus.worker.spec import WorkerSpec
from stratus.zk.paths import ClusterPaths

PLACEMENT = {
    "pipeline": "orders",
    "supervisor": "s2",
    "epoch": 4,
    "generation": 2,
    "digest": "ab" * 32,
    "size_bytes": 1200,
    "conf": {"pipeline.standby": "hot"},
    "placed": 1_700_000_000.0,
}


def test_a_supervisor_of_an_older_release_reads_as_running_no_standby_worker() -> None:
    older = {"id": "s1", "time": 1.0, "slots": 2, "running": ["orders"]}
    beat = SupervisorHeartbeat.model_validate(older)
    assert beat.standby_workers == []
    summary = SupervisorSummary.model_validate({"id": "s1", "host": "h1", "slots": 2})
    assert summary.beat_lease is None


def test_an_older_release_ignores_the_standby_workers_a_newer_supervisor_reports() -> None:
    newer = {
        "id": "s1",
        "time": 1.0,
        "slots": 2,
        "standby_workers": [
            {
                "pipeline": "orders",
                "generation": 2,
                "digest": "ab" * 32,
                "state": "READY",
                "since": 1.0,
                "rss_mb": 702,
                "a_field_of_a_later_release": 1,
            }
        ],
        "beat_lease": {"lease_secs": 0.8, "stop_secs": 0.1, "poll_secs": 0.02},
        "a_field_of_a_later_release": {"x": 1},
    }
    beat = SupervisorHeartbeat.model_validate(newer)
    assert beat.standby_workers[0].state is StandbyWorkerState.READY
    assert beat.standby_workers[0].rss_mb == 702
    assert beat.beat_lease == BeatLease(lease_secs=0.8, stop_secs=0.1, poll_secs=0.02)
    assert "a_field_of_a_later_release" not in beat.model_dump()


def test_the_floor_of_a_beat_lease_adds_its_stop_its_poll_and_the_margin() -> None:
    lease = BeatLease(lease_secs=0.8, stop_secs=0.1, poll_secs=0.02)
    assert lease.floor_secs(margin_secs=0.1) == pytest.approx(1.02)
    with pytest.raises(ValidationError, match="lease_secs"):
        BeatLease(lease_secs=0, stop_secs=0.1, poll_secs=0.02)


def test_a_placement_keeps_what_a_newer_leader_wrote_through_a_rewrite() -> None:
    stored = json.dumps({**PLACEMENT, "a_field_of_a_later_release": {"x": 1}})
    placement = StandbyWorkerPlacement.model_validate_json(stored)
    moved = placement.model_copy(update={"supervisor": "s3"})
    written = json.loads(moved.encode())
    assert written["supervisor"] == "s3"
    assert written["a_field_of_a_later_release"] == {"x": 1}


def test_a_placement_keeps_at_most_its_newest_refusals() -> None:
    refusal = StandbyWorkerRefusal(supervisor="s3", reason="memory", at=1.0).model_dump()
    StandbyWorkerPlacement.model_validate({**PLACEMENT, "refusals": [refusal] * MAX_REFUSALS})
    with pytest.raises(ValidationError, match="refusals"):
        StandbyWorkerPlacement.model_validate(
            {**PLACEMENT, "refusals": [refusal] * (MAX_REFUSALS + 1)}
        )


def test_an_unplaced_standby_worker_says_why() -> None:
    unplaced = StandbyWorkerPlacement.model_validate(
        {**PLACEMENT, "supervisor": None, "unplaced_because": "no other supervisor"}
    )
    assert (unplaced.supervisor, unplaced.unplaced_because) == (None, "no other supervisor")


def test_a_promotion_is_an_assignment_change_of_its_own() -> None:
    change = AssignmentChange(
        at=1.0,
        epoch=4,
        reason=AssignmentReason.STANDBY_PROMOTED,
        supervisor="s2",
        previous="s1",
        generation=2,
        digest="ab" * 32,
    )
    assert json.loads(change.encode())["reason"] == "standby_promoted"


@pytest.mark.parametrize(("value", "wanted"), [("hot", True), ("none", False)])
def test_the_standby_conf_key_takes_none_or_hot(value: str, wanted: bool) -> None:
    conf = validate_pipeline_conf({"pipeline.standby": value})
    assert wants_standby_worker(conf) is wanted


def test_an_unknown_standby_mode_is_refused_naming_the_key_and_the_modes() -> None:
    with pytest.raises(InvalidConfError, match=r"pipeline.standby: expected none or hot"):
        validate_pipeline_conf({"pipeline.standby": "warm"})


def test_a_pipeline_without_the_key_wants_no_standby_worker() -> None:
    assert not wants_standby_worker({})


def test_placements_live_in_a_parent_created_at_start_up() -> None:
    paths = ClusterPaths("/stratus/c1")
    assert paths.standby_worker("orders") == "/stratus/c1/standby-workers/orders"
    assert paths.standby_workers in paths.all_parents()


def _process(role: str | None) -> ProcessRecord:
    data = {
        "supervisor": "s1",
        "cluster": {"root": "/c1", "servers": ["zk1:2181"]},
        "pipeline": "orders",
        "epoch": 4,
        "generation": 2,
        "token": {"era": 1, "zxid": 10},
        "digest": "ab" * 32,
        "monitor": {"pid": 10, "start": 1},
        "worker": {"pid": 11, "start": 1},
        "boot_id": "b",
    }
    if role is not None:
        data["role"] = role
    return ProcessRecord.model_validate(data)


ASSIGNMENT = Assignment(
    pipeline="orders",
    supervisor="s1",
    epoch=4,
    generation=2,
    digest="ab" * 32,
    size_bytes=1,
    assigned=1.0,
    token=FencingToken(era=1, zxid=10),
)


def test_a_standby_workers_process_never_runs_the_pipelines_assignment() -> None:
    assert _process(None).runs(ASSIGNMENT)  # a process.json of an older release: active
    assert _process("active").runs(ASSIGNMENT)
    assert not _process("standby").runs(ASSIGNMENT)


def test_a_spec_of_an_older_supervisor_reads_as_an_active_worker(tmp_path: Path) -> None:
    spec = WorkerSpec(
        pipeline="orders",
        supervisor="s1",
        epoch=4,
        generation=2,
        token=FencingToken(era=1, zxid=10),
        digest="ab" * 32,
        kind="app",
        entrypoint="orders.main:run",
        code_dir=tmp_path,
        work_dir=tmp_path,
        conf={},
        spark_master="local[1]",
        checkpoint_location=str(tmp_path / "cp"),
        cluster=ClusterIdentity(root="/c1", servers=("zk1:2181",)),
        heartbeat_path=tmp_path / "hb",
        heartbeat_interval_secs=1.0,
        stop_grace_secs=1.0,
    )
    older = {
        k: v
        for k, v in json.loads(spec.model_dump_json()).items()
        if k not in {"role", "promote_path", "beat_lease_path", "beat_poll_secs", "beat_stop_secs"}
    }
    read = WorkerSpec.model_validate(older)
    assert (read.role, read.promote_path, read.beat_lease_path) == ("active", None, None)
