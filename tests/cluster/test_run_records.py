"""Run records written by a real supervisor on a real ZooKeeper, with stand-in workers.

Each scenario assigns a pipeline as the leader would (the assignment, and for a removal the
pipeline's assignment change), and reads ``runs/<pipeline>/`` back: one record per worker
process, its outcome as the supervisor judged it, and the log of each run in its own
directory.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from stratus.api.errors import UnknownPipelineError, UnknownRunError
from stratus.api.records import (
    Assignment,
    AssignmentChange,
    AssignmentReason,
    RunOutcome,
    RunRecord,
    WorkerState,
)
from stratus.nimbus.records.assignment_history import AssignmentHistoryLog
from stratus.nimbus.records.run_reads import RunReader
from stratus.supervisor.run_logs import kept_runs, read_run_number, run_dir
from stratus.supervisor.run_outcome import RunEnd
from stratus.supervisor.run_records import RunBook
from stratus.supervisor.worker_process import WorkerPaths
from stratus.zk.paths import ClusterPaths, sequence_of
from tests.cluster.test_supervisor import ROOT, Cluster, running
from tests.harness.zkfixtures import kazoo_client, process_gone, wait_until

pytestmark = pytest.mark.slow

PATHS = ClusterPaths(ROOT)


@pytest.fixture
def cluster(zk_hosts: str, tmp_path: Path) -> Iterator[Cluster]:
    with kazoo_client(zk_hosts) as zk:
        yield Cluster(zk, zk_hosts, tmp_path)


def runs(cluster: Cluster, name: str = "etl") -> list[RunRecord]:
    """The pipeline's run records, oldest first, each with its number."""
    parent = PATHS.pipeline_runs(name)
    if not cluster.zk.exists(parent):
        return []
    found = []
    for node in sorted(cluster.zk.get_children(parent), key=sequence_of):
        record = RunRecord.model_validate_json(cluster.zk.get(f"{parent}/{node}")[0])
        found.append(record.model_copy(update={"run": sequence_of(node)}))
    return found


def wait_for_runs(
    cluster: Cluster, count: int, *, ended: int, name: str = "etl"
) -> list[RunRecord]:
    """Once ``count`` runs are recorded, ``ended`` of them closed: the records."""
    wait_until(
        lambda: (
            len(found := runs(cluster, name)) == count
            and sum(r.outcome is not None for r in found) == ended
        ),
        20,
        f"{count} runs of {name}, {ended} ended",
    )
    return runs(cluster, name)


def record_change(
    cluster: Cluster, reason: AssignmentReason, to: str | None, name: str = "etl"
) -> None:
    """The pipeline's assignment change, as the leader writes it with the assignment."""
    change = AssignmentChange(
        at=time.time(),
        epoch=1,
        reason=reason,
        supervisor=to,
        previous="s1",
        generation=0,
        digest="d",
    )
    prefix = PATHS.assignment_change_prefix(name)
    cluster.zk.create(prefix, change.encode(), sequence=True, makepath=True)


def worker_dir(cluster: Cluster, name: str = "etl") -> Path:
    return cluster.tmp_path / "s1" / "workers" / name


def test_a_finished_batch_is_one_run_recorded_finished_with_its_log_in_its_own_directory(
    cluster,
) -> None:
    meta = cluster.code.upload("etl")
    with running(cluster.conf(), cluster):
        cluster.assign(meta, mode="finish")
        cluster.wait_for_worker(WorkerState.FINISHED)
        (run,) = wait_for_runs(cluster, 1, ended=1)
    assert (run.run, run.outcome, run.exit_code, run.supervisor) == (
        0,
        RunOutcome.FINISHED,
        0,
        "s1",
    )
    assert run.pid is not None and run.ended is not None and run.ended >= run.started
    assert run.digest == meta.digest and run.error is None
    assert run.log_dir == str(run_dir(worker_dir(cluster), 0))
    assert "mode=finish" in (Path(run.log_dir) / "worker.log").read_text()


def test_each_crash_restart_is_a_new_run_failed_with_the_pipelines_exception_first(
    cluster,
) -> None:
    meta = cluster.code.upload("etl")
    with running(cluster.conf(**{"supervisor.worker.max.restarts": 1}), cluster):
        cluster.assign(meta, mode="crash")
        cluster.wait_for_worker(WorkerState.FAILED)
        found = wait_for_runs(cluster, 2, ended=2)
    assert [r.run for r in found] == [0, 1]
    for run in found:
        assert (run.outcome, run.exit_code) == (RunOutcome.FAILED, 1)
        assert run.error is not None
        assert run.error.splitlines()[0] == "ValueError: the fake pipeline crashed"
        assert run.error.splitlines()[1].startswith("the worker exited with code 1:")
        log = Path(run.log_dir or "-") / "worker.log"
        assert log.read_text().count("fake worker etl") == 1  # its own run only
    assert kept_runs(worker_dir(cluster)) == [0, 1]


def test_an_update_closes_the_run_updated_and_opens_the_next(cluster) -> None:
    meta = cluster.code.upload("etl")
    with running(cluster.conf(), cluster):
        cluster.assign(meta)
        first = cluster.wait_for_worker(WorkerState.RUNNING)
        cluster.assign(meta, generation=1)
        cluster.wait_for_worker(WorkerState.RUNNING, where=lambda b: b.generation == 1)
        old, new = wait_for_runs(cluster, 2, ended=1)
        assert read_run_number(worker_dir(cluster)) == 1
    assert (old.outcome, old.generation, old.pid) == (RunOutcome.UPDATED, 0, first.pid)
    assert (new.generation, new.run) == (1, 1)


@pytest.mark.parametrize(
    ("reason", "to", "outcome"),
    [
        (AssignmentReason.KILLED, None, RunOutcome.STOPPED),
        (AssignmentReason.WORKER_SILENT, "s2", RunOutcome.MOVED),
        (AssignmentReason.DRAINED, None, RunOutcome.MOVED),
    ],
)
def test_a_removed_assignment_closes_the_run_as_its_newest_change_says(
    cluster, reason, to, outcome
) -> None:
    meta = cluster.code.upload("etl")
    with running(cluster.conf(), cluster):
        cluster.assign(meta)
        beat = cluster.wait_for_worker(WorkerState.RUNNING)
        record_change(cluster, reason, to)
        cluster.unassign()
        wait_until(lambda: process_gone(beat.pid or 0), 10, "the worker to stop")
        (run,) = wait_for_runs(cluster, 1, ended=1)
    assert run.outcome is outcome
    assert run.exit_code == 0  # it stopped on its SIGTERM


def test_a_supervisor_stopping_with_its_workers_closes_their_runs_stopped(cluster) -> None:
    meta = cluster.code.upload("etl")
    with running(cluster.conf(), cluster):
        cluster.assign(meta)
        cluster.wait_for_worker(WorkerState.RUNNING)
        wait_for_runs(cluster, 1, ended=0)
    (run,) = runs(cluster)  # stop() wrote it before it left ZooKeeper
    assert run.outcome is RunOutcome.STOPPED


def test_the_runs_are_trimmed_to_the_newest_kept_and_the_logs_to_theirs(cluster) -> None:
    meta = cluster.code.upload("etl")
    conf = cluster.conf(
        **{
            "supervisor.worker.max.restarts": 4,
            "pipeline.runs.keep": 3,
            "supervisor.worker.log.runs.keep": 2,
        }
    )
    with running(conf, cluster):
        cluster.assign(meta, mode="crash")
        cluster.wait_for_worker(WorkerState.FAILED)
        wait_until(lambda: [r.run for r in runs(cluster)] == [2, 3, 4], 20, "runs 2 to 4 kept")
    assert kept_runs(worker_dir(cluster)) == [3, 4]


def test_a_nimbus_reads_the_runs_newest_first_and_infers_the_end_a_dead_supervisor_left(
    cluster,
) -> None:
    meta = cluster.code.upload("etl")
    with running(cluster.conf(), cluster):
        cluster.assign(meta, mode="finish")
        cluster.wait_for_worker(WorkerState.FINISHED)
        wait_for_runs(cluster, 1, ended=1)
        cluster.unassign()
        cluster.assign(meta, generation=1)
        wait_for_runs(cluster, 2, ended=1)
    # s1 is gone: as if it had died, its second run is left open, and the leader moved it
    open_path = PATHS.run("etl", 1)
    raw, stat = cluster.zk.get(open_path)
    reopened = RunRecord.model_validate_json(raw).model_copy(
        update={"ended": None, "outcome": None}
    )
    cluster.zk.set(open_path, reopened.encode(), version=stat.version)
    record_change(cluster, AssignmentReason.SUPERVISOR_DEAD, "s2")
    history = AssignmentHistoryLog(cluster.zk, PATHS)
    reader = RunReader(cluster.zk, PATHS, history=history.read, live=lambda: ["s2"])

    newest, first = reader.runs("etl")
    assert (newest.run, first.run) == (1, 0)
    assert first.outcome is RunOutcome.FINISHED and not first.inferred
    assert (newest.outcome, newest.inferred) == (RunOutcome.MOVED, True)
    assert reader.runs("etl", limit=1) == [newest]
    assert reader.run("etl", 0) == first
    with pytest.raises(UnknownRunError, match="runs 0 to 1 are kept"):
        reader.run("etl", 5)
    with pytest.raises(UnknownPipelineError):
        reader.run("nosuch", 0)


def test_a_worker_started_while_zookeeper_is_down_has_its_run_recorded_once_it_is_back(
    zk_restartable, tmp_path
) -> None:
    """The control loop's start does not wait for ZooKeeper: ``open`` gives no number, the
    worker starts with its log where an unnumbered run keeps it, and the book's thread
    writes the run, its pid and its end once ZooKeeper answers again."""
    assignment = Assignment(
        pipeline="etl",
        supervisor="s1",
        epoch=3,
        generation=1,
        digest="d" * 64,
        size_bytes=1,
        assigned=time.time(),
    )
    with kazoo_client(zk_restartable.connect_string) as zk:
        book = RunBook(
            zk,
            PATHS,
            "s1",
            log_dir_of=lambda pipeline, run: (
                WorkerPaths.of(tmp_path, pipeline).for_run(run).log.parent
            ),
        )
        book.start()
        try:
            zk_restartable.stop()
            wait_until(lambda: not zk.connected, 10, "the client to see ZooKeeper gone")
            assert book.open(assignment, started=time.time()) is None
            book.running("etl", None, pid=4242)
            book.close("etl", None, RunEnd(RunOutcome.STOPPED, time.time(), exit_code=0), {})
            zk_restartable.start()
            wait_until(
                lambda: [(r.pid, r.outcome) for r in recorded(zk)] == [(4242, RunOutcome.STOPPED)],
                30,
                "the run recorded with its pid and its end",
            )
        finally:
            book.stop(timeout=5.0)
        (record,) = recorded(zk)
        assert record.run == 0 and record.epoch == 3
        assert record.log_dir == str(tmp_path / "workers" / "etl")  # no runs/<number>/


def recorded(zk: KazooClient) -> list[RunRecord]:
    parent = PATHS.pipeline_runs("etl")
    if not zk.connected or not zk.exists(parent):
        return []
    return [
        RunRecord.model_validate_json(zk.get(f"{parent}/{node}")[0])
        for node in sorted(zk.get_children(parent), key=sequence_of)
    ]
