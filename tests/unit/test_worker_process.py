"""What the supervisor gives a worker (``supervisor/worker_process.py``): its Spark master,
its spec, and the tail of its log; and what the worker makes of a spec on a cluster master."""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

import pytest

from stratus.config import config_from_mapping
from stratus.logs import LogFormat, LogSettings
from stratus.supervisor.errors import UnfencedAssignmentError
from stratus.supervisor.settings import SupervisorSettings
from stratus.supervisor.worker_process import WorkerPaths, build_spec, log_tail, spark_master
from stratus.worker.sdp_run import sdp_environment, sdp_settings
from stratus.worker.session_conf import DEPS_DIR
from stratus.worker.spark_app import spark_settings
from stratus.worker.spec import WorkerSpec
from tests.harness.supervisor_fakes import assignment, code

CLUSTER = SupervisorSettings.from_config(
    config_from_mapping(
        {
            "supervisor.id": "s1",
            "pipeline.spark.master": "spark://cluster:7077",
            "pipeline.checkpoint.root": "/ck/",
        }
    )
).spec


def test_spark_master_is_the_pipelines_then_its_pipeline_key_then_the_clusters() -> None:
    assert spark_master(CLUSTER, {"spark.master": "local[2]", "pipeline.spark.master": "x"}) == (
        "local[2]"
    )
    assert spark_master(CLUSTER, {"pipeline.spark.master": "yarn"}) == "yarn"
    assert spark_master(CLUSTER, {}) == "spark://cluster:7077"


def test_the_spec_carries_the_assignment_the_code_and_where_to_checkpoint(tmp_path) -> None:
    paths = WorkerPaths.of(tmp_path, "etl")
    spec = build_spec(
        CLUSTER, "s1", assignment(epoch=3, generation=2, conf={"spark.x": 1}), code(tmp_path), paths
    )
    assert (spec.pipeline, spec.supervisor, spec.epoch, spec.generation) == ("etl", "s1", 3, 2)
    assert (spec.kind, spec.entrypoint, spec.code_dir) == ("app", "m:run", tmp_path / "code")
    assert spec.checkpoint_location == "/ck/etl"
    assert spec.spark_master == "spark://cluster:7077"
    assert spec.heartbeat_path == tmp_path / "workers" / "etl" / "work" / "heartbeat.json"
    assert spec.conf == {"spark.x": 1}
    assert spec.trigger_interval_secs is None


def test_the_spec_carries_the_assignments_token_and_refuses_none(tmp_path: Path) -> None:
    paths = WorkerPaths.of(tmp_path, "etl")
    spec = build_spec(CLUSTER, "s1", assignment(zxid=77), code(tmp_path), paths)
    assert spec.token == assignment(zxid=77).token
    without = assignment().model_copy(update={"token": None})
    with pytest.raises(UnfencedAssignmentError, match="no fencing token"):
        build_spec(CLUSTER, "s1", without, code(tmp_path), paths)


def test_a_worker_logs_at_its_supervisors_level_and_format(tmp_path) -> None:
    settings = SupervisorSettings.from_config(
        config_from_mapping({"supervisor.id": "s1", "log.level": "debug", "log.format": "json"})
    ).spec
    spec = build_spec(settings, "s1", assignment(), code(tmp_path), WorkerPaths.of(tmp_path, "etl"))
    assert spec.log_settings() == LogSettings(logging.DEBUG, LogFormat.JSON)
    read_back = WorkerSpec.model_validate_json(spec.model_dump_json())
    assert read_back.log_settings() == LogSettings(logging.DEBUG, LogFormat.JSON)
    assert (
        build_spec(
            CLUSTER, "s1", assignment(), code(tmp_path), WorkerPaths.of(tmp_path, "etl")
        ).log_settings()
        == LogSettings()
    )


def test_the_pipelines_checkpoint_subpath_and_the_manifests_trigger_are_used(tmp_path) -> None:
    manifest = "name: etl\nkind: sdp\ntrigger:\n  interval_secs: 5\nconf:\n  spark.a: manifest\n"
    pipeline_conf = {"pipeline.checkpoint.subpath": "v2/orders", "spark.a": "submit"}
    spec = build_spec(
        CLUSTER,
        "s1",
        assignment(conf=pipeline_conf),
        code(tmp_path, manifest),
        WorkerPaths.of(tmp_path, "etl"),
    )
    assert spec.checkpoint_location == "/ck/etl/v2/orders"
    assert spec.trigger_interval_secs == 5.0
    assert spec.conf["spark.a"] == "submit"  # the assignment's conf over the manifest's
    assert (spec.kind, spec.project) == ("sdp", "spark-pipeline.yml")


def test_a_checkpoint_root_in_an_older_records_conf_is_ignored(tmp_path) -> None:
    """Records written before the root was the operator's alone may still name one."""
    conf = {"pipeline.checkpoint.root": "s3://elsewhere/ck"}
    spec = build_spec(
        CLUSTER, "s1", assignment(conf=conf), code(tmp_path), WorkerPaths.of(tmp_path, "etl")
    )
    assert spec.checkpoint_location == "/ck/etl"


def test_the_requirements_archive_goes_to_a_worker_on_a_cluster_master_only(tmp_path) -> None:
    archive = tmp_path / "envs" / "py311-x" / "stratus-deps.tar.gz"
    with_env = dataclasses.replace(code(tmp_path), deps_archive=archive)
    paths = WorkerPaths.of(tmp_path, "etl")
    on_cluster = build_spec(CLUSTER, "s1", assignment(), with_env, paths)
    local = build_spec(
        CLUSTER, "s1", assignment(conf={"spark.master": "local[2]"}), with_env, paths
    )
    assert on_cluster.deps_archive == archive
    assert local.deps_archive is None  # local executors run the environment's own Python
    settings = spark_settings(on_cluster)
    assert settings["spark.executorEnv.PYTHONPATH"] == DEPS_DIR  # first, relative: unpacked
    assert "spark.executorEnv.PYTHONPATH" not in spark_settings(local)
    own = on_cluster.model_copy(update={"conf": {"spark.executorEnv.PYTHONPATH": "/opt/lib"}})
    assert spark_settings(own)["spark.executorEnv.PYTHONPATH"] == f"{DEPS_DIR}:/opt/lib"


def test_an_sdp_pipeline_on_a_cluster_master_ships_its_requirements_not_the_hosts_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    operator = tmp_path / "spark-conf"  # the operator's SPARK_CONF_DIR, with an archive
    operator.mkdir()
    (operator / "spark-defaults.conf").write_text(
        "# the operator's\nspark.archives  hdfs:///libs/geo.zip#geo\nspark.executor.cores=1\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(operator))
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3")  # the executors' own
    archive = tmp_path / "envs" / "py311-x" / "stratus-deps.tar.gz"
    python = tmp_path / "envs" / "py311-x" / "bin" / "python"  # the supervisor host's
    sdp = dataclasses.replace(
        code(tmp_path, "name: etl\nkind: sdp\n"), deps_archive=archive, python=python
    )
    paths = WorkerPaths.of(tmp_path, "etl")
    conf = {"spark.sql.catalogImplementation": "in-memory"}
    on_cluster = build_spec(
        CLUSTER,
        "s1",
        assignment(conf={**conf, "spark.executorEnv.PYTHONPATH": "/opt/lib"}),
        sdp,
        paths,
    )
    local = build_spec(
        CLUSTER, "s1", assignment(conf={**conf, "spark.master": "local[2]"}), sdp, paths
    )

    settings = sdp_settings(on_cluster)
    assert settings["spark.archives"] == f"hdfs:///libs/geo.zip#geo,{archive}#{DEPS_DIR}"
    assert settings["spark.executorEnv.PYTHONPATH"] == f"{DEPS_DIR}:/opt/lib"
    environment = sdp_environment(tmp_path / "sdp-conf", on_cluster.spark_master)
    assert environment["PYSPARK_PYTHON"] == "/usr/bin/python3"  # not this host's path
    assert environment["PYSPARK_DRIVER_PYTHON"] == sys.executable  # the driver is here
    monkeypatch.delenv("PYSPARK_PYTHON")
    assert "PYSPARK_PYTHON" not in sdp_environment(tmp_path, on_cluster.spark_master)

    assert local.deps_archive is None  # local executors run the environment's own Python
    assert "spark.archives" not in sdp_settings(local)
    assert "spark.executorEnv.PYTHONPATH" not in sdp_settings(local)
    assert sdp_environment(tmp_path, local.spark_master)["PYSPARK_PYTHON"] == sys.executable


def test_the_log_tail_is_that_of_the_last_run(tmp_path) -> None:
    log = tmp_path / "worker.log"
    mark = "==== stratus supervisor: worker started"
    log.write_text(f"{mark} run=1\nold error\n{mark} run=2\nline a\n\nline b\n")
    assert log_tail(log) == "line a\nline b"
    assert log_tail(tmp_path / "none.log") is None


# ---------------------------------------------------------------------- a worker's lifecycle
