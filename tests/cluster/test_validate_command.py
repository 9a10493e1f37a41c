"""``stratus validate PATH`` prints one ok line (or JSON) for a valid package, else an error."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from stratus.cli.main import main
from tests.harness.package_factory import valid_package, valid_package_dir


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"STRATUS_CONF": None}).invoke(main, ["validate", *args])
    return result.exit_code, result.stdout, result.stderr


def test_a_valid_directory_prints_one_ok_line(tmp_path: Path) -> None:
    directory = valid_package_dir(tmp_path, "wordcount", extra={"lib/util.py": "X = 1\n"})
    size = len(valid_package("wordcount", extra={"lib/": b"", "lib/util.py": "X = 1\n"}))
    code, out, err = run(str(directory))
    assert (code, err) == (0, "")
    assert out == (
        f"ok: pipeline wordcount, kind app (entrypoint pipeline_main:run), 3 files, {size} B\n"
    )


def test_a_valid_sdp_zip_names_its_project(tmp_path: Path) -> None:
    archive = tmp_path / "etl.zip"
    archive.write_bytes(valid_package("etl", kind="sdp", payload_bytes=4096))
    code, out, _ = run(str(archive))
    assert code == 0
    assert out.startswith("ok: pipeline etl, kind sdp (project spark-pipeline.yml), 4 files, 4.")
    assert out.endswith(" KiB\n")


def test_json_prints_the_manifest_sizes_and_digest(tmp_path: Path) -> None:
    data = valid_package("wordcount", conf={"spark.sql.shuffle.partitions": 4})
    archive = tmp_path / "wordcount.zip"
    archive.write_bytes(data)
    code, out, _ = run("--json", str(archive))
    assert code == 0
    summary = json.loads(out)
    assert summary["manifest"]["name"] == "wordcount"
    assert summary["manifest"]["conf"] == {"spark.sql.shuffle.partitions": 4}
    assert (summary["entries"], summary["files"]) == (2, 2)
    assert summary["packed_bytes"] == len(data)
    assert summary["sha256"] == hashlib.sha256(data).hexdigest()


def test_json_redacts_the_manifests_secret_conf_values(tmp_path: Path) -> None:
    conf = {"pipeline.env.DB_PASSWORD": "hunter2", "spark.x": 1}
    archive = tmp_path / "secretive.zip"
    archive.write_bytes(valid_package("secretive", conf=conf))
    code, out, _ = run("--json", str(archive))
    assert code == 0 and "hunter2" not in out
    assert json.loads(out)["manifest"]["conf"] == {"pipeline.env.DB_PASSWORD": "***", "spark.x": 1}


def test_a_manifest_whose_conf_leaves_the_checkpoint_root_is_invalid(tmp_path: Path) -> None:
    archive = tmp_path / "escape.zip"
    archive.write_bytes(valid_package("escape", conf={"pipeline.checkpoint.subpath": "../x"}))
    code, _, err = run(str(archive))
    assert code == 1
    assert "pipeline.checkpoint.subpath" in err and "'..'" in err


def test_the_digest_of_a_directory_is_that_of_its_zip(tmp_path: Path) -> None:
    directory = valid_package_dir(tmp_path, "wordcount")
    _, out, _ = run("--json", str(directory))
    assert json.loads(out)["sha256"] == hashlib.sha256(valid_package("wordcount")).hexdigest()


def test_an_invalid_package_prints_the_error_and_exits_1(tmp_path: Path) -> None:
    directory = valid_package_dir(tmp_path, "wordcount")
    (directory / "stratus.yaml").write_text("name: wordcount\nkind: jar\n")
    code, out, err = run(str(directory))
    assert (code, out) == (1, "")
    assert err == "error: stratus.yaml: kind: must be 'app' or 'sdp' (got 'jar')\n"


def test_the_configured_limits_apply(tmp_path: Path) -> None:
    archive = tmp_path / "big.zip"
    archive.write_bytes(valid_package(payload_bytes=10_000))
    code, _, err = run(str(archive), "-c", "package.max.unpacked.bytes=5000")
    assert code == 1
    assert "over package.max.unpacked.bytes (5000)" in err


def test_the_installed_command_validates_and_fails(tmp_path: Path) -> None:
    directory = valid_package_dir(tmp_path, "wordcount")
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"not a zip")
    command = [sys.executable, "-m", "stratus", "validate"]  # sys.executable: .venv/bin/python
    env = {key: value for key, value in os.environ.items() if key != "STRATUS_CONF"}
    ok = subprocess.run(
        [*command, str(directory)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("ok: pipeline wordcount, kind app")
    failed = subprocess.run(
        [*command, str(broken)], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert failed.returncode == 1
    assert failed.stdout == ""
    assert failed.stderr.startswith("error: the package is not a zip archive")
    assert "Traceback" not in failed.stderr


def test_under_json_an_invalid_package_is_a_json_error_on_stdout(tmp_path: Path) -> None:
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"not a zip")

    code, out, err = run("--json", str(broken))

    assert (code, err) == (1, "")
    body = json.loads(out)
    assert body["error"] == "invalid_package"
    assert body["message"].startswith("the package is not a zip archive")


def test_a_syntax_error_is_refused_naming_the_file_line_and_message(tmp_path: Path) -> None:
    broken = "def total(rows:\n    return sum(rows)\n"
    directory = valid_package_dir(tmp_path, "wordcount", extra={"lib/util.py": broken})
    code, out, err = run(str(directory))
    assert (code, out) == (1, "")
    assert err.startswith("error: lib/util.py, line 1: ")
    assert "def total(rows:" in err
