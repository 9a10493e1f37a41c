"""End to end on a real Spark standalone cluster: a pipeline's environment reaches the
executors, and the pipeline moves off a killed supervisor exactly once.

A master and one worker (one core) run from the pyspark wheel's ``spark-class``
(``tests/harness/spark_standalone.py``); a nimbus and two supervisors run as real processes,
with the cluster's master allowed by ``pipeline.spark.masters``. The streaming pipeline's UDF
imports a module that exists only in the pipeline's requirements (a wheel the test writes
into a local wheelhouse), and the executors' Python is the test's own interpreter, which
does not have it: a row comes out right only if the requirements' archive reached the
executor. Where the UDF ran (its working directory, under the Spark worker's) and the
master's JSON (the app with its core) show that the executor was the Spark worker's.

Then the supervisor running it is killed (SIGKILL): its worker, the driver, stops at the EOF
of its lifeline, the master ends the driver's application when the driver's connection
drops (``Master.onDisconnected`` finishes the app and kills its executors), so the one core
is free for the driver the other supervisor starts. Every row fed before, during and after
the move comes out once: the new driver resumes from the checkpoint on the shared disk.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from stratus.codedist.package_build import package_bytes
from stratus.local.examples_io import read_rows
from tests.harness.pipeline_cluster import pipeline_cluster
from tests.harness.spark_packages import (
    INPUT_KEY,
    OUTPUT_KEY,
    passthrough_conf,
    read_ids,
    write_ids,
)
from tests.harness.spark_standalone import spark_standalone
from tests.harness.wheelhouse import make_wheel
from tests.harness.zkfixtures import process_gone, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]  # a loaded CI machine

PROBE = "stratus-probe"
PROBE_MODULE = "stratus_probe"
PROBE_VALUE = 7
OUTPUT_SECS = 240.0  # an environment built, an executor started, batches on one core
MOVE_SECS = 240.0  # detection, the other supervisor's environment, a driver's start, the core
BEFORE, DURING, AFTER = range(0, 10), range(10, 20), range(20, 30)
STREAM_SOURCE = f'''"""Each id times its requirement's VALUE, computed on an executor."""

import os

from pyspark.sql import functions as sf
from pyspark.sql.types import LongType, StringType, StructField, StructType

SCHEMA = StructType([StructField("id", LongType())])


@sf.udf(LongType())
def times_value(i):
    import {PROBE_MODULE}  # only in the pipeline's requirements

    return {PROBE_MODULE}.VALUE * i


@sf.udf(StringType())
def where(i):
    return os.getcwd()


def run(spark, context):
    rows = spark.readStream.schema(SCHEMA).json(context.conf["{INPUT_KEY}"])
    tagged = rows.select("id", times_value("id").alias("value"), where("id").alias("cwd"))
    (
        tagged.writeStream.format("parquet")
        .option("checkpointLocation", context.checkpoint("probe"))
        .trigger(processingTime="1 second")
        .start(context.conf["{OUTPUT_KEY}"])
    )
'''


def probe_stream_package(name: str) -> bytes:
    manifest = {
        "name": name,
        "kind": "app",
        "entrypoint": "probe_stream:run",
        "requirements": [f"{PROBE}=={PROBE_VALUE}.0"],
    }
    return package_bytes(
        {
            "stratus.yaml": yaml.safe_dump(manifest, sort_keys=False),
            "probe_stream.py": STREAM_SOURCE,
        }
    )


def test_a_streaming_pipeline_on_a_standalone_cluster_ships_its_requirements_and_moves_once(
    zk_hosts: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    make_wheel(wheelhouse, PROBE, f"{PROBE_VALUE}.0", {PROBE_MODULE: f"VALUE = {PROBE_VALUE}"})
    # The executors' Python: stratus's own, without the requirement; the driver on loopback.
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    with spark_standalone(tmp_path / "spark") as spark:
        options = [
            *("-c", f"pipeline.spark.masters={spark.url}"),
            *("-c", f"supervisor.deps.find.links={wheelhouse}"),
            *("-c", "supervisor.deps.offline=true"),
        ]
        with pipeline_cluster(
            zk_hosts, tmp_path, request.node.name, supervisors=("s1", "s2"), extra=options
        ) as cluster:
            inbox, output = tmp_path / "in", tmp_path / "out"
            conf: dict[str, Any] = {
                **passthrough_conf(inbox, output),
                "spark.master": spark.url,
                "spark.executor.memory": "512m",
            }
            cluster.client.submit("probe", probe_stream_package("probe"), conf)
            first = cluster.wait_running("probe")
            write_ids(inbox, BEFORE)
            wait_until(lambda: read_ids(output) == list(BEFORE), OUTPUT_SECS, "ids before, once")

            rows = sorted(read_rows(output), key=lambda row: row["id"])
            assert [(row["id"], row["value"]) for row in rows] == [
                (i, PROBE_VALUE * i) for i in BEFORE
            ]
            assert all(
                Path(row["cwd"]).parent == spark.work_dir / str(first.app_id) for row in rows
            )
            apps = {app["id"]: app for app in spark.state()["activeapps"]}
            assert apps[first.app_id]["name"] == "stratus-probe"
            assert apps[first.app_id]["cores"] == 1

            cluster.supervisors[first.supervisor].signal(signal.SIGKILL)
            write_ids(inbox, DURING)
            moved = cluster.wait_running("probe", not_on=first.supervisor, timeout=MOVE_SECS)
            write_ids(inbox, AFTER)
            every = list(range(AFTER.stop))
            wait_until(lambda: read_ids(output) == every, OUTPUT_SECS, "every id fed, once")

            assert first.pid is not None and process_gone(first.pid)
            assert moved.app_id not in (None, first.app_id)
            finished = {app["id"] for app in spark.state()["completedapps"]}
            assert first.app_id in finished  # the dead driver's app ended, its core freed
            apps = {app["id"]: app for app in spark.state()["activeapps"]}
            assert apps[moved.app_id]["cores"] == 1  # and the new driver got it
            by_id = {row["id"]: row for row in read_rows(output)}
            assert all(by_id[i]["value"] == PROBE_VALUE * i for i in every)
            new_dir = spark.work_dir / str(moved.app_id)
            assert all(Path(by_id[i]["cwd"]).parent == new_dir for i in AFTER)
