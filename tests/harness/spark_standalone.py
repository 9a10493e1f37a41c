"""A real Spark standalone cluster for a test: one master and one worker on loopback.

Both are started from the pyspark wheel's ``spark-class`` (``Master`` and ``Worker``), each
in a process group of its own, so that stopping a group also stops the executors the worker
started. The worker has one core and a little memory; each executor runs in a directory
``<work_dir>/<app id>/<executor id>``, which is how a test tells that code ran there::

    with spark_standalone(tmp_path / "spark") as spark:
        spark.url                  # spark://127.0.0.1:PORT, a pipeline's spark.master
        spark.state()["activeapps"]   # the master's JSON: apps, their cores
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyspark

from stratus.process import ProcessGroup
from tests.harness.zkfixtures import wait_until

SPARK_HOME = Path(pyspark.__file__).parent
START_SECS = 120.0  # two JVMs on a loaded two-core machine
STOP_GRACE_SECS = 10.0


@dataclass(frozen=True)
class SparkStandalone:
    """The running cluster's addresses and the worker's directory."""

    url: str  # the master, as spark.master
    ui: str  # the master's web UI, whose /json/ is the cluster's state
    work_dir: Path  # the worker's: executors run in <work_dir>/<app id>/<executor id>

    def state(self) -> dict[str, Any]:
        """The master's JSON: workers, active and completed apps with their cores."""
        state: dict[str, Any] = httpx.get(f"{self.ui}/json/", timeout=10).json()
        return state


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def spark_standalone(
    directory: Path, *, cores: int = 1, memory: str = "1g"
) -> Iterator[SparkStandalone]:
    """A master and one worker, up and registered; both process groups stopped at the end."""
    directory.mkdir(parents=True, exist_ok=True)
    port, ui_port, worker_ui_port = free_port(), free_port(), free_port()
    cluster = SparkStandalone(
        url=f"spark://127.0.0.1:{port}",
        ui=f"http://127.0.0.1:{ui_port}",
        work_dir=directory / "work",
    )
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
    groups: list[ProcessGroup] = []
    try:
        groups.append(
            _start(
                directory / "master.log",
                env,
                "org.apache.spark.deploy.master.Master",
                *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)),
            )
        )
        groups.append(
            _start(
                directory / "worker.log",
                env,
                "org.apache.spark.deploy.worker.Worker",
                *("--host", "127.0.0.1", "--webui-port", str(worker_ui_port)),
                *("--cores", str(cores), "--memory", memory),
                *("--work-dir", str(cluster.work_dir), cluster.url),
            )
        )
        wait_until(lambda: _alive_workers(cluster) == 1, START_SECS, "a Spark worker to register")
        yield cluster
    finally:
        for group in reversed(groups):
            group.stop(STOP_GRACE_SECS)


def _start(log: Path, env: dict[str, str], main: str, *args: str) -> ProcessGroup:
    with log.open("wb") as out:
        return ProcessGroup.start(
            [str(SPARK_HOME / "bin" / "spark-class"), main, *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def _alive_workers(cluster: SparkStandalone) -> int:
    try:
        return int(cluster.state().get("aliveworkers", 0))
    except (httpx.HTTPError, ValueError):
        return 0  # the master's UI is not up yet
