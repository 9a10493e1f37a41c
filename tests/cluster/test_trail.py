"""The trail recorder (``stratus.trail``): what a line holds, that processes sharing a
file never tear each other's lines, that a SIGKILL loses nothing recorded, and that each
process kind records its events (a worker's from its own code, a leader's fenced writes
from the election library's one commit path)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stratus.api.records import QueryProgress, WorkerState
from stratus.chaos.trail_events import load_events
from stratus.config import config_from_mapping
from stratus.coordination import Coordinator, FencedWrite, LeadershipLostError
from stratus.supervisor.settings import SupervisorSettings
from stratus.supervisor.worker_process import WorkerPaths, build_spec
from stratus.trail import MAX_LINE_BYTES, Actor, TrailRecorder, open_for_appending
from stratus.worker.query_progress import QueryTracker
from stratus.worker.run_trail import WorkerTrail
from stratus.worker.spec import WorkerSpec
from stratus.zk.session import ZkSession, ZkSettings
from tests.harness.supervisor_fakes import assignment, code
from tests.harness.zkfixtures import kazoo_client


def spec(tmp_path: Path, history: Path | None) -> WorkerSpec:
    settings = SupervisorSettings.from_config(
        config_from_mapping(
            {"supervisor.id": "s1", **({"history.file": str(history)} if history else {})}
        )
    ).spec
    return build_spec(
        settings,
        "s1",
        assignment(epoch=3, generation=2),
        code(tmp_path),
        WorkerPaths.of(tmp_path, "etl"),
    )


def test_a_line_holds_both_clocks_the_process_and_the_events_fields(tmp_path) -> None:
    path = tmp_path / "h.jsonl"
    recorder = TrailRecorder.open(path, Actor("nimbus", "n1:6627"))
    recorder.record("leader_won", epoch=4, wall="a field may not replace the line's own")
    recorder.close()
    [line] = path.read_text().splitlines()
    event = json.loads(line)
    assert event["event"] == "leader_won" and event["epoch"] == 4
    assert (event["kind"], event["id"], event["pid"]) == ("nimbus", "n1:6627", os.getpid())
    assert isinstance(event["wall"], float) and isinstance(event["mono"], float)
    assert event["host"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_with_no_file_nothing_is_recorded(tmp_path) -> None:
    recorder = TrailRecorder.open(None, Actor("worker", "etl"))
    recorder.record("worker_started", pipeline="etl")
    assert not recorder.enabled
    assert list(tmp_path.iterdir()) == []


def test_a_line_too_long_is_cut_to_its_identity(tmp_path) -> None:
    path = tmp_path / "h.jsonl"
    recorder = TrailRecorder.open(path, Actor("nimbus", "n1"))
    recorder.record("leader_write", epoch=2, ops=["set_data /x"] * 1000)
    recorder.close()
    raw = path.read_bytes()
    assert len(raw) <= MAX_LINE_BYTES
    event = json.loads(raw)
    assert event["truncated"] is True and event["event"] == "leader_write"
    assert "ops" not in event


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from stratus.trail import Actor, TrailRecorder
    recorder = TrailRecorder.open(Path(sys.argv[1]), Actor("worker", sys.argv[2]))
    for n in range(int(sys.argv[3])):
        recorder.record("batch_committed", pipeline=sys.argv[2], batch_id=n, pad="x" * 900)
    if len(sys.argv) > 4:
        print("recorded", flush=True)
        sys.stdin.read()  # wait to be killed
    """
)


def test_processes_sharing_one_file_never_tear_each_others_lines(tmp_path) -> None:
    path = tmp_path / "shared.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"p{k}", "300"], env=env)
        for k in range(4)
    ]
    assert all(w.wait(timeout=60) == 0 for w in writers)
    lines = path.read_bytes().splitlines()
    assert len(lines) == 4 * 300
    events = [json.loads(line) for line in lines]  # a torn line would not parse
    for k in range(4):
        ids = [e["batch_id"] for e in events if e["pipeline"] == f"p{k}"]
        assert ids == list(range(300))


def test_a_process_killed_with_sigkill_loses_nothing_it_recorded(tmp_path) -> None:
    path = tmp_path / "h.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), "p0", "50", "wait"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == "recorded"
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=10)
    assert writer.returncode == -signal.SIGKILL
    assert [e.get("batch_id") for e in load_events([path])] == list(range(50))


def test_a_supervisor_hands_history_file_to_its_workers_spec(tmp_path) -> None:
    path = tmp_path / "h.jsonl"
    assert spec(tmp_path, path).history_file == path
    assert WorkerSpec.model_validate_json(spec(tmp_path, path).model_dump_json()).history_file == (
        path
    )
    assert spec(tmp_path, None).history_file is None


def test_a_worker_records_its_start_each_batch_once_and_its_stop(tmp_path) -> None:
    path = tmp_path / "h.jsonl"
    history = WorkerTrail.open(spec(tmp_path, path))
    tracker = QueryTracker(on_batch=history.batch_committed)
    history.started()
    progresses = [(0, 10, 2.5), (1, 5, 0.25), (1, 5, 0.25), (2, 0, None)]  # batch 1 twice
    for batch_id, rows, secs in progresses:
        tracker.progressed(
            "q-1",
            name="counts",
            batch_id=batch_id,
            num_input_rows=rows,
            input_rows_per_second=1.0,
            processed_rows_per_second=1.0,
            batch_duration_secs=secs,
        )
    history.stopped(WorkerState.STOPPED)
    history.stopped(WorkerState.STOPPED)  # a grace timer racing the main thread: once
    events = [e.fields for e in load_events([path])]
    assert [e["event"] for e in events] == [
        "worker_started",
        "batch_committed",
        "batch_committed",
        "batch_committed",
        "worker_stopped",
    ]
    assert all(
        (e["pipeline"], e["epoch"], e["generation"], e["kind"], e["id"])
        == ("etl", 3, 2, "worker", "etl")
        for e in events
    )
    batches = [(e["query"], e["batch_id"], e["rows"], e["duration_secs"]) for e in events[1:4]]
    assert batches == [("counts", 0, 10, 2.5), ("counts", 1, 5, 0.25), ("counts", 2, 0, None)]
    assert events[-1]["state"] == "STOPPED"
    assert tracker.snapshot() == [
        QueryProgress(
            name="counts",
            id="q-1",
            batch_id=2,
            num_input_rows=0,
            input_rows_per_second=1.0,
            processed_rows_per_second=1.0,
            rows_total=15,
        )
    ]


def test_the_election_library_reports_every_applied_fenced_write_and_no_refused_one(
    zk_hosts,
) -> None:
    heard: list[FencedWrite] = []
    session = ZkSession(ZkSettings(zk_hosts, "/stratus", 4.0, 15.0))
    with (
        Coordinator(session, owns_session=True, on_fenced_write=heard.append) as coordinator,
        kazoo_client(zk_hosts) as zk,
    ):
        zk.ensure_path("/app")
        term = coordinator.nominate("g", "m1")
        with term.transaction() as tx:
            tx.create("/app/a", b"1").set_data("/app", b"x")
        assert len(heard) == 1
        write = heard[0]
        assert (write.group, write.member_id, write.epoch) == ("g", "m1", term.epoch)
        assert write.ops == (("create", "/app/a"), ("set_data", "/app"))
        zk.set(term.epoch_path, b"")  # the epoch moves on: another term began
        with pytest.raises(LeadershipLostError), term.transaction() as tx:
            tx.create("/app/b", b"2")
        assert len(heard) == 1


def test_the_worker_process_records_its_start_and_its_failed_end(tmp_path) -> None:
    """The real worker's main (no Spark: its entrypoint fails to load before Spark starts)."""
    path = tmp_path / "h.jsonl"
    worker_spec = spec(tmp_path, path)
    (tmp_path / "code").mkdir()
    worker_spec.heartbeat_path.parent.mkdir(parents=True)
    worker_spec.write(tmp_path / "spec.json")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    worker = subprocess.run(
        [
            sys.executable,
            "-m",
            "stratus.worker.main",
            str(tmp_path / "spec.json"),
            "--ignore-stdin",
        ],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert worker.returncode == 1, worker.stderr
    events = load_events([path])
    assert [(e.name, e.get("pipeline"), e.get("epoch")) for e in events] == [
        ("worker_started", "etl", 3),
        ("worker_stopped", "etl", 3),
    ]
    assert events[-1].get("state") == "FAILED"
    assert events[0].process == events[1].process  # the worker's own pid, not the test's
    assert events[0].process[1] != os.getpid()


def test_an_inherited_descriptor_is_recorded_to_only_if_it_appends(tmp_path) -> None:
    path = tmp_path / "h.jsonl"
    fd = open_for_appending(path)
    recorder = TrailRecorder.inherited(fd, Actor("worker", "etl"))
    recorder.record("worker_started", pipeline="etl")
    recorder.close()
    assert [json.loads(line)["event"] for line in path.read_text().splitlines()] == [
        "worker_started"
    ]
    assert oct(path.stat().st_mode & 0o777) == "0o600"

    read_only = os.open(path, os.O_RDONLY)
    try:
        assert not TrailRecorder.inherited(read_only, Actor("worker", "etl")).enabled
    finally:
        os.close(read_only)
