"""A standby worker's files: the promotion it takes only when it fits what it prepared, the
READY record it writes, and the stop that ends it only before its promotion."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from stratus.api.records import FencingToken
from stratus.api.standby_workers import StandbyWorkerState
from stratus.worker.errors import PromotionError
from stratus.worker.outcome import OK_EXIT
from stratus.worker.promotion import (
    PROMOTE_FILE,
    STANDBY_FILE_MODE,
    StandbyReady,
    clear_standby_ready,
    promotion_problem,
    read_promotion,
    read_standby_ready,
    standby_file,
    standby_spec_problem,
    write_standby_ready,
)
from stratus.worker.spec import WorkerSpec
from stratus.worker.standby import StandbyPhase, StandbyWorker

DIGEST = "ab" * 32
SECRET = "s3cr3t-value"


def standby_spec(tmp_path: Path, **changes: Any) -> WorkerSpec:
    """A standby worker's spec of pipeline 'orders'; ``changes`` replace its fields."""
    fields: dict[str, Any] = {
        "pipeline": "orders",
        "supervisor": "s2",
        "epoch": 4,
        "generation": 2,
        "token": FencingToken(era=1_700_000_000_000, zxid=7),
        "digest": DIGEST,
        "kind": "app",
        "entrypoint": "orders.main:run",
        "code_dir": tmp_path / "code",
        "work_dir": tmp_path / "work",
        "conf": {
            "spark.sql.shuffle.partitions": 4,
            "spark.executor.memory": "2g",
            "spark.orders.input": "/in",
        },
        "spark_master": "local[2]",
        "checkpoint_location": str(tmp_path / "checkpoints" / "orders"),
        "heartbeat_path": tmp_path / "heartbeat.json",
        "heartbeat_interval_secs": 1.0,
        "stop_grace_secs": 5.0,
        "role": "standby",
        "promote_path": tmp_path / "work" / PROMOTE_FILE,
    }
    return WorkerSpec.model_validate({**fields, **changes})


def promotion_of(standby: WorkerSpec, **changes: Any) -> WorkerSpec:
    """The active worker's spec its supervisor would write: a new token, epoch, generation."""
    update = {
        "role": "active",
        "promote_path": None,
        "token": FencingToken(era=standby.token.era, zxid=standby.token.zxid + 5),
        "epoch": standby.epoch + 1,
        "generation": standby.generation + 1,
        **changes,
    }
    return standby.model_copy(update=update)


def test_a_promotion_with_a_new_token_epoch_generation_and_runtime_conf_fits(tmp_path) -> None:
    standby = standby_spec(tmp_path)
    runtime = {**standby.conf, "spark.sql.shuffle.partitions": 8, "spark.orders.input": "/in2"}
    assert promotion_problem(standby, promotion_of(standby, conf=runtime)) is None


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"pipeline": "payments"}, "pipeline 'payments', not this standby worker's 'orders'"),
        ({"digest": "cd" * 32}, f"code {'cd' * 6}, this standby worker imported {'ab' * 6}"),
        ({"entrypoint": "orders.other:run"}, "it runs app 'orders.other:run'"),
        ({"spark_master": "spark://m:7077"}, "its Spark master is 'spark://m:7077'"),
        ({"deps_archive": Path("/envs/orders.tar.gz")}, "its requirements' archive is /envs"),
        ({"role": "standby"}, "of role 'standby', not of an active one"),
    ],
)
def test_a_promotion_of_another_pipeline_code_or_session_is_refused_naming_it(
    tmp_path, changes: dict[str, Any], named: str
) -> None:
    standby = standby_spec(tmp_path)
    problem = promotion_problem(standby, promotion_of(standby, **changes))
    assert problem is not None and named in problem


@pytest.mark.parametrize(
    "conf",
    [
        {"spark.executor.memory": SECRET},  # changed
        {"spark.sql.extensions": SECRET},  # a static SQL key added
    ],
)
def test_a_static_spark_key_changed_is_refused_naming_the_key_not_its_value(
    tmp_path, conf: dict[str, str]
) -> None:
    standby = standby_spec(tmp_path)
    problem = promotion_problem(standby, promotion_of(standby, conf={**standby.conf, **conf}))
    [key] = conf
    assert problem is not None and f"Spark setting {key} is not the one" in problem
    assert SECRET not in problem


def test_a_promotion_is_read_from_the_promote_path_when_it_fits(tmp_path) -> None:
    standby = standby_spec(tmp_path)
    assert standby.promote_path is not None
    standby.promote_path.parent.mkdir(parents=True)
    promotion = promotion_of(standby)
    promotion.write(standby.promote_path)
    assert read_promotion(standby) == promotion


def test_an_unreadable_or_unfit_promotion_is_an_error_that_names_the_file(tmp_path) -> None:
    standby = standby_spec(tmp_path)
    path = standby.promote_path
    assert path is not None
    path.parent.mkdir(parents=True)
    with pytest.raises(PromotionError, match=f"the promotion {path} cannot be read"):
        read_promotion(standby)  # missing
    path.write_text('{"pipeline": "orders"')
    with pytest.raises(PromotionError, match=f"the promotion {path} cannot be read"):
        read_promotion(standby)
    promotion_of(standby, digest="cd" * 32).write(path)
    with pytest.raises(PromotionError, match=r"is refused: it runs code cdcd.*nothing was claimed"):
        read_promotion(standby)


def test_only_an_apps_standby_spec_with_a_promote_path_can_wait_for_a_promotion(tmp_path) -> None:
    assert standby_spec_problem(standby_spec(tmp_path)) is None
    active = standby_spec_problem(standby_spec(tmp_path, role="active"))
    assert active is not None and "its role is 'active'" in active
    nowhere = standby_spec_problem(standby_spec(tmp_path, promote_path=None))
    assert nowhere is not None and "no promote_path" in nowhere
    sdp = standby_spec_problem(standby_spec(tmp_path, kind="sdp", entrypoint=None))
    assert sdp is not None and "of kind 'sdp'" in sdp


def test_the_ready_record_is_read_by_its_supervisor_until_it_is_cleared(tmp_path) -> None:
    spec = standby_spec(tmp_path)
    spec.work_dir.mkdir()
    assert read_standby_ready(spec.work_dir) is None
    ready = StandbyReady.now(spec)
    write_standby_ready(spec.work_dir, ready)
    assert read_standby_ready(spec.work_dir) == ready
    assert ready.state is StandbyWorkerState.READY
    assert (ready.pipeline, ready.generation, ready.digest) == ("orders", 2, DIGEST)
    assert stat.S_IMODE(standby_file(spec.work_dir).stat().st_mode) == STANDBY_FILE_MODE
    clear_standby_ready(spec.work_dir)
    assert read_standby_ready(spec.work_dir) is None
    clear_standby_ready(spec.work_dir)  # nothing to clear: no error


@pytest.mark.parametrize(
    "phase", [StandbyPhase.PREPARING, StandbyPhase.STARTING, StandbyPhase.READY]
)
def test_a_stop_before_the_promotion_leaves_at_once_with_exit_0(phase: StandbyPhase) -> None:
    left: list[int] = []
    standby = StandbyWorker(leave=left.append)
    standby.enter(phase)
    standby.stopped("SIGTERM")
    assert left == [OK_EXIT]


def test_a_stop_after_the_promotion_is_left_to_the_worker_it_became() -> None:
    left: list[int] = []
    standby = StandbyWorker(leave=left.append)
    standby.enter(StandbyPhase.PROMOTED)
    standby.stopped("SIGTERM")
    assert left == []
