"""The spec a supervisor starts a standby worker with (``launcher.standby_spec``)."""

from __future__ import annotations

from pathlib import Path

from stratus.api.records import FencingToken
from stratus.api.standby_workers import STANDBY_CONF_KEY, StandbyWorkerPlacement
from stratus.config import config_from_mapping
from stratus.supervisor.launcher import standby_spec
from stratus.supervisor.settings import SupervisorSettings
from stratus.supervisor.worker_process import WorkerPaths
from stratus.worker.promotion import PROMOTE_FILE
from tests.harness.supervisor_fakes import DIGEST, code


def settings(tmp_path: Path, **conf: object) -> SupervisorSettings:
    values = {"supervisor.id": "s1", "supervisor.local.dir": str(tmp_path), **conf}
    return SupervisorSettings.from_config(config_from_mapping(values))


def placement() -> StandbyWorkerPlacement:
    return StandbyWorkerPlacement(
        pipeline="etl",
        supervisor="s1",
        epoch=3,
        generation=2,
        digest=DIGEST,
        size_bytes=10,
        conf={STANDBY_CONF_KEY: "hot", "spark.sql.shuffle.partitions": 4},
        placed=100.0,
    )


def test_a_standby_worker_waits_on_its_promote_file_with_a_token_below_every_claim(
    tmp_path: Path,
) -> None:
    paths = WorkerPaths.of(tmp_path, "etl")
    spec = standby_spec(settings(tmp_path).spec, "s1", placement(), code(tmp_path), paths, era=7)
    assert (spec.role, spec.promote_path) == ("standby", paths.work / PROMOTE_FILE)
    assert spec.token == FencingToken(era=7, zxid=0)
    assert (spec.pipeline, spec.generation, spec.digest) == ("etl", 2, DIGEST)
    assert spec.conf["spark.sql.shuffle.partitions"] == 4


def test_a_standby_worker_warms_up_for_the_supervisors_batches(tmp_path: Path) -> None:
    paths = WorkerPaths.of(tmp_path, "etl")
    default = standby_spec(settings(tmp_path).spec, "s1", placement(), code(tmp_path), paths, 1)
    assert default.warm_up_batches == 40
    few = settings(tmp_path, **{"supervisor.standby.warmup.batches": 3}).spec
    assert standby_spec(few, "s1", placement(), code(tmp_path), paths, 1).warm_up_batches == 3
