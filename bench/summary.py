"""Cluster summary: a nimbus's ``GET /api/v1/cluster`` against reading ZooKeeper, same run.

Measures requests per second, latency, and ZooKeeper operations per request of two ways for a
client to get the same ``ClusterSummary`` (every nimbus with the leader marked, supervisors,
pipelines, and the leader with its epoch):

* **nimbus**: ``GET /api/v1/cluster`` on a *standby* nimbus with one keep-alive
  ``httpx.Client``, the body parsed into ``ClusterSummary``; the nimbus answers from its
  watch-fed cluster view;
* **zookeeper** (the baseline): a kazoo client that reads ``<root>/nimbuses``,
  ``<root>/pipelines``, ``<root>/supervisors`` and ``<root>/groups/nimbus/slots`` (children,
  then the data of every child) and builds the same ``ClusterSummary`` (each pipeline's
  record read whole, then summarized as the nimbus does). Its reads are
  pipelined: the four ``get_children_async`` go out together, then every ``get_async``, so a
  request costs two round trips to ZooKeeper, not one per znode.

Each is measured with one client and with ``--clients`` concurrent clients, every client a
process of its own (so that the clients' parsing does not share one GIL). ZooKeeper operations
per request come from ZooKeeper's own per-connection counters (the ``cons`` four-letter word:
packets received on each session): for the nimbus, the packets of the standby's session
during the phase minus its idle rate (pings) over as long, divided by the requests; for the
baseline, the packets of the clients' sessions. ``all ZK`` is the same for every packet the
server received (``mntr``), minus the idle rate of the whole cluster.

The setup is real: one ZooKeeper (``ZooKeeperServer``), ``--nimbuses`` nimbus processes
(``NimbusProcess``), ``--pipelines`` pipelines submitted through the leader's HTTP API (every
fifth one deactivated). Rounds interleave the systems, the first alternating, so that machine
noise hits both alike.

    .venv/bin/python bench/summary.py [--requests 5000] [--pipelines 50] [--clients 4]
    .venv/bin/python bench/summary.py --quick      # 1 round, fewer requests: a smoke run

Targets: nimbus requests/s >= 10x the ZooKeeper client's, and 0 ZooKeeper operations per
request (below 0.001, i.e. at most one packet per thousand requests beyond the idle pings).
The exit code is 0 even when a target is missed (benchmarks never fail the build); it is 1
only when the benchmark itself could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, Protocol

import httpx
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from rich import box
from rich.console import Console
from rich.table import Table

from _report import (
    Interrupted,
    handle_interrupts,
    ms,
    percentile,
    print_header,
    print_verdicts,
    raise_interrupted,
    write_json,
)
from stratus.api.records import (
    ClusterSummary,
    LeaderInfo,
    NimbusRegistration,
    NimbusSummary,
    PipelineRecord,
    SupervisorSummary,
)
from stratus.codedist.package_build import package_bytes
from stratus.coordination.records import SlotRecord
from stratus.local.processes import NimbusProcess, ProcessStartError
from stratus.security.authorizer import pipeline_summary
from stratus.zk.errors import ZooKeeperServerError
from stratus.zk.paths import NIMBUS_GROUP, ClusterPaths, GroupPaths, join
from stratus.zk.ports import pick_free_port
from stratus.zk.server import ZooKeeperServer

SYSTEMS = ("nimbus", "zookeeper")
DIRECT_PARENTS = ("nimbuses", "pipelines", "supervisors", "leader slots")
ROOT = "/stratus-bench"
SESSION_TIMEOUT_SECS = 10.0  # the nimbus default; the baseline clients use the same
HTTP_TIMEOUT_SECS = 10.0
READY_TIMEOUT_SECS = 60.0
WORKER_TIMEOUT_SECS = 600.0
WARMUP_REQUESTS = 50  # per client, before every client reports ready
PACKAGE_BYTES = 16 * 1024
RATIO_TARGET = 10.0
ZERO_OPS = 0.001  # "0 operations per request": fewer than one per thousand requests
POLL_SECS = 0.05


class BenchError(Exception):
    """The benchmark could not run (not a missed target)."""


# ---------------------------------------------------------------------------------------------
# The two clients


class SummaryClient(Protocol):
    @property
    def session_id(self) -> int | None:
        """The client's own ZooKeeper session, if it has one."""

    def summary(self) -> ClusterSummary: ...

    def close(self) -> None: ...


class NimbusSummaryClient:
    """``GET /api/v1/cluster`` on one nimbus with one keep-alive connection."""

    session_id: int | None = None

    def __init__(self, url: str) -> None:
        self._http = httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_SECS)

    def summary(self) -> ClusterSummary:
        response = self._http.get("/api/v1/cluster")
        if response.status_code != 200:
            raise BenchError(f"GET /api/v1/cluster: {response.status_code} {response.text}")
        return ClusterSummary.model_validate_json(response.content)

    def close(self) -> None:
        self._http.close()


class ZooKeeperSummaryClient:
    """The same summary from ZooKeeper per request: children, then all data, pipelined."""

    def __init__(self, hosts: str, root: str) -> None:
        paths = ClusterPaths(root)
        self._parents = (
            paths.nimbuses,
            paths.pipelines,
            paths.supervisors,
            GroupPaths(root, NIMBUS_GROUP).slots,
        )
        self._zk = KazooClient(hosts=hosts, timeout=SESSION_TIMEOUT_SECS)
        self._zk.start(timeout=READY_TIMEOUT_SECS)
        self.session_id: int | None = int(self._zk.client_id[0])

    def summary(self) -> ClusterSummary:
        listings = [self._zk.get_children_async(parent) for parent in self._parents]
        children = [sorted(listing.get()) for listing in listings]
        reads = [
            [(name, self._zk.get_async(join(parent, name))) for name in names]
            for parent, names in zip(self._parents, children, strict=True)
        ]
        nimbuses, pipelines, supervisors, slots = (
            [(name, raw) for name, raw in ((name, _data(read)) for name, read in group) if raw]
            for group in reads
        )
        leader = LeaderInfo(address=None, epoch=None)
        for _, raw in slots:
            slot = SlotRecord.decode(raw)
            if slot.slot == 0:
                leader = LeaderInfo(address=slot.member_id, epoch=slot.epoch)
        now = time.time()
        registrations = [NimbusRegistration.model_validate_json(raw) for _, raw in nimbuses]
        return ClusterSummary(
            nimbuses=[
                NimbusSummary(
                    host=reg.host,
                    port=reg.port,
                    uptime_secs=max(0, int(now - reg.started)),
                    is_leader=reg.address == leader.address,
                    version=reg.version,
                )
                for reg in registrations
            ],
            supervisors=[SupervisorSummary.model_validate_json(raw) for _, raw in supervisors],
            pipelines=[
                pipeline_summary(PipelineRecord.model_validate_json(raw)) for _, raw in pipelines
            ],
            leader=leader,
        )

    def close(self) -> None:
        self._zk.stop()
        self._zk.close()


def _data(read: Any) -> bytes | None:
    """The data of one ``get_async``, or None if the znode went away since the listing."""
    try:
        data, _ = read.get()
    except NoNodeError:
        return None
    return bytes(data)


def make_client(system: str, target: str) -> SummaryClient:
    return (
        NimbusSummaryClient(target) if system == "nimbus" else ZooKeeperSummaryClient(target, ROOT)
    )


def comparable(summary: ClusterSummary) -> dict[str, Any]:
    """The summary without uptimes, which the two clients compute a moment apart."""
    doc = summary.model_dump()
    for nimbus in doc["nimbuses"]:
        nimbus.pop("uptime_secs")
    return doc


# ---------------------------------------------------------------------------------------------
# Client processes


def client_process(system: str, target: str, conn: Connection) -> None:
    """One client in a process of its own: ``("run", n)`` -> ``("done", start, end, latencies)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the bench stops its clients itself
    try:
        client = make_client(system, target)
        try:
            for _ in range(WARMUP_REQUESTS):
                client.summary()
            conn.send(("ready", client.session_id))
            while (command := conn.recv())[0] == "run":
                latencies = []
                start = time.monotonic()
                for _ in range(int(command[1])):
                    began = time.perf_counter()
                    client.summary()
                    latencies.append(time.perf_counter() - began)
                conn.send(("done", start, time.monotonic(), latencies))
        finally:
            client.close()
    except Exception as exc:
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


@dataclass
class ClientGroup:
    """``clients`` client processes of one system, kept across rounds."""

    system: str
    clients: int
    processes: list[BaseProcess]
    conns: list[Connection]
    session_ids: list[int]

    @classmethod
    def start(cls, system: str, target: str, clients: int) -> ClientGroup:
        context = multiprocessing.get_context("spawn")  # no fork of a process with threads
        group = cls(system, clients, [], [], [])
        for _ in range(clients):
            parent_end, child_end = context.Pipe()
            process = context.Process(
                target=client_process, args=(system, target, child_end), daemon=True
            )
            process.start()
            group.processes.append(process)
            group.conns.append(parent_end)
        for conn in group.conns:
            reply = group._receive(conn, READY_TIMEOUT_SECS)
            if reply[1] is not None:
                group.session_ids.append(int(reply[1]))
        return group

    def run(self, requests: int) -> tuple[float, list[float]]:
        """Every client makes its share of ``requests``; (wall-clock seconds, latencies)."""
        shares = [
            requests // self.clients + (i < requests % self.clients) for i in range(self.clients)
        ]
        for conn, share in zip(self.conns, shares, strict=True):
            conn.send(("run", share))
        replies = [self._receive(conn, WORKER_TIMEOUT_SECS) for conn in self.conns]
        start = min(float(reply[1]) for reply in replies)
        end = max(float(reply[2]) for reply in replies)
        return end - start, [latency for reply in replies for latency in reply[3]]

    def _receive(self, conn: Connection, timeout: float) -> tuple[Any, ...]:
        if not conn.poll(timeout):
            raise BenchError(f"a {self.system} client did not answer within {timeout:g} s")
        try:
            reply: tuple[Any, ...] = conn.recv()
        except EOFError:
            raise BenchError(f"a {self.system} client process died") from None
        if reply[0] == "error":
            raise BenchError(f"a {self.system} client failed: {reply[1]}")
        return reply

    def stop(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(("stop",))
        for process in self.processes:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()


# ---------------------------------------------------------------------------------------------
# ZooKeeper's statistics


def packets_by_session(server: ZooKeeperServer) -> dict[int, int]:
    """Packets received on each client connection that has a session (``cons``)."""
    counts = {}
    for line in server.four_letter("cons").splitlines():
        session = re.search(r"sid=0x([0-9a-f]+)", line)
        received = re.search(r"recved=(\d+)", line)
        if session and received:
            counts[int(session.group(1), 16)] = int(received.group(1))
    return counts


def packets_received(server: ZooKeeperServer) -> int:
    """Every packet the server received (``mntr``'s ``zk_packets_received``)."""
    found = re.search(r"zk_packets_received\s+(\d+)", server.four_letter("mntr"))
    if found is None:
        raise BenchError("mntr has no zk_packets_received")
    return int(found.group(1))


@dataclass(frozen=True)
class Counters:
    at: float
    sessions: dict[int, int]
    total: int

    @classmethod
    def read(cls, server: ZooKeeperServer) -> Counters:
        return cls(time.monotonic(), packets_by_session(server), packets_received(server))

    def total_since(self, before: Counters, overhead: int) -> int:
        """Packets received since ``before``, less those of the bench's own reads."""
        return self.total - before.total - overhead

    def sessions_since(self, before: Counters, session_ids: list[int]) -> int:
        missing = [sid for sid in session_ids if sid not in self.sessions]
        if missing:
            raise BenchError(f"sessions {[hex(s) for s in missing]} are not connected to ZooKeeper")
        return sum(self.sessions[sid] - before.sessions.get(sid, 0) for sid in session_ids)


# ---------------------------------------------------------------------------------------------
# The cluster


@contextlib.contextmanager
def cluster(
    tmp: Path, nimbuses: int, console: Console
) -> Iterator[tuple[ZooKeeperServer, list[NimbusProcess]]]:
    server = ZooKeeperServer(tmp / "zk", force_sync=False)
    processes: list[NimbusProcess] = []
    try:
        server.start()
        options = [
            "-c", f"zookeeper.servers={server.connect_string}",
            "-c", f"zookeeper.root={ROOT}",
            "-c", f"zookeeper.session.timeout.secs={SESSION_TIMEOUT_SECS}",
        ]  # fmt: skip
        processes = [
            NimbusProcess(options, port=pick_free_port(), log_dir=tmp) for _ in range(nimbuses)
        ]
        console.print(f"ZooKeeper on {server.connect_string}; starting {nimbuses} nimbuses...")
        for nimbus in processes:
            nimbus.start()
        for nimbus in processes:
            nimbus.wait_ready(READY_TIMEOUT_SECS)
        yield server, processes
    finally:
        handle_interrupts(signal.SIG_IGN)  # let the cleanup finish
        for nimbus in processes:
            nimbus.kill()
        server.kill()


def agreed_leader(nimbuses: list[NimbusProcess]) -> str:
    deadline = time.monotonic() + READY_TIMEOUT_SECS
    while time.monotonic() < deadline:
        seen = set()
        for nimbus in nimbuses:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                seen.add(httpx.get(f"{nimbus.url}/api/v1/leader", timeout=2).json()["address"])
        if len(seen) == 1 and None not in seen:
            return str(seen.pop())
        time.sleep(POLL_SECS)
    raise BenchError("the nimbuses did not agree on a leader")


def bench_package(name: str) -> bytes:
    """A valid package of about ``PACKAGE_BYTES``, its padding random (so never shared)."""
    return package_bytes(
        {
            "stratus.yaml": f"name: {name}\nkind: app\nentrypoint: job:run\n",
            "job.py": "def run(spark, context):  # bench/summary.py never runs it\n    pass\n",
            "padding.bin": os.urandom(PACKAGE_BYTES),
        }
    )


def submit_pipelines(leader: NimbusProcess, count: int) -> None:
    """``count`` pipelines with a package and a conf each; every fifth one deactivated."""
    conf = {
        "spark.sql.shuffle.partitions": 8,
        "spark.executor.memory": "2g",
        "pipeline.trigger.interval.secs": 30,
        "pipeline.checkpoint.subpath": "v1",
    }
    with httpx.Client(base_url=leader.url, timeout=HTTP_TIMEOUT_SECS) as http:
        for index in range(count):
            name = f"etl-{index:03d}"
            response = http.post(
                "/api/v1/pipelines",
                data={"name": name, "conf": json.dumps(conf), "request_id": f"bench-{name}"},
                files={"package": (f"{name}.zip", bench_package(name))},
            )
            if response.status_code not in (200, 201):
                raise BenchError(f"submit {name}: {response.status_code} {response.text}")
            if index % 5 == 4:
                response = http.post(f"/api/v1/pipelines/{name}/deactivate")
                if response.status_code != 200:
                    raise BenchError(f"deactivate {name}: {response.status_code} {response.text}")


def wait_for_view(nimbus: NimbusProcess, pipelines: int, nimbuses: int) -> None:
    """Until the standby's view holds every pipeline and every nimbus."""
    deadline = time.monotonic() + READY_TIMEOUT_SECS
    client = NimbusSummaryClient(nimbus.url)
    try:
        while time.monotonic() < deadline:
            summary = client.summary()
            if len(summary.pipelines) == pipelines and len(summary.nimbuses) == nimbuses:
                return
            time.sleep(POLL_SECS)
    finally:
        client.close()
    raise BenchError(f"{nimbus.address} did not see {pipelines} pipelines in time")


def check_same_summary(nimbus: NimbusProcess, hosts: str) -> ClusterSummary:
    """Both clients must build the same summary, or the comparison means nothing."""
    clients = [make_client("nimbus", nimbus.url), make_client("zookeeper", hosts)]
    try:
        for _ in range(10):  # the data may move under one of the reads (not here: nothing writes)
            from_nimbus, from_zookeeper = (client.summary() for client in clients)
            if comparable(from_nimbus) == comparable(from_zookeeper):
                return from_nimbus
            time.sleep(POLL_SECS)
    finally:
        for client in clients:
            client.close()
    raise BenchError(
        "the nimbus and ZooKeeper clients built different summaries:\n"
        f"{comparable(from_nimbus)}\n{comparable(from_zookeeper)}"
    )


# ---------------------------------------------------------------------------------------------
# Measurement


@dataclass
class Phase:
    system: str
    clients: int
    round: int
    requests: int
    seconds: float
    latencies: list[float]
    own_packets: int  # on the sessions of the system (the standby nimbus's, or the clients')
    own_idle: float  # expected from the idle rate of those sessions over the phase
    all_packets: int  # every packet ZooKeeper received
    all_idle: float

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def ops_per_request(self) -> float:
        return max(0.0, self.own_packets - self.own_idle) / self.requests


@dataclass(frozen=True)
class IdleRates:
    """Packets per second that ZooKeeper receives with no request in flight.

    ``overhead``: the packets of one ``Counters.read`` itself (its ``cons`` and ``mntr``
    connections), which fall in every window that a read ends.
    """

    sessions: dict[int, float]
    total: float
    overhead: int

    @classmethod
    def measure(cls, server: ZooKeeperServer, seconds: float) -> IdleRates:
        first = Counters.read(server)
        before = Counters.read(server)
        overhead = before.total - first.total
        time.sleep(seconds)
        after = Counters.read(server)
        elapsed = after.at - before.at
        return cls(
            {
                sid: (count - before.sessions.get(sid, 0)) / elapsed
                for sid, count in after.sessions.items()
            },
            after.total_since(before, overhead) / elapsed,
            overhead,
        )


def measure(
    server: ZooKeeperServer,
    group: ClientGroup,
    *,
    counted: list[int],
    idle: IdleRates,
    requests: int,
    number: int,
) -> Phase:
    before = Counters.read(server)
    seconds, latencies = group.run(requests)
    after = Counters.read(server)
    elapsed = after.at - before.at
    return Phase(
        system=group.system,
        clients=group.clients,
        round=number,
        requests=requests,
        seconds=seconds,
        latencies=latencies,
        own_packets=after.sessions_since(before, counted),
        own_idle=sum(idle.sessions.get(sid, 0.0) for sid in counted) * elapsed,
        all_packets=after.total_since(before, idle.overhead),
        all_idle=idle.total * elapsed,
    )


def run(args: argparse.Namespace, console: Console) -> list[Phase]:
    phases: list[Phase] = []
    groups: list[ClientGroup] = []
    with (
        tempfile.TemporaryDirectory(prefix="stratus-bench-summary-") as tmp,
        cluster(Path(tmp), args.nimbuses, console) as (server, nimbuses),
    ):
        try:
            leader_address = agreed_leader(nimbuses)
            leader = next(n for n in nimbuses if n.address == leader_address)
            standby = next(n for n in nimbuses if n.address != leader_address)
            console.print(f"leader {leader.address}; submitting {args.pipelines} pipelines...")
            submit_pipelines(leader, args.pipelines)
            wait_for_view(standby, args.pipelines, args.nimbuses)
            summary = check_same_summary(standby, server.connect_string)
            console.print(
                f"summary: {len(summary.nimbuses)} nimbuses, {len(summary.supervisors)} "
                f"supervisors, {len(summary.pipelines)} pipelines, "
                f"{len(httpx.get(f'{standby.url}/api/v1/cluster').content)} bytes of JSON; "
                f"measuring on standby {standby.address}; a ZooKeeper-client request reads "
                f"{len(DIRECT_PARENTS)} children lists and "
                f"{len(summary.nimbuses) + len(summary.supervisors) + len(summary.pipelines) + 1}"
                " znodes"
            )
            standby_session = standby_session_id(server, standby)
            targets = {"nimbus": standby.url, "zookeeper": server.connect_string}
            counts = sorted({1, args.clients})
            for clients in counts:
                for system in SYSTEMS:
                    groups.append(ClientGroup.start(system, targets[system], clients))
            console.print(f"idle ZooKeeper traffic for {args.idle_secs:g} s...")
            idle = IdleRates.measure(server, args.idle_secs)
            for number in range(1, args.rounds + 1):
                order = groups if number % 2 else list(reversed(groups))
                for group in order:
                    counted = [standby_session] if group.system == "nimbus" else group.session_ids
                    requests = args.requests if group.system == "nimbus" else args.direct_requests
                    phase = measure(
                        server, group, counted=counted, idle=idle, requests=requests, number=number
                    )
                    phases.append(phase)
                    console.print(
                        f"round {number}/{args.rounds}: {phase.system:>9} x{phase.clients} "
                        f"{phase.rate:8,.0f} requests/s, {phase.ops_per_request:7.4f} ZK ops "
                        f"per request ({phase.own_packets} packets, "
                        f"{phase.own_idle:.1f} expected idle)"
                    )
        finally:
            for group in groups:
                group.stop()
    return phases


def standby_session_id(server: ZooKeeperServer, standby: NimbusProcess) -> int:
    """The session of the standby nimbus: the owner of its ephemeral registration."""
    zk = KazooClient(hosts=server.connect_string, timeout=SESSION_TIMEOUT_SECS)
    zk.start(timeout=READY_TIMEOUT_SECS)
    try:
        _, stat = zk.get(ClusterPaths(ROOT).nimbus(standby.address))
        return int(stat.ephemeralOwner)
    finally:
        zk.stop()
        zk.close()


# ---------------------------------------------------------------------------------------------
# Report


@dataclass(frozen=True)
class Result:
    system: str
    clients: int
    rate: float  # median over rounds
    p50: float
    p99: float
    packets: int  # on the system's own sessions, all rounds together
    idle: float  # of those, expected from the sessions' idle rate (pings)
    all_ops: float  # every packet ZooKeeper received, less the idle rate, per request
    requests: int

    @property
    def ops(self) -> float:
        """ZooKeeper operations per request: own packets beyond the idle ones."""
        return max(0.0, self.packets - self.idle) / self.requests

    @classmethod
    def of(cls, phases: list[Phase]) -> Result:
        latencies = [latency for phase in phases for latency in phase.latencies]
        requests = sum(phase.requests for phase in phases)
        every = sum(phase.all_packets - phase.all_idle for phase in phases)
        return cls(
            phases[0].system,
            phases[0].clients,
            statistics.median(phase.rate for phase in phases),
            percentile(latencies, 50),
            percentile(latencies, 99),
            sum(phase.own_packets for phase in phases),
            sum(phase.own_idle for phase in phases),
            max(0.0, every) / requests,
            requests,
        )


def report(console: Console, phases: list[Phase], clients: list[int]) -> list[str]:
    """Print the results table and the targets; return the verdict lines."""
    table = Table(
        title="Cluster summary: requests/s and ZooKeeper operations per request",
        caption=(
            "requests/s: median over rounds; latency (ms) over every request; ZK packets: on "
            "the system's own sessions, less the idle pings expected over as long; ZK ops/req: "
            "that per request; all ZK/req: every packet ZooKeeper received, less the idle "
            "rate; ratio = nimbus / zookeeper"
        ),
        box=box.SIMPLE_HEAD,
    )
    headers = ("clients", "system", "requests", "req/s", "p50", "p99")
    for header in (*headers, "ZK packets", "ZK ops/req", "all ZK/req"):
        table.add_column(header, justify="left" if header == "system" else "right", no_wrap=True)
    verdicts = []
    for count in clients:
        nimbus, direct = (
            Result.of([p for p in phases if p.system == system and p.clients == count])
            for system in SYSTEMS
        )
        for result in (nimbus, direct):
            table.add_row(
                str(count),
                result.system,
                str(result.requests),
                f"{result.rate:,.0f}",
                ms(result.p50),
                ms(result.p99),
                f"{result.packets} - {result.idle:.1f}",
                f"{result.ops:.4f}",
                f"{result.all_ops:.4f}",
            )
        ratio = nimbus.rate / direct.rate
        table.add_row(
            "", "ratio", "", f"{ratio:.1f}x", f"{nimbus.p50 / direct.p50:.2f}x",
            f"{nimbus.p99 / direct.p99:.2f}x", "", "", "", end_section=True,
        )  # fmt: skip
        plural = "s" if count > 1 else ""
        verdicts.append(
            f"{count} client{plural}: nimbus {ratio:.1f}x the requests/s of the ZooKeeper "
            f"client{plural} (target >= {RATIO_TARGET:g}x): "
            f"{'met' if ratio >= RATIO_TARGET else 'MISSED'}"
        )
        verdicts.append(
            f"{count} client{plural}: {nimbus.ops:.4f} ZooKeeper operations per nimbus request "
            f"(target 0, i.e. < {ZERO_OPS:g}): {'met' if nimbus.ops < ZERO_OPS else 'MISSED'}"
        )
    console.print(table)
    print_verdicts(console, verdicts)
    return verdicts


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=5000, help="nimbus requests per phase")
    parser.add_argument(
        "--direct-requests", type=int, help="ZooKeeper-client requests per phase (requests/10)"
    )
    parser.add_argument("--pipelines", type=int, default=50, help="pipelines submitted (50)")
    parser.add_argument("--nimbuses", type=int, default=3, help="nimbus processes (3)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients, besides 1")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every phase (3)")
    parser.add_argument("--idle-secs", type=float, default=10.0, help="idle-rate window, s")
    parser.add_argument("--quick", action="store_true", help="1 round, 1000 requests: a smoke run")
    parser.add_argument("--json", type=Path, help="also write every phase to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.requests, args.idle_secs = 1, 1000, 5.0
    if args.direct_requests is None:
        args.direct_requests = max(1, args.requests // 10)
    if min(args.requests, args.direct_requests, args.rounds, args.clients) < 1:
        parser.error("--requests, --direct-requests, --rounds and --clients must be >= 1")
    if args.nimbuses < 2:
        parser.error("--nimbuses must be >= 2: the summary is read from a standby")
    if args.pipelines < 0 or args.idle_secs <= 0:
        parser.error("--pipelines must be >= 0 and --idle-secs > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)  # explicitly: a background job inherits an ignored SIGINT
    console = Console() if sys.stdout.isatty() else Console(width=110)
    console.rule("Cluster summary: nimbus GET /api/v1/cluster vs a ZooKeeper client")
    info, reproduce = print_header(
        console, "summary.py", argv, ("kazoo", "httpx", "fastapi", "uvicorn")
    )
    console.print(
        f"[bold]{'run':>9}[/]: {args.rounds} rounds, {args.requests} nimbus / "
        f"{args.direct_requests} ZooKeeper-client requests per phase, 1 and {args.clients} "
        f"clients, {args.nimbuses} nimbuses, {args.pipelines} pipelines"
    )
    try:
        phases = run(args, console)
    except (BenchError, ProcessStartError, ZooKeeperServerError) as exc:
        console.print(f"[bold red]benchmark failed:[/] {exc}")
        return 1
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc}); every process was stopped[/]")
        return 128 + exc.signum
    report(console, phases, sorted({1, args.clients}))
    write_json(
        args.json,
        args,
        machine=info,
        reproduce=reproduce,
        phases=[asdict(phase) for phase in phases],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
