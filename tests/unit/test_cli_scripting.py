"""The CLI as scripts use it: exit codes by class of failure, errors as JSON under ``--json``,
a line while it retries toward a nimbus, unwrapped output and UTC times when piped, and
configuration before the verb.

The nimbuses are the scripted fakes of ``test_client_unit`` behind httpx.MockTransport: what
is tested here is what the CLI prints and returns, not the cluster.
"""

from __future__ import annotations

import io
import json
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from rich.console import Console
from rich.table import Table

from stratus.api.errors import (
    ApiError,
    ForbiddenError,
    InvalidTransitionError,
    UnknownPipelineError,
)
from stratus.api.records import (
    ClusterSummary,
    LeaderInfo,
    PipelineList,
    PipelineRuns,
    PipelineStatus,
    PipelineWorkers,
    RunOutcome,
    RunRecord,
    SupervisorSummary,
)
from stratus.cli.cluster_view import print_cluster
from stratus.cli.exit_codes import ExitCode, error_code_of, exit_code_of
from stratus.cli.main import main
from stratus.cli.output import print_table, table_lines, when
from stratus.cli.retry_display import RetryDisplay
from stratus.client import NimbusClient, RetryNotice
from stratus.config import load_config
from stratus.zk.errors import ZooKeeperHistoryBehindError, ZooKeeperUnavailableError
from tests.unit.test_client_unit import A, B, Cluster, FakeTime, Nimbus, error, ok, record

SEEDS = ["-c", f"nimbus.seeds={A},{B}", "-c", "client.retry.deadline.secs=0.05"]


def run(cluster: Cluster, *args: str, seeds: list[str] = SEEDS) -> Any:
    return CliRunner().invoke(main, [*args, *seeds], obj=httpx.MockTransport(cluster))


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


# ---------------------------------------------------------------------- exit codes


def test_a_zookeeper_out_of_reach_is_unavailable_but_one_behind_in_history_is_a_failure():
    """Retrying helps the first (6); only an operator helps the second (1)."""
    assert exit_code_of(ZooKeeperUnavailableError("down")) is ExitCode.UNAVAILABLE
    behind = ZooKeeperHistoryBehindError("wiped")
    assert exit_code_of(behind) is ExitCode.FAILED
    assert error_code_of(behind) == "zookeeper_history_behind"


@pytest.mark.parametrize(
    ("cls", "verb", "code"),
    [
        (UnknownPipelineError, "status", ExitCode.NOT_FOUND),
        (ForbiddenError, "activate", ExitCode.REFUSED),
        (InvalidTransitionError, "activate", ExitCode.CONFLICT),
        (ApiError, "activate", ExitCode.FAILED),
    ],
)
def test_each_class_of_api_error_has_its_exit_code(cluster, cls, verb, code):
    cluster.nimbuses[A] = Nimbus(leaders=[A], answers=[error(cls, "no")])

    result = run(cluster, verb, "wordcount")

    assert result.exit_code == code
    assert result.stderr.splitlines() == ["Error: no"]


def test_no_nimbus_answering_exits_unavailable(cluster):
    result = run(cluster, "list")

    assert result.exit_code == int(ExitCode.UNAVAILABLE) == 6


def test_usage_and_configuration_errors_exit_2(cluster):
    assert run(cluster, "status").exit_code == ExitCode.USAGE  # missing NAME
    bad_key = run(cluster, "list", "-c", "nimbus.seedz=x:1")
    assert bad_key.exit_code == ExitCode.USAGE
    assert "did you mean 'nimbus.seeds'" in bad_key.stderr
    assert cluster.requests == []


def test_exit_codes_are_distinct_per_class():
    assert len({int(code) for code in ExitCode}) == len(ExitCode)


# ---------------------------------------------------------------------- errors under --json


def test_under_json_an_api_error_is_one_json_object_on_stdout(cluster):
    cluster.nimbuses[A] = Nimbus(answers=[error(UnknownPipelineError, "unknown pipeline 'x'")])

    result = run(cluster, "status", "x", "--json")

    assert result.exit_code == ExitCode.NOT_FOUND
    assert result.stderr == ""
    assert json.loads(result.stdout) == {
        "error": "unknown_pipeline",
        "message": "unknown pipeline 'x'",
        "exit_code": 3,
    }


def test_under_json_unreachable_nimbuses_are_a_json_error(cluster):
    result = run(cluster, "list", "--json")

    assert result.exit_code == ExitCode.UNAVAILABLE
    body = json.loads(result.stdout)
    assert body["error"] == "unreachable"
    assert f"seeds: {A}, {B}" in body["message"]


def test_under_json_usage_and_configuration_errors_are_json(cluster):
    usage = run(cluster, "kill", "--json", "--wait", "soon", "wordcount")
    config = run(cluster, "list", "--json", "-c", "nimbus.port=http")

    assert usage.exit_code == config.exit_code == ExitCode.USAGE
    assert json.loads(usage.stdout)["error"] == "usage"
    assert "'soon' is not a valid float" in json.loads(usage.stdout)["message"]
    assert json.loads(config.stdout)["error"] == "invalid_config"
    assert "nimbus.port" in json.loads(config.stdout)["message"]

    before_the_verb = invoke(cluster, "--timeout", "-1", "list", "--json")
    assert before_the_verb.exit_code == ExitCode.USAGE
    assert json.loads(before_the_verb.stdout)["error"] == "usage"


# ---------------------------------------------------------------------- no silent waits


def test_the_client_tells_its_listener_of_every_retry_and_how_the_call_ended(cluster):
    fake_time = FakeTime()
    notices: list[RetryNotice] = []
    cluster.nimbuses[B] = Nimbus(leaders=[None, None, B], answers=[ok(record())])
    client = NimbusClient(
        [A, B],
        retry_deadline=5.0,
        transport=httpx.MockTransport(cluster),
        clock=fake_time.clock,
        sleep=fake_time.sleep,
        on_retry=notices.append,
    )

    client.activate("wordcount")

    *retries, end = notices
    assert [n.attempt for n in retries] == [1, 2]
    assert all(not n.done and n.seeds == (A, B) for n in retries)
    assert "no nimbus knows a leader" in (retries[0].error or "")
    assert end.done and end.error is None and end.attempt == 3
    assert end.elapsed_secs == fake_time.now


def test_a_call_that_never_retried_tells_the_listener_nothing(cluster):
    notices: list[RetryNotice] = []
    cluster.nimbuses[A] = Nimbus(answers=[ok(PipelineList(pipelines=[]))])
    with NimbusClient([A], transport=httpx.MockTransport(cluster), on_retry=notices.append) as c:
        c.list_pipelines()
    assert notices == []


def notice(elapsed: float, *, done: bool = False) -> RetryNotice:
    error = "ConnectError from 10.0.0.1:6627: connection refused"
    return RetryNotice("GET /api/v1/pipelines", 3, elapsed, 30.0 - elapsed, (A, B), error, done)


def test_piped_the_display_says_one_line_once_retries_pass_a_second():
    out = io.StringIO()
    display = RetryDisplay(Console(file=out, width=80), interactive=False)

    display(notice(0.5))
    assert out.getvalue() == ""  # a failover's retries say nothing
    for elapsed in (1.0, 1.5, 2.0):
        display(notice(elapsed))

    [line] = out.getvalue().splitlines()  # one line, not wrapped at 80 columns
    assert line.startswith("stratus: still trying GET /api/v1/pipelines after 1.0 s")
    assert f"seeds: {A}, {B}" in line and "connection refused" in line
    assert line.endswith("giving up in 29 s")


def test_on_a_terminal_the_display_is_a_status_line_that_goes_when_the_call_ends():
    out = io.StringIO()
    display = RetryDisplay(Console(file=out, force_terminal=True, width=200), interactive=True)

    display(notice(1.2))
    display(notice(2.5))
    display(notice(2.6, done=True))

    shown = out.getvalue()
    assert "still trying GET /api/v1/pipelines after 2.5 s" in shown  # updated in place
    assert "\x1b[?25h" in shown  # the live line stopped: the cursor is shown again
    display(notice(3.0))
    display.close()
    assert "after 3.0 s" in out.getvalue()  # a later call's retries start a new line


def test_the_cli_says_it_waits_in_one_line_on_stderr_and_still_answers_json(cluster):
    seeds = ["-c", f"nimbus.seeds={A},{B}", "-c", "client.retry.deadline.secs=1.3"]

    result = run(cluster, "list", "--json", seeds=seeds)

    assert result.exit_code == ExitCode.UNAVAILABLE
    [line] = result.stderr.splitlines()
    assert line.startswith("stratus: still trying GET /api/v1/pipelines after 1.")
    assert json.loads(result.stdout)["error"] == "unreachable"


# ---------------------------------------------------------------------- tables and times

LONG_NAME = "a-pipeline-with-a-name-long-enough-to-push-a-table-past-eighty-columns"


def test_piped_list_is_tab_separated_unwrapped_with_utc_times(cluster):
    records = [record(LONG_NAME), record("b", status=PipelineStatus.KILLED)]
    cluster.nimbuses[A] = Nimbus(answers=[ok(PipelineList(pipelines=records))])

    result = run(cluster, "list")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "# pipelines",
        "pipeline\tstatus\towners\tdigest\tsize\tsubmitted\tepoch",
        f"{LONG_NAME}\tACTIVE\t-\tabababababab\t2.0 KiB\t2023-11-14T22:13:20Z\t3",
        "b\tKILLED\t-\tabababababab\t2.0 KiB\t2023-11-14T22:13:20Z\t3",
    ]


def test_piped_status_shows_the_record_as_field_value_lines(cluster):
    workers = PipelineWorkers(pipeline="wordcount", assignment=None, workers=[])
    no_runs = PipelineRuns(pipeline="wordcount", runs=[])
    cluster.nimbuses[A] = Nimbus(answers=[ok(record()), ok(workers), ok(no_runs)])

    result = run(cluster, "status", "wordcount")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "# pipeline wordcount"
    assert "submitted\t2023-11-14T22:13:20Z" in lines
    assert "# workers of wordcount: not assigned" in lines


def test_the_status_of_a_pipeline_that_runs_nowhere_shows_its_last_run(cluster):
    workers = PipelineWorkers(pipeline="wordcount", assignment=None, workers=[])
    last = RunRecord(
        run=4,
        pipeline="wordcount",
        supervisor="s1",
        epoch=1,
        generation=0,
        digest="d",
        started=1_700_000_000.0,
        ended=1_700_000_125.0,
        outcome=RunOutcome.FINISHED,
        exit_code=0,
        rows=1200,
    )
    runs = PipelineRuns(pipeline="wordcount", runs=[last])
    cluster.nimbuses[A] = Nimbus(answers=[ok(record()), ok(workers), ok(runs)])

    result = run(cluster, "status", "wordcount")

    assert result.exit_code == 0, result.output
    assert "not assigned" not in result.stdout
    assert (
        "last run 4 on s1: FINISHED, started 2023-11-14T22:13:20Z, ended 2023-11-14T22:15:25Z, "
        "ran 2m 05s, exit code 0, rows 1200"
    ) in result.stdout.splitlines()


def test_a_long_line_is_not_wrapped_when_piped(cluster):
    conf = {f"spark.conf.key.number.{i}": "a-value-of-some-length" for i in range(4)}
    cluster.nimbuses[A] = Nimbus(leaders=[A], answers=[ok(record(conf=conf))])

    result = run(cluster, "rebalance", "wordcount", "--conf", "spark.conf.key.number.0=x")

    assert result.exit_code == 0, result.output
    [line] = result.stdout.splitlines()
    assert len(line) > 100 and line.startswith("rebalanced pipeline wordcount")


def test_on_a_terminal_a_table_is_drawn_as_wide_as_the_terminal():
    out = io.StringIO()
    table = Table(title="pipelines")
    table.add_column("pipeline")
    table.add_row(LONG_NAME)

    print_table(Console(file=out, force_terminal=True, width=160), table)

    assert "┏━" in out.getvalue() and "\t" not in out.getvalue()  # rich's box, not tabs
    assert LONG_NAME in out.getvalue()  # one piece: the terminal is wide enough


def test_times_are_iso_8601_in_utc():
    assert when(1_700_000_000.5) == "2023-11-14T22:13:20Z"


# ---------------------------------------------------------------------- config before the verb


def invoke(cluster: Cluster, *args: str) -> Any:
    return CliRunner().invoke(main, list(args), obj=httpx.MockTransport(cluster))


def test_config_given_before_the_verb_is_used(cluster, tmp_path):
    cluster.nimbuses[B] = Nimbus(answers=[ok(PipelineList(pipelines=[]))])
    config = tmp_path / "stratus.yaml"
    config.write_text(f"nimbus.seeds: {B}\n")  # a string, as in -c

    by_override = invoke(cluster, "-c", f"nimbus.seeds={B}", "list")
    by_file = invoke(cluster, "--config", str(config), "list")

    assert by_override.exit_code == by_file.exit_code == 0, by_override.output + by_file.output
    assert {address for address, _ in cluster.sent()} == {B}


def test_the_verbs_own_config_comes_after_the_groups(cluster):
    cluster.nimbuses[A] = Nimbus(answers=[ok(PipelineList(pipelines=[]))])

    result = invoke(cluster, "-c", f"nimbus.seeds={B}", "list", "-c", f"nimbus.seeds={A}")

    assert result.exit_code == 0, result.output
    assert cluster.sent() == [(A, "/api/v1/pipelines")]


@pytest.mark.parametrize("where", ["before", "after"])
def test_timeout_bounds_the_retries_before_or_after_the_verb(cluster, where):
    timeout = ["--timeout", "0.07"]
    args = [*timeout, "list"] if where == "before" else ["list", *timeout]

    result = invoke(cluster, "-c", f"nimbus.seeds={A}", *args)

    assert result.exit_code == ExitCode.UNAVAILABLE
    assert "within 0.07 s" in result.stderr


def test_a_list_key_given_as_a_string_in_a_file_is_the_same_as_with_c(tmp_path):
    config = tmp_path / "stratus.yaml"
    config.write_text(
        "zookeeper.servers: zk1:2181\nnimbus.seeds: 'n1:6627, n2:6627'\n"
        "pipeline.spark.masters: [local]\n"
    )

    from_file = load_config(config, environ={})
    from_overrides = load_config(
        None, ["zookeeper.servers=zk1:2181", "nimbus.seeds=n1:6627, n2:6627"], environ={}
    )

    assert from_file.zookeeper_servers == from_overrides.zookeeper_servers == ["zk1:2181"]
    assert from_file.nimbus_seeds == from_overrides.nimbus_seeds == ["n1:6627", "n2:6627"]
    assert from_file.pipeline_spark_masters == ["local"]  # a YAML list stays a list


def test_a_piped_table_cell_stays_on_its_line_with_escapes_shown():
    table = Table(title="t")
    table.add_column("error")
    table.add_row("two\tparts\nand a \x1b[2J clear")

    assert table_lines(table) == ["# t", "error", "two parts and a \\x1b[2J clear"]


def test_the_cluster_shows_which_supervisors_ride_out_an_outage_of_zookeeper_and_why_not():
    supervisors = [
        SupervisorSummary(id="s1", host="h1", slots=2, zookeeper_outage="ride"),
        SupervisorSummary(
            id="s2",
            host="h2",
            slots=2,
            zookeeper_outage="fence",
            ride_unavailable="2 servers listed for 3 voting members, each once",
        ),
        SupervisorSummary(id="s3", host="h3", slots=2, zookeeper_outage="fence"),
    ]
    summary = ClusterSummary(
        nimbuses=[],
        supervisors=supervisors,
        pipelines=[],
        leader=LeaderInfo(address=None, epoch=None),
    )
    out = io.StringIO()

    print_cluster(Console(file=out, width=200), summary)

    lines = [line.split("\t") for line in out.getvalue().splitlines()]
    header = next(line for line in lines if line[0] == "supervisor")
    rows = {line[0]: dict(zip(header, line, strict=True)) for line in lines if len(line) > 5}
    assert rows["s1"]["zk outage"] == "ride"
    reason = "fence (2 servers listed for 3 voting members, each once)"
    assert rows["s2"]["zk outage"] == reason
    assert rows["s3"]["zk outage"] == "fence"
