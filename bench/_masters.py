"""What the benchmarks that fail a master over share: its processes, and Spark's masters.

Not a benchmark itself (imported as ``_masters``, as ``_report`` is). ``Daemon`` is one
master (or worker) process that a benchmark starts, signals and restarts with the same
command, ports and log; ``SparkCluster`` is Spark's standalone masters with ZooKeeper
recovery (and optionally one registered worker), the baseline that ``bench/failover.py``
and ``bench/zkfc_failover.py`` measure stratus against in the same run::

    spark = SparkCluster(zk_hosts, work_dir, 2, with_worker=True, http=httpx.Client())
    spark.start()                                   # one ALIVE master, the others STANDBY
    old = spark.wait_whole()
    old.send_signal(signal.SIGKILL)
    served_at, by = spark.first_leader_call(1, time.monotonic() + 60, old)

Spark's master serves driver status, like submissions and kills, only in state ALIVE; a
standby or a recovering master answers ``Current state is not alive: STANDBY`` (or
``RECOVERING``): the first leader-only call is the first driver-status request that another
master answers as the leader. Its session: Spark asks ZooKeeper for a hard-coded 60 s
(``SparkCuratorUtil``), which a ZooKeeper's ``maxSessionTimeout`` negotiates down.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from stratus.process import die_with_parent_hook
from stratus.zk.ports import LOOPBACK, pick_free_port

SPARK_SESSION_REQUEST_MS = 60_000  # SparkCuratorUtil.ZK_SESSION_TIMEOUT_MILLIS (Spark 4.3)
SPARK_POLL_SECS = 0.02
SPARK_STANDBY_REFUSAL = "Current state is not alive"  # Utils.BACKUP_STANDALONE_MASTER_PREFIX
SPARK_PROBE_DRIVER = "driver-20000101000000-0000"  # a driver id no master ever has
SPARK_DAEMON_MEMORY = "256m"
SPARK_WORKER_OFFER = ("--cores", "1", "--memory", "512m")  # what the worker offers to apps
READY_TIMEOUT_SECS = 180.0  # a JVM start on a loaded 2-CPU machine
WHOLE_POLL_SECS = 0.1
STOP_TIMEOUT_SECS = 10.0
PROBE_TIMEOUT_SECS = 30.0  # the leader's first answer to the status probe


class BenchError(Exception):
    """The benchmark could not run (not a missed target)."""


# ---------------------------------------------------------------------------------------------
# Processes


@dataclass(eq=False)
class Daemon:
    """One master (or worker) process; restarted with the same command, ports and log."""

    name: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    address: str = ""  # host:port that a client uses, if any
    process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise BenchError(f"{self.name} was never started")
        return self.process.pid

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.log_path.parent,
                start_new_session=True,  # Ctrl-C reaches the bench only; the bench kills them
                preexec_fn=die_with_parent_hook(),  # noqa: PLW1509 (one prctl, from the main thread)
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_running(self) -> None:
        if not self.running():
            code = self.process.returncode if self.process else None
            raise BenchError(
                f"{self.name} exited (code {code}); its log ends with:\n{self.log_tail()}"
            )

    def send_signal(self, signum: int) -> None:
        """``kill -9`` or SIGTERM, without waiting."""
        os.kill(self.pid, signum)

    def reap(self) -> None:
        if self.process is not None:
            with contextlib.suppress(OSError):
                self.process.kill()
            self.process.wait(STOP_TIMEOUT_SECS)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def wait_for(condition: Callable[[], bool], what: str, timeout: float = READY_TIMEOUT_SECS) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise BenchError(f"{what} did not happen within {timeout:g} s")
        time.sleep(WHOLE_POLL_SECS)


# ---------------------------------------------------------------------------------------------
# Spark's standalone masters


class SparkCluster:
    """Spark standalone masters with ZooKeeper recovery, and optionally one worker."""

    system = "spark"
    leader_znode: str | None = None  # the standby's latch node exists already: a win creates none

    def __init__(
        self, zk_hosts: str, work_dir: Path, masters: int, *, with_worker: bool, http: httpx.Client
    ) -> None:
        import pyspark  # noqa: PLC0415 (only this system needs it)

        self.spark_home = Path(pyspark.__file__).parent
        self.http = http
        self.with_worker = with_worker
        conf_dir = work_dir / "spark-conf"  # empty: no spark-defaults.conf or spark-env.sh
        conf_dir.mkdir(parents=True)
        env = dict(
            os.environ,
            SPARK_HOME=str(self.spark_home),
            SPARK_CONF_DIR=str(conf_dir),
            SPARK_DAEMON_MEMORY=SPARK_DAEMON_MEMORY,
            SPARK_LOG_DIR=str(work_dir),
            SPARK_WORKER_DIR=str(work_dir / "spark-worker"),
        )
        spark_class = str(self.spark_home / "bin" / "spark-class")
        zk_dir = f"/spark-bench-{uuid.uuid4().hex[:12]}"
        self.masters: list[Daemon] = []
        self.ui_ports: dict[str, int] = {}
        self.rest_ports: dict[str, int] = {}
        for index in range(1, masters + 1):
            port, ui_port, rest_port = pick_free_port(), pick_free_port(), pick_free_port()
            name = f"spark-master-{index}"
            properties = work_dir / f"{name}.properties"
            properties.write_text(
                "\n".join(
                    [
                        "spark.deploy.recoveryMode=ZOOKEEPER",
                        f"spark.deploy.zookeeper.url={zk_hosts}",
                        f"spark.deploy.zookeeper.dir={zk_dir}",
                        "spark.master.rest.enabled=true",
                        f"spark.master.rest.port={rest_port}",
                        "spark.port.maxRetries=0",  # a taken port fails loudly, never drifts
                        "",
                    ]
                ),
                encoding="utf-8",
            )
            self.masters.append(
                Daemon(
                    name,
                    [
                        spark_class,
                        "org.apache.spark.deploy.master.Master",
                        *("--host", LOOPBACK, "--port", str(port)),
                        *("--webui-port", str(ui_port), "--properties-file", str(properties)),
                    ],
                    env,
                    work_dir / f"{name}.log",
                    f"{LOOPBACK}:{port}",
                )
            )
            self.ui_ports[name] = ui_port
            self.rest_ports[name] = rest_port
        self.master_url = "spark://" + ",".join(m.address for m in self.masters)
        self.worker = Daemon(
            "spark-worker",
            [
                spark_class,
                "org.apache.spark.deploy.worker.Worker",
                *("--host", LOOPBACK, "--webui-port", str(pick_free_port())),
                *SPARK_WORKER_OFFER,
                *("--work-dir", str(work_dir / "spark-worker"), self.master_url),
            ],
            env,
            work_dir / "spark-worker.log",
        )

    def start(self) -> None:
        for master in self.masters:
            master.start()
        if self.with_worker:
            self.worker.start()
        self.wait_whole()

    def status(self, master: Daemon) -> dict[str, Any] | None:
        """The master's web UI JSON (``status``: ALIVE, STANDBY, RECOVERING...), if it answers."""
        url = f"http://{LOOPBACK}:{self.ui_ports[master.name]}/json/"
        try:
            answer: dict[str, Any] = self.http.get(url).json()
        except (httpx.HTTPError, ValueError):
            return None
        return answer

    def wait_whole(self) -> Daemon:
        leaders: list[Daemon] = []

        def whole() -> bool:
            for daemon in [*self.masters, *([self.worker] if self.with_worker else [])]:
                daemon.check_running()
            states = {m.name: self.status(m) for m in self.masters}
            alive = [m for m in self.masters if (states[m.name] or {}).get("status") == "ALIVE"]
            standby = [m for m in self.masters if (states[m.name] or {}).get("status") == "STANDBY"]
            if len(alive) != 1 or len(standby) != len(self.masters) - 1:
                return False
            if self.with_worker and not (states[alive[0].name] or {}).get("aliveworkers"):
                return False
            leaders[:] = alive
            return True

        wait_for(whole, f"Spark: one ALIVE master, the others STANDBY ({self.master_url})")
        leader = leaders[0]
        # The probe must tell the leader from a standby, or the measurement means nothing.
        # (its first REST request after a JVM start may outlast one HTTP timeout: retried)
        wait_for(
            lambda: self.answers_as_leader(leader),
            f"Spark: the ALIVE master {leader.name} answering the status probe",
            PROBE_TIMEOUT_SECS,
        )
        for master in self.masters:
            if master is not leader and self.answers_as_leader(master):
                raise BenchError(f"Spark: the STANDBY master {master.name} answered the probe")
        return leader

    def answers_as_leader(self, master: Daemon) -> bool:
        """Whether the master answers a driver-status request as the leader (not a refusal)."""
        url = (
            f"http://{LOOPBACK}:{self.rest_ports[master.name]}"
            f"/v1/submissions/status/{SPARK_PROBE_DRIVER}"
        )
        try:
            response = self.http.get(url)
            body = response.json()
        except (httpx.HTTPError, ValueError):
            return False
        return (
            response.status_code == 200
            and body.get("action") == "SubmissionStatusResponse"
            and SPARK_STANDBY_REFUSAL not in str(body.get("message", ""))
        )

    def first_leader_call(self, number: int, deadline: float, old: Daemon) -> tuple[float, str]:
        others = [m for m in self.masters if m is not old]  # a stopping master still answers
        while True:
            for master in others:
                if self.answers_as_leader(master):
                    return time.monotonic(), master.name
            if time.monotonic() >= deadline:
                raise BenchError("Spark: no master answered as the leader before the deadline")
            time.sleep(SPARK_POLL_SECS)

    def stop(self) -> None:
        for daemon in [*self.masters, self.worker]:
            daemon.reap()
