"""End to end, on real Spark: safe updates of a running streaming pipeline.

Nimbus, supervisor and workers are real processes on the shared real ZooKeeper. One
scenario, in the order an operator meets it:

1. an update whose entry point cannot be imported is refused before the old worker stops:
   its pid is the same after, its batches go on, the pipeline is back at version 1 with the
   import error as its reason, and ``stratus update`` (which waits by default) exits 1
   with it;
2. an update whose first batch fails is rolled back to the version that ran before, which
   resumes from the checkpoint: every row is still counted once (``wait_running`` returns
   once the new worker runs, before its first batch: it may return, or fail if the
   rollback came first);
3. an update that fails with rollback off leaves the pipeline FAILED, and ``restart`` runs it
   again with its kept package: every row once, the late ones by the restarted version.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stratus.api.records import PipelineStatus
from stratus.cli.main import main
from stratus.client.errors import RolloutFailedError
from tests.harness.pipeline_cluster import SPARK_START_SECS, PipelineCluster, pipeline_cluster
from tests.harness.spark_packages import (
    FAIL_MARKER_KEY,
    flaky_batch_package,
    passthrough_conf,
    passthrough_package,
    read_ids,
    read_versions,
    unimportable_package,
    write_ids,
)
from tests.harness.zkfixtures import process_gone, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]
OUTPUT_SECS = 120.0
ROLLOUT_SECS = 2 * SPARK_START_SECS + OUTPUT_SECS  # a stop, a start, a failure, a start
GRACEFUL = [
    "-c", "nimbus.supervisor.timeout.secs=30",
    "-c", "supervisor.worker.stop.secs=25",
    "-c", "supervisor.worker.max.restarts=0",  # a worker that crashes is FAILED at once
]  # fmt: skip


def feed_and_wait(tmp_path: Path, ids: range, output: Path) -> None:
    """Feed ``ids`` and wait until the output holds every id fed so far, each once."""
    write_ids(tmp_path / "pt-in", ids)
    expected = list(range(ids.stop))
    wait_until(lambda: read_ids(output) == expected, OUTPUT_SECS, f"ids 0-{ids.stop - 1} once")


def refused_import(cluster: PipelineCluster, tmp_path: Path, output: Path) -> int:
    """Scenario 1; the pid of the worker that ran on."""
    old = cluster.wait_running("pt")
    package = tmp_path / "unimportable.zip"
    package.write_bytes(unimportable_package("pt"))
    seeds = ["-c", f"nimbus.seeds={','.join(cluster.nimbuses.seeds)}"]

    update = CliRunner().invoke(main, ["update", "pt", str(package), "--json", *seeds])  # waits

    assert update.exit_code == 1, update.output
    failure = json.loads(update.output)
    assert failure["error"] == "rollout_failed"
    why = "rolled back from version 2 to 1: its entry point failed to import: "
    assert f"{why}RuntimeError: REGION is not set" in failure["message"]
    record = cluster.client.status("pt")
    assert record.version == 1 and (record.reason or "").startswith(why)
    still = cluster.wait_running("pt")
    assert (still.pid, still.generation) == (old.pid, record.generation)  # never stopped
    feed_and_wait(tmp_path, range(50, 100), output)  # its batches go on
    assert old.pid is not None
    return old.pid


def rolled_back_at_first_batch(
    cluster: PipelineCluster, tmp_path: Path, output: Path, old_pid: int, marker: Path
) -> int:
    """Scenario 2; the pid of the worker of version 1 that runs again."""
    marker.touch()
    update = cluster.client.update("pt", flaky_batch_package("pt"), {FAIL_MARKER_KEY: str(marker)})
    assert update.version == 3
    wait_until(lambda: process_gone(old_pid), ROLLOUT_SECS, "the old worker to stop for version 3")
    write_ids(tmp_path / "pt-in", range(100, 150))  # version 3's first batch fails on them

    with contextlib.suppress(RolloutFailedError):  # it may run, or fail before it runs
        cluster.client.wait_running(update, timeout=ROLLOUT_SECS)

    def rolled_back() -> str:
        return cluster.client.status("pt").reason or ""

    why = "rolled back from version 3 to 1: its worker failed before its first batch"
    wait_until(lambda: why in rolled_back(), ROLLOUT_SECS, "version 3 to be rolled back")
    assert "batch refused" in rolled_back()
    back = cluster.wait_running("pt", timeout=ROLLOUT_SECS)
    assert cluster.client.status("pt").version == 1
    feed_and_wait(tmp_path, range(150, 200), output)  # 0-199, each once
    assert all(version is None for version in read_versions(output).values())  # 3 wrote none
    assert back.pid is not None
    return back.pid


def restarted_after_failing(
    cluster: PipelineCluster, tmp_path: Path, output: Path, old_pid: int, marker: Path
) -> None:
    """Scenario 3."""
    conf = {FAIL_MARKER_KEY: str(marker), "pipeline.update.rollback": False}
    update = cluster.client.update("pt", flaky_batch_package("pt", version=4), conf)
    assert update.version == 4
    wait_until(lambda: process_gone(old_pid), ROLLOUT_SECS, "the old worker to stop for version 4")
    write_ids(tmp_path / "pt-in", range(200, 250))
    failed = cluster.wait_status("pt", PipelineStatus.FAILED, timeout=ROLLOUT_SECS)
    assert "batch refused" in (failed.reason or "") and failed.version == 4

    marker.unlink()
    restarted = cluster.client.restart("pt")
    assert restarted.status is PipelineStatus.ACTIVE
    assert restarted.generation == failed.generation + 1
    cluster.client.wait_running(restarted, timeout=ROLLOUT_SECS)
    feed_and_wait(tmp_path, range(250, 300), output)  # 0-299, each once
    versions = read_versions(output)
    assert all(versions[i] == 4 for i in range(200, 300))  # by the restarted version


def test_a_failing_update_never_loses_the_running_pipeline_and_restart_runs_a_failed_one(
    zk_hosts, tmp_path, request
):
    with pipeline_cluster(
        zk_hosts, tmp_path, request.node.name, supervisors=("s1",), extra=GRACEFUL
    ) as cluster:
        output = tmp_path / "pt-out"
        cluster.client.submit(
            "pt", passthrough_package("pt"), passthrough_conf(tmp_path / "pt-in", output)
        )
        cluster.wait_running("pt")
        feed_and_wait(tmp_path, range(0, 50), output)
        marker = tmp_path / "fail-now"

        pid = refused_import(cluster, tmp_path, output)
        pid = rolled_back_at_first_batch(cluster, tmp_path, output, pid, marker)
        restarted_after_failing(cluster, tmp_path, output, pid, marker)
