"""The preflight of an update: the new entry point imported in a real process of its own."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from stratus.codedist.manifest import parse_manifest
from stratus.supervisor.code_cache import PipelineCode
from stratus.supervisor.preflight import (
    Preflight,
    PreflightFailed,
    PreflightPassed,
    PreflightResult,
    start_preflight,
)
from tests.harness.zkfixtures import wait_until

APP = "name: etl\nkind: app\nentrypoint: jobs.main:run\n"


def package(tmp_path: Path, source: str, manifest: str = APP) -> PipelineCode:
    directory = tmp_path / "code"
    (directory / "jobs").mkdir(parents=True)
    (directory / "jobs" / "__init__.py").write_text("")
    (directory / "jobs" / "main.py").write_text(source)
    return PipelineCode("d" * 64, directory, parse_manifest(manifest))


def result_of(code: PipelineCode, timeout_secs: float = 60.0) -> PreflightResult:
    check = start_preflight([sys.executable], code, dict(os.environ), timeout_secs=timeout_secs)
    if isinstance(check, PreflightPassed):
        return check
    assert isinstance(check, Preflight)
    wait_until(lambda: check.poll() is not None, 60, "the preflight's end")
    result = check.poll()
    assert result is not None
    return result


def test_an_entry_point_that_imports_passes(tmp_path) -> None:
    assert result_of(package(tmp_path, "def run(spark, context):\n    return None\n")) == (
        PreflightPassed()
    )


def test_an_exception_at_import_fails_with_the_users_exception_line_first(tmp_path) -> None:
    source = "import os\nprint('noise')\nraise ValueError('bad setting: region')\n"
    result = result_of(package(tmp_path, source))
    assert isinstance(result, PreflightFailed)
    lines = result.error.splitlines()
    assert lines[0] == "ValueError: bad setting: region"
    assert lines[1] == "at jobs/main.py, line 3"
    assert "entrypoint 'jobs.main:run'" in result.error


def test_a_module_missing_from_the_requirements_fails_naming_it(tmp_path) -> None:
    result = result_of(package(tmp_path, "import no_such_library_here\n"))
    assert isinstance(result, PreflightFailed)
    assert result.error.splitlines()[0] == (
        "ModuleNotFoundError: No module named 'no_such_library_here'"
    )


def test_an_entry_function_that_is_missing_fails(tmp_path) -> None:
    result = result_of(package(tmp_path, "def main(spark, context):\n    pass\n"))
    assert isinstance(result, PreflightFailed)
    assert "has no function 'run'" in result.error


def test_an_import_that_does_not_end_in_time_is_killed_and_fails(tmp_path) -> None:
    code = package(tmp_path, "import time\ntime.sleep(600)\n")
    result = result_of(code, timeout_secs=1.0)
    assert isinstance(result, PreflightFailed)
    assert "did not end in time" in result.error


def test_an_sdp_pipeline_has_no_entry_point_to_import(tmp_path) -> None:
    manifest = "name: etl\nkind: sdp\nproject: spark-pipeline.yml\n"
    code = package(tmp_path, "raise ValueError('never imported')\n", manifest)
    check = start_preflight([sys.executable], code, dict(os.environ), timeout_secs=60)
    assert check == PreflightPassed()
