"""End to end: the runs of a pipeline and the logs of ended runs, through the real CLI.

A nimbus and a supervisor as processes, pipelines on real Spark: a batch pipeline that
finishes is one run listed FINISHED, its log printed and its last run in the status once
it runs nowhere; a streaming pipeline whose batches raise the pipeline's own exception
crashes for good, and each of its runs is listed FAILED with that exception first and its
log read by number after the pipeline FAILED.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import TypeAdapter

from stratus.api.records import PipelineStatus, RunOutcome, RunRecord
from tests.harness.pipeline_cluster import SPARK_START_SECS, PipelineCluster, pipeline_cluster
from tests.harness.spark_packages import batch_package, failing_batch_package

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

USER_LINE = "failing.RowCountMismatch: batch 0: expected 10 rows, got 0"  # its module's class


def stratus(cluster: PipelineCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, as a user runs it, against the cluster's nimbus."""
    env = {key: value for key, value in os.environ.items() if key != "STRATUS_CONF"}
    seeds = ",".join(cluster.nimbuses.seeds)
    return subprocess.run(
        [sys.executable, "-m", "stratus", *args, "-c", f"nimbus.seeds={seeds}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def listed_runs(cluster: PipelineCluster, name: str) -> list[RunRecord]:
    """``stratus runs NAME -o json``: the run records, newest first, as the API gives them."""
    shown = stratus(cluster, "runs", name, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    return TypeAdapter(list[RunRecord]).validate_json(shown.stdout)


def test_a_finished_batch_is_listed_its_log_printed_and_its_last_run_in_the_status(
    zk_hosts, tmp_path, request
) -> None:
    with pipeline_cluster(zk_hosts, tmp_path, request.node.name, supervisors=("s1",)) as cluster:
        output = {"spark.stratus.example.output": str(tmp_path / "report")}
        cluster.client.submit("report", batch_package(), output)
        cluster.wait_status("report", PipelineStatus.FINISHED, timeout=SPARK_START_SECS * 2)

        (run,) = listed_runs(cluster, "report")
        assert (run.run, run.outcome, run.exit_code, run.supervisor) == (
            0,
            RunOutcome.FINISHED,
            0,
            "s1",
        )
        table = stratus(cluster, "runs", "report")
        assert table.returncode == 0 and "FINISHED" in table.stdout

        log = stratus(cluster, "logs", "report")
        assert log.returncode == 0, log.stderr
        assert "event=worker_exiting state=FINISHED" in log.stdout
        tail = stratus(cluster, "logs", "report", "--tail", "1")
        assert tail.returncode == 0 and len(tail.stdout.splitlines()) == 1

        status = stratus(cluster, "status", "report")
        assert status.returncode == 0, status.stderr
        assert "last run 0 on s1: FINISHED" in status.stdout
        assert "not assigned" not in status.stdout

        bad = stratus(cluster, "logs", "report", "--run", "5")
        assert bad.returncode == 3  # not found
        assert "has no run 5: runs 0 to 0 are kept" in bad.stderr
        malformed = stratus(cluster, "logs", "report", "--since", "ten minutes")
        assert malformed.returncode == 2 and "30s, 10m, 2h, 1d" in malformed.stderr


def test_a_pipeline_that_crashes_for_good_keeps_each_runs_error_and_log(
    zk_hosts, tmp_path, request
) -> None:
    restarts = ["-c", "supervisor.worker.max.restarts=1"]
    with pipeline_cluster(
        zk_hosts, tmp_path, request.node.name, supervisors=("s1",), extra=restarts
    ) as cluster:
        cluster.client.submit("failing", failing_batch_package("failing"), {})
        cluster.wait_status("failing", PipelineStatus.FAILED, timeout=SPARK_START_SECS * 3)

        newest, first = listed_runs(cluster, "failing")
        assert (newest.run, first.run) == (1, 0)
        for run in (newest, first):
            assert (run.outcome, run.exit_code) == (RunOutcome.FAILED, 1)
            assert run.error is not None and run.error.splitlines()[0] == USER_LINE
            log = stratus(cluster, "logs", "failing", "--run", str(run.run))
            assert log.returncode == 0, log.stderr
            assert USER_LINE in log.stdout
            assert log.stdout.count("==== stratus supervisor: worker started") == 1

        status = stratus(cluster, "status", "failing")
        assert status.returncode == 0, status.stderr
        assert "last run 1 on s1: FAILED" in status.stdout
        assert "restarts: 1" in status.stdout
        assert status.stdout.count(f"): {USER_LINE}") == 2  # each run's crash, its exception
