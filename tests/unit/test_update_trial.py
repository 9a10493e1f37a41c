"""The rollback decision and the kept versions: pure functions of a record and a heartbeat."""

from __future__ import annotations

from typing import Any

import pytest

from stratus.api.errors import UnknownVersionError
from stratus.api.records import (
    KeptVersion,
    PipelineRecord,
    PipelineStatus,
    QueryProgress,
    RefusedUpdate,
    WorkerCrash,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.nimbus.records.kept_versions import offset_for, rollback_target, with_applied
from stratus.nimbus.records.update_trial import Proven, RollBack, RollbackPolicy, judge

ON = RollbackPolicy(enabled=True, crashes=3)


def kept(version: int, conf: dict[str, Any] | None = None) -> KeptVersion:
    return KeptVersion(
        version=version, digest=f"{version:x}" * 64, size_bytes=10, conf=conf or {}, applied=1.0
    )


def record(version: int = 2, *, on_trial: bool = True, **changes: Any) -> PipelineRecord:
    """A pipeline updated from version 1 to ``version``, its new version on trial."""
    versions = [kept(v) for v in range(1, version + 1)]
    base = PipelineRecord(
        name="etl",
        status=PipelineStatus.ACTIVE,
        digest=versions[-1].digest,
        size_bytes=10,
        submitted=1.0,
        updated=1.0,
        epoch=1,
        version=version,
        versions=versions,
        on_trial=on_trial,
    )
    return base.model_copy(update=changes)


def beat(
    rec: PipelineRecord, state: WorkerState = WorkerState.RUNNING, **fields: Any
) -> WorkerHeartbeat:
    values: dict[str, Any] = {
        "pipeline": rec.name,
        "supervisor": "s1",
        "epoch": 1,
        "generation": rec.generation,
        "digest": rec.digest,
        "state": state,
        "time": 2.0,
    }
    return WorkerHeartbeat(**{**values, **fields})


def test_a_first_committed_batch_proves_the_version() -> None:
    rec = record()
    progress = [QueryProgress(name="counts", batch_id=0, rows_total=10)]
    assert judge(rec, beat(rec, queries=progress), ON) == Proven(rec.generation)


def test_a_finished_batch_pipeline_proves_the_version() -> None:
    rec = record()
    assert judge(rec, beat(rec, WorkerState.FINISHED), ON) == Proven(rec.generation)


def test_a_running_worker_before_its_first_batch_is_not_judged_yet() -> None:
    rec = record()
    assert judge(rec, beat(rec, queries=[QueryProgress(batch_id=-1)]), ON) is None


def test_a_failed_worker_before_its_first_batch_rolls_the_version_back() -> None:
    rec = record()
    verdict = judge(rec, beat(rec, WorkerState.FAILED, error="KeyError: 'region'"), ON)
    assert verdict == RollBack(
        rec.generation, "its worker failed before its first batch: KeyError: 'region'"
    )


def test_a_crash_looping_worker_rolls_the_version_back_at_the_configured_count() -> None:
    rec = record()
    crash = WorkerCrash(time=2.0, exit_code=1, error="ZeroDivisionError")
    looping = beat(rec, WorkerState.RESTARTING, restarts=2, last_crash=crash)
    assert judge(rec, looping, ON) is None
    looping = beat(rec, WorkerState.RESTARTING, restarts=3, last_crash=crash)
    verdict = judge(rec, looping, ON)
    assert isinstance(verdict, RollBack) and "crashed 3 times" in verdict.why
    assert "ZeroDivisionError" in verdict.why


def test_a_proven_version_is_never_rolled_back() -> None:
    rec = record(on_trial=False)
    assert judge(rec, beat(rec, WorkerState.FAILED, error="boom"), ON) is None


def test_rollback_off_in_the_cluster_or_the_pipelines_conf_leaves_the_failure_alone() -> None:
    rec = record()
    failed = beat(rec, WorkerState.FAILED, error="boom")
    assert judge(rec, failed, RollbackPolicy(enabled=False)) is None
    off = record(conf={"pipeline.update.rollback": False})
    assert judge(off, beat(off, WorkerState.FAILED, error="boom"), ON) is None
    on = record(conf={"pipeline.update.rollback": True})
    assert isinstance(judge(on, beat(on, WorkerState.FAILED), RollbackPolicy(False)), RollBack)


def test_a_refused_update_rolls_back_whatever_the_policy_says() -> None:
    rec = record()
    old = record(version=1, on_trial=False)
    refused = RefusedUpdate(generation=rec.generation, digest=rec.digest, error="ValueError: x")
    running_old = beat(old, refused=refused)  # the old worker runs on, reporting the refusal
    verdict = judge(rec, running_old, RollbackPolicy(enabled=False))
    assert verdict == RollBack(rec.generation, "its entry point failed to import: ValueError: x")


def test_a_refusal_of_an_older_generation_is_not_judged_again() -> None:
    rec = record()
    refused = RefusedUpdate(generation=rec.generation - 1, digest="f" * 64, error="x")
    assert judge(rec, beat(rec, refused=refused), ON) is None


def test_a_failure_with_no_version_to_go_back_to_is_left_to_fail() -> None:
    rec = record(version=1)
    assert judge(rec, beat(rec, WorkerState.FAILED, error="boom"), ON) is None


def test_a_heartbeat_of_another_generation_is_not_judged() -> None:
    rec = record()
    stale = beat(rec, WorkerState.FAILED, generation=rec.generation - 1)
    assert judge(rec, stale, ON) is None


# ---------------------------------------------------------------------- kept versions


def test_an_update_keeps_the_newest_versions_only() -> None:
    rec = record(version=3)
    versions = with_applied(rec, kept(4), keep=3)
    assert [v.version for v in versions] == [2, 3, 4]


def test_a_record_older_than_the_list_starts_it_with_its_current_version() -> None:
    rec = record(version=1).model_copy(update={"versions": []})
    assert [v.version for v in with_applied(rec, kept(2), keep=3)] == [1, 2]


def test_a_rollback_goes_to_the_version_that_ran_before_not_the_highest_number() -> None:
    # 2 -> 3 -> 4, rolled back to 3 (which goes last), then updated to 5
    rec = record(version=4)
    rolled = rec.model_copy(update={"version": 3, "versions": with_applied(rec, kept(3), keep=3)})
    updated = rolled.model_copy(
        update={"version": 5, "versions": with_applied(rolled, kept(5), keep=3)}
    )
    assert [v.version for v in updated.versions] == [4, 3, 5]
    assert rollback_target(updated, None).version == 3


def test_a_rollback_to_a_version_not_kept_names_the_kept_ones() -> None:
    rec = record(version=4).model_copy(update={"versions": [kept(2), kept(3), kept(4)]})
    with pytest.raises(UnknownVersionError) as caught:
        rollback_target(rec, 1)
    assert str(caught.value) == (
        "pipeline 'etl' does not keep version 1; the versions kept are 2, 3, 4 (current 4)"
    )
    with pytest.raises(UnknownVersionError, match="runs version 4 already"):
        rollback_target(rec, 4)


def test_the_generation_grows_by_one_when_the_version_goes_back() -> None:
    rec = record(version=4, rebalances=2)
    offset = offset_for(rec, 2)
    back = rec.model_copy(update={"version": 2, "generation_offset": offset})
    assert back.generation == rec.generation + 1
