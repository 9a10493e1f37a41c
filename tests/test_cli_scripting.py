"""The CLI as scripts use it: exit codes by class of failure, errors as JSON under ``--json``,
a line while it retries toward a nimbus, unwrapped output and UTC times when piped, and
configuration before the verb.

The nimbuses are the scripted fakes of ``test_client_unit`` behind httpx.MockTransport: what
is tested here is what the CLI prints and returns, not the cluster.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from stratus.api.errors import (
    ApiError,
    ForbiddenError,
    InvalidTransitionError,
    UnknownPipelineError,
)
from stratus.cli.exit_codes import ExitCode
from stratus.cli.main import main
from tests.test_client_unit import A, B, Cluster, Nimbus, error

SEEDS = ["-c", f"nimbus.seeds={A},{B}", "-c", "client.retry.deadline.secs=0.05"]


def run(cluster: Cluster, *args: str, seeds: list[str] = SEEDS) -> Any:
    return CliRunner().invoke(main, [*args, *seeds], obj=httpx.MockTransport(cluster))


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


# ---------------------------------------------------------------------- exit codes


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
