"""Control-plane failover: stratus nimbus against Spark's standalone Master HA, same run.

Measures, per round, the time from ``kill -9`` of the leader master process to the first
successful leader-only call made by a client that knows every master:

* **stratus**: ``NimbusClient([every nimbus])`` calls ``deactivate(name)`` (``activate`` on
  odd rounds) on a pipeline submitted at the start; the client retries across the failover
  on its own (backoff up to 250 ms);
* **Spark**: a driver-status request (``GET /v1/submissions/status/<id>``) to the REST
  submission server of every master in turn, every 20 ms, until one answers as the leader.
  Spark's master serves driver status, like submissions and kills, only in state ALIVE; a
  standby or a recovering master answers ``Current state is not alive: STANDBY`` (or
  ``RECOVERING``), which is also how Spark's own REST client tells a backup master apart.

Both run against one ZooKeeper started here (loopback, tick 100 ms) whose
``maxSessionTimeout`` is the session timeout under test: Spark's master asks for a hard-coded
60 s (``SparkCuratorUtil``) and ZooKeeper negotiates it down to the cap, while each nimbus is
configured with ``zookeeper.session.timeout.secs`` equal to it, so both systems have the same
effective session timeout (``--spark-native-session`` leaves Spark its 60 s instead).
Each system has the same number of masters (``--masters``, default 2); Spark also has one
registered Worker by default (``--no-spark-worker`` for an empty master), so that its new
leader goes through recovery as in production. After each measurement the killed master is
restarted as a standby, and the next round waits until the cluster is whole again. Rounds of
the two systems are interleaved (the first alternating), so that machine noise hits both.

    .venv/bin/python bench/failover.py [--rounds 20] [--session-timeout 2]
    .venv/bin/python bench/failover.py --only spark --spark-rounds 10
    .venv/bin/python bench/failover.py --quick       # 3 rounds each: a smoke run

The exit code is 0 even when a target is missed (benchmarks never fail the build); it is 1
only when the benchmark itself could not run (a master did not start, no leader...).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
from kazoo.client import KazooClient
from rich import box
from rich.console import Console
from rich.table import Table

from _report import Interrupted, handle_interrupts, machine, ms, percentile, raise_interrupted
from stratus.client import NimbusClient
from stratus.errors import StratusError
from stratus.nimbus.daemon import NIMBUS_GROUP
from stratus.nimbus.records import ClusterSummary, LeaderInfo
from stratus.zk.paths import GroupPaths
from stratus.zk.server import LOOPBACK, ZooKeeperServer, pick_free_port

SYSTEMS = ("stratus", "spark")
TICK_TIME_MS = 100
TARGET_SLACK = 0.500  # stratus p99 <= session timeout + this
SPEEDUP_TARGET = 5.0  # Spark p50 / stratus p50 >= this
SPARK_SESSION_REQUEST_MS = 60_000  # SparkCuratorUtil.ZK_SESSION_TIMEOUT_MILLIS (Spark 4.3)
SPARK_POLL_SECS = 0.02
SPARK_STANDBY_REFUSAL = "Current state is not alive"  # Utils.BACKUP_STANDALONE_MASTER_PREFIX
SPARK_PROBE_DRIVER = "driver-20000101000000-0000"  # a driver id no master ever has
SPARK_DAEMON_MEMORY = "256m"
SPARK_WORKER_OFFER = ("--cores", "1", "--memory", "512m")  # what the worker offers to apps
PIPELINE = "bench-failover"
PIPELINE_PACKAGE = b"stratus bench/failover.py: a package that is never run\n"
HTTP_TIMEOUT_SECS = 2.0
READY_TIMEOUT_SECS = 180.0  # a JVM start on a loaded 2-CPU machine
WHOLE_POLL_SECS = 0.1
SETTLE_SECS = 1.0  # quiet time before each measurement
WATCH_GRACE_SECS = 2.0  # how long after the first call the expiry watch may lag
STOP_TIMEOUT_SECS = 10.0
_PR_SET_PDEATHSIG = 1


class BenchError(Exception):
    """The benchmark could not run (not a missed target)."""


# ---------------------------------------------------------------------------------------------
# Processes


def _die_with_bench() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes Linux SIGKILL the child if the bench dies (main thread)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return hook


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
                preexec_fn=_die_with_bench(),  # noqa: PLW1509 (sets one prctl, from the main thread)
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_running(self) -> None:
        if not self.running():
            code = self.process.returncode if self.process else None
            raise BenchError(
                f"{self.name} exited (code {code}); its log ends with:\n{self.log_tail()}"
            )

    def send_kill(self) -> None:
        """``kill -9``, without waiting."""
        os.kill(self.pid, signal.SIGKILL)

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
# When ZooKeeper expired the killed master's session


def _socket_ports(pid: int, remote_port: int) -> set[int]:
    """Local ports of ``pid``'s TCP connections to ``remote_port`` (IPv4 and IPv6 tables)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text(encoding="ascii").splitlines()[1:]:
                fields = line.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == remote_port:
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


_CONNECTION = re.compile(r":(?P<port>\d+)\[\d+\]\((?P<stats>[^)]*)\)")
_SESSION_ID = re.compile(r"\bsid=(?P<sid>0x[0-9a-f]+)")


def ephemerals_of(pid: int, zk: ZooKeeperServer) -> list[str]:
    """The ephemeral znodes of every ZooKeeper session that process ``pid`` holds."""
    ports = _socket_ports(pid, zk.port)
    sessions = set()
    for connection in _CONNECTION.finditer(zk.four_letter("cons")):
        sid = _SESSION_ID.search(connection["stats"])
        if sid and int(connection["port"]) in ports:
            sessions.add(int(sid["sid"], 16))
    paths: list[str] = []
    owner: int | None = None
    dump = zk.four_letter("dump")
    section = dump.split("Sessions with Ephemerals", 1)[-1].split("Connections dump", 1)[0]
    for line in section.splitlines()[1:]:
        if line.startswith("0x"):
            owner = int(line.rstrip(":"), 16)
        elif line.startswith("\t") and owner in sessions:
            paths.append(line.strip())
    return paths


def watch_expiry(reader: Any, paths: list[str]) -> Callable[[], float | None]:
    """Watch ``paths``; the returned function gives when the first was deleted, if one was.

    All ephemerals of a session go in the one transaction that closes it, so the first
    deletion is when ZooKeeper expired the killed process's session (as this client saw it).
    """
    deleted: list[float] = []
    notified = threading.Event()

    def watch(event: Any) -> None:
        if event.type == "DELETED":
            deleted.append(time.monotonic())
            notified.set()

    watched = [path for path in paths if reader.exists(path, watch=watch) is not None]

    def deleted_at() -> float | None:
        if watched:
            notified.wait(WATCH_GRACE_SECS)
        return min(deleted) if deleted else None

    return deleted_at


def watch_recreation(reader: Any, path: str | None) -> Callable[[], float | None]:
    """Watch ``path`` be deleted and created again; the function gives when it was created.

    For stratus, ``path`` is the leader's slot: deleted with the killed leader's session,
    created by the next leader when it wins.
    """
    created: list[float] = []
    notified = threading.Event()

    def watch(event: Any) -> None:
        if event.type == "CREATED" or (
            event.type == "DELETED" and reader.exists(path, watch=watch) is not None
        ):
            created.append(time.monotonic())
            notified.set()

    armed = path is not None and reader.exists(path, watch=watch) is not None

    def created_at() -> float | None:
        if armed:
            notified.wait(WATCH_GRACE_SECS)
        return created[0] if created else None

    return created_at


# ---------------------------------------------------------------------------------------------
# The two systems


class Cluster(Protocol):
    """Masters of one system: one leads, the others stand by."""

    system: str
    masters: list[Daemon]
    leader_znode: str | None  # a znode the new leader creates when it wins, if there is one

    def start(self) -> None:
        """Start every master (and what else the system needs); return once it is whole."""

    def wait_whole(self) -> Daemon:
        """Wait until every master runs, one leads and the others stand by; the leader."""

    def first_leader_call(self, number: int, deadline: float) -> tuple[float, str]:
        """Make leader-only calls until one succeeds; (``time.monotonic()`` after it, by whom)."""

    def stop(self) -> None:
        """Kill every process of the system (idempotent)."""


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
        if not self.answers_as_leader(leader):
            raise BenchError(f"Spark: the ALIVE master {leader.name} refused the status probe")
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

    def first_leader_call(self, number: int, deadline: float) -> tuple[float, str]:
        while True:
            for master in self.masters:
                if self.answers_as_leader(master):
                    return time.monotonic(), master.name
            if time.monotonic() >= deadline:
                raise BenchError("Spark: no master answered as the leader before the deadline")
            time.sleep(SPARK_POLL_SECS)

    def stop(self) -> None:
        for daemon in [*self.masters, self.worker]:
            daemon.reap()


class StratusCluster:
    """``stratus nimbus`` processes, one pipeline, and a ``NimbusClient`` naming them all."""

    system = "stratus"

    def __init__(
        self,
        zk_hosts: str,
        work_dir: Path,
        masters: int,
        *,
        session_timeout: float,
        retry_deadline: float,
        http: httpx.Client,
    ) -> None:
        self.http = http
        root = f"/bench-{uuid.uuid4().hex[:12]}"
        self.leader_znode: str | None = GroupPaths(root, NIMBUS_GROUP).slot(0)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.masters = []
        for index in range(1, masters + 1):
            port = pick_free_port()
            name = f"nimbus-{index}"
            self.masters.append(
                Daemon(
                    name,
                    [
                        sys.executable,
                        *("-m", "stratus", "nimbus"),
                        *("-c", f"zookeeper.servers={zk_hosts}"),
                        *("-c", f"zookeeper.root={root}"),
                        *("-c", f"zookeeper.session.timeout.secs={session_timeout:g}"),
                        *("-c", f"nimbus.host={LOOPBACK}", "-c", f"nimbus.port={port}"),
                        *("-c", f"nimbus.local.dir={work_dir / name}"),
                    ],
                    env,
                    work_dir / f"{name}.log",
                    f"{LOOPBACK}:{port}",
                )
            )
        self.client = NimbusClient([m.address for m in self.masters], retry_deadline=retry_deadline)

    def start(self) -> None:
        for master in self.masters:
            master.start()
        self.wait_whole()
        try:
            self.client.submit(PIPELINE, PIPELINE_PACKAGE)
        except StratusError as exc:
            raise BenchError(f"stratus: submit({PIPELINE!r}) failed: {exc}") from exc

    def leader_seen_by(self, master: Daemon) -> str | None:
        try:
            response = self.http.get(f"http://{master.address}/api/v1/leader")
            return LeaderInfo.model_validate_json(response.content).address
        except (httpx.HTTPError, ValueError):
            return None

    def wait_whole(self) -> Daemon:
        by_address = {m.address: m for m in self.masters}
        leaders: list[Daemon] = []

        def whole() -> bool:
            for master in self.masters:
                master.check_running()
            seen = {self.leader_seen_by(m) for m in self.masters}
            if len(seen) != 1 or (address := seen.pop()) not in by_address:
                return False
            leader = by_address[address]
            try:
                response = self.http.get(f"http://{address}/api/v1/cluster")
                summary = ClusterSummary.model_validate_json(response.content)
            except (httpx.HTTPError, ValueError):
                return False
            if len(summary.nimbuses) != len(self.masters):
                return False
            leaders[:] = [leader]
            return True

        wait_for(whole, "stratus: every nimbus registered and naming the same leader")
        return leaders[0]

    def first_leader_call(self, number: int, deadline: float) -> tuple[float, str]:
        call = self.client.activate if number % 2 else self.client.deactivate
        try:
            call(PIPELINE)  # retries across the failover until the client's retry deadline
        except StratusError as exc:
            raise BenchError(f"stratus: {call.__name__}({PIPELINE!r}) failed: {exc}") from exc
        done = time.monotonic()
        names = {m.address: m.name for m in self.masters}
        return done, names.get(self.client.known_leader or "", "?")

    def stop(self) -> None:
        for master in self.masters:
            master.reap()
        self.client.close()


# ---------------------------------------------------------------------------------------------
# Rounds


@dataclass
class Sample:
    system: str
    round: int
    old_leader: str
    new_leader: str
    failover: float  # kill -9 sent -> first successful leader-only call returned, seconds
    expiry: float | None  # kill -9 sent -> the killed master's ephemeral znodes deleted
    elected: float | None  # those znodes deleted -> the new leader's znode created (stratus)
    after_expiry: float | None  # those znodes deleted -> the successful call returned
    restart: float  # the killed master restarted -> the cluster whole again, seconds


def run_round(
    cluster: Cluster, zk: ZooKeeperServer, reader: Any, number: int, call_timeout: float
) -> Sample:
    """Kill the leader master, time the first leader-only call, restart it as a standby."""
    old = cluster.wait_whole()
    time.sleep(SETTLE_SECS)
    old = cluster.wait_whole()  # (it may have changed while settling; it should not)
    expired_at = watch_expiry(reader, ephemerals_of(old.pid, zk))
    elected_at = watch_recreation(reader, cluster.leader_znode)
    started = time.monotonic()
    old.send_kill()
    done, new_leader = cluster.first_leader_call(number, started + call_timeout)
    expired = expired_at()
    elected = elected_at()
    old.reap()
    restarted = time.monotonic()
    old.start()
    cluster.wait_whole()
    return Sample(
        cluster.system,
        number,
        old.name,
        new_leader,
        done - started,
        None if expired is None else expired - started,
        None if expired is None or elected is None else elected - expired,
        None if expired is None else done - expired,
        time.monotonic() - restarted,
    )


def schedule(
    rounds: dict[str, int], warmup: int
) -> Iterator[tuple[str, int]]:  # (system, round), round <= 0 being warm-up
    """Each system's rounds, spread over the longest run so that they interleave."""
    longest = max(rounds.values())
    for step in range(1 - warmup, longest + 1):
        order = SYSTEMS if step % 2 else tuple(reversed(SYSTEMS))
        for system in order:
            if system not in rounds:
                continue
            if step <= 0:
                yield system, step
                continue
            wanted = rounds[system]  # this system's round k falls on step ceil(k * longest / n)
            number = math.floor(step * wanted / longest)
            if number >= 1 and math.ceil(number * longest / wanted) == step:
                yield system, number


# ---------------------------------------------------------------------------------------------
# Statistics and reporting


@dataclass(frozen=True)
class Stats:
    n: int
    min: float
    p50: float
    p99: float
    max: float
    expiry_p50: float
    elected_p50: float
    after_p50: float
    restart_mean: float

    @classmethod
    def of(cls, samples: list[Sample]) -> Stats:
        values = [s.failover for s in samples]

        def p50(known: list[float | None]) -> float:
            return percentile([v for v in known if v is not None] or [math.nan], 50)

        return cls(
            len(values),
            min(values),
            percentile(values, 50),
            percentile(values, 99),
            max(values),
            p50([s.expiry for s in samples]),
            p50([s.elected for s in samples]),
            p50([s.after_expiry for s in samples]),
            sum(s.restart for s in samples) / len(samples),
        )


def report(
    console: Console, samples: list[Sample], session_timeout: float, spark_session: float
) -> list[str]:
    """Print the results table and the targets; return the verdict lines."""
    sessions = (
        f"session timeout {session_timeout:g} s"
        if spark_session == session_timeout
        else f"session timeout stratus {session_timeout:g} s, Spark {spark_session:g} s"
    )
    table = Table(
        title=f"Failover after kill -9 of the leader master, {sessions}: milliseconds",
        caption=(
            "from kill -9 of the leader to the first successful leader-only call; expiry = "
            "until ZooKeeper deleted the killed master's ephemeral znodes (p50); elected = from "
            "there to the new leader's slot znode created (p50, stratus only); after = from the "
            "deletion to the call (p50); restart = killed master restarted until the cluster "
            "was whole again (mean, s); ratio = Spark / stratus"
        ),
        box=box.SIMPLE_HEAD,
    )
    headers = ("system", "n", "min", "p50", "p99", "max", "expiry", "elected", "after", "restart")
    for header in headers:
        table.add_column(header, justify="left" if header == "system" else "right", no_wrap=True)
    table.add_column("p99 target", no_wrap=True)
    limit = session_timeout + TARGET_SLACK
    stats: dict[str, Stats] = {}
    for system in SYSTEMS:
        chosen = [s for s in samples if s.system == system]
        if not chosen:
            continue
        stats[system] = st = Stats.of(chosen)
        met = st.p99 <= limit
        if system == "stratus":
            result = "met" if met else "[bold red]MISSED[/]"
        else:
            result = "(met)" if met else "(missed)"
        table.add_row(
            system,
            str(st.n),
            *(ms(v) for v in (st.min, st.p50, st.p99, st.max, st.expiry_p50)),
            "-" if math.isnan(st.elected_p50) else ms(st.elected_p50),
            ms(st.after_p50),
            f"{st.restart_mean:.1f}",
            f"<= {limit * 1000:.0f} {result}",
        )
    verdicts = []
    if "stratus" in stats:
        p99 = stats["stratus"].p99
        word = "met" if p99 <= limit else "MISSED"
        verdicts.append(
            f"stratus p99 {ms(p99)} ms, target <= session timeout + "
            f"{TARGET_SLACK * 1000:.0f} ms = {limit * 1000:.0f} ms: {word}"
        )
    if len(stats) == 2:
        s, k = stats["stratus"], stats["spark"]
        pairs = (
            (k.min, s.min),
            (k.p50, s.p50),
            (k.p99, s.p99),
            (k.max, s.max),
            (k.expiry_p50, s.expiry_p50),
            (math.nan, math.nan),
            (k.after_p50, s.after_p50),
            (k.restart_mean, s.restart_mean),
        )
        cells = ("" if math.isnan(a) else f"{a / b:.2f}x" for a, b in pairs)
        table.add_row("ratio", "", *cells, "")
        speedup = k.p50 / s.p50
        word = "met" if speedup >= SPEEDUP_TARGET else "MISSED"
        verdicts.append(
            f"Spark / stratus failover: {speedup:.2f}x at p50 ({k.p99 / s.p99:.2f}x at p99), "
            f"target >= {SPEEDUP_TARGET:g}x at p50: {word}"
        )
    console.print(table)
    for line in verdicts:
        console.print(("[bold red]" if line.endswith("MISSED") else "[green]") + line + "[/]")
    return verdicts


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=20, help="stratus rounds (default 20)")
    parser.add_argument(
        "--spark-rounds", type=int, help="Spark rounds (default: as many as --rounds)"
    )
    parser.add_argument(
        "--session-timeout", type=float, default=2.0, help="ZooKeeper session timeout, s"
    )
    parser.add_argument(
        "--spark-native-session",
        action="store_true",
        help=f"leave Spark its hard-coded {SPARK_SESSION_REQUEST_MS // 1000} s session "
        "(the ZooKeeper cap is then that, not --session-timeout)",
    )
    parser.add_argument("--masters", type=int, default=2, help="masters per system (default 2)")
    parser.add_argument(
        "--spark-worker",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="register one Spark Worker, so that a new leader recovers it (default: yes)",
    )
    parser.add_argument("--only", choices=SYSTEMS, help="measure one system only")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first")
    parser.add_argument("--quick", action="store_true", help="3 rounds each: a smoke run")
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    parser.add_argument("--keep-logs", type=Path, help="keep every process's log in this dir")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = args.spark_rounds = 3
    if args.spark_rounds is None:
        args.spark_rounds = args.rounds
    if min(args.rounds, args.spark_rounds) < 1 or args.warmup < 0 or args.masters < 2:
        parser.error("rounds must be >= 1, --warmup >= 0 and --masters >= 2")
    if args.session_timeout * 1000 < 2 * TICK_TIME_MS:
        parser.error(f"--session-timeout must be >= {2 * TICK_TIME_MS / 1000:g} s (2 ticks)")
    return args


def run(args: argparse.Namespace, console: Console, work_dir: Path) -> list[Sample]:
    spark_session = (
        SPARK_SESSION_REQUEST_MS / 1000 if args.spark_native_session else args.session_timeout
    )
    cap_ms = round(max(args.session_timeout, spark_session) * 1000)
    rounds = {
        system: count
        for system, count in (("stratus", args.rounds), ("spark", args.spark_rounds))
        if args.only in (None, system)
    }
    call_timeout = 3 * max(args.session_timeout, spark_session) + 60
    samples: list[Sample] = []
    server = ZooKeeperServer(
        work_dir / "zk", port=0, tick_time_ms=TICK_TIME_MS, max_session_timeout_ms=cap_ms
    )
    http = httpx.Client(timeout=HTTP_TIMEOUT_SECS, trust_env=False)
    clusters: dict[str, Cluster] = {}
    reader = None
    try:
        server.start()
        reader = KazooClient(hosts=server.connect_string)
        reader.start(timeout=15)
        console.print(
            f"ZooKeeper on {server.connect_string} (maxSessionTimeout {cap_ms} ms); "
            f"starting {' and '.join(rounds)}..."
        )
        if "spark" in rounds:
            clusters["spark"] = SparkCluster(
                server.connect_string,
                work_dir,
                args.masters,
                with_worker=args.spark_worker,
                http=http,
            )
        if "stratus" in rounds:
            clusters["stratus"] = StratusCluster(
                server.connect_string,
                work_dir,
                args.masters,
                session_timeout=args.session_timeout,
                retry_deadline=call_timeout,
                http=http,
            )
        for cluster in clusters.values():
            began = time.monotonic()
            cluster.start()
            console.print(f"{cluster.system}: whole in {time.monotonic() - began:.1f} s")
        for system, number in schedule(rounds, args.warmup):
            sample = run_round(clusters[system], server, reader, number, call_timeout)
            label = "warm-up" if number <= 0 else f"{number}/{rounds[system]}"
            expiry = "?" if sample.expiry is None else ms(sample.expiry)
            console.print(
                f"{system:>7} round {label:>7}: {ms(sample.failover):>6} ms "
                f"(expiry {expiry} ms), {sample.old_leader} -> {sample.new_leader}, "
                f"whole again {sample.restart:.1f} s later"
            )
            if number > 0:
                samples.append(sample)
    finally:
        handle_interrupts(signal.SIG_IGN)  # let the cleanup finish (seconds at most)
        for cluster in clusters.values():
            cluster.stop()
        http.close()
        if reader is not None:
            with contextlib.suppress(Exception):
                reader.stop()
                reader.close()
        server.kill()
    return samples


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)  # explicitly: a background job inherits an ignored SIGINT
    # A terminal gets its own width; a file or a pipe (CI logs, docs) gets room for the table.
    console = Console() if sys.stdout.isatty() else Console(width=110)
    console.rule("Control-plane failover: stratus nimbus vs Spark standalone Master HA")
    info = machine(("kazoo", "pyspark", "httpx"))
    for key, value in info.items():
        console.print(f"[bold]{key:>9}[/]: {value}")
    spark_session = (
        SPARK_SESSION_REQUEST_MS / 1000 if args.spark_native_session else args.session_timeout
    )
    systems = [args.only] if args.only else list(SYSTEMS)
    counts = {"stratus": args.rounds, "spark": args.spark_rounds}
    console.print(
        f"[bold]{'run':>9}[/]: "
        + ", ".join(f"{s} {counts[s]} rounds" for s in systems)
        + f" (+{args.warmup} warm-up each); {args.masters} masters per system; "
        f"session timeout stratus {args.session_timeout:g} s, Spark {spark_session:g} s "
        f"(asks {SPARK_SESSION_REQUEST_MS // 1000} s); ZooKeeper tick {TICK_TIME_MS} ms; "
        f"Spark worker: {'yes' if args.spark_worker else 'no'}"
    )
    began = time.monotonic()
    try:
        if args.keep_logs:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            samples = run(args, console, args.keep_logs.absolute())
        else:
            with tempfile.TemporaryDirectory(prefix="stratus-bench-failover-") as tmp:
                samples = run(args, console, Path(tmp))
    except BenchError as exc:
        console.print(f"[bold red]benchmark failed:[/] {exc}")
        return 1
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc}); every process was stopped[/]")
        return 128 + exc.signum
    console.print(f"measured in {time.monotonic() - began:.0f} s")
    verdicts = report(console, samples, args.session_timeout, spark_session)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": info,
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "spark_session_timeout": spark_session,
                    "verdicts": verdicts,
                    "samples": [asdict(s) for s in samples],
                },
                indent=1,
            ),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
