"""The test run's Spark defaults: a ``spark-defaults.conf`` that every Spark JVM of the run
reads, through ``SPARK_CONF_DIR`` (``tests/conftest.py`` sets it at import, unless the shell
names one; workers keep it, as they keep an operator's).

The run starts Spark drivers by the dozen, each for seconds: the JIT's first tier compiles
them for far less CPU than the optimizing tier, which so short a life never pays back, and
the serial collector suits their small heaps (a third less CPU per driver's start and first
job on a 2-core machine). Neither changes what a pipeline computes. The ZooKeeper JVMs of
the run start with the same flags (``stratus.zk.server``).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

SPARK_CONF_DIR = "SPARK_CONF_DIR"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
DEFAULTS = {
    DRIVER_JAVA_OPTIONS: JAVA_OPTIONS,
    "spark.executor.extraJavaOptions": JAVA_OPTIONS,
}


def spark_conf_dir(defaults: Mapping[str, str] = DEFAULTS) -> Path:
    """A new directory holding a ``spark-defaults.conf`` of ``defaults`` (the run's unless
    told), readable by every user (a test's workers may run as another), removed when this
    process exits."""
    directory = Path(tempfile.mkdtemp(prefix="stratus-spark-conf-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    directory.chmod(0o755)
    conf = directory / "spark-defaults.conf"
    conf.write_text("".join(f"{key} {value}\n" for key, value in defaults.items()))
    conf.chmod(0o644)
    return directory
