"""The daemons' logs: their fields read from the message template, one quoting rule in text,
one JSON object per line with ``log.format: json``, and ``--log-level`` on every daemon and
on ``stratus elect``.

The formatters are pure and tested on log records; one real ``stratus pacemaker`` process
shows the level and format reaching a daemon's stderr, and one real ``stratus elect`` its.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from stratus.cli.main import main
from stratus.config import load_config
from stratus.logs import (
    ContextFields,
    JsonFormatter,
    LogFormat,
    LogSettings,
    RepeatLimit,
    TextFormatter,
    configure_daemon_logging,
    event_fields,
    with_fields,
)
from stratus.settings import log_settings
from tests.harness.pipeline_cluster import pipeline_cluster
from tests.harness.spark_packages import bad_entrypoint_package
from tests.harness.zkfixtures import wait_until

ROOT = Path(__file__).resolve().parents[2]
DAEMONS = ("zookeeper", "nimbus", "supervisor", "pacemaker", "zkfc")
LOGGING_COMMANDS = (*DAEMONS, "elect")  # elect: a long-running process beside a command


def record(msg: str, *args: object, level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord("stratus.test", level, __file__, 1, msg, args, None)


def test_fields_come_from_the_template_with_their_types():
    fields = event_fields(
        record(
            "event=fenced epoch=%d member=%s error=%r rate=%.1f short=%.3s",
            4,
            "n 1",
            "it's down",
            2.345,
            "abcdef",
        )
    )

    assert fields == {
        "event": "fenced",
        "epoch": 4,
        "member": "n 1",
        "error": "it's down",  # %r of a string: the string, not its repr's quotes
        "rate": 2.3,
        "short": "abc",
    }


def test_words_that_are_not_fields_are_the_message():
    assert event_fields(record("Started server process [%d]", 42)) == {
        "message": "Started server process [42]"
    }
    assert event_fields(record("event=x pid=%d", 1, 2)) == {"message": "event=x pid=%d (1, 2)"}


def test_text_lines_quote_every_value_one_way():
    line = TextFormatter().format(
        record("event=code_fetched pipeline=%s from=%s error=%r", "etl", "n1:6628", "a b")
    )

    time, rest = line.split(" ", 1)
    assert time.endswith("Z") and "T" in time  # ISO 8601, UTC
    assert rest == (
        'level=INFO logger=stratus.test event=code_fetched pipeline=etl from=n1:6628 error="a b"'
    )
    assert TextFormatter().format(record("event=x reason=%s", "")).endswith('reason=""')


def test_json_lines_carry_the_same_fields_and_the_traceback():
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord(
            "stratus.test",
            logging.ERROR,
            __file__,
            1,
            "event=close_failed id=%s",
            ("s1",),
            sys.exc_info(),
        )

    line = JsonFormatter().format(failed)

    assert "\n" not in line
    body = json.loads(line)
    assert body["level"] == "ERROR" and body["logger"] == "stratus.test"
    assert body["event"] == "close_failed" and body["id"] == "s1"
    assert body["time"].endswith("Z")
    assert body["exception"].endswith("ValueError: boom")


class Collect(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__()
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_fields_passed_with_the_call_are_fields_of_the_line_in_both_formats():
    """A state machine's transition logs details that vary with the transition: they are
    fields with their types, never words of a message."""
    logger = logging.getLogger("stratus.test.fields")
    records: list[logging.LogRecord] = []
    handler = Collect(records)
    logger.addHandler(handler)
    try:
        logger.warning(
            "event=worker_backoff pipeline=%s restarts=%d",
            "etl",
            1,
            extra=with_fields(
                crashes_in_row=1, restart_in_secs=0.5, error="exit 1: it's down", time="x"
            ),
        )
    finally:
        logger.removeHandler(handler)

    body = json.loads(JsonFormatter().format(records[0]))
    assert "message" not in body
    assert (body["event"], body["pipeline"], body["restarts"]) == ("worker_backoff", "etl", 1)
    assert (body["crashes_in_row"], body["restart_in_secs"]) == (1, 0.5)
    assert body["error"] == "exit 1: it's down"
    assert body["field.time"] == "x"  # a reserved name is kept apart
    text = TextFormatter().format(records[0])
    assert text.endswith(
        'restarts=1 crashes_in_row=1 restart_in_secs=0.5 error="exit 1: it\'s down" field.time=x'
    )


def test_the_repeat_limit_count_is_a_field():
    limit = RepeatLimit(limit=1, interval_secs=10, clock=lambda: now)
    now = 0.0
    limit.filter(record("event=accept_failed", level=logging.WARNING))
    assert not limit.filter(record("event=accept_failed", level=logging.WARNING))
    now = 20.0
    again = record("event=accept_failed", level=logging.WARNING)
    assert limit.filter(again)

    assert json.loads(JsonFormatter().format(again))["suppressed_before"] == "1"


def test_log_settings_come_from_the_keys():
    conf = load_config(None, ["log.level=debug", "log.format=json"], environ={})

    assert log_settings(conf) == LogSettings(logging.DEBUG, LogFormat.JSON)
    assert log_settings(load_config(None, [], environ={})) == LogSettings()


def test_context_fields_follow_the_logger_on_every_line_in_both_formats():
    entry = record("event=batch_committed batch=%d", 7)
    assert ContextFields({"pipeline": "etl", "epoch": 3}).filter(entry)

    text = TextFormatter().format(entry)
    assert text.split(" ", 1)[1] == (
        "level=INFO logger=stratus.test pipeline=etl epoch=3 event=batch_committed batch=7"
    )
    fields = json.loads(JsonFormatter().format(entry))
    assert (fields["pipeline"], fields["epoch"], fields["batch"]) == ("etl", 3, 7)


def test_http_clients_log_no_line_per_request_at_info():
    root = logging.getLogger()
    loggers = [logging.getLogger(name) for name in ("httpx", "httpcore", "kazoo", "uvicorn")]
    levels = [logger.level for logger in [root, *loggers]]
    try:
        configure_daemon_logging(LogSettings(logging.INFO))
        root.setLevel(logging.INFO)  # as in a daemon (the test's root already has handlers)

        assert not any(logger.isEnabledFor(logging.INFO) for logger in loggers)
        assert all(logger.isEnabledFor(logging.WARNING) for logger in loggers)
    finally:
        for logger, level in zip([root, *loggers], levels, strict=True):
            logger.setLevel(level)


@pytest.mark.parametrize("command", LOGGING_COMMANDS)
def test_every_daemon_and_stratus_elect_take_log_level(command):
    result = CliRunner().invoke(main, [command, "--help"])

    assert result.exit_code == 0
    assert "--log-level" in result.stdout


def test_a_bad_log_level_is_a_usage_error():
    result = CliRunner().invoke(main, ["pacemaker", "--log-level", "loud"])

    assert result.exit_code == 2
    assert "'loud' is not one of" in result.stderr


def test_a_daemon_logs_json_lines_at_its_level(tmp_path):
    """A real pacemaker with --log-level warning and log.format json: a malformed frame's
    warning is one JSON line on stderr, and its start-up information lines are not logged."""
    stderr = (tmp_path / "pacemaker.log").open("w")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    args = ["pacemaker", "--port", "0", "--log-level", "WARNING", "-c", "log.format=json"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "stratus", *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("pacemaker: serving at "), line
        port = int(line.strip().rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(b"\xff\xff\xff\xff not a frame")
            conn.recv(4096)  # the error answer: the warning is logged before it is sent
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        stderr.close()

    lines = (tmp_path / "pacemaker.log").read_text().splitlines()
    logged = [json.loads(line) for line in lines]  # every line is JSON
    assert [entry["event"] for entry in logged] == ["bad_frame"]
    assert logged[0]["level"] == "WARNING" and logged[0]["reason"]


def test_stratus_elect_logs_json_lines_at_its_level(zk_hosts):
    """A real ``stratus elect --show`` with log.format json: its ZooKeeper session's lines
    are JSON on stderr, beside the group on stdout; with --log-level warning they are not
    logged."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def show(*options: str) -> subprocess.CompletedProcess[str]:
        args = ["elect", "--show", "svc", "-c", f"zookeeper.servers={zk_hosts}", *options]
        return subprocess.run(
            [sys.executable, "-m", "stratus", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    logged = show("-c", "log.format=json")
    quiet = show("-c", "log.format=json", "--log-level", "WARNING")

    assert logged.returncode == 0, logged.stderr
    assert "group svc: no leader" in logged.stdout
    events = [json.loads(line)["event"] for line in logged.stderr.splitlines()]
    assert "zookeeper_connected" in events
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""


def test_a_message_without_arguments_is_kept_as_written():
    assert event_fields(record("event=x note=100%%")) == {"event": "x", "note": "100%%"}
    assert event_fields(record("event=x done=%d%%", 50)) == {"event": "x", "done": "50%"}


@pytest.mark.timeout(300)
def test_a_real_supervisors_worker_lifecycle_lines_carry_their_fields_in_json(
    zk_hosts, tmp_path, request
):
    """A real nimbus and supervisor with log.format json, a pipeline whose worker fails at
    once: the supervisor's worker_running and worker_backoff lines hold the pid, the error,
    the delay and the count as JSON fields of their own, nothing in a message."""
    with pipeline_cluster(
        zk_hosts,
        tmp_path,
        request.node.name,
        supervisors=("s1",),
        extra=["-c", "log.format=json", "-c", "supervisor.worker.restart.backoff.secs=5"],
    ) as cluster:
        cluster.client.submit("bad", bad_entrypoint_package("bad"), {})
        log = cluster.supervisors["s1"].log_path

        def lifecycle() -> dict[str, dict[str, object]]:
            found: dict[str, dict[str, object]] = {}
            for line in log.read_text().splitlines():
                if line.startswith("{"):
                    body = json.loads(line)
                    if str(body.get("event", "")).startswith("worker_"):
                        found.setdefault(str(body["event"]), body)
            return found

        wait_until(lambda: "worker_backoff" in lifecycle(), 60, "a worker_backoff line")
        lines = lifecycle()

    running, backoff = lines["worker_running"], lines["worker_backoff"]
    assert "message" not in running and "message" not in backoff
    assert isinstance(running["pid"], int) and running["pid"] > 0
    assert running["pipeline"] == "bad" and isinstance(running["token"], str)
    assert backoff["restart_in_secs"] == 5.0
    assert backoff["crashes_in_row"] == 1
    assert isinstance(backoff["error"], str) and "no function 'run'" in backoff["error"]
    assert backoff["level"] == "WARNING"
