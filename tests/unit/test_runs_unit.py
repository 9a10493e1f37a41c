"""The pure rules of runs: outcomes, inferred ends, the pipeline's own exception, trimming,
the CLI's durations and tails."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from stratus.api.errors import NoLogError
from stratus.api.records import (
    AssignmentChange,
    AssignmentReason,
    QueryProgress,
    RunOutcome,
    RunRecord,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.api.user_exception import error_first, user_exception
from stratus.cli.run_output import failed_runs_lines, parse_since, runs_since
from stratus.nimbus.records.run_reads import inferred_end, pick_run, with_beat
from stratus.supervisor.run_logs import pick_kept, run_over, to_prune, write_run_number
from stratus.supervisor.run_outcome import RunEnd, StopReason, removal_outcome, stop_outcome
from stratus.supervisor.run_records import RUN_RECORD_MAX_BYTES, ended_record, fitted, to_trim
from stratus.supervisor.worker_log import tail_lines

FIXTURES = Path(__file__).parent.parent / "fixtures" / "errors"
USER_LINE = "RowCountMismatch: batch 0: expected 10 rows, got 0"


def run(number: int = 7, **fields: object) -> RunRecord:
    values: dict[str, object] = {
        "run": number,
        "pipeline": "etl",
        "supervisor": "s1",
        "epoch": 1,
        "generation": 0,
        "digest": "d",
        "started": 100.0,
        **fields,
    }
    return RunRecord.model_validate(values)


def change(at: float, reason: AssignmentReason, to: str | None) -> AssignmentChange:
    return AssignmentChange(
        at=at, epoch=1, reason=reason, supervisor=to, previous="s1", generation=0, digest="d"
    )


# ---------------------------------------------------------------------- the user's exception


@pytest.mark.parametrize("name", ["foreach-batch-exception", "foreach-batch-traceback"])
def test_the_pipelines_own_exception_is_found_in_a_real_pyspark_streaming_error(name) -> None:
    text = (FIXTURES / f"{name}.txt").read_text()
    assert user_exception(text) == USER_LINE
    assert text.index(USER_LINE) > 600  # what the error's first lines hide today
    shown = error_first(text)
    assert shown.splitlines()[0] == USER_LINE
    assert shown.endswith(text)


def test_an_error_without_a_traceback_or_with_wrappers_only_is_left_as_it_is() -> None:
    plain = "entrypoint 'nope:run': no module named 'nope'"
    assert error_first(plain) == plain
    wrapped = (
        "Traceback (most recent call last):\n"
        '  File "/x/py4j/java_gateway.py", line 1, in __call__\n'
        "    return f()\n"
        "py4j.protocol.Py4JJavaError: An error occurred while calling o42.start.\n"
        "\tat org.apache.spark.Foo.bar(Foo.scala:1)\n"
        "java.lang.IllegalStateException: boom\n"
    )
    assert user_exception(wrapped) is None


def test_a_chained_exception_shows_the_one_the_pipeline_raised_last() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/app/main.py", line 3, in run\n'
        "    conf['db']\n"
        "KeyError: 'db'\n\n"
        "The above exception was the direct cause of the following exception:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/app/main.py", line 5, in run\n'
        "    raise ConfigError('no db configured') from exc\n"
        "app.errors.ConfigError: no db configured\n"
    )
    assert user_exception(text) == "app.errors.ConfigError: no db configured"


# ---------------------------------------------------------------------- outcomes


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [
        (StopReason.RESTART, RunOutcome.UPDATED),
        (StopReason.FENCED, RunOutcome.FENCED),
        (StopReason.SHUTDOWN, RunOutcome.STOPPED),
        (StopReason.HUNG, RunOutcome.FAILED),
        (StopReason.UNASSIGNED, None),
    ],
)
def test_a_stop_reason_is_the_runs_outcome_but_a_removal_which_history_decides(
    reason, outcome
) -> None:
    assert stop_outcome(reason) is outcome


@pytest.mark.parametrize(
    ("newest", "outcome"),
    [
        (None, RunOutcome.STOPPED),
        (change(1.0, AssignmentReason.KILLED, None), RunOutcome.STOPPED),
        (change(1.0, AssignmentReason.DEACTIVATED, None), RunOutcome.STOPPED),
        (change(1.0, AssignmentReason.SUPERVISOR_DEAD, "s2"), RunOutcome.MOVED),
        (change(1.0, AssignmentReason.DRAINED, None), RunOutcome.MOVED),
        (change(1.0, AssignmentReason.UPDATED, None), RunOutcome.MOVED),  # to its standby
        (change(1.0, AssignmentReason.REBALANCED, None), RunOutcome.MOVED),
        (change(1.0, AssignmentReason.PLACED, "s1"), RunOutcome.STOPPED),
    ],
)
def test_a_removal_is_a_move_only_when_the_newest_change_sends_it_elsewhere(
    newest, outcome
) -> None:
    assert removal_outcome(newest, "s1") is outcome


def test_an_ended_record_takes_the_exit_the_signal_and_a_redacted_error_its_exception_first() -> (
    None
):
    text = (FIXTURES / "foreach-batch-exception.txt").read_text()
    error = f"the worker exited with code 1: {text} password=hunter2"
    failed = ended_record(run(), RunEnd(RunOutcome.FAILED, 200.0, 1, error), {}, None)
    assert (failed.outcome, failed.exit_code, failed.signal) == (RunOutcome.FAILED, 1, None)
    assert failed.error is not None and failed.error.splitlines()[0] == USER_LINE
    assert "hunter2" not in failed.error and failed.duration_secs == 100.0
    killed = ended_record(run(), RunEnd(RunOutcome.FAILED, 200.0, -9), {}, None)
    assert (killed.exit_code, killed.signal, killed.exit) == (None, "SIGKILL", "SIGKILL")
    moved = change(150.0, AssignmentReason.WORKER_SILENT, "s2")
    assert ended_record(run(), RunEnd(None, 200.0, 0), {}, moved).outcome is RunOutcome.MOVED


# ---------------------------------------------------------------------- inferred ends


def test_an_open_run_of_a_dead_supervisor_ends_with_the_change_that_took_it_away() -> None:
    changes = [
        change(50.0, AssignmentReason.SUPERVISOR_DEAD, "s3"),  # before it started
        change(100.0, AssignmentReason.PLACED, "s1"),  # its own placement
        change(300.0, AssignmentReason.SUPERVISOR_DEAD, "s2"),
        change(400.0, AssignmentReason.KILLED, None),
    ]
    ended = inferred_end(run(), list(reversed(changes)))  # newest first, as read
    assert (ended.ended, ended.outcome, ended.inferred) == (300.0, RunOutcome.MOVED, True)
    stopped = inferred_end(run(), [change(250.0, AssignmentReason.NO_ROOM, None)])
    assert (stopped.ended, stopped.outcome) == (250.0, RunOutcome.STOPPED)


def test_an_open_run_that_no_change_took_away_stays_open() -> None:
    still = inferred_end(run(), [change(100.0, AssignmentReason.PLACED, "s1")])
    assert still.ended is None and not still.inferred


# ---------------------------------------------------------------------- trimming and picking


def test_trimming_takes_the_oldest_beyond_the_kept_and_logs_the_same() -> None:
    nodes = [f"run-{n:010d}" for n in (12, 3, 10, 11)]
    assert to_trim(nodes, 2) == ["run-0000000003", "run-0000000010"]
    assert to_trim(nodes, 10) == []
    assert to_prune([5, 1, 9, 7], 2) == [1, 5]


def test_the_log_read_by_default_is_the_newest_run_or_the_one_before() -> None:
    newest_first = [run(9), run(8)]
    assert pick_run("etl", newest_first, previous=False) == run(9)
    assert pick_run("etl", newest_first, previous=True) == run(8)
    assert pick_run("etl", [], previous=True) is None  # an older release's: as before
    with pytest.raises(NoLogError, match="one run on record"):
        pick_run("etl", [run(9)], previous=True)


# ---------------------------------------------------------------------- the CLI


@pytest.mark.parametrize(("text", "secs"), [("30s", 30.0), ("10m", 600.0), ("2h", 7200.0)])
def test_since_takes_a_number_and_a_unit(text, secs) -> None:
    assert parse_since(text) == secs


@pytest.mark.parametrize("text", ["10", "ten minutes", "-5m", "0s", "3w"])
def test_since_refuses_anything_else_naming_the_form(text) -> None:
    with pytest.raises(click.BadParameter, match="30s, 10m, 2h, 1d"):
        parse_since(text)


def test_since_picks_the_runs_open_or_ended_after_the_cutoff_oldest_first() -> None:
    newest_first = [run(3, ended=None), run(2, ended=500.0), run(1, ended=90.0)]
    assert [r.run for r in runs_since(newest_first, 400.0)] == [2, 3]


def test_a_failed_pipelines_restarts_and_crashes_come_from_its_runs() -> None:
    crash = {"outcome": RunOutcome.FAILED, "ended": 150.0, "exit_code": 1, "error": "E: x"}
    newest_first = [run(4, **crash), run(3, **crash), run(2, supervisor="s2", **crash)]
    lines = failed_runs_lines(newest_first)
    assert lines[0] == "restarts: 1"
    assert [line.split(" on ")[0] for line in lines[1:]] == ["crash of run 4", "crash of run 3"]


def test_a_tail_is_the_last_lines_across_rotated_files(tmp_path) -> None:
    old, new = tmp_path / "worker.log.1", tmp_path / "worker.log"
    old.write_bytes(b"".join(b"line %d\n" % n for n in range(5000)))
    new.write_bytes(b"line 5000\nline 5001\n")
    assert tail_lines([old, new], 3) == b"line 4999\nline 5000\nline 5001\n"
    assert tail_lines([old, new], 0) == b""
    assert tail_lines([new], 10) == b"line 5000\nline 5001\n"


def test_a_newer_writers_fields_survive_a_supervisor_that_completes_the_run() -> None:
    stored = run().model_dump(mode="json") | {"gpu_hours": 1.5}
    record = RunRecord.model_validate(stored)
    ended = ended_record(record, RunEnd(RunOutcome.FINISHED, 200.0, 0), {}, None)
    written = json.loads(ended.encode())
    assert written["gpu_hours"] == 1.5 and written["outcome"] == "FINISHED"
    assert "gpu_hours" not in ended.model_dump()  # never shown by the API


def test_a_supervisor_reads_the_named_run_else_its_newest_or_the_one_before() -> None:
    assert pick_kept([3, 4, 5], 4, previous=False) == 4
    assert pick_kept([3, 4, 5], None, previous=False) == 5
    assert pick_kept([3, 4, 5], None, previous=True) == 4
    assert pick_kept([5], None, previous=True) is None
    assert pick_kept([], None, previous=False) is None


def test_a_run_is_over_once_its_exit_is_recorded_or_a_newer_run_is_the_workers(tmp_path) -> None:
    write_run_number(tmp_path, 5)
    assert not run_over(tmp_path, 5, "exit.json")
    assert run_over(tmp_path, 4, "exit.json")
    (tmp_path / "exit.json").write_text("{}")
    assert run_over(tmp_path, 5, "exit.json")


def test_an_open_run_shows_its_own_workers_newest_heartbeat_only() -> None:
    beat = WorkerHeartbeat(
        pipeline="etl",
        supervisor="s1",
        epoch=1,
        generation=0,
        state=WorkerState.RUNNING,
        time=150.0,
        pid=42,
        app_id="local-1",
        spark_ui="http://h:4040",
        queries=[QueryProgress(batch_id=4, rows_total=50), QueryProgress(batch_id=1, rows_total=7)],
    )
    shown = with_beat(run(pid=42), beat)
    assert (shown.batches, shown.rows, shown.app_id) == (7, 57, "local-1")
    assert shown.spark_ui == "http://h:4040"
    assert with_beat(run(pid=41), beat) == run(pid=41)  # another process: an earlier run's


def test_a_run_record_over_the_cap_is_written_with_its_texts_cut_and_says_so() -> None:
    small = RunRecord(
        pipeline="etl", supervisor="s1", epoch=1, generation=0, digest="d", started=1.0
    )
    assert fitted(small) is small
    huge = small.model_copy(update={"app_id": "a" * 40_000, "error": "Boom: " + "x" * 40_000})
    assert len(huge.encode()) > RUN_RECORD_MAX_BYTES
    cut = fitted(huge)
    assert len(cut.encode()) <= RUN_RECORD_MAX_BYTES
    assert cut.error is not None and cut.error.startswith("Boom: ")
    assert f"over {RUN_RECORD_MAX_BYTES} bytes" in cut.error
    assert cut.app_id is not None and len(cut.app_id) <= 256


def test_a_run_record_that_cannot_fit_is_refused_by_name() -> None:
    record = RunRecord(
        pipeline="etl", supervisor="s1", epoch=1, generation=0, digest="d", started=1.0
    )
    with pytest.raises(ValueError, match=r"run \d+ of 'etl' is over 100 bytes even cut"):
        fitted(record, cap=100)
