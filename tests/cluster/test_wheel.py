"""stratus's wheel works anywhere: built from the source tree as docs/deploy.md builds it,
installed into a fresh virtual environment outside the repository (its dependencies from the
package index pip is configured with), it carries the licence, the examples and the ZooKeeper
lookup, and ``stratus local --demo`` run there, from a directory outside the repository,
finishes with every event of the streaming example counted and no process of its own left."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from stratus.supervisor.warm_memory import BUDGET_ENV_VAR
from tests.harness.spark_defaults import SPARK_CONF_DIR, SPARK_SUBMIT_OPTS
from tests.harness.zkfixtures import descendants, left_behind

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# What the wheel is built from: the project's files, not the checkout's venv, caches or .git.
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "src")
INSTALL_SECS = 900  # pyspark and the rest, from the index pip is configured with
DEMO_SECS = 900
# This checkout's, and the test run's settings (no warm workers, its Spark JVM options)
NOT_INHERITED = frozenset(
    {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", BUDGET_ENV_VAR, SPARK_CONF_DIR, SPARK_SUBMIT_OPTS}
)
COUNTED = re.compile(r"(?P<fed>\d+) events fed, (?P<counted>\d+) counted in its output")


def _environment() -> dict[str, str]:
    """This process's environment with no trace of this checkout, nor of the test run's
    settings: the demo runs as ``make run`` runs it, warm workers by default included."""
    env = {key: value for key, value in os.environ.items() if key not in NOT_INHERITED}
    env["COLUMNS"] = "200"
    return env


def _run(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """``argv`` in ``cwd``, with no trace of this checkout in its environment."""
    return subprocess.run(
        argv,
        cwd=cwd,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The bin directory of a fresh venv with stratus installed from its wheel."""
    base = tmp_path_factory.mktemp("wheel")
    tree = base / "source"
    tree.mkdir()
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(
                source, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
            )
        else:
            shutil.copy2(source, tree / name)
    dist = base / "dist"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(dist), "."],
        tree,
        INSTALL_SECS,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("stratus_ha-*.whl")
    venv = base / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], base, 120)
    assert made.returncode == 0, made.stderr
    done = _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", str(wheel)], base, INSTALL_SECS
    )
    assert done.returncode == 0, done.stderr[-3000:]
    yield venv / "bin"


def test_the_wheel_holds_the_license_and_the_examples(installed: Path) -> None:
    (wheel,) = installed.parent.parent.glob("dist/stratus_ha-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    (info,) = {name.split("/")[0] for name in names if name.endswith(".dist-info/METADATA")}
    assert f"{info}/licenses/LICENSE" in names
    for example in ("streaming", "batch", "sdp"):
        assert f"stratus/examples/{example}/stratus.yaml" in names
    for asset in ("app.js", "charts.js", "ui.css", "uplot/uPlot.iife.min.js", "uplot/LICENSE"):
        assert f"stratus/nimbus/ui/static/{asset}" in names  # the web UI's, with its license
    metadata = archive.read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "Classifier: Programming Language :: Python :: 3.11" in metadata
    assert "Project-URL: Homepage, " in metadata


def test_the_installed_stratus_is_the_wheels_and_finds_the_zookeeper_jars(
    installed: Path, tmp_path: Path
) -> None:
    where = _run(
        [str(installed / "python"), "-c", "import stratus; print(stratus.__file__)"],
        tmp_path,
        60,
    )
    assert Path(where.stdout.strip()).is_relative_to(installed.parent)  # not this checkout
    version = _run(
        [
            str(installed / "stratus"),
            "zookeeper-java",
            "org.apache.zookeeper.version.VersionInfoMain",
        ],
        tmp_path,
        120,
    )
    assert version.stdout.startswith("Apache ZooKeeper, version 3.9."), version.stderr


@pytest.mark.timeout(INSTALL_SECS + DEMO_SECS)
def test_stratus_local_demo_from_the_wheel_counts_every_event_and_leaves_no_process(
    installed: Path, tmp_path: Path
) -> None:
    """What ``make run`` runs, as shipped: both kills survived, rows in = rows out, and no
    process of the demo's left once it exits."""
    elsewhere = tmp_path / "elsewhere"  # no examples/ here, no checkout above
    elsewhere.mkdir()
    log = tmp_path / "demo.log"
    with log.open("w") as out:
        demo = subprocess.Popen(
            [str(installed / "stratus"), "local", "--demo"],
            cwd=elsewhere,
            env=_environment(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    started: dict[int, int] = {}
    try:
        while demo.poll() is None:
            started.update(descendants(demo.pid))
            with contextlib.suppress(subprocess.TimeoutExpired):
                demo.wait(timeout=0.2)
    finally:
        demo.kill()
    output = log.read_text()
    assert demo.returncode == 0, output[-4000:]
    assert "kill -9 of the leader nimbus" in output
    assert "kill -9 of supervisor" in output
    counted = COUNTED.search(output)
    assert counted, output[-4000:]
    assert int(counted["fed"]) == int(counted["counted"]) > 0
    assert "rows in = rows out" in output
    assert "all processes stopped" in output
    assert len(started) >= 6  # ZooKeeper, three nimbuses, two supervisors, at least
    left = left_behind(started)
    assert not left, left
