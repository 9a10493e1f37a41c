"""The worker runs one pipeline on real Spark, as a real process, as its supervisor starts it.

Each worker's JVMs are found by a marker in their environment (``worker_processes``), so a
test asserts that none outlives it. Tests wait on conditions (heartbeat contents, output
rows, process exit), never fixed sleeps.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from stratus.api.records import ClusterIdentity, FencingToken, WorkerHeartbeat, WorkerState
from stratus.client_settings import package_limits
from stratus.codedist.package_check import check_package
from stratus.config import StratusConfig
from stratus.local.examples_io import (
    FLUSH_KEY,
    committed_files,
    flush_event,
    make_events,
    read_rows,
)
from stratus.worker import run_guard
from stratus.worker.checkpoint_owner import OWNERS_DIR, CheckpointOwners
from stratus.worker.entrypoint import load_entrypoint
from stratus.worker.errors import EntrypointError
from stratus.worker.outcome import FENCED_EXIT, REFUSED_EXIT
from stratus.worker.pipeline_context import PipelineContext
from stratus.worker.query_progress import QueryTracker
from stratus.worker.sdp_run import derived_spec, sdp_settings
from stratus.worker.spec import WorkerSpec
from stratus.worker.stop_request import STDIN_CLOSED, StopRequest
from tests.harness.spark_packages import (
    BAD_ENTRYPOINT,
    FIRST_TOKEN,
    PASSTHROUGH_QUERY,
    bad_entrypoint_package,
    batch_package,
    blocking_package,
    example_package,
    passthrough_conf,
    passthrough_package,
    read_ids,
    unpack,
    worker_spec,
    write_ids,
)
from tests.harness.worker_processes import START_SECS, STOP_SECS, Worker, WorkerProcesses
from tests.harness.zkfixtures import process_gone, wait_until

pytestmark = pytest.mark.spark

SDP_SECS = 180.0


@pytest.fixture
def start_worker() -> Iterator[Callable[[WorkerSpec], Worker]]:
    """Start workers like a supervisor does; kill what is left of them after the test."""
    processes = WorkerProcesses()
    yield processes.start
    processes.close()


def streaming_spec(tmp_path: Path, name: str) -> WorkerSpec:
    """A pass-through worker over tmp_path/input and tmp_path/output, one checkpoint."""
    code = unpack(passthrough_package(), tmp_path / "code")
    return worker_spec(
        tmp_path / name,
        "passthrough",
        code,
        checkpoint_location=str(tmp_path / "checkpoints" / "passthrough"),
        conf=passthrough_conf(tmp_path / "input", tmp_path / "output"),
    )


def rows_total_is(count: int) -> Callable[[WorkerHeartbeat], bool]:
    return lambda beat: beat.state is WorkerState.RUNNING and beat.rows_total == count


def assert_stopped_without_jvm(worker: Worker, exit_code: int) -> WorkerHeartbeat:
    assert exit_code == 0, worker.output()
    final = worker.heartbeat()
    assert final is not None
    assert final.state is WorkerState.STOPPED, final
    assert worker.seen_jvms, "the worker never ran a JVM"
    assert worker.jvms() == set()
    return final


def test_streaming_pipeline_stopped_then_resumed_delivers_every_record_once(tmp_path, start_worker):
    write_ids(tmp_path / "input", range(50))
    spec = streaming_spec(tmp_path, "first")
    ui_on = {**spec.conf, "spark.ui.enabled": "true", "spark.ui.port": "0"}
    first = start_worker(spec.model_copy(update={"conf": ui_on}))
    starting = first.wait_heartbeat(lambda beat: True, "the first heartbeat", timeout=20)
    assert starting.state is WorkerState.STARTING
    assert starting.pid == first.process.pid
    running = first.wait_heartbeat(rows_total_is(50), "50 rows processed")
    assert running.app_id is not None and running.app_id.startswith("local-")
    assert running.spark_ui is not None and running.spark_ui.startswith("http://")
    assert httpx.get(running.spark_ui, follow_redirects=True).status_code == 200  # the UI
    [query] = running.queries
    assert query.name == PASSTHROUGH_QUERY and query.batch_id >= 0
    assert read_ids(tmp_path / "output") == list(range(50))

    first.process.send_signal(signal.SIGTERM)
    stopped = assert_stopped_without_jvm(first, first.wait_exit())
    assert stopped.app_id == running.app_id and stopped.rows_total == 50

    write_ids(tmp_path / "input", range(50, 120))
    second = start_worker(streaming_spec(tmp_path, "second"))
    second.wait_heartbeat(rows_total_is(70), "the 70 new rows, and only them")
    wait_until(lambda: len(read_ids(tmp_path / "output")) >= 120, 30, "120 rows in the output")
    assert read_ids(tmp_path / "output") == list(range(120))  # each exactly once

    assert second.process.stdin is not None
    second.process.stdin.close()  # its monitor is gone
    assert_stopped_without_jvm(second, second.wait_exit())


def test_a_worker_fenced_by_a_newer_claim_stops_at_its_next_batch(tmp_path, start_worker):
    """A newer worker of the pipeline claimed the checkpoint while this one ran: the batch
    that commits next is its last; it stops by itself, FENCED, and leaves no JVM."""
    write_ids(tmp_path / "input", range(10))
    spec = streaming_spec(tmp_path, "stale")
    worker = start_worker(spec)
    worker.wait_heartbeat(rows_total_is(10), "the first 10 rows")
    newer = FencingToken(era=FIRST_TOKEN.era, zxid=FIRST_TOKEN.zxid + 1)
    assert CheckpointOwners(spec.checkpoint_location, newer).claim() is None
    write_ids(tmp_path / "input", range(10, 20))  # its next batch
    assert worker.wait_exit(START_SECS) == FENCED_EXIT, worker.output()
    final = worker.heartbeat()
    assert final is not None and final.state is WorkerState.FENCED, final
    assert final.error is not None and f"token {newer}" in final.error
    assert worker.seen_jvms and worker.jvms() == set()
    commits = Path(spec.checkpoint_location) / PASSTHROUGH_QUERY / "commits"
    committed = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    assert committed == final.last_batch_id  # nothing committed after the one that saw it
    assert "event=worker_fenced at=batch" in worker.output()


def test_a_checkpoint_of_another_cluster_is_refused_before_spark_runs_the_query(
    tmp_path, start_worker
):
    """Two clusters with one checkpoint root: the second's worker of a pipeline of the same
    name finds the first's checkpoint (Spark's offsets and commits, the first's origin),
    and ends FAILED with an error naming the location and the fix; it writes no claim
    there, starts no JVM, and exits with the code its supervisor does not restart."""
    first = ClusterIdentity.of("127.0.0.1:2181", "/cluster-a")
    write_ids(tmp_path / "input", range(10))
    ran = streaming_spec(tmp_path, "first").model_copy(update={"cluster": first})
    worker = start_worker(ran)
    worker.wait_heartbeat(rows_total_is(10), "the first cluster's 10 rows")
    assert worker.process.stdin is not None
    worker.process.stdin.close()  # as its monitor's end: it stops, checkpoint kept
    assert worker.wait_exit() == 0, worker.output()
    location = Path(ran.checkpoint_location)
    claims_before = sorted((location / OWNERS_DIR).iterdir())
    assert (location / PASSTHROUGH_QUERY / "commits").is_dir()

    second = ClusterIdentity.of("127.0.0.1:2181", "/cluster-b")
    other = streaming_spec(tmp_path, "second").model_copy(
        update={"cluster": second, "token": FencingToken(era=FIRST_TOKEN.era + 1, zxid=1)}
    )
    refused = start_worker(other)

    assert refused.wait_exit() == REFUSED_EXIT, refused.output()
    final = refused.heartbeat()
    assert final is not None and final.state is WorkerState.FAILED, final
    assert final.error is not None
    assert final.error.startswith(f"the checkpoint location {location} is refused")
    assert "root /cluster-a" in final.error and "root /cluster-b" in final.error
    assert "stratus kill --purge passthrough" in final.error
    assert refused.seen_jvms == set()  # refused before Spark ran anything
    assert sorted((location / OWNERS_DIR).iterdir()) == claims_before  # no claim written
    assert "event=checkpoint_refused" in refused.output()


def test_a_worker_moves_its_clusters_checkpoints_from_the_old_default_root(tmp_path, start_worker):
    """An upgraded cluster on the default root: the first worker of a pipeline finds its
    checkpoints under the root of 0.2.0 and earlier (its claims of this cluster's era) and
    moves them to its location before it claims it, then records its origin there."""
    legacy = tmp_path / "stratus-checkpoints" / "bad"
    CheckpointOwners(str(legacy), FencingToken(era=FIRST_TOKEN.era, zxid=0)).claim()
    (legacy / "counts" / "commits").mkdir(parents=True)
    code = unpack(bad_entrypoint_package("bad"), tmp_path / "code")
    location = tmp_path / "stratus-checkpoints.prod" / "bad"
    spec = worker_spec(tmp_path / "bad", "bad", code, checkpoint_location=str(location)).model_copy(
        update={
            "cluster": ClusterIdentity.of("127.0.0.1:2181", "/prod"),
            "legacy_checkpoint_location": str(legacy),
        }
    )
    worker = start_worker(spec)
    assert worker.wait_exit() == 1  # its entrypoint is missing: after the move and the claim
    assert not legacy.exists()
    assert (location / "counts" / "commits").is_dir()
    assert (location / OWNERS_DIR / "origin.json").is_file()
    assert "event=legacy_checkpoints_moved" in worker.output()


def test_a_sigkilled_worker_leaves_no_jvm(tmp_path, start_worker):
    worker = start_worker(streaming_spec(tmp_path, "killed"))
    wait_until(worker.jvms, START_SECS, "the worker's JVM to start")
    worker.process.kill()  # the worker alone: its JVM sees EOF on its stdin pipe
    worker.process.wait()
    wait_until(lambda: not worker.jvms(), STOP_SECS, "the JVM of the killed worker to exit")


def test_a_run_that_ignores_the_stop_is_abandoned_after_the_specs_grace(tmp_path, start_worker):
    code = unpack(blocking_package(), tmp_path / "code")
    spec = worker_spec(
        tmp_path / "blocking",
        "blocking",
        code,
        checkpoint_location=str(tmp_path / "checkpoints"),
        stop_grace_secs=1.0,
    )
    worker = start_worker(spec)
    worker.wait_heartbeat(lambda beat: beat.state is WorkerState.RUNNING, "Spark to run it")
    assert worker.process.stdin is not None
    worker.process.stdin.close()  # its monitor is gone: no one will SIGKILL this worker
    assert worker.wait_exit() == 0, worker.output()
    final = worker.heartbeat()
    assert final is not None and final.state is WorkerState.STOPPED, final
    assert final.error == "the run did not end within 1 s of the stop request"
    wait_until(lambda: not worker.jvms(), STOP_SECS, "its JVM to be gone")


def test_batch_example_finishes_with_its_output(tmp_path, start_worker):
    code = unpack(batch_package(), tmp_path / "code")
    output = tmp_path / "totals"
    spec = worker_spec(
        tmp_path / "batch",
        "batch-report",
        code,
        checkpoint_location=str(tmp_path / "checkpoints"),
        conf={"spark.stratus.example.output": str(output), "spark.stratus.example.orders": 700},
    )
    worker = start_worker(spec)
    assert worker.wait_exit(START_SECS) == 0, worker.output()
    final = worker.heartbeat()
    assert final is not None and final.state is WorkerState.FINISHED, final
    assert final.app_id is not None and final.error is None
    totals = read_rows(output)
    assert len(totals) == 7 and sum(row["orders"] for row in totals) == 700
    assert worker.jvms() == set()


def test_a_missing_entrypoint_function_fails_naming_it(tmp_path, start_worker):
    code = unpack(bad_entrypoint_package(), tmp_path / "code")
    spec = worker_spec(tmp_path / "bad", "bad", code, checkpoint_location=str(tmp_path / "cp"))
    worker = start_worker(spec)
    assert worker.wait_exit() == 1
    final = worker.heartbeat()
    assert final is not None and final.state is WorkerState.FAILED
    assert final.error == (
        f"entrypoint {BAD_ENTRYPOINT!r}: module 'jobs.main' has no function 'run'"
    )
    assert "Traceback" in worker.output()
    assert worker.seen_jvms == set()  # it failed before starting Spark


PYSPARK_CONNECT_PORT = 15002  # where pyspark's own sdp command line binds its Connect server


@contextlib.contextmanager
def port_taken(port: int) -> Iterator[None]:
    """``port`` held on every address for the block (or already held by someone else)."""
    with socket.socket() as holder:
        with contextlib.suppress(OSError):
            holder.bind(("0.0.0.0", port))
            holder.listen()
        yield


def test_sdp_runs_of_one_host_run_at_once_each_on_a_connect_port_of_its_own(tmp_path, start_worker):
    """Two pipelines' sdp runs at once, with pyspark's fixed Connect port taken: each run's
    server binds a free port of its own, and both finish with their tables."""
    code = unpack(example_package("sdp"), tmp_path / "code")
    with port_taken(PYSPARK_CONNECT_PORT):
        workers = {}
        for name in ("sdp-orders", "sdp-orders-2"):
            checkpoints = tmp_path / "checkpoints" / name
            spec = worker_spec(tmp_path / name, name, code, checkpoint_location=str(checkpoints))
            workers[checkpoints] = start_worker(spec)

        def both_exited() -> bool:
            for worker in workers.values():
                worker.jvms()  # notes each one's JVMs while the other one runs too
            return all(worker.process.poll() is not None for worker in workers.values())

        wait_until(both_exited, SDP_SECS, "both sdp workers' exit")
        for checkpoints, worker in workers.items():
            assert worker.process.returncode == 0, worker.output()
            final = worker.heartbeat()
            assert final is not None and final.state is WorkerState.FINISHED, final
            assert final.runs == 1, final
            totals = read_rows(checkpoints / "warehouse" / "customer_totals")
            assert sum(row["orders"] for row in totals) == 1000
            assert worker.seen_jvms, "the sdp run started no JVM"
            assert worker.jvms() == set()


# Pure logic, no Spark: the parts that the scenarios above cannot reach cheaply.


@pytest.mark.parametrize("example", ["streaming", "batch", "sdp"])
def test_examples_are_valid_packages(example, tmp_path):
    archive = tmp_path / "package.zip"
    archive.write_bytes(example_package(example))
    checked = check_package(archive, package_limits(StratusConfig()))
    assert checked.manifest.kind == ("sdp" if example == "sdp" else "app")


def test_entrypoint_errors_name_the_problem(tmp_path):
    (tmp_path / "jobs_ok.py").write_text("value = 3\n\ndef run(spark, context):\n    pass\n")
    (tmp_path / "jobs_broken.py").write_text("raise RuntimeError('no config')\n")
    assert callable(load_entrypoint("jobs_ok:run", tmp_path))
    with pytest.raises(EntrypointError, match="module 'jobs_ok' has no function 'main'"):
        load_entrypoint("jobs_ok:main", tmp_path)
    with pytest.raises(EntrypointError, match="'value' in module 'jobs_ok' is a int, not a"):
        load_entrypoint("jobs_ok:value", tmp_path)
    with pytest.raises(EntrypointError, match="importing 'jobs_broken' raised RuntimeError"):
        load_entrypoint("jobs_broken:run", tmp_path)
    with pytest.raises(EntrypointError, match=r"no module named 'jobs_ok\.sub' in the package"):
        load_entrypoint("jobs_ok.sub:run", tmp_path)


def test_rows_total_counts_each_batch_once_and_a_restarted_query_clears_its_failure():
    tracker = QueryTracker()
    tracker.started("q1", "counts")
    for batch, rows in [(0, 10), (1, 5), (1, 5), (0, 10), (2, 0)]:
        tracker.progressed(
            "q1",
            name="counts",
            batch_id=batch,
            num_input_rows=rows,
            input_rows_per_second=float("nan"),
            processed_rows_per_second=2.5,
        )
    [query] = tracker.snapshot()
    assert (query.batch_id, query.num_input_rows, query.rows_total) == (2, 0, 15)
    assert query.input_rows_per_second == 0.0
    tracker.terminated("q1", "java.io.IOException: disk full\n\tat a.B.c(B.java:1)\n")
    assert (
        tracker.failure() == "streaming query 'counts' (q1) failed: java.io.IOException: disk full"
    )
    tracker.started("q1", "counts")
    assert tracker.failure() is None


def test_context_checkpoints_are_named_under_the_location():
    stop = threading.Event()
    context = PipelineContext(
        pipeline="etl",
        conf={},
        epoch=3,
        generation=0,
        checkpoint_location="hdfs://nn/checkpoints/etl/",
        trigger_interval_secs=None,
        stop_event=stop,
    )
    assert context.checkpoint("counts") == "hdfs://nn/checkpoints/etl/counts"
    for bad in ("", "/abs", "../up", "a//b"):
        with pytest.raises(ValueError, match="checkpoint name"):
            context.checkpoint(bad)
    assert not context.should_stop()
    stop.set()
    assert context.should_stop() and context.wait(60)


def test_sdp_spec_and_settings_are_derived_from_the_pipeline(tmp_path):
    code = unpack(example_package("sdp"), tmp_path / "code")
    spec = worker_spec(
        tmp_path / "w",
        "sdp-orders",
        code,
        checkpoint_location="hdfs://nn/cp/sdp-orders",
        conf={"spark.sql.shuffle.partitions": 3, "spark.master": "local[1]"},
    )
    project = {"name": "p", "storage": "x", "configuration": {"spark.sql.shuffle.partitions": "9"}}
    derived = derived_spec(project, spec)
    assert derived["storage"] == "hdfs://nn/cp/sdp-orders/sdp-storage"
    assert derived["configuration"] == {"spark.sql.shuffle.partitions": "3"}
    settings = sdp_settings(spec)
    assert settings["spark.sql.warehouse.dir"] == "hdfs://nn/cp/sdp-orders/warehouse"
    assert settings["spark.sql.catalogImplementation"] == "hive"
    assert (
        str(tmp_path / "w" / "work" / "sdp-metastore")
        in settings["spark.hadoop.javax.jdo.option.ConnectionURL"]
    )  # not on HDFS: Derby needs a local directory
    assert "spark.master" not in settings  # given as --remote


def test_the_guard_takes_its_whole_group_down_at_eof():
    guard = subprocess.Popen(
        [sys.executable, run_guard.__file__, "--", "sh", "-c", "sleep 60 & sleep 60"],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    group = guard.pid

    def members() -> list[str]:
        return [
            proc.name
            for proc in Path("/proc").glob("[0-9]*")
            if _pgrp(proc) == group and not process_gone(int(proc.name))
        ]

    wait_until(lambda: len(members()) >= 3, 10, "the guard, sh and two sleeps")
    assert guard.stdin is not None
    guard.stdin.close()
    assert guard.wait(timeout=STOP_SECS) == run_guard.TAKEN_DOWN_EXIT
    wait_until(lambda: not members(), 10, "the group to be empty")


def test_the_guard_exits_with_the_code_of_a_command_that_ends_by_itself():
    guard = subprocess.Popen(
        [sys.executable, run_guard.__file__, "--", "sh", "-c", "exit 3"],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert guard.wait(timeout=STOP_SECS) == 3
    finally:
        assert guard.stdin is not None
        guard.stdin.close()


def test_a_stop_is_requested_when_the_workers_stdin_closes():
    read_end, write_end = os.pipe()
    stop = StopRequest()
    try:
        stop.watch(read_end)
        assert not stop.wait(0.05)
        os.close(write_end)  # what the kernel does when the supervisor dies
        assert stop.wait(STOP_SECS)
        assert stop.reason == STDIN_CLOSED
    finally:
        for fd in (write_end, read_end):
            with contextlib.suppress(OSError):
                os.close(fd)


def test_committed_files_follow_the_sink_log_through_compaction(tmp_path):
    log = tmp_path / "_spark_metadata"
    log.mkdir()

    def entry(name: str, action: str = "add") -> str:
        return f'{{"path":"file://{tmp_path}/{name}","action":"{action}"}}'

    (log / "8").write_text("v1\n" + entry("stale.parquet") + "\n")
    (log / "9.compact").write_text("v1\n" + entry("a.parquet") + "\n" + entry("b.parquet") + "\n")
    (log / "10").write_text("v1\n" + entry("c%20d.parquet") + "\n" + entry("a.parquet", "delete"))
    (log / ".11.tmp").write_text("v1\n" + entry("partial.parquet") + "\n")
    assert committed_files(tmp_path) == [tmp_path / "b.parquet", tmp_path / "c d.parquet"]


def test_events_move_forward_in_time_and_a_flush_is_a_day_later():
    events = make_events(4, start_id=10)
    assert [event["id"] for event in events] == [10, 11, 12, 13]
    assert [event["ts"] for event in events] == sorted(event["ts"] for event in events)
    flush = flush_event(14)
    assert flush["key"] == FLUSH_KEY
    assert flush["ts"] == "2024-01-02T00:00:14+00:00"


def _pgrp(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, IndexError, ValueError):
        return None
