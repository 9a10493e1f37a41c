"""Control-plane failover: stratus nimbus against Spark's standalone Master HA, same run.

Two scenarios, each its own table (``--scenario``, default both, kill first):

* **kill**: ``kill -9`` of the leader master process. Nobody is told: the standby can lead
  only once ZooKeeper expires the dead master's session;
* **term**: SIGTERM to the leader master process, a graceful stop. Whatever the system does
  on its way out (give its leadership up, close its ZooKeeper session) happens here; what it
  does not do is left to the session expiry again.

Each round measures the time from the signal to the first successful leader-only call made
by a client that knows every master:

* **stratus**: ``NimbusClient([every nimbus])`` calls ``deactivate(name)`` (``activate`` on
  odd rounds) on a pipeline submitted at the start; the client retries across the failover
  on its own (backoff up to 250 ms). A SIGTERMed nimbus leaves the election queue first
  (``Nimbus.stop``); a call that the stopping leader still served would be made again;
* **Spark**: a driver-status request (``GET /v1/submissions/status/<id>``) to the REST
  submission server of every other master in turn, every 20 ms, until one answers as the
  leader (a SIGTERMed master still answers as the leader while its JVM shuts down).
  Spark's master serves driver status, like submissions and kills, only in state ALIVE; a
  standby or a recovering master answers ``Current state is not alive: STANDBY`` (or
  ``RECOVERING``), which is also how Spark's own REST client tells a backup master apart.
  The signal goes to the master's JVM (``spark-class`` execs it).

Besides, per round: when ZooKeeper deleted the old leader's ephemeral znodes (watched by the
bench), when its process exited, and whether one of its ZooKeeper sessions was still open
once its process had exited (then only the session expiry could end it).

Both run against one ZooKeeper started here (loopback, tick 100 ms) whose
``maxSessionTimeout`` is the session timeout under test: Spark's master asks for a hard-coded
60 s (``SparkCuratorUtil``) and ZooKeeper negotiates it down to the cap, while each nimbus is
configured with ``zookeeper.session.timeout.secs`` equal to it, so both systems have the same
effective session timeout (``--spark-native-session`` leaves Spark its 60 s instead).
Each system has the same number of masters (``--masters``, default 2); Spark also has one
registered Worker by default (``--no-spark-worker`` for an empty master), so that its new
leader goes through recovery as in production. After each measurement the stopped master is
restarted as a standby, and the next round waits until the cluster is whole again. Rounds of
the two systems are interleaved (the first alternating), so that machine noise hits both.

    .venv/bin/python bench/failover.py [--rounds 20] [--term-rounds 20] [--session-timeout 2]
    .venv/bin/python bench/failover.py --scenario term --term-spark-rounds 10
    .venv/bin/python bench/failover.py --only spark --scenario kill --spark-rounds 10
    .venv/bin/python bench/failover.py --quick       # 1 round each, both scenarios: a smoke run

The exit code is 0 even when a target is missed (benchmarks never fail the build); it is 1
only when the benchmark itself could not run (a master did not start, no leader...).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import signal
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

from _masters import (
    SPARK_SESSION_REQUEST_MS,
    BenchError,
    Daemon,
    SparkCluster,
    wait_for,
)
from _report import (
    Interrupted,
    handle_interrupts,
    ms,
    percentile,
    print_header,
    print_verdicts,
    raise_interrupted,
    report_console,
    write_json,
)
from stratus.api.records import ClusterSummary, LeaderInfo
from stratus.client import NimbusClient
from stratus.codedist.package_build import package_bytes
from stratus.errors import StratusError
from stratus.zk.paths import NIMBUS_GROUP, GroupPaths
from stratus.zk.ports import LOOPBACK, pick_free_port
from stratus.zk.server import ZooKeeperServer

SYSTEMS = ("stratus", "spark")
SCENARIOS = ("kill", "term")
SIGNALS = {"kill": signal.SIGKILL, "term": signal.SIGTERM}
SIGNAL_NAMES = {"kill": "kill -9", "term": "SIGTERM"}
TICK_TIME_MS = 100
TARGET_SLACK = 0.500  # stratus p99 <= session timeout + this
SPEEDUP_TARGET = 5.0  # Spark p50 / stratus p50 >= this
TERM_ROUNDS = 20  # stratus rounds of the term scenario
TERM_SPARK_ROUNDS = 20  # Spark rounds of the term scenario (a JVM restart each)
PIPELINE = "bench-failover"
PIPELINE_PACKAGE = package_bytes(
    {
        "stratus.yaml": "name: bench\nkind: app\nentrypoint: bench:run\n",
        "bench.py": "def run(spark, context):  # bench/failover.py never runs it\n    pass\n",
    }
)
HTTP_TIMEOUT_SECS = 2.0
SETTLE_SECS = 1.0  # quiet time before each measurement
WATCH_GRACE_SECS = 2.0  # how long after the first call the expiry watch may lag
EXIT_TIMEOUT_SECS = 20.0  # how long a SIGTERMed master may take to exit before a kill -9


# ---------------------------------------------------------------------------------------------
# Processes


# ---------------------------------------------------------------------------------------------
# When ZooKeeper deleted the old leader's ephemerals, and whether its session outlived it


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


def sessions_of(pid: int, zk: ZooKeeperServer) -> set[int]:
    """The ZooKeeper sessions that process ``pid`` holds (its connections, as ``cons`` sees)."""
    ports = _socket_ports(pid, zk.port)
    sessions = set()
    for connection in _CONNECTION.finditer(zk.four_letter("cons")):
        sid = _SESSION_ID.search(connection["stats"])
        if sid and int(connection["port"]) in ports:
            sessions.add(int(sid["sid"], 16))
    return sessions


def ephemerals_of(sessions: set[int], zk: ZooKeeperServer) -> list[str]:
    """The ephemeral znodes of ``sessions`` (``dump``)."""
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


def live_sessions(zk: ZooKeeperServer) -> set[int]:
    """Every session that ZooKeeper's session tracker still holds (``dump``)."""
    dump = zk.four_letter("dump")
    section = dump.split("SessionTracker dump:", 1)[-1].split("ephemeral nodes dump:", 1)[0]
    return {int(line.strip(), 16) for line in section.splitlines() if line.startswith("\t0x")}


def watch_deletion(reader: Any, paths: list[str]) -> Callable[[], float | None]:
    """Watch ``paths``; the returned function gives when the first was deleted, if one was.

    After ``kill -9``, all ephemerals of a session go in the one transaction that expires it,
    so the first deletion is when ZooKeeper expired the killed process's session (as this
    client saw it). After SIGTERM it is the first one the master gave up itself, if it did.
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


def watch_exit(
    daemon: Daemon, zk: ZooKeeperServer, sessions: set[int]
) -> Callable[[float], tuple[float | None, bool | None]]:
    """Wait for ``daemon`` to exit, in a thread.

    The returned function waits up to its argument (seconds) and gives when the process
    exited (``None`` if it still runs) and whether one of ``sessions`` was still open in
    ZooKeeper once it had (``None`` if unknown). A session that outlives its process was not
    closed by it, and ends only when ZooKeeper expires it.
    """
    process = daemon.process
    if process is None:
        raise BenchError(f"{daemon.name} was never started")
    result: list[tuple[float, bool | None]] = []

    def wait() -> None:
        process.wait()
        exited = time.monotonic()
        outlived: bool | None = None
        if sessions:
            with contextlib.suppress(Exception):
                outlived = bool(sessions & live_sessions(zk))
        result.append((exited, outlived))

    waiter = threading.Thread(target=wait, name=f"exit-{daemon.name}", daemon=True)
    waiter.start()

    def exited_at(timeout: float) -> tuple[float | None, bool | None]:
        waiter.join(timeout)
        return result[0] if result else (None, None)

    return exited_at


def watch_recreation(reader: Any, path: str | None) -> Callable[[], float | None]:
    """Watch ``path`` be deleted and created again; the function gives when it was created.

    For stratus, ``path`` is the leader's slot: deleted with the old leader's session (or by
    the old leader itself when it stops), created by the next leader when it wins.
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

    def first_leader_call(self, number: int, deadline: float, old: Daemon) -> tuple[float, str]:
        """Make leader-only calls until a master other than ``old`` serves one.

        Returns ``time.monotonic()`` after that call, and the name of the master that served
        it. (A SIGTERMed master may serve calls until it stops: those do not count.)
        """

    def stop(self) -> None:
        """Kill every process of the system (idempotent)."""


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
                        # self-elected: a killed master is left to its session's expiry,
                        # as Spark's is (bench/zkfc_failover.py measures the controllers)
                        *("-c", "nimbus.ha.mode=self"),
                        *("-c", f"nimbus.host={LOOPBACK}", "-c", f"nimbus.port={port}"),
                        *("-c", "nimbus.code.port=0"),  # several nimbuses on this machine
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

    def first_leader_call(self, number: int, deadline: float, old: Daemon) -> tuple[float, str]:
        call = self.client.activate if number % 2 else self.client.deactivate
        names = {m.address: m.name for m in self.masters}
        while True:  # the calls are idempotent: one served by the stopping leader is made again
            try:
                call(PIPELINE)  # retries across the failover until the client's retry deadline
            except StratusError as exc:
                raise BenchError(f"stratus: {call.__name__}({PIPELINE!r}) failed: {exc}") from exc
            done = time.monotonic()
            served_by = self.client.known_leader or ""
            if served_by != old.address:
                return done, names.get(served_by, "?")
            if done >= deadline:
                raise BenchError(f"stratus: only the stopped {old.name} served the calls")

    def stop(self) -> None:
        for master in self.masters:
            master.reap()
        self.client.close()


# ---------------------------------------------------------------------------------------------
# Rounds


@dataclass
class Sample:
    scenario: str  # "kill" (kill -9) or "term" (SIGTERM)
    system: str
    round: int
    old_leader: str
    new_leader: str
    failover: float  # signal sent -> first successful leader-only call returned, seconds
    deleted: float | None  # signal sent -> the old leader's first ephemeral znode deleted
    elected: float | None  # that deletion -> the new leader's znode created (stratus)
    after: float | None  # that deletion -> the successful call returned
    exited: float | None  # signal sent -> the old leader's process exited (None: killed late)
    outlived: bool | None  # a ZooKeeper session of the old leader was open after its exit
    restart: float  # the stopped master restarted -> the cluster whole again, seconds


def run_round(
    cluster: Cluster,
    zk: ZooKeeperServer,
    reader: Any,
    scenario: str,
    number: int,
    *,
    call_timeout: float,
) -> Sample:
    """Signal the leader master, time the first leader-only call, restart it as a standby."""
    old = cluster.wait_whole()
    time.sleep(SETTLE_SECS)
    old = cluster.wait_whole()  # (it may have changed while settling; it should not)
    sessions = sessions_of(old.pid, zk)
    deleted_at = watch_deletion(reader, ephemerals_of(sessions, zk))
    elected_at = watch_recreation(reader, cluster.leader_znode)
    exited_at = watch_exit(old, zk, sessions)
    started = time.monotonic()
    old.send_signal(SIGNALS[scenario])
    done, new_leader = cluster.first_leader_call(number, started + call_timeout, old)
    deleted = deleted_at()
    elected = elected_at()
    exited, outlived = exited_at(EXIT_TIMEOUT_SECS)
    old.reap()  # kill -9 if a SIGTERMed master still runs (then exited is None)
    restarted = time.monotonic()
    old.start()
    cluster.wait_whole()
    return Sample(
        scenario,
        cluster.system,
        number,
        old.name,
        new_leader,
        done - started,
        None if deleted is None else deleted - started,
        None if deleted is None or elected is None else elected - deleted,
        None if deleted is None else done - deleted,
        None if exited is None else exited - started,
        outlived,
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


def _p50(known: list[float | None]) -> float:
    return percentile([v for v in known if v is not None] or [math.nan], 50)


@dataclass(frozen=True)
class Stats:
    n: int
    min: float
    p50: float
    p99: float
    max: float
    deleted_p50: float
    elected_p50: float
    after_p50: float
    exited_p50: float
    outlived: int  # rounds in which a session of the old leader outlived its process
    outlived_known: int  # rounds in which that is known
    restart_mean: float

    @classmethod
    def of(cls, samples: list[Sample]) -> Stats:
        values = [s.failover for s in samples]
        return cls(
            len(values),
            min(values),
            percentile(values, 50),
            percentile(values, 99),
            max(values),
            _p50([s.deleted for s in samples]),
            _p50([s.elected for s in samples]),
            _p50([s.after for s in samples]),
            _p50([s.exited for s in samples]),
            sum(1 for s in samples if s.outlived),
            sum(1 for s in samples if s.outlived is not None),
            sum(s.restart for s in samples) / len(samples),
        )


def _cell(value: float) -> str:
    return "-" if math.isnan(value) else ms(value)


def _ratio(spark: float, stratus: float) -> str:
    if math.isnan(spark) or math.isnan(stratus) or stratus <= 0:
        return ""
    return f"{spark / stratus:.2f}x"


def _sessions_label(session_timeout: float, spark_session: float) -> str:
    if spark_session == session_timeout:
        return f"session timeout {session_timeout:g} s"
    return f"session timeout stratus {session_timeout:g} s, Spark {spark_session:g} s"


def report_kill(
    console: Console, samples: list[Sample], session_timeout: float, spark_session: float
) -> list[str]:
    """Print the kill -9 table and its targets; return the verdict lines."""
    table = Table(
        title=(
            "Failover after kill -9 of the leader master, "
            f"{_sessions_label(session_timeout, spark_session)}: milliseconds"
        ),
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
            *(_cell(v) for v in (st.min, st.p50, st.p99, st.max, st.deleted_p50)),
            _cell(st.elected_p50),
            _cell(st.after_p50),
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
            (k.deleted_p50, s.deleted_p50),
            (math.nan, math.nan),
            (k.after_p50, s.after_p50),
            (k.restart_mean, s.restart_mean),
        )
        table.add_row("ratio", "", *(_ratio(a, b) for a, b in pairs), "")
        speedup = k.p50 / s.p50
        word = "met" if speedup >= SPEEDUP_TARGET else "MISSED"
        verdicts.append(
            f"Spark / stratus failover: {speedup:.2f}x at p50 ({k.p99 / s.p99:.2f}x at p99), "
            f"target >= {SPEEDUP_TARGET:g}x at p50: {word}"
        )
    console.print(table)
    print_verdicts(console, verdicts)
    return verdicts


def report_term(
    console: Console, samples: list[Sample], session_timeout: float, spark_session: float
) -> list[str]:
    """Print the SIGTERM table and the Spark / stratus ratio (no target); the verdict lines."""
    table = Table(
        title=(
            "Failover after SIGTERM to the leader master, "
            f"{_sessions_label(session_timeout, spark_session)}: milliseconds"
        ),
        caption=(
            "from SIGTERM to the leader to the first successful leader-only call; deleted = "
            "until the stopped master's first ephemeral znode was deleted (p50); elected = from "
            "there to the new leader's slot znode created (p50, stratus only); after = from the "
            "deletion to the call (p50); exited = SIGTERM until the stopped process exited "
            "(p50); outlived = rounds in which a ZooKeeper session of the stopped master was "
            "still open once its process had exited (left to expire); restart = stopped master "
            "restarted until the cluster was whole again (mean, s); ratio = Spark / stratus"
        ),
        box=box.SIMPLE_HEAD,
    )
    headers = (
        *("system", "n", "min", "p50", "p99", "max", "deleted", "elected", "after", "exited"),
        *("outlived", "restart"),
    )
    for header in headers:
        table.add_column(header, justify="left" if header == "system" else "right", no_wrap=True)
    stats: dict[str, Stats] = {}
    for system in SYSTEMS:
        chosen = [s for s in samples if s.system == system]
        if not chosen:
            continue
        stats[system] = st = Stats.of(chosen)
        table.add_row(
            system,
            str(st.n),
            *(_cell(v) for v in (st.min, st.p50, st.p99, st.max, st.deleted_p50)),
            *(_cell(v) for v in (st.elected_p50, st.after_p50, st.exited_p50)),
            f"{st.outlived}/{st.outlived_known}",
            f"{st.restart_mean:.1f}",
        )
    verdicts = []
    for system, st in stats.items():
        verdicts.append(
            f"SIGTERM, {system}: p50 {ms(st.p50)} ms, p99 {ms(st.p99)} ms; the session "
            f"outlived the process in {st.outlived} of {st.outlived_known} rounds"
        )
    if len(stats) == 2:
        s, k = stats["stratus"], stats["spark"]
        pairs = (
            (k.min, s.min),
            (k.p50, s.p50),
            (k.p99, s.p99),
            (k.max, s.max),
            (k.deleted_p50, s.deleted_p50),
            (math.nan, math.nan),
            (k.after_p50, s.after_p50),
            (k.exited_p50, s.exited_p50),
        )
        table.add_row(
            "ratio",
            "",
            *(_ratio(a, b) for a, b in pairs),
            "",
            _ratio(k.restart_mean, s.restart_mean),
        )
        verdicts.append(
            f"SIGTERM, Spark / stratus failover: {k.p50 / s.p50:.2f}x at p50 "
            f"({k.p99 / s.p99:.2f}x at p99); no target"
        )
    console.print(table)
    for line in verdicts:
        console.print("[cyan]" + line + "[/]")
    return verdicts


def report(
    console: Console, samples: list[Sample], session_timeout: float, spark_session: float
) -> list[str]:
    """Print one table per scenario measured (kill first); return the verdict lines."""
    verdicts = []
    for scenario, reporter in (("kill", report_kill), ("term", report_term)):
        chosen = [s for s in samples if s.scenario == scenario]
        if chosen:
            verdicts += reporter(console, chosen, session_timeout, spark_session)
    return verdicts


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--scenario",
        choices=(*SCENARIOS, "both"),
        default="both",
        help="kill: kill -9 of the leader master; term: SIGTERM to it; both (default): kill "
        "first, then term, each its own table",
    )
    parser.add_argument(
        "--rounds", type=int, default=20, help="stratus rounds of the kill scenario (default 20)"
    )
    parser.add_argument(
        "--spark-rounds", type=int, help="Spark rounds of the kill scenario (default: --rounds)"
    )
    parser.add_argument(
        "--term-rounds",
        type=int,
        help=f"stratus rounds of the term scenario (default {TERM_ROUNDS})",
    )
    parser.add_argument(
        "--term-spark-rounds",
        type=int,
        help=f"Spark rounds of the term scenario (default {TERM_SPARK_ROUNDS}, or --term-rounds "
        "if that is given)",
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
    parser.add_argument(
        "--warmup", type=int, default=1, help="unmeasured rounds first, in each scenario"
    )
    parser.add_argument(
        "--quick", action="store_true", help="1 round each, no warm-up: a smoke run"
    )
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    parser.add_argument("--keep-logs", type=Path, help="keep every process's log in this dir")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = args.spark_rounds = args.term_rounds = args.term_spark_rounds = 1
        args.warmup = 0
    if args.spark_rounds is None:
        args.spark_rounds = args.rounds
    if args.term_spark_rounds is None:
        args.term_spark_rounds = args.term_rounds or TERM_SPARK_ROUNDS
    if args.term_rounds is None:
        args.term_rounds = TERM_ROUNDS
    counts = (args.rounds, args.spark_rounds, args.term_rounds, args.term_spark_rounds)
    if min(counts) < 1 or args.warmup < 0 or args.masters < 2:
        parser.error("rounds must be >= 1, --warmup >= 0 and --masters >= 2")
    if args.session_timeout * 1000 < 2 * TICK_TIME_MS:
        parser.error(f"--session-timeout must be >= {2 * TICK_TIME_MS / 1000:g} s (2 ticks)")
    return args


def planned_rounds(args: argparse.Namespace) -> dict[str, dict[str, int]]:
    """Rounds per scenario (in the order run) and system."""
    counts = {
        "kill": {"stratus": args.rounds, "spark": args.spark_rounds},
        "term": {"stratus": args.term_rounds, "spark": args.term_spark_rounds},
    }
    return {
        scenario: {
            system: count
            for system, count in counts[scenario].items()
            if args.only in (None, system)
        }
        for scenario in SCENARIOS
        if args.scenario in ("both", scenario)
    }


def run(args: argparse.Namespace, console: Console, work_dir: Path) -> list[Sample]:
    spark_session = (
        SPARK_SESSION_REQUEST_MS / 1000 if args.spark_native_session else args.session_timeout
    )
    cap_ms = round(max(args.session_timeout, spark_session) * 1000)
    plan = planned_rounds(args)
    systems = [system for system in SYSTEMS if any(system in r for r in plan.values())]
    call_timeout = 3 * max(args.session_timeout, spark_session) + 60
    samples: list[Sample] = []
    server = ZooKeeperServer(
        work_dir / "zk",
        port=0,
        tick_time_ms=TICK_TIME_MS,
        max_session_timeout_ms=cap_ms,
        force_sync=False,
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
            f"starting {' and '.join(systems)}..."
        )
        if "spark" in systems:
            clusters["spark"] = SparkCluster(
                server.connect_string,
                work_dir,
                args.masters,
                with_worker=args.spark_worker,
                http=http,
            )
        if "stratus" in systems:
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
        for scenario, rounds in plan.items():
            console.print(f"{SIGNAL_NAMES[scenario]} of the leader master:")
            for system, number in schedule(rounds, args.warmup):
                sample = run_round(
                    clusters[system], server, reader, scenario, number, call_timeout=call_timeout
                )
                label = "warm-up" if number <= 0 else f"{number}/{rounds[system]}"
                deleted = "?" if sample.deleted is None else ms(sample.deleted)
                exited = "?" if sample.exited is None else ms(sample.exited)
                outlived = {True: "outlived", False: "closed", None: "?"}[sample.outlived]
                details = (
                    f"expiry {deleted} ms"
                    if scenario == "kill"
                    else f"deleted {deleted} ms, exited {exited} ms, session {outlived}"
                )
                console.print(
                    f"{scenario} {system:>7} round {label:>7}: {ms(sample.failover):>6} ms "
                    f"({details}), {sample.old_leader} -> {sample.new_leader}, "
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
    console = report_console(width=110)
    console.rule("Control-plane failover: stratus nimbus vs Spark standalone Master HA")
    info, reproduce = print_header(console, "failover.py", argv, ("kazoo", "pyspark", "httpx"))
    spark_session = (
        SPARK_SESSION_REQUEST_MS / 1000 if args.spark_native_session else args.session_timeout
    )
    plan = planned_rounds(args)
    console.print(
        f"[bold]{'run':>9}[/]: "
        + "; ".join(
            f"{SIGNAL_NAMES[scenario]}: "
            + ", ".join(f"{system} {count} rounds" for system, count in rounds.items())
            for scenario, rounds in plan.items()
        )
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
    write_json(
        args.json,
        args,
        machine=info,
        reproduce=reproduce,
        spark_session_timeout=spark_session,
        verdicts=verdicts,
        samples=[asdict(s) for s in samples],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
