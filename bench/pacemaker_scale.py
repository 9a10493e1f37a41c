"""The pacemaker at a cluster's scale, and how fast a dead supervisor is detected with it.

Parts (``--part``, repeatable; all by default):

* **scale**: ``--supervisors`` simulated supervisors (200) of ``--workers`` workers each (50:
  10,000 workers), every supervisor sending its period's heartbeats once a second as the
  real supervisor does: ``HeartbeatBoard.put_round`` on the real state store, so one
  ``send_pulses`` message to the pacemaker. The supervisors run in ``--clients`` separate
  processes, so the server's own process is measured alone: its CPU (utime + stime from
  ``/proc/<pid>/stat`` over the steady window, as % of one core) and its resident memory
  (``VmRSS``, and the peak ``VmHWM``). Meanwhile this process reads every heartbeat the way
  the leader does every ``--read-every`` seconds, in turn the raw read (the pacemaker
  store's ``read_rounds``, one pulse per supervisor; the ZooKeeper store's
  ``read_tree("/")``) and ``HeartbeatBoard.read`` (the same read, decoded into records),
  and reports the p99 of each, on the wall clock and in CPU time. The same load runs against a real
  ZooKeeper (durable, as ``stratus zookeeper`` runs) in the same run, through the ZooKeeper
  state store: its CPU, RSS and read time give the ratios. The window opens once the leader's
  read sees every worker (ZooKeeper creates 10,000 znodes first). The heartbeat rate the
  clients actually achieved is printed beside each row: on a small machine the clients can
  starve the server, and ZooKeeper may not keep up with 10,000 writes a second at all.
  Targets: pacemaker under 30 % of one core and 300 MB resident; the read's p99 under 50 ms.

* **detection**: the supervisor timeout that stays safe, derived from the settings of the
  local cluster and printed term by term; then ``kill -9`` of the supervisor running a
  streaming pipeline until its new assignment is written, with heartbeats in two pacemakers
  and with heartbeats in ZooKeeper, in the same run (real processes: ZooKeeper, a nimbus,
  two supervisors, Spark; the kill rounds are ``bench/reassign.py``'s). Minutes.

* **beats**: the fast beats of hot pipelines. ``--supervisors`` simulated supervisors (200)
  each beat every ``supervisor.beat.interval.ms`` (100 ms: 2,000 beats a second) through the
  real ``BeatBoard.beat`` to 3 real pacemakers, a beat counting once a majority stored it,
  from ``--clients`` processes (4; each one pacemaker pool, as a process has, and a thread
  per supervisor); meanwhile this process reads ``/beats`` with ``BeatBoard.read`` every
  ``nimbus.detector.poll.ms`` (100 ms), as the leader's detector does. Reported: the beats a
  majority stored per second of those asked, each beat's acknowledgement time (from its send
  to the majority's answer), each pacemaker's CPU and RSS, the read's wall time and its own
  CPU, and how many reads a majority answered. The baseline, in the same run on the same
  pacemakers, is the same beats once a second: the rate of the heartbeats the pacemakers
  take today. Targets: acknowledgement p99 under 100 ms (a beat counts well within its 0.8 s
  lease), the read's p99 under 50 ms, each pacemaker under 30 % of one core.

    .venv/bin/python bench/pacemaker_scale.py [--secs 30] [--clients 4] [--json out.json]
    .venv/bin/python bench/pacemaker_scale.py --part scale --supervisors 200 --workers 50
    .venv/bin/python bench/pacemaker_scale.py --part detection [--rounds 3]
    .venv/bin/python bench/pacemaker_scale.py --part beats [--supervisors 200] [--clients 4]
    .venv/bin/python bench/pacemaker_scale.py --quick   # 20 supervisors, 2 s; no kill

``--quick`` runs the scale and beats parts small and prints the derived timeout, leaving the
kills out unless ``--part detection`` is named (then one round per store). The exit code is 0 even
when a target is missed; it is 1 only when the benchmark itself could not run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kazoo.client import KazooClient
from rich import box
from rich.console import Console
from rich.table import Table

from _report import (
    Interrupted,
    handle_interrupts,
    machine,
    ms,
    percentile,
    print_verdicts,
    raise_interrupted,
    report_console,
    write_json,
)
from pacemaker import start_pacemaker
from reassign import BenchError, PartResult, describe_round, run_kill_rounds
from stratus.api.records import SupervisorHeartbeat, WorkerHeartbeat, WorkerState
from stratus.config.nimbus import NimbusSection
from stratus.config.supervisor import SupervisorSection
from stratus.errors import StratusError
from stratus.local import cluster as local
from stratus.local.cluster import LocalCluster
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.state.beats import BEATS_PATH, BeatBoard
from stratus.state.errors import StateStoreUnavailableError
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.pacemaker_store import PacemakerStateStore
from stratus.state.store import ClusterStateStore
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.supervisor.settings import MAX_TICK_SECS
from stratus.zk.server import ZooKeeperServer

CPU_TARGET_PERCENT = 30.0
RSS_TARGET_MB = 300.0
READ_TARGET_SECS = 0.050
ZK_ROOT = "/bench-scale/heartbeats"
CALL_TIMEOUT_SECS = 30.0
FILL_TIMEOUT_SECS = 180.0  # every worker's heartbeat written once (ZooKeeper creates them)
PACKAGES = ("kazoo", "msgpack", "pydantic")

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Part: scale


@dataclass(frozen=True)
class ScaleRow:
    """One store under the whole load, over the steady window."""

    store: str
    window_secs: float
    workers_per_sec: float  # worker heartbeats the clients had acknowledged, per second
    target_per_sec: float
    cpu_percent: float  # of one core, the server process alone
    rss_mb: float
    peak_rss_mb: float
    reads: list[float]  # seconds per raw leader read (read_rounds; ZooKeeper: read_tree)
    decoded_reads: list[float]  # seconds per HeartbeatBoard.read (the same, decoded)
    read_cpu: list[float]  # CPU seconds of the reading process per raw read
    decoded_cpu: list[float]  # CPU seconds of the reading process per HeartbeatBoard.read
    workers_read: int  # workers in the last leader read
    unanswered_reads: int  # leader reads that got no answer within the call timeout
    failed_rounds: int  # supervisor rounds the store did not acknowledge in time

    @property
    def read_p50(self) -> float:
        return _percentile(self.reads, 50)

    @property
    def read_p99(self) -> float:
        return _percentile(self.reads, 99)

    @property
    def read_cpu_p99(self) -> float:
        return _percentile(self.read_cpu, 99)

    @property
    def decoded_cpu_p99(self) -> float:
        return _percentile(self.decoded_cpu, 99)

    @property
    def decoded_p99(self) -> float:
        return _percentile(self.decoded_reads, 99)


def build_store(kind: str, address: str) -> tuple[ClusterStateStore, Callable[[], None]]:
    """A nimbus-side state store of ``kind`` on ``address``; and how to release it."""
    if kind == "pacemaker":
        host, port = address.rsplit(":", 1)
        settings = PacemakerClientSettings(
            servers=((host, int(port)),),
            timeout_secs=CALL_TIMEOUT_SECS,
        )  # the default maximum frame: the leader's read of 10,000 workers (~2 MB) is paged
        pool = BlockingPacemakerPool(settings, call_timeout_secs=CALL_TIMEOUT_SECS)
        store = PacemakerStateStore(pool)
        return store, store.close
    client = KazooClient(hosts=address, timeout=CALL_TIMEOUT_SECS)
    client.start(timeout=CALL_TIMEOUT_SECS)

    def release() -> None:
        client.stop()
        client.close()

    return ZooKeeperStateStore(client, ZK_ROOT, timeout=CALL_TIMEOUT_SECS), release


def simulated_round(sid: str, workers: int) -> tuple[SupervisorHeartbeat, list[WorkerHeartbeat]]:
    """One supervisor's period: its heartbeat and its ``workers`` running workers'."""
    now = time.time()
    beats = [
        WorkerHeartbeat(
            pipeline=f"p-{sid}-{n}",
            supervisor=sid,
            epoch=2,
            generation=1,
            digest="0" * 64,
            state=WorkerState.RUNNING,
            time=now,
            started=now,
            pid=10_000 + n,
            app_id=f"local-{sid}-{n}",
        )
        for n in range(workers)
    ]
    supervisor = SupervisorHeartbeat(
        id=sid, time=now, slots=workers, running=[b.pipeline for b in beats]
    )
    return supervisor, beats


@dataclass(frozen=True)
class Load:
    """What one client process simulates: supervisors ``sids`` of ``workers`` workers each."""

    kind: str
    address: str
    sids: list[str]
    workers: int


def _supervisors(load: Load, start: Any, stop: Any, result: Any) -> None:
    """A client process: its supervisors each send one round a second, spread over the
    second; returns the wall-clock times of the acknowledged rounds."""
    try:
        store, release = build_store(load.kind, load.address)
        board = HeartbeatBoard(store)
        rounds = [simulated_round(sid, load.workers) for sid in load.sids]
        done: list[float] = []
        failed = 0
        start.wait()
        began = time.monotonic()
        period = 0
        while not stop.is_set():
            for index, (supervisor, beats) in enumerate(rounds):
                due = began + period + index / len(rounds)
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)  # pacing at 1 Hz, not synchronization
                elif delay < -1.0:  # a period behind: carry on from now, never in a burst
                    began -= delay
                try:
                    board.put_round(supervisor, beats)
                    done.append(time.time())
                except StateStoreUnavailableError:
                    failed += 1  # an overloaded store: counted, and the next round goes on
                if stop.is_set():
                    break
            period += 1
        release()
        result.put(("ok", (done, failed)))
    except Exception as exc:
        result.put(("error", repr(exc)))


def cpu_secs(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid: int) -> tuple[float, float]:
    """Resident memory of ``pid`` now and at its peak (``VmRSS``, ``VmHWM``), in MB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


@dataclass(frozen=True)
class Window:
    """The steady window: its bounds on the wall clock, and what the measured processes used."""

    began: float
    ended: float
    cpu_percent: list[float]  # of one core, each server process alone
    clients_cpu_percent: float  # of one core, the client processes together: the load's cost
    memory_mb: list[tuple[float, float]]  # each server's RSS and peak RSS at the window's end

    @property
    def secs(self) -> float:
        return self.ended - self.began


def run_load(
    label: str,
    target: Callable[[Any, Any, Any, Any], None],
    loads: list[Any],
    servers: list[int],
    wait: Callable[[list[Any]], None],
    measure: Callable[[], T],
    args: argparse.Namespace,
    console: Console,
) -> tuple[T, Window, list[Any]]:
    """One spawned client process per load, running ``target(load, start, stop, result)``;
    once ``wait(processes)`` has seen the whole load and ``--settle`` has passed, ``measure()``
    over the steady window while the CPU of the ``servers`` (pids) and of the clients is
    sampled. Returns what ``measure`` returned, the window, and each client's result."""
    context = multiprocessing.get_context("spawn")
    start, stop, result = context.Event(), context.Event(), context.Queue()
    processes = [context.Process(target=target, args=(load, start, stop, result)) for load in loads]
    try:
        for process in processes:
            process.start()
        start.set()
        wait(processes)
        time.sleep(args.settle)  # every client past its first rounds: not the measured part
        watched = servers + [process.pid for process in processes if process.pid is not None]
        with console.status(f"{label}: steady window of {args.secs:g} s"):
            began, before = time.time(), [cpu_secs(pid) for pid in watched]
            measured = measure()
            ended, after = time.time(), [cpu_secs(pid) for pid in watched]
            memory = [memory_mb(pid) for pid in servers]
        stop.set()
        values = []
        for _ in processes:
            status, value = result.get(timeout=CALL_TIMEOUT_SECS + 60)
            if status != "ok":
                raise BenchError(f"{label}: a client process failed: {value}")
            values.append(value)
    finally:
        stop.set()
        for process in processes:
            process.join(CALL_TIMEOUT_SECS + 30)
            if process.is_alive():
                process.kill()
    used = [100.0 * (a - b) / (ended - began) for b, a in zip(before, after, strict=True)]
    window = Window(began, ended, used[: len(servers)], sum(used[len(servers) :]), memory)
    return measured, window, values


def count_workers(board: HeartbeatBoard) -> int:
    """Workers in one leader read; 0 when the store did not answer in time."""
    try:
        return sum(len(by_supervisor) for by_supervisor in board.read().workers.values())
    except StateStoreUnavailableError:
        return 0


def wait_filled(
    kind: str, board: HeartbeatBoard, total: int, processes: list[Any], console: Console
) -> None:
    """Until the leader reads every worker (ZooKeeper creates them first), or the fill time."""
    deadline = time.monotonic() + FILL_TIMEOUT_SECS
    with console.status(f"{kind}: waiting until the leader reads all {total:,} workers"):
        while (filled := count_workers(board)) < total:
            if not any(p.is_alive() for p in processes):
                raise BenchError(f"{kind}: every client process ended before the fill")
            if time.monotonic() > deadline:
                console.print(f"{kind}: {filled:,} of {total:,} workers after the fill time")
                return
            time.sleep(0.5)


@dataclass
class LeaderReads:
    """The leader's reads over the window: the raw read alone (``raw_read``: the bytes of
    every heartbeat) and ``HeartbeatBoard.read`` (the same, decoded into records), in turn."""

    tree: list[float]  # seconds per raw read
    board: list[float]  # seconds per board read
    tree_cpu: list[float] = field(default_factory=list)  # CPU seconds of this process per
    # raw read (every thread: the client's too): what the read costs, whatever the load
    board_cpu: list[float] = field(default_factory=list)  # the same, per board read
    seen: int = 0  # workers in the last answered board read
    unanswered: int = 0  # reads that got no answer within the call timeout


def raw_read(store: ClusterStateStore) -> None:
    """The leader's read of every heartbeat's bytes: the pacemaker store's rounds (what
    ``HeartbeatBoard.read`` reads there), else the whole tree."""
    if isinstance(store, PacemakerStateStore):
        store.read_rounds()
    else:
        store.read_tree("/")


def leader_reads(
    board: HeartbeatBoard, store: ClusterStateStore, secs: float, every: float
) -> LeaderReads:
    """Read every heartbeat each ``every`` seconds for ``secs``, the raw tree and the
    board's decoded read in turn."""
    reads = LeaderReads([], [])
    ends = time.monotonic() + secs
    while time.monotonic() < ends:
        decoded = len(reads.board) < len(reads.tree)
        began, cpu = time.perf_counter(), time.process_time()
        try:
            if decoded:
                read = board.read()
                reads.seen = sum(len(v) for v in read.workers.values())
            else:
                raw_read(store)
        except StateStoreUnavailableError:
            reads.unanswered += 1  # timed as what it cost: the call's whole timeout
        took = time.perf_counter() - began
        (reads.board if decoded else reads.tree).append(took)
        (reads.board_cpu if decoded else reads.tree_cpu).append(time.process_time() - cpu)
        time.sleep(max(0.0, every - took))  # the leader's period
    return reads


def measure_scale(
    kind: str, address: str, pid: int, args: argparse.Namespace, console: Console
) -> ScaleRow:
    """The whole load against one store; see the module docstring."""
    total = args.supervisors * args.workers
    sids = [f"sim-{n:04d}" for n in range(args.supervisors)]
    loads = [
        Load(kind, address, sids[c :: args.clients], args.workers) for c in range(args.clients)
    ]
    store, release = build_store(kind, address)
    board = HeartbeatBoard(store)
    try:
        reads, window, values = run_load(
            kind,
            _supervisors,
            loads,
            [pid],
            lambda processes: wait_filled(kind, board, total, processes, console),
            lambda: leader_reads(board, store, args.secs, args.read_every),
            args,
            console,
        )
    finally:
        release()
    acknowledged = failed = 0
    for times, failures in values:
        acknowledged += sum(1 for t in times if window.began <= t <= window.ended)
        failed += failures
    rss, peak = window.memory_mb[0]
    return ScaleRow(
        store=kind,
        window_secs=window.secs,
        workers_per_sec=acknowledged * args.workers / window.secs,
        target_per_sec=float(total),
        cpu_percent=window.cpu_percent[0],
        rss_mb=rss,
        peak_rss_mb=peak,
        reads=reads.tree,
        read_cpu=reads.tree_cpu,
        decoded_reads=reads.board,
        decoded_cpu=reads.board_cpu,
        workers_read=reads.seen,
        unanswered_reads=reads.unanswered,
        failed_rounds=failed,
    )


def scale_part(args: argparse.Namespace, console: Console) -> PartResult:
    total = args.supervisors * args.workers
    console.print(
        f"scale: {args.supervisors} simulated supervisors x {args.workers} workers = {total:,} "
        f"workers at 1 Hz, from {args.clients} client processes; leader read every "
        f"{args.read_every:g} s; window {args.secs:g} s"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="stratus-bench-pacemaker-scale-") as tmp:
        pacemaker = start_pacemaker(Path(tmp, "pacemaker.log"))
        try:
            address = f"127.0.0.1:{pacemaker.port}"  # type: ignore[attr-defined]
            rows.append(measure_scale("pacemaker", address, pacemaker.pid, args, console))
            console.print(f"pacemaker: {describe_row(rows[-1])}")
        finally:
            pacemaker.send_signal(signal.SIGTERM)
            pacemaker.wait(30)
        with ZooKeeperServer(Path(tmp, "zk"), port=0) as zookeeper:
            if zookeeper.pid is None:
                raise BenchError("ZooKeeper started without a process id")
            rows.append(
                measure_scale("zookeeper", zookeeper.connect_string, zookeeper.pid, args, console)
            )
            console.print(f"zookeeper: {describe_row(rows[-1])}")
    return scale_report(rows, console)


def describe_row(row: ScaleRow) -> str:
    return (
        f"{row.workers_per_sec:,.0f} heartbeats/s of {row.target_per_sec:,.0f}, CPU "
        f"{row.cpu_percent:.1f} %, RSS {row.rss_mb:.0f} MB, raw read p99 {ms(row.read_p99)} ms, "
        f"decoded read p99 {ms(row.decoded_p99)} ms, {row.failed_rounds} rounds and "
        f"{row.unanswered_reads} reads unanswered"
    )


def scale_report(rows: list[ScaleRow], console: Console) -> PartResult:
    table = Table(
        title="heartbeats of simulated workers at 1 Hz: the server process, over the window",
        caption="CPU: % of one core; rate: worker heartbeats acknowledged per second; raw: "
        "the leader's read of every heartbeat's bytes (pacemaker: read_rounds, one pulse per "
        "supervisor; ZooKeeper: read_tree) on the wall clock, and its CPU (the reading "
        "process, every thread); decoded: HeartbeatBoard.read, the same decoded into records",
        box=box.SIMPLE,
    )
    headers = (
        "store",
        "rate",
        "of",
        "CPU %",
        "RSS MB",
        "peak MB",
        "raw p50",
        "raw p99",
        "raw CPU p99",
        "decoded p99",
        "decoded CPU p99",
        "read",
    )
    for header in headers:
        table.add_column(header, justify="left" if header == "store" else "right")
    for row in rows:
        table.add_row(
            row.store,
            f"{row.workers_per_sec:,.0f}",
            f"{row.target_per_sec:,.0f}",
            f"{row.cpu_percent:.1f}",
            f"{row.rss_mb:.0f}",
            f"{row.peak_rss_mb:.0f}",
            f"{ms(row.read_p50)} ms",
            f"{ms(row.read_p99)} ms",
            f"{ms(row.read_cpu_p99)} ms",
            f"{ms(row.decoded_p99)} ms",
            f"{ms(row.decoded_cpu_p99)} ms",
            f"{row.workers_read:,} workers",
        )
    console.print(table)
    by = {row.store: row for row in rows}
    pm, zk = by["pacemaker"], by["zookeeper"]
    verdicts = []
    for row in rows:
        achieved = row.workers_per_sec / row.target_per_sec
        if achieved < 0.95 or row.failed_rounds or row.unanswered_reads:
            verdicts.append(
                f"scale, {row.store}: the clients achieved {row.workers_per_sec:,.0f} of "
                f"{row.target_per_sec:,.0f} heartbeats/s ({achieved:.0%}; {row.failed_rounds} "
                f"rounds and {row.unanswered_reads} of {len(row.reads)} leader reads got no "
                f"answer within {CALL_TIMEOUT_SECS:g} s); its figures are at that rate"
            )
    verdicts += [
        f"scale, pacemaker CPU {pm.cpu_percent:.1f} % of one core (target < "
        f"{CPU_TARGET_PERCENT:g} %; ZooKeeper {zk.cpu_percent:.1f} %, ratio "
        f"{_ratio(zk.cpu_percent, pm.cpu_percent)}) "
        + ("met" if pm.cpu_percent < CPU_TARGET_PERCENT else "MISSED"),
        f"scale, pacemaker RSS {pm.rss_mb:.0f} MB (target < {RSS_TARGET_MB:g} MB; ZooKeeper "
        f"{zk.rss_mb:.0f} MB, ratio {_ratio(zk.rss_mb, pm.rss_mb)}) "
        + ("met" if pm.peak_rss_mb < RSS_TARGET_MB else "MISSED"),
        f"scale, leader raw read of {pm.workers_read:,} workers: pacemaker p99 "
        f"{ms(pm.read_p99)} ms (target < {ms(READ_TARGET_SECS)} ms; ZooKeeper p99 "
        f"{ms(zk.read_p99)} ms, ratio {_ratio(zk.read_p99, pm.read_p99)}) "
        + ("met" if pm.read_p99 < READ_TARGET_SECS else "MISSED"),
        f"scale, leader raw read's own CPU: pacemaker p99 {ms(pm.read_cpu_p99)} ms "
        f"(ZooKeeper {ms(zk.read_cpu_p99)} ms): the read's wall time on an idle core",
        f"scale, leader HeartbeatBoard.read (decoded) of {pm.workers_read:,} workers: pacemaker "
        f"p99 {ms(pm.decoded_p99)} ms (target < {ms(READ_TARGET_SECS)} ms; ZooKeeper p99 "
        f"{ms(zk.decoded_p99)} ms, ratio {_ratio(zk.decoded_p99, pm.decoded_p99)}) "
        + ("met" if pm.decoded_p99 < READ_TARGET_SECS else "MISSED"),
        f"scale, leader HeartbeatBoard.read's own CPU: pacemaker p99 "
        f"{ms(pm.decoded_cpu_p99)} ms (ZooKeeper {ms(zk.decoded_cpu_p99)} ms)",
    ]
    samples = [
        asdict(r) | {"read_p50": r.read_p50, "read_p99": r.read_p99, "decoded_p99": r.decoded_p99}
        for r in rows
    ]
    return PartResult(verdicts, {"scale": samples})


def _percentile(values: list[float], q: float) -> float:
    """NaN for no sample (a store whose one read outlasted the window)."""
    return percentile(values, q) if values else float("nan")


def _ratio(baseline: float, ours: float) -> str:
    return f"{baseline / ours:.1f}x" if ours > 0 else "n/a"


# ---------------------------------------------------------------------------------------------
# Part: detection


@dataclass(frozen=True)
class SafeTimeout:
    """The shortest ``nimbus.supervisor.timeout.secs`` that never runs a pipeline twice.

    A supervisor's lease runs from the *start* of its last acknowledged heartbeat write and
    lapses ``fence`` later; its control loop notices within one tick and stops its workers
    within ``stop``. The leader starts counting no earlier than that write's start (it cannot
    see a value before it is written), so the old workers are gone before a reassignment
    when ``timeout > fence + tick + stop``. With the pacemaker store two more conditions hold
    the derivation: a client call ends within ``client`` < ``fence`` (a write slower than the
    lease renews nothing, and a stuck call must not outlast it), and a pulse outlives the
    timeout (``ttl`` > ``timeout``: an evicted pulse would read as a dead supervisor).
    """

    fence: float
    tick: float
    stop: float
    client: float
    ttl: float
    configured: float

    @property
    def minimum(self) -> float:
        return self.fence + self.tick + self.stop

    @property
    def safe(self) -> bool:
        return (
            self.configured > self.minimum
            and self.client < self.fence
            and self.ttl > self.configured
        )


def local_safe_timeout() -> SafeTimeout:
    """The derivation with the local cluster's settings (``stratus.local.cluster``)."""
    options = local.demo_options("127.0.0.1:2181", Path("/tmp")) + local.pacemaker_options([])
    conf = dict(o.split("=", 1) for o in options if o != "-c")
    heartbeat = float(conf["worker.heartbeat.frequency.secs"])
    return SafeTimeout(
        fence=float(conf["supervisor.fence.timeout.secs"]),
        tick=min(MAX_TICK_SECS, heartbeat / 2),
        stop=float(conf["supervisor.worker.stop.secs"]),
        client=float(conf["pacemaker.client.timeout.secs"]),
        ttl=float(conf["pacemaker.pulse.ttl.secs"]),
        configured=float(conf["nimbus.supervisor.timeout.secs"]),
    )


def detection_part(args: argparse.Namespace, console: Console) -> PartResult:
    derived = local_safe_timeout()
    console.print(
        f"detection: safe supervisor timeout > fence {derived.fence:g} s + control loop tick "
        f"{derived.tick:g} s + worker stop {derived.stop:g} s = [bold]{derived.minimum:g} s[/]; "
        f"pacemaker client timeout {derived.client:g} s < fence {derived.fence:g} s; pulse TTL "
        f"{derived.ttl:g} s > timeout; the local cluster runs {derived.configured:g} s: "
        + ("safe" if derived.safe else "UNSAFE")
    )
    verdicts = [
        f"detection, derived safe supervisor timeout: > {derived.minimum:g} s (configured "
        f"{derived.configured:g} s) " + ("met" if derived.safe else "MISSED")
    ]
    samples: dict[str, Any] = {"safe_timeout": asdict(derived) | {"minimum": derived.minimum}}
    if args.no_kill:
        console.print("detection: kills left out by --quick; --part detection runs them")
        return PartResult(verdicts, samples)
    detected: dict[str, list[float]] = {}
    for store in ("pacemaker", "zookeeper"):
        detected[store] = kill_rounds(store, args.rounds, console)
    table = Table(
        title="kill -9 of the supervisor running a pipeline → its new assignment written: seconds",
        box=box.SIMPLE,
    )
    for header in ("heartbeats in", "rounds", "p50", "max"):
        table.add_column(header, justify="left" if header == "heartbeats in" else "right")
    for store, values in detected.items():
        table.add_row(
            store, str(len(values)), f"{percentile(values, 50):.2f}", f"{max(values):.2f}"
        )
    console.print(table)
    pm, zk = percentile(detected["pacemaker"], 50), percentile(detected["zookeeper"], 50)
    verdicts.append(
        f"detection, kill -9 → new assignment: pacemaker p50 {pm:.2f} s, ZooKeeper p50 "
        f"{zk:.2f} s (ratio {pm / zk:.2f}; timeout {derived.configured:g} s)"
    )
    samples["detection"] = detected
    return PartResult(verdicts, samples)


def kill_rounds(store: str, rounds: int, console: Console) -> list[float]:
    """``rounds`` kills on a fresh local cluster with heartbeats in ``store``; the detection
    step of each (the kill until the new assignment)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"stratus-bench-detect-{store}-"))
    cluster = LocalCluster(workdir, console, nimbuses=1, supervisors=2, state_store=store)
    try:
        cluster.start()
        _, results = run_kill_rounds(cluster, rounds, console)
    except (StratusError, BenchError) as exc:
        raise BenchError(f"detection ({store}): {exc} (logs kept in {workdir})") from exc
    finally:
        handle_interrupts(signal.SIG_IGN)  # let the cleanup finish
        cluster.close()
        handle_interrupts(raise_interrupted)
    shutil.rmtree(workdir, ignore_errors=True)
    for result in results:
        console.print(f"{store}: {describe_round(result)}")
    return [result.start.phases()["detection"] for result in results]


# ---------------------------------------------------------------------------------------------
# Part: beats

BEAT_INTERVAL_SECS = SupervisorSection.model_fields["supervisor_beat_interval_ms"].default / 1000
BEAT_LEASE_SECS: float = SupervisorSection.model_fields["supervisor_beat_lease_secs"].default
DETECTOR_POLL_SECS = NimbusSection.model_fields["nimbus_detector_poll_ms"].default / 1000
BASELINE_INTERVAL_SECS = 1.0  # the supervisors' heartbeat: once a second
BEAT_ACK_TARGET_SECS = 0.100  # well within the beat lease (0.8 s)
BEAT_SERVERS = 3


@dataclass(frozen=True)
class BeatLoad:
    """What one client process simulates: supervisors ``sids`` beating every ``interval``."""

    servers: tuple[tuple[str, int], ...]
    sids: list[str]
    interval: float


@dataclass(frozen=True)
class BeatSent:
    """One beat as its supervisor saw it."""

    sent: float  # wall clock when it was sent
    took: float  # seconds until a majority answered (or the deadline, or the call's error)
    counted: bool  # a majority stored it


@dataclass(frozen=True)
class BeatRow:
    """Every supervisor beating every ``interval`` seconds, over the steady window."""

    interval: float
    window_secs: float
    beats_per_sec: float  # counted beats (a majority stored them) per second
    target_per_sec: float
    acks: list[float]  # seconds from send to the majority's answer, every beat of the window
    uncounted: int  # beats of the window that no majority stored by the deadline
    cpu_percent: list[float]  # of one core, each pacemaker process alone
    clients_cpu_percent: float  # of one core, the client processes together: the load's cost
    rss_mb: list[float]  # each pacemaker's resident memory at the window's end
    reads: list[float]  # seconds per BeatBoard.read on the wall clock
    read_cpu: list[float]  # CPU seconds of the reading process per read (every thread)
    majority_reads: int  # reads answered by a majority of the pacemakers
    beats_read: int  # supervisors in the last read answered by a majority

    @property
    def ack_p50(self) -> float:
        return _percentile(self.acks, 50)

    @property
    def ack_p99(self) -> float:
        return _percentile(self.acks, 99)

    @property
    def read_p50(self) -> float:
        return _percentile(self.reads, 50)

    @property
    def read_p99(self) -> float:
        return _percentile(self.reads, 99)

    @property
    def read_cpu_p99(self) -> float:
        return _percentile(self.read_cpu, 99)

    def summary(self) -> dict[str, Any]:
        """The row for ``--json``: every read, and the beats' percentiles (not every beat)."""
        row = asdict(self)
        del row["acks"]
        return row | {
            "beats": len(self.acks),
            "ack_p50": self.ack_p50,
            "ack_p99": self.ack_p99,
            "read_p50": self.read_p50,
            "read_p99": self.read_p99,
        }


def beat_settings(servers: tuple[tuple[str, int], ...]) -> PacemakerClientSettings:
    """The pacemaker client settings of a beat agent (and of the leader) of ``servers``."""
    return PacemakerClientSettings(servers=servers)


def _beat_loop(
    board: BeatBoard, sid: str, phase: float, load: BeatLoad, stop: Any, sent: list[BeatSent]
) -> None:
    """One simulated supervisor's beat agent: a beat every ``load.interval``, from ``phase``."""
    boot_id = f"bench-{os.getpid()}-{sid}"
    due = time.monotonic() + phase
    seq = 0
    while not stop.is_set():
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # pacing at the beat interval, not synchronization
        elif delay < -load.interval:  # a beat behind: carry on from now, never in a burst
            due = time.monotonic()
        at, began = time.time(), time.perf_counter()
        try:
            counted = board.beat(sid, boot_id, seq, BEAT_LEASE_SECS).counted
        except StateStoreUnavailableError:
            counted = False  # an overloaded client or server: counted as not counted
        sent.append(BeatSent(at, time.perf_counter() - began, counted))
        seq += 1
        due += load.interval


def _beaters(load: BeatLoad, start: Any, stop: Any, result: Any) -> None:
    """A client process: one pacemaker pool (a process's), one thread and one ``BeatBoard``
    per simulated supervisor, their beats spread evenly over the interval; returns every
    beat sent."""
    try:
        pool = BlockingPacemakerPool(beat_settings(load.servers), call_timeout_secs=BEAT_LEASE_SECS)
        pool.connect()
        sent: list[BeatSent] = []
        start.wait()
        threads = [
            threading.Thread(
                target=_beat_loop,
                args=(BeatBoard(pool), sid, load.interval * n / len(load.sids), load, stop, sent),
                daemon=True,
            )
            for n, sid in enumerate(load.sids)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        pool.close()
        result.put(("ok", [(b.sent, b.took, b.counted) for b in sent]))
    except Exception as exc:
        result.put(("error", repr(exc)))


@dataclass
class BeatReads:
    """The leader's ``BeatBoard.read`` over the window, one every detector poll."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    majority: int = 0
    seen: int = 0


def wait_beating(board: BeatBoard, sids: int, processes: list[Any], console: Console) -> None:
    """Until a majority read holds every supervisor's beat, or the fill time."""
    deadline = time.monotonic() + FILL_TIMEOUT_SECS
    with console.status(f"beats: waiting until the leader reads all {sids} supervisors' beats"):
        while True:
            try:
                read = board.read()
                seen = len(read.beats) if read.from_majority else 0
            except StateStoreUnavailableError:
                seen = 0
            if seen >= sids:
                return
            if not any(p.is_alive() for p in processes):
                raise BenchError("beats: every client process ended before every beat was read")
            if time.monotonic() > deadline:
                console.print(f"beats: {seen} of {sids} supervisors' beats after the fill time")
                return
            time.sleep(0.2)


def beat_reads(board: BeatBoard, secs: float) -> BeatReads:
    """``BeatBoard.read`` every detector poll for ``secs``, as the leader's detector does."""
    reads = BeatReads()
    ends = time.monotonic() + secs
    while time.monotonic() < ends:
        began, cpu = time.perf_counter(), time.process_time()
        try:
            read = board.read()
            if read.from_majority:
                reads.majority += 1
                reads.seen = len(read.beats)
        except StateStoreUnavailableError:
            pass  # timed as what it cost; not answered by a majority
        took = time.perf_counter() - began
        reads.wall.append(took)
        reads.cpu.append(time.process_time() - cpu)
        time.sleep(max(0.0, DETECTOR_POLL_SECS - took))  # the detector's period
    return reads


def measure_beats(
    servers: tuple[tuple[str, int], ...],
    pids: list[int],
    interval: float,
    args: argparse.Namespace,
    console: Console,
) -> BeatRow:
    """Every simulated supervisor beating every ``interval`` to ``servers``, the leader
    reading every detector poll; see the module docstring."""
    sids = [f"sim-{n:04d}" for n in range(args.supervisors)]
    loads = [
        BeatLoad(servers, sids[c :: args.clients], interval)
        for c in range(min(args.clients, args.supervisors))
    ]
    settings = beat_settings(servers)
    pool = BlockingPacemakerPool(settings, call_timeout_secs=settings.timeout_secs)
    board = BeatBoard(pool)
    try:
        pool.delete_path(BEATS_PATH)  # the beats of a run before: the wait is for this run's
        reads, window, values = run_load(
            f"beats every {interval:g} s",
            _beaters,
            loads,
            pids,
            lambda processes: wait_beating(board, len(sids), processes, console),
            lambda: beat_reads(board, args.secs),
            args,
            console,
        )
    finally:
        pool.close()
    window_beats = [b for value in values for b in value if window.began <= b[0] <= window.ended]
    return BeatRow(
        interval=interval,
        window_secs=window.secs,
        beats_per_sec=sum(1 for b in window_beats if b[2]) / window.secs,
        target_per_sec=len(sids) / interval,
        acks=[b[1] for b in window_beats],
        uncounted=sum(1 for b in window_beats if not b[2]),
        cpu_percent=window.cpu_percent,
        clients_cpu_percent=window.clients_cpu_percent,
        rss_mb=[rss for rss, _ in window.memory_mb],
        reads=reads.wall,
        read_cpu=reads.cpu,
        majority_reads=reads.majority,
        beats_read=reads.seen,
    )


def beats_part(args: argparse.Namespace, console: Console) -> PartResult:
    console.print(
        f"beats: {args.supervisors} simulated supervisors each beating every "
        f"{BEAT_INTERVAL_SECS:g} s ({args.supervisors / BEAT_INTERVAL_SECS:,.0f} beats/s) "
        f"through BeatBoard.beat to {BEAT_SERVERS} pacemakers (a majority counts), from "
        f"{min(args.clients, args.supervisors)} client processes; BeatBoard.read every "
        f"{DETECTOR_POLL_SECS:g} s; window {args.secs:g} s; baseline: the same beats at "
        f"{BASELINE_INTERVAL_SECS:g} Hz, the heartbeat's rate"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="stratus-bench-pacemaker-beats-") as tmp:
        pacemakers: list[Any] = []
        try:
            for n in range(BEAT_SERVERS):
                pacemakers.append(start_pacemaker(Path(tmp, f"pacemaker-{n}.log")))
            servers = tuple(("127.0.0.1", int(p.port)) for p in pacemakers)
            pids = [p.pid for p in pacemakers]
            for interval in (BEAT_INTERVAL_SECS, BASELINE_INTERVAL_SECS):
                rows.append(measure_beats(servers, pids, interval, args, console))
                console.print(f"beats every {interval:g} s: {describe_beats(rows[-1])}")
        finally:
            for pacemaker in pacemakers:
                pacemaker.send_signal(signal.SIGTERM)
            for pacemaker in pacemakers:
                pacemaker.wait(30)
    return beats_report(rows, console)


def describe_beats(row: BeatRow) -> str:
    return (
        f"{row.beats_per_sec:,.0f} beats/s counted of {row.target_per_sec:,.0f}, "
        f"acknowledgement p99 {ms(row.ack_p99)} ms, {row.uncounted} not counted, pacemaker CPU "
        f"{_each(row.cpu_percent)} %, read p99 {ms(row.read_p99)} ms, "
        f"{row.majority_reads} of {len(row.reads)} reads answered by a majority, the client "
        f"processes {row.clients_cpu_percent:.0f} % of one core"
    )


def _each(values: list[float], digits: int = 1) -> str:
    """One figure per pacemaker: ``7.1/6.9/7.3``."""
    return "/".join(f"{value:.{digits}f}" for value in values)


def beats_report(rows: list[BeatRow], console: Console) -> PartResult:
    table = Table(
        title=f"fast beats to {BEAT_SERVERS} pacemakers (a majority counts), the leader "
        f"reading /beats every {DETECTOR_POLL_SECS:g} s, over the window",
        caption="times in ms; rate: beats a majority stored, per second, of those asked; ack: "
        "from send to the majority's answer (BeatBoard.beat); CPU: % of one core, and RSS, of "
        "each pacemaker; read: BeatBoard.read on the wall clock, and its CPU (the reading "
        "process, every thread); majority: reads a majority answered, of all",
        box=box.SIMPLE,
        pad_edge=False,
    )
    headers = (
        "beats",
        "rate",
        "ack p50",
        "ack p99",
        "CPU %",
        "RSS MB",
        "read p50",
        "read p99",
        "read CPU p99",
        "majority",
    )
    for header in headers:
        table.add_column(header, justify="left" if header == "beats" else "right")
    for row in rows:
        table.add_row(
            f"{1 / row.interval:g} Hz",
            f"{row.beats_per_sec:,.0f}/{row.target_per_sec:,.0f}",
            ms(row.ack_p50),
            ms(row.ack_p99),
            _each(row.cpu_percent),
            _each(row.rss_mb, 0),
            ms(row.read_p50),
            ms(row.read_p99),
            ms(row.read_cpu_p99),
            f"{row.majority_reads}/{len(row.reads)}",
        )
    console.print(table)
    fast, slow = rows
    verdicts = []
    for row in rows:
        achieved = row.beats_per_sec / row.target_per_sec
        if achieved < 0.95 or row.uncounted or row.majority_reads < len(row.reads):
            verdicts.append(
                f"beats every {row.interval:g} s: the clients achieved {row.beats_per_sec:,.0f} "
                f"of {row.target_per_sec:,.0f} beats/s ({achieved:.0%}; {row.uncounted} beats "
                f"not counted, {len(row.reads) - row.majority_reads} of {len(row.reads)} reads "
                "not answered by a majority); its figures are at that rate"
            )
    busiest = max(fast.cpu_percent)
    verdicts += [
        f"beats, rate: {fast.beats_per_sec:,.0f} of {fast.target_per_sec:,.0f} beats/s counted "
        f"by a majority ({fast.beats_per_sec / fast.target_per_sec:.0%})",
        f"beats, acknowledgement p99 {ms(fast.ack_p99)} ms, p50 {ms(fast.ack_p50)} ms (target < "
        f"{ms(BEAT_ACK_TARGET_SECS)} ms, lease {BEAT_LEASE_SECS:g} s; at "
        f"{BASELINE_INTERVAL_SECS:g} Hz p99 {ms(slow.ack_p99)} ms) "
        + ("met" if fast.ack_p99 < BEAT_ACK_TARGET_SECS else "MISSED"),
        f"beats, leader BeatBoard.read of {fast.beats_read} beats: p99 {ms(fast.read_p99)} ms, "
        f"p50 {ms(fast.read_p50)} ms (target < {ms(READ_TARGET_SECS)} ms; at "
        f"{BASELINE_INTERVAL_SECS:g} Hz p99 {ms(slow.read_p99)} ms) "
        + ("met" if fast.read_p99 < READ_TARGET_SECS else "MISSED"),
        f"beats, leader BeatBoard.read's own CPU: p99 {ms(fast.read_cpu_p99)} ms; "
        f"{fast.majority_reads} of {len(fast.reads)} reads answered by a majority",
        f"beats, pacemaker CPU {_each(fast.cpu_percent)} % of one core each (target < "
        f"{CPU_TARGET_PERCENT:g} %; at {BASELINE_INTERVAL_SECS:g} Hz {_each(slow.cpu_percent)} %) "
        + ("met" if busiest < CPU_TARGET_PERCENT else "MISSED"),
        f"beats, pacemaker RSS {_each(fast.rss_mb, 0)} MB each (at "
        f"{BASELINE_INTERVAL_SECS:g} Hz {_each(slow.rss_mb, 0)} MB)",
        f"beats, the simulated supervisors' client processes: {fast.clients_cpu_percent:.0f} % "
        f"of one core together (at {BASELINE_INTERVAL_SECS:g} Hz "
        f"{slow.clients_cpu_percent:.0f} %), on the machine's {os.cpu_count()} CPUs",
    ]
    return PartResult(verdicts, {"beats": [row.summary() for row in rows]})


# ---------------------------------------------------------------------------------------------
# Main

PARTS: dict[str, Callable[[argparse.Namespace, Console], PartResult]] = {
    "scale": scale_part,
    "detection": detection_part,
    "beats": beats_part,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--part", choices=tuple(PARTS), action="append")
    parser.add_argument("--supervisors", type=int, default=200, help="simulated (200)")
    parser.add_argument("--workers", type=int, default=50, help="per supervisor (50)")
    parser.add_argument("--clients", type=int, default=4, help="client processes (4)")
    parser.add_argument("--secs", type=float, default=30.0, help="steady window (30)")
    parser.add_argument("--settle", type=float, default=2.0, help="after the fill (2)")
    parser.add_argument("--read-every", type=float, default=0.5, help="leader reads (0.5 s)")
    parser.add_argument("--rounds", type=int, default=3, help="detection: kills per store (3)")
    parser.add_argument("--quick", action="store_true", help="small and short: a smoke run")
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    args = parser.parse_args(argv)
    if min(args.supervisors, args.workers, args.clients, args.rounds) < 1 or args.secs <= 0:
        parser.error("--supervisors, --workers, --clients, --rounds >= 1 and --secs > 0")
    args.no_kill = False
    if args.quick:
        args.supervisors, args.secs, args.settle, args.rounds = 20, 2.0, 0.5, 1
        args.clients = min(args.clients, 2)
        args.no_kill = args.part is None  # Spark: minutes, only when named
    args.part = list(dict.fromkeys(args.part or PARTS))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)
    console = report_console(width=120)
    console.rule("Pacemaker at scale: " + ", ".join(args.part))
    info = machine(PACKAGES)
    with open("/proc/loadavg") as loadavg:
        info["load"] = " ".join(loadavg.read().split()[:3])
    reproduce = shlex.join(
        [".venv/bin/python", "bench/pacemaker_scale.py", *(sys.argv[1:] if argv is None else argv)]
    )
    for key, value in {**info, "reproduce": reproduce}.items():
        console.print(f"[bold]{key:>9}[/]: {value}")
    verdicts: list[str] = []
    samples: dict[str, Any] = {}
    try:
        for name in args.part:
            result = PARTS[name](args, console)
            verdicts += result.verdicts
            samples |= result.samples
    except (BenchError, StratusError) as exc:
        console.print(f"[bold red]benchmark failed:[/] {exc}")
        return 1
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc})[/]")
        return 128 + exc.signum
    with open("/proc/loadavg") as loadavg:
        console.print(f"[bold]load after[/]: {' '.join(loadavg.read().split()[:3])}")
    print_verdicts(console, verdicts)
    write_json(
        args.json, args, machine=info, reproduce=reproduce, verdicts=verdicts, samples=samples
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
