"""The test run's Spark JVM options: ``SPARK_SUBMIT_OPTS``, which every Spark driver of the run
reads (``tests/conftest.py`` sets it at import, unless the shell names it or a
``SPARK_CONF_DIR``; supervisors pass it on to their workers, as they do an operator's).

The run starts Spark drivers by the dozen, each for seconds:

- the JIT's first tier compiles them for far less CPU than the optimizing tier, which so short
  a life never pays back, and the serial collector suits their small heaps (a third less CPU
  per driver's start and first job on a 2-core machine);
- a class-data sharing archive (``class_archive.py``), made by the run's first Spark test,
  holds the classes a driver loads, parsed and verified once: each later driver maps it (about
  40 % less CPU again per start and first streaming query, and half the wall time).

Neither changes what a pipeline computes. Not a ``spark-defaults.conf``: Spark puts
``SPARK_CONF_DIR`` first on a driver's class path, and the JVM maps no class archive whose
class path holds a non-empty directory. The benchmarks keep a ``spark-defaults.conf`` of the
JIT's flags (``spark_conf_dir``); the run's ZooKeeper JVMs start with those flags too
(``stratus.zk.server``).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

SPARK_CONF_DIR = "SPARK_CONF_DIR"
SPARK_SUBMIT_OPTS = "SPARK_SUBMIT_OPTS"
SHARED_ARCHIVE = "-XX:SharedArchiveFile="
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
QUIET_SHARING = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a missing or foreign archive: no warning
DEFAULTS = {
    DRIVER_JAVA_OPTIONS: JAVA_OPTIONS,
    "spark.executor.extraJavaOptions": JAVA_OPTIONS,
}


def spark_conf_dir(defaults: Mapping[str, str] = DEFAULTS) -> Path:
    """A new directory holding a ``spark-defaults.conf`` of ``defaults`` (the run's unless
    told), readable by every user (a test's workers may run as another), removed when this
    process exits."""
    directory = run_dir("stratus-spark-conf-")
    conf = directory / "spark-defaults.conf"
    conf.write_text("".join(f"{key} {value}\n" for key, value in defaults.items()))
    conf.chmod(0o644)
    return directory


def driver_options(archive_dir: Path) -> str:
    """The run's ``SPARK_SUBMIT_OPTS``: the JIT's flags and the class archive, to be made in
    ``archive_dir`` (readable by every user: a test's workers may run as another)."""
    return f"{JAVA_OPTIONS} {SHARED_ARCHIVE}{archive_dir / 'spark.jsa'} {QUIET_SHARING}"


def run_dir(prefix: str) -> Path:
    """A new directory readable by every user, removed when this process exits."""
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    directory.chmod(0o755)
    return directory
