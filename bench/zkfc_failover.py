"""Nimbus failover: supervised (the default), under zkfcs, self-elected; same run, same ZooKeeper.

Three clusters of ``--nimbuses`` real ``stratus nimbus`` processes on one ZooKeeper (loopback,
tick 100 ms), each under its own root: one with the default ``nimbus.ha.mode: supervised``
(each ``stratus nimbus`` a failover controller running its nimbus as its child), one
self-elected (``nimbus.ha.mode: self``), one in ``nimbus.ha.mode: zkfc`` with a real
``stratus zkfc`` beside each nimbus. The controllers of the first and the zkfcs of the third
have the same settings. Three scenarios:

* **kill**: ``kill -9`` of the leader nimbus process alone (supervised: the child, not its
  controller), in the three clusters, and of the ALIVE master of Spark's standalone master
  HA (``--spark-rounds``; rounds interleaved, so that machine noise hits them all).
  Supervised, the controller reaps its dead child and gives the lock up at once;
  self-elected, the standby leads once ZooKeeper expires the dead nimbus's session; under
  zkfcs, the dead nimbus's zkfc sees its port refuse connections at its next health check
  and gives the lock up at once; Spark's standby master leads once the dead master's session
  expires, then recovers;
* **stop**: SIGSTOP of the leader nimbus alone, supervised and zkfc clusters: its
  controller's health check times out after ``--health-timeout`` (a supervised one then
  kills it, and restarts it); then SIGCONT, and the next round waits until the old leader
  says it is standby;
* **host**: ``kill -9`` of the leader nimbus and of its zkfc together, zkfc cluster only (a
  lost host): nobody is left to give the lock up, so the zkfc's session must expire.

Each round measures, from the signal: **served**, the first successful leader-only call
(``activate`` of a pipeline submitted at the start, a no-op) by a ``NimbusClient`` that knows
every nimbus; and **record**, the creation time (in ZooKeeper) of the new leader's record.
For Spark, served is the first driver-status request that another master answers as the
leader (``bench/_masters.py``, shared with ``bench/failover.py``), with the same number of
masters and one registered worker (``--no-spark-worker``: none); Spark asks for a 60 s
session, which the ZooKeeper here caps at ``--session-timeout``, so all three have the same.
Killed processes are restarted, and each round waits until the cluster is whole again
(every nimbus queued in the election, one leader that every nimbus names; one ALIVE Spark
master, the others STANDBY).

    .venv/bin/python bench/zkfc_failover.py [--rounds 20] [--session-timeout 2]
    .venv/bin/python bench/zkfc_failover.py --quick      # 1 round each, no Spark: a smoke run
    .venv/bin/python bench/zkfc_failover.py --quick --spark-rounds 2   # with Spark (JVMs)

The exit code is 0 even when a target is missed; 1 only when the benchmark itself could not
run.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from rich import box
from rich.console import Console
from rich.table import Table

from _masters import SparkCluster
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
from stratus.api.records import LeaderInfo
from stratus.client import NimbusClient
from stratus.codedist.package_build import package_bytes
from stratus.coordination.records import SlotRecord
from stratus.ha.protocol import HAServiceClient, HAState
from stratus.local.processes import NimbusProcess, ZkfcProcess
from stratus.zk.paths import NIMBUS_GROUP, GroupPaths
from stratus.zk.ports import pick_free_port
from stratus.zk.server import ZooKeeperServer

TICK_TIME_MS = 100
PIPELINE = "bench-zkfc"
PIPELINE_PACKAGE = package_bytes(
    {
        "stratus.yaml": "name: bench\nkind: app\nentrypoint: bench:run\n",
        "bench.py": "def run(spark, context):  # bench/zkfc_failover.py never runs it\n    pass\n",
    }
)
SPARK_ROUNDS = 10  # each restarts a master JVM and waits for its recovery
KILL_P50_TARGET = 0.250  # zkfc, kill -9 of the nimbus alone
KILL_P99_TARGET = 1.0
SUPERVISED_P50_TARGET = 0.500  # supervised (the default), kill -9 of the nimbus child
SUPERVISED_P99_TARGET = 1.0
MODES = ("supervised", "self", "zkfc")
STOP_SLACK = 1.0  # zkfc, SIGSTOP: p99 <= health timeout + this
WHOLE_TIMEOUT_SECS = 120.0
POLL_SECS = 0.05
CALL_DEADLINE_SECS = 60.0
REQUEST_TIMEOUT_SECS = 1.0  # a frozen leader holds a call this long before the next seed


class BenchError(Exception):
    """The benchmark could not run (not a missed target)."""


@dataclass(frozen=True)
class Sample:
    scenario: str  # kill, stop, host
    mode: str  # supervised, self, zkfc, spark
    served: float  # seconds from the signal to the first leader-only call served
    record: float | None  # seconds from the signal to the new leader record's creation
    old_epoch: int
    new_epoch: int
    signalled: float = 0.0  # wall clock of the signal: to place the round in --keep-logs logs


def wait_for(condition: Callable[[], bool], what: str, timeout: float = WHOLE_TIMEOUT_SECS) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise BenchError(f"{what} did not happen within {timeout:g} s")
        time.sleep(POLL_SECS)


class Cluster:
    """N nimbuses in one mode (with a zkfc each in ``zkfc`` mode), under one root."""

    # The signals of a round go to the process that serves the nimbus: under a supervised
    # nimbus's controller, its child (whose pid its HA status gives)

    def __init__(self, mode: str, zk: ZooKeeperServer, workdir: Path, args: argparse.Namespace):
        self.mode = mode
        self.root = f"/bench-{mode}"
        self.group = GroupPaths(self.root, NIMBUS_GROUP)
        logs = workdir / mode
        logs.mkdir(parents=True, exist_ok=True)
        common = [
            "-c", f"zookeeper.servers={zk.connect_string}",
            "-c", f"zookeeper.root={self.root}",
            "-c", f"zookeeper.session.timeout.secs={args.session_timeout}",
        ]  # fmt: skip
        controller = [
            "-c", "ha.health.check.interval.secs=0.1",
            "-c", f"ha.health.rpc.timeout.secs={args.health_timeout}",
            "-c", "ha.health.max.backoff.secs=0.5",
            "-c", "ha.zkfc.rejoin.delay.secs=0.5",
            "-c", f"ha.fencing.graceful.timeout.secs={args.graceful_timeout}",
        ]  # fmt: skip
        nimbus_options = [
            *common,
            "-c", f"nimbus.ha.mode={mode}",
            "-c", "nimbus.code.sync.freq.secs=1",
            *(controller if mode == "supervised" else []),
        ]  # fmt: skip
        zkfc_options = [*common, *controller, "-c", "ha.zkfc.port=0"]
        self.nimbuses = [
            NimbusProcess(nimbus_options, port=pick_free_port(), log_dir=logs)
            for _ in range(args.nimbuses)
        ]
        self.zkfcs: dict[str, ZkfcProcess] = {}
        if mode == "zkfc":
            self.zkfcs = {
                n.address: ZkfcProcess(zkfc_options, target=n.address, log_dir=logs)
                for n in self.nimbuses
            }
        self.http = httpx.Client(timeout=REQUEST_TIMEOUT_SECS)
        self.reader = KazooClient(hosts=zk.connect_string)
        self.client = NimbusClient(
            [n.address for n in self.nimbuses],
            retry_deadline=CALL_DEADLINE_SECS,
            request_timeout=REQUEST_TIMEOUT_SECS,
        )

    def start(self) -> None:
        self.reader.start(timeout=30)
        for nimbus in self.nimbuses:
            nimbus.start()
        for nimbus in self.nimbuses:
            nimbus.wait_ready()
        for zkfc in self.zkfcs.values():
            zkfc.start()
        for zkfc in self.zkfcs.values():
            zkfc.wait_ready()
        self.wait_whole()
        self.client.submit(PIPELINE, PIPELINE_PACKAGE)

    def close(self) -> None:
        for process in [*self.zkfcs.values(), *self.nimbuses]:
            process.signal(signal.SIGCONT)
            process.kill()
        self.client.close()
        self.http.close()
        with contextlib.suppress(Exception):
            self.reader.stop()
            self.reader.close()

    def leader(self) -> SlotRecord | None:
        try:
            data, _ = self.reader.get(self.group.slot(0))
        except NoNodeError:
            return None
        return SlotRecord.decode(data)

    def leader_since(self) -> tuple[SlotRecord, float] | None:
        """The leader record and its creation time (wall clock, seconds)."""
        try:
            data, stat = self.reader.get(self.group.slot(0))
        except NoNodeError:
            return None
        return SlotRecord.decode(data), stat.ctime / 1000.0

    def _named_leader(self, nimbus: NimbusProcess) -> str | None:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            answer = self.http.get(f"{nimbus.url}/api/v1/leader")
            return LeaderInfo.model_validate_json(answer.content).address
        return None

    def _standby(self, nimbus: NimbusProcess) -> bool:
        with HAServiceClient(nimbus.address, timeout=REQUEST_TIMEOUT_SECS) as service:
            try:
                return service.status().state is HAState.STANDBY
            except Exception:
                return False

    def is_whole(self) -> bool:
        if not all(n.is_running() for n in self.nimbuses):
            return False
        try:
            queued = len(self.reader.get_children(self.group.candidates))
        except NoNodeError:
            return False
        leader = self.leader()
        if queued < len(self.nimbuses) or leader is None:
            return False
        if {self._named_leader(n) for n in self.nimbuses} != {leader.member_id}:
            return False
        others = [n for n in self.nimbuses if n.address != leader.member_id]
        return self.mode == "self" or all(self._standby(n) for n in others)

    def served_by(self, nimbus: NimbusProcess) -> int:
        """The pid that serves ``nimbus``: a supervised nimbus's child, else the process."""
        if self.mode == "supervised":
            with HAServiceClient(nimbus.address, timeout=REQUEST_TIMEOUT_SECS) as service:
                pid = service.status().pid
            if pid is None:
                raise BenchError(f"{nimbus.address} does not say its pid")
            return pid
        assert nimbus.pid is not None
        return nimbus.pid

    def wait_whole(self) -> None:
        wait_for(self.is_whole, f"the {self.mode} cluster to be whole again")

    def round(self, scenario: str) -> Sample:
        """One failure of the leader and its measurement; the cluster made whole again after."""
        self.wait_whole()
        found = self.leader()
        if found is None:
            raise BenchError(f"no leader in the {self.mode} cluster")
        victim = next(n for n in self.nimbuses if n.address == found.member_id)
        zkfc = self.zkfcs.get(victim.address)
        pid = self.served_by(victim)
        signalled = time.time()
        started = time.monotonic()
        if scenario == "stop":
            os.kill(pid, signal.SIGSTOP)
        else:
            if scenario == "host" and zkfc is not None:
                zkfc.signal(signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
        try:
            self.client.activate(PIPELINE)
            served = time.monotonic() - started
        finally:
            if scenario == "stop":
                with contextlib.suppress(ProcessLookupError):  # a supervised one was killed
                    os.kill(pid, signal.SIGCONT)
        since = self.leader_since()
        record = None
        new_epoch = found.epoch
        if since is not None and since[0].epoch > found.epoch:
            new_epoch = since[0].epoch
            record = max(0.0, since[1] - signalled)
        if scenario != "stop" and self.mode != "supervised":  # its controller restarts it
            victim.kill()
            victim.start()
            victim.wait_ready()
            if scenario == "host" and zkfc is not None:
                zkfc.kill()
                zkfc.start()
                zkfc.wait_ready()
        return Sample(scenario, self.mode, served, record, found.epoch, new_epoch, signalled)


def spark_round(spark: SparkCluster) -> Sample:
    """kill -9 of the ALIVE Spark master, timed to the first call another master serves as
    the leader; the killed master restarted as a standby."""
    old = spark.wait_whole()
    signalled = time.time()
    started = time.monotonic()
    old.send_signal(signal.SIGKILL)
    served, _ = spark.first_leader_call(0, started + CALL_DEADLINE_SECS, old)
    old.reap()
    old.start()
    spark.wait_whole()
    return Sample("kill", "spark", served - started, None, 0, 0, signalled)


def run(args: argparse.Namespace, console: Console, workdir: Path) -> list[Sample]:
    zk = ZooKeeperServer(
        workdir / "zookeeper",
        port=0,
        tick_time_ms=TICK_TIME_MS,
        force_sync=False,
        max_session_timeout_ms=int(args.session_timeout * 1000),
    )
    samples: list[Sample] = []
    clusters: dict[str, Cluster] = {}
    spark: SparkCluster | None = None
    http = httpx.Client(timeout=2.0, trust_env=False)
    zk.start()
    try:
        for mode in MODES:
            clusters[mode] = Cluster(mode, zk, workdir, args)
            clusters[mode].start()
        if args.spark_rounds:
            console.print("starting Spark's standalone masters...")
            spark = SparkCluster(
                zk.connect_string,
                workdir / "spark",
                args.nimbuses,
                with_worker=args.spark_worker,
                http=http,
            )
            spark.start()
        plan: list[tuple[str, str]] = []
        for n in range(max(args.rounds, args.spark_rounds)):
            modes = [m for m in MODES if n < args.rounds]
            modes += ["spark"] if n < args.spark_rounds else []
            shift = n % len(modes)  # each mode goes first in turn
            plan += [("kill", mode) for mode in modes[shift:] + modes[:shift]]
        plan += [("stop", mode) for _ in range(args.stop_rounds) for mode in ("supervised", "zkfc")]
        plan += [("host", "zkfc")] * args.host_rounds
        for n, (scenario, mode) in enumerate(plan, 1):
            if mode == "spark":
                assert spark is not None
                sample = spark_round(spark)
            else:
                sample = clusters[mode].round(scenario)
            samples.append(sample)
            record = "-" if sample.record is None else ms(sample.record)
            print(
                f"  {n:>3}/{len(plan)} {scenario:<4} {mode:<10} served {ms(sample.served):>6} ms"
                f"  record {record:>6} ms  epoch {sample.old_epoch}→{sample.new_epoch}",
                flush=True,
            )
    finally:
        handle_interrupts(signal.SIG_IGN)
        for cluster in clusters.values():
            cluster.close()
        if spark is not None:
            spark.stop()
        http.close()
        zk.stop()
    return samples


def stats(values: list[float]) -> tuple[float, float, float]:
    return percentile(values, 50), percentile(values, 99), max(values)


def report(console: Console, samples: list[Sample], args: argparse.Namespace) -> list[str]:
    table = Table(title="leader failover: signal → first leader-only call served", box=box.SIMPLE)
    for column in ("scenario", "mode", "rounds", "served p50", "p99", "max", "record p50", "p99"):
        table.add_column(column, justify="right" if column != "scenario" else "left")
    groups: dict[tuple[str, str], list[Sample]] = {}
    for sample in samples:
        groups.setdefault((sample.scenario, sample.mode), []).append(sample)
    p: dict[tuple[str, str], tuple[float, float, float]] = {}
    for (scenario, mode), group in groups.items():
        p[(scenario, mode)] = stats([s.served for s in group])
        records = [s.record for s in group if s.record is not None]
        rec = stats(records) if records else None
        table.add_row(
            scenario,
            mode,
            str(len(group)),
            *(ms(v) for v in p[(scenario, mode)]),
            ms(rec[0]) if rec else "-",
            ms(rec[1]) if rec else "-",
        )
    console.print(table)
    verdicts = []
    if ("kill", "zkfc") in p:
        p50, p99, _ = p[("kill", "zkfc")]
        verdicts.append(
            f"kill -9, zkfc p50 {ms(p50)} ms (target <= {ms(KILL_P50_TARGET)}): "
            + ("met" if p50 <= KILL_P50_TARGET else "MISSED")
        )
        verdicts.append(
            f"kill -9, zkfc p99 {ms(p99)} ms (target < {ms(KILL_P99_TARGET)}): "
            + ("met" if p99 < KILL_P99_TARGET else "MISSED")
        )
    if ("kill", "zkfc") in p and ("kill", "self") in p:
        ratio = p[("kill", "self")][0] / p[("kill", "zkfc")][0]
        verdicts.append(f"kill -9, self-elected p50 / zkfc p50: {ratio:.1f}x (informational)")
    if ("kill", "zkfc") in p and ("kill", "spark") in p:
        ratio = p[("kill", "spark")][0] / p[("kill", "zkfc")][0]
        verdicts.append(
            f"kill -9, Spark standalone master HA p50 / zkfc p50: {ratio:.1f}x (same session "
            f"timeout, {ms(args.session_timeout)} ms)"
        )
    if ("kill", "supervised") in p:
        p50, p99, _ = p[("kill", "supervised")]
        verdicts.append(
            f"kill -9, supervised (the default) p50 {ms(p50)} ms (target <= "
            f"{ms(SUPERVISED_P50_TARGET)}): "
            + ("met" if p50 <= SUPERVISED_P50_TARGET else "MISSED")
        )
        verdicts.append(
            f"kill -9, supervised p99 {ms(p99)} ms (target <= {ms(SUPERVISED_P99_TARGET)}): "
            + ("met" if p99 <= SUPERVISED_P99_TARGET else "MISSED")
        )
        for other, name in (("self", "self-elected"), ("zkfc", "zkfc"), ("spark", "Spark")):
            if ("kill", other) in p:
                ratio = p[("kill", other)][0] / p50
                verdicts.append(f"kill -9, {name} p50 / supervised p50: {ratio:.1f}x")
    for mode in ("supervised", "zkfc"):
        if ("stop", mode) in p:
            bound = args.health_timeout + STOP_SLACK
            p99 = p[("stop", mode)][1]
            verdicts.append(
                f"SIGSTOP, {mode} p99 {ms(p99)} ms (target <= health timeout + 1 s = "
                f"{ms(bound)}): " + ("met" if p99 <= bound else "MISSED")
            )
    if ("host", "zkfc") in p:
        p99 = p[("host", "zkfc")][1]
        verdicts.append(
            f"host lost, zkfc p99 {ms(p99)} ms against a session timeout of "
            f"{ms(args.session_timeout)} ms (measured, bounded by the session expiry)"
        )
    print_verdicts(console, verdicts)
    return verdicts


def log_client(path: Path) -> None:
    """Every attempt and retry of the measuring client, timestamped, beside the daemons' logs:
    with them, one failover can be followed from the signal to the call served."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s level=%(levelname)s %(message)s"))
    for name in ("stratus.client", "httpx"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG if name == "stratus.client" else logging.INFO)
        logger.addHandler(handler)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="kill -9 rounds per mode")
    parser.add_argument(
        "--stop-rounds", type=int, default=10, help="SIGSTOP rounds (supervised and zkfc, each)"
    )
    parser.add_argument("--host-rounds", type=int, default=5, help="host-lost rounds (zkfc)")
    parser.add_argument("--nimbuses", type=int, default=2, help="nimbuses per cluster")
    parser.add_argument("--session-timeout", type=float, default=2.0, help="seconds")
    parser.add_argument(
        "--health-timeout", type=float, default=1.0, help="the zkfcs' ha.health.rpc.timeout.secs"
    )
    parser.add_argument(
        "--graceful-timeout",
        type=float,
        default=0.25,
        help="the zkfcs' ha.fencing.graceful.timeout.secs: a frozen old active costs two",
    )
    parser.add_argument(
        "--spark-rounds",
        type=int,
        default=None,
        help="kill -9 rounds of Spark's standalone masters (default 10; 0 in --quick)",
    )
    parser.add_argument(
        "--no-spark-worker",
        dest="spark_worker",
        action="store_false",
        help="no Spark worker registered with the masters (recovery has nothing to recover)",
    )
    parser.add_argument("--quick", action="store_true", help="1 round of each: a smoke run")
    parser.add_argument(
        "--keep-logs", type=Path, help="keep every process's log here (and the client's)"
    )
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.stop_rounds, args.host_rounds = 1, 1, 1
    if args.spark_rounds is None:  # Spark's JVMs cost tens of seconds: off in a smoke run
        args.spark_rounds = 0 if args.quick else SPARK_ROUNDS
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)
    console = report_console(width=110)
    console.rule(
        "Nimbus failover: supervised (default) vs under zkfcs vs self-elected vs Spark's "
        "standalone master HA"
    )
    info, reproduce = print_header(console, "zkfc_failover.py", argv, ("kazoo", "pyspark", "httpx"))
    console.print(
        f"[bold]{'run':>9}[/]: kill -9 {args.rounds} rounds per mode "
        f"({args.spark_rounds} of Spark's standalone masters), SIGSTOP "
        f"{args.stop_rounds}, host lost {args.host_rounds}; {args.nimbuses} nimbuses per "
        f"cluster; session timeout {args.session_timeout:g} s; controllers' health check "
        f"every 0.1 s, "
        f"timeout {args.health_timeout:g} s; graceful fence timeout {args.graceful_timeout:g} s "
        f"(retried once after a refusal); ZooKeeper tick {TICK_TIME_MS} ms"
    )
    began = time.monotonic()
    try:
        if args.keep_logs:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            log_client(args.keep_logs / "client.log")
            samples = run(args, console, args.keep_logs.absolute())
        else:
            with tempfile.TemporaryDirectory(prefix="stratus-bench-zkfc-") as tmp:
                samples = run(args, console, Path(tmp))
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc}); every process was stopped[/]")
        return 128 + exc.signum
    except Exception as exc:  # BenchError, or a process that did not start
        console.print(f"[bold red]benchmark failed:[/] {type(exc).__name__}: {exc}")
        return 1
    console.print(f"measured in {time.monotonic() - began:.0f} s")
    verdicts = report(console, samples, args)
    write_json(
        args.json,
        args,
        machine=info,
        reproduce=reproduce,
        verdicts=verdicts,
        samples=[asdict(s) for s in samples],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
