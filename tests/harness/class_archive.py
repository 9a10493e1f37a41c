"""The test run's class-data sharing archive for Spark drivers: made once, mapped by every
driver after it (``spark_defaults.py`` says why).

``SPARK_SUBMIT_OPTS`` names the archive from the run's start. A driver that starts before it
exists, or whose class path differs from the one it was made with (an sdp run's conf
directory, a wheel's own pyspark), runs without it, silently. The first Spark test of each
pytest process calls ``ensure``: under a lock (two workers never make it twice), a driver runs
``class_archive_workload`` with ``-XX:ArchiveClassesAtExit``, its JVM writes the classes it
loaded as it exits, and the file is renamed into place whole. A failure to make it is
reported once, and the run goes on without it::

    ensure(archive_of(os.environ))      # the archive is in place, or was tried here
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path

from tests.harness.spark_defaults import JAVA_OPTIONS, SHARED_ARCHIVE, SPARK_SUBMIT_OPTS
from tests.harness.zkfixtures import holds_within, process_gone

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = "tests.harness.class_archive_workload"
PID_LINE = "driver jvm pid: "  # the workload's line, among its JVM's own
MAKE_SECS = 300.0  # a driver's start, two queries and the dump, on a loaded 2-core machine
_attempted: set[Path] = set()  # the archives this process made, or found, or failed to make


def archive_of(environ: Mapping[str, str]) -> Path | None:
    """The archive ``SPARK_SUBMIT_OPTS`` names, if any."""
    for option in environ.get(SPARK_SUBMIT_OPTS, "").split():
        if option.startswith(SHARED_ARCHIVE):
            return Path(option.removeprefix(SHARED_ARCHIVE))
    return None


def ensure(archive: Path | None) -> None:
    """Make ``archive`` unless it is in place or this process tried already."""
    if archive is None or archive in _attempted:
        return
    _attempted.add(archive)
    with (archive.parent / f"{archive.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if archive.exists():
            return
        try:
            _make(archive)
        except (OSError, subprocess.SubprocessError, ValueError) as error:
            warnings.warn(f"no class archive for the run's Spark drivers: {error}", stacklevel=1)


def _make(archive: Path) -> None:
    """Run the workload with the archive dumped at its JVM's exit, then move it into place."""
    dumped = archive.with_name(f"{archive.name}.making")
    dumped.unlink(missing_ok=True)
    env = {**os.environ, SPARK_SUBMIT_OPTS: f"{JAVA_OPTIONS} -XX:ArchiveClassesAtExit={dumped}"}
    with tempfile.TemporaryDirectory(prefix="stratus-class-archive-") as work:
        done = subprocess.run(
            [sys.executable, "-m", WORKLOAD, work],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=MAKE_SECS,
            check=False,
        )
        if done.returncode != 0:
            raise ValueError(f"its workload exited {done.returncode}: {done.stderr[-2000:]}")
        pids = [
            line.removeprefix(PID_LINE)
            for line in done.stdout.splitlines()
            if line.startswith(PID_LINE)
        ]
        if not pids:
            raise ValueError(f"its workload printed no pid: {done.stdout[-2000:]}")
        pid = int(pids[-1])
        # the JVM writes the archive as it exits, after its Python
        if not holds_within(lambda: process_gone(pid), MAKE_SECS):
            raise ValueError(f"its JVM {pid} still runs {MAKE_SECS:g} s after its driver")
    if not dumped.exists():
        raise ValueError(f"its JVM wrote no {dumped}")
    dumped.chmod(0o644)  # workers run as other users in some tests
    dumped.rename(archive)
