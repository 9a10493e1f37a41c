"""Code replication: from a submit to ``pipeline.min.replication.count = 3``, against ``cp``.

Measures, per round, how long a pipeline's package takes to reach three nimbuses (the leader
that took the upload and both standbys) for packages of 1, 10 and 100 MB, next to the
physical floor measured in the same run: copying the same file twice with ``cp`` on the same
disk. The cluster is real: one ZooKeeper (``ZooKeeperServer``) and three ``stratus nimbus``
processes (``NimbusProcess``), whose package stores and the floor's files share one work
directory, so one disk. A round:

* **submit**: ``NimbusClient(every nimbus).submit(name, package, conf)`` with
  ``pipeline.min.replication.count = 3`` and ``pipeline.max.replication.wait.time.sec = -1``.
  ``t0`` is taken just before the call, ``accepted`` when it returns (the client's check, the
  upload, the leader's checks and store: "upload"). The bench's own kazoo client watches
  ``<root>/code/<name>`` (a ``DataWatch`` until it exists, then a ``ChildrenWatch``) and takes
  ``time.monotonic()`` in the callback that sees the third holder: ``replicated``. Reported:
  replication = replicated - accepted (the two standbys' copies) and total = replicated - t0.
  Afterwards the record must be ACTIVE with replication >= 3 (``wait_replicated``), and the
  pipeline is killed; the next measurement waits until its znodes and every copy of its
  package are gone;
* **floor**: the same package bytes written to a file in the work directory (so in the page
  cache, as the leader's copy is), then ``cp src dst1`` and ``cp src dst2`` (real ``cp``
  processes) timed together; also each ``cp`` followed by an ``fsync`` of its copy (a stored
  package is fsynced, ``cp`` does not), for reference.

Each round uses a new pipeline name and new bytes (16 random bytes at the front of the
package's ``data.bin``), so nothing can be found by its digest. Before every measurement the
bench calls ``sync`` and pauses, so that the writeback of the previous one does not land in
it; whether the floor or the submit goes first alternates between rounds. The package is a
valid stratus package (``stratus.yaml``, ``pipeline_main.py``) plus incompressible random
bytes, stored (not deflated) in the zip.

A second cluster (fresh nimbuses, same ZooKeeper) runs the sizes from 10 MB up again without
the nimbuses' package servers (``nimbus.code.port=-1``, ``--api-rounds``): copies are then
served by the API route alone (FastAPI on uvicorn), to measure what the second server buys.

A third cluster then runs with the watch path disabled
(``nimbus.code.watch=false``, ``nimbus.code.sync.freq.secs=--sync-secs``): the standbys fetch
new code only in their background sync, for contrast, with fewer rounds (``--sync-rounds``,
10 MB only). Its submits wait a random part of the sync period first: else each would come
right after the sync round that removed the previous pipeline, always at the same phase.

A second table splits each round with the nimbuses' own logs (``event=submitted``,
``code_registered``, ``code_fetch_started``, ``code_fetched``): the upload up to the new
record, the standbys' start, fetch (GET, check, write) and registration. A leader that
changed between rounds is printed (its record's epoch), as are the rounds it changed in.
It also gives the CPU time (user + system, ``/proc/<pid>/stat``, 10 ms ticks) that the
three nimbuses used during replication, and that the floor's two ``cp`` used: on a shared,
noisy machine, CPU time says what a copy costs when wall times wander.

    .venv/bin/python bench/replication.py [--rounds 5] [--sizes 1 10 100] [--api-rounds 5]
    .venv/bin/python bench/replication.py --quick      # 1 round of each: a smoke run
    .venv/bin/python bench/replication.py --keep-logs /tmp/repl --json out.json

Targets: at 100 MB replication <= 2x the floor (median of the per-round ratios); at 10 MB
total <= 1 s (median). The exit code is 0 even when a target is missed (benchmarks never fail
the build); it is 1 only when the benchmark itself could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import re
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
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
from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.client import NimbusClient
from stratus.errors import StratusError
from stratus.local.processes import NimbusProcess, ProcessStartError
from stratus.zk.errors import ZooKeeperServerError
from stratus.zk.paths import ClusterPaths
from stratus.zk.ports import pick_free_port
from stratus.zk.server import ZooKeeperServer

MB = 1_000_000
NIMBUSES = 3
REPLICATION = 3  # pipeline.min.replication.count of every submit
WATCH, API, SYNC = "watch", "api route", "sync only"
MODES = (WATCH, API, SYNC)
SLUGS = {WATCH: "watch", API: "api", SYNC: "sync"}
API_MIN_MB = 10  # the API-route contrast runs the measured sizes from this one up
SYNC_SIZE_MB = 10  # the only size of the sync-only contrast
TICK_TIME_MS = 100
SESSION_TIMEOUT_SECS = 4.0
HTTP_TIMEOUT_SECS = 120.0  # one request: a 100 MB upload on a loaded 2-CPU machine
RETRY_DEADLINE_SECS = 120.0
READY_TIMEOUT_SECS = 60.0
REPLICATION_TIMEOUT_SECS = 120.0  # plus 3 sync periods in the sync-only mode
CLEANUP_TIMEOUT_SECS = 60.0  # plus 3 sync periods in the sync-only mode
WATCH_GRACE_SECS = 2.0  # how long the bench's watch may lag a client's read
SETTLE_SECS = 0.5  # after the sync that precedes each measurement
POLL_SECS = 0.05
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # of the CPU times in /proc/<pid>/stat
UNIQUE_BYTES = 16  # random bytes at the front of data.bin, new each round
RATIO_TARGET = 2.0  # replication / floor at 100 MB
RATIO_TARGET_MB = 100
TOTAL_TARGET_SECS = 1.0  # submit to third holder at 10 MB
TOTAL_TARGET_MB = 10
PIPELINE_MAIN = (
    "def run(spark, context):\n"
    '    """Never run: bench/replication.py only measures how this package is copied."""\n'
)


class BenchError(Exception):
    """The benchmark could not run (not a missed target)."""


# ---------------------------------------------------------------------------------------------
# Packages


def package(name: str, data: bytes) -> bytes:
    """A valid stratus package holding ``data`` as ``data.bin``, stored (not deflated)."""
    manifest = f"name: {name}\nkind: app\nentrypoint: pipeline_main:run\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for entry, content in (
            ("stratus.yaml", manifest.encode()),
            ("pipeline_main.py", PIPELINE_MAIN.encode()),
            ("data.bin", data),
        ):
            info = zipfile.ZipInfo(entry, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, content)
    return buffer.getvalue()


class Packages:
    """Packages of about ``size_mb`` MB, each with new bytes: no two share a digest."""

    def __init__(self) -> None:
        self._random: dict[int, bytes] = {}

    def make(self, name: str, size_mb: int) -> bytes:
        if size_mb not in self._random:
            self._random[size_mb] = os.urandom(size_mb * MB)
        base = self._random[size_mb]
        overhead = len(package(name, b""))
        return package(name, os.urandom(UNIQUE_BYTES) + base[UNIQUE_BYTES : len(base) - overhead])


# ---------------------------------------------------------------------------------------------
# Watching ZooKeeper


class HolderWatch:
    """When ``<root>/code/<name>`` first had 1, 2, 3... children (``time.monotonic()``).

    A ``ChildrenWatch`` stops when its znode does not exist, and this one does not exist
    before the submit: a ``DataWatch`` waits for it, then starts the ``ChildrenWatch``.
    """

    def __init__(self, zk: Any, path: str, wanted: int) -> None:
        self.times: dict[int, float] = {}
        self.reached = threading.Event()
        self._zk = zk
        self._path = path
        self._wanted = wanted
        self._listening = False
        self._closed = False
        zk.DataWatch(path, self._on_data)

    def _on_data(self, _data: bytes | None, stat: Any, _event: Any = None) -> bool | None:
        if self._closed:
            return False
        if stat is None or self._listening:
            return None
        self._listening = True
        self._zk.ChildrenWatch(self._path, self._on_children)
        return False  # the children watch takes over

    def _on_children(self, children: list[str]) -> bool | None:
        now = time.monotonic()
        for count in range(1, len(children) + 1):
            self.times.setdefault(count, now)
        if len(children) >= self._wanted:
            self.reached.set()
            return False
        return False if self._closed else None

    def close(self) -> None:
        self._closed = True


class ActiveWatch:
    """When the record ``<root>/pipelines/<name>`` first said ACTIVE (``time.monotonic()``)."""

    def __init__(self, zk: Any, path: str) -> None:
        self.at: float | None = None
        self.seen = threading.Event()
        self._closed = False
        zk.DataWatch(path, self._on_data)

    def _on_data(self, data: bytes | None, _stat: Any, _event: Any = None) -> bool | None:
        if self._closed:
            return False
        if data:
            with contextlib.suppress(ValueError):
                if PipelineRecord.model_validate_json(data).status is PipelineStatus.ACTIVE:
                    self.at = time.monotonic()
                    self.seen.set()
                    return False
        return None

    def close(self) -> None:
        self._closed = True


# ---------------------------------------------------------------------------------------------
# The cluster


class Cluster:
    """Three nimbus processes under their own root, and a client naming them all."""

    def __init__(
        self, mode: str, zk_hosts: str, work_dir: Path, *, session: float, sync_secs: float
    ) -> None:
        self.mode = mode
        slug = SLUGS[mode]
        self.paths = ClusterPaths(f"/bench-replication-{slug}-{uuid.uuid4().hex[:8]}")
        options = [
            "-c", f"zookeeper.servers={zk_hosts}",
            "-c", f"zookeeper.root={self.paths.root}",
            "-c", f"zookeeper.session.timeout.secs={session:g}",
        ]  # fmt: skip
        slack = 3 * sync_secs if mode == SYNC else 0.0  # waits for the sync rounds
        self.replication_timeout = REPLICATION_TIMEOUT_SECS + slack
        self.cleanup_timeout = CLEANUP_TIMEOUT_SECS + slack
        if mode == API:  # no package server: copies are served by the API route alone
            options += ["-c", "nimbus.code.port=-1"]
        if mode == SYNC:
            options += ["-c", "nimbus.code.watch=false"]
            options += ["-c", f"nimbus.code.sync.freq.secs={sync_secs:g}"]
        self.options = options
        log_dir = work_dir / slug
        log_dir.mkdir(parents=True, exist_ok=True)
        self.nimbuses = [
            NimbusProcess(options, port=pick_free_port(), log_dir=log_dir) for _ in range(NIMBUSES)
        ]
        self.client = NimbusClient(
            [n.address for n in self.nimbuses],
            retry_deadline=RETRY_DEADLINE_SECS,
            request_timeout=HTTP_TIMEOUT_SECS,
        )

    def start(self) -> str:
        """Start every nimbus; the leader's address once all of them name the same one."""
        for nimbus in self.nimbuses:
            nimbus.start()
        for nimbus in self.nimbuses:
            nimbus.wait_ready(READY_TIMEOUT_SECS)
        deadline = time.monotonic() + READY_TIMEOUT_SECS
        while time.monotonic() < deadline:
            seen = set()
            for nimbus in self.nimbuses:
                with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                    answer = httpx.get(f"{nimbus.url}/api/v1/leader", timeout=2, trust_env=False)
                    seen.add(answer.json()["address"])
            if len(seen) == 1 and None not in seen:
                return str(seen.pop())
            time.sleep(POLL_SECS)
        raise BenchError(f"{self.mode}: the nimbuses did not agree on a leader")

    def cpu_secs(self) -> float:
        """User + system CPU seconds that the nimbus processes have used so far."""
        return sum(process_cpu_secs(n.pid) for n in self.nimbuses if n.pid is not None)

    def copies(self, digest: str) -> list[Path]:
        """Every file of any nimbus whose name holds ``digest`` (its stored package)."""
        return [
            path
            for nimbus in self.nimbuses
            if nimbus.local_dir.exists()
            for path in nimbus.local_dir.rglob(f"*{digest}*")
        ]

    def stop(self) -> None:
        for nimbus in self.nimbuses:
            nimbus.kill()
        self.client.close()


# ---------------------------------------------------------------------------------------------
# Rounds


@dataclass
class Sample:
    mode: str
    size_mb: int
    round: int  # <= 0: warm-up, not reported
    name: str
    size_bytes: int
    started_wall: float  # time.time() at t0, to find the round in the nimbus logs
    upload: float  # t0 -> submit returned (client check, upload, leader's checks and store)
    replication: float  # submit returned -> the third holder registered
    total: float  # t0 -> the third holder registered
    holders: list[float]  # t0 -> the 1st, 2nd, 3rd holder registered
    active: float | None  # the third holder -> the record said ACTIVE
    cleanup: float  # kill -> znodes and every copy gone
    floor: float = 0.0  # cp src dst1; cp src dst2
    floor_fsync: float = 0.0  # the same, each copy fsynced
    cpu: float = 0.0  # CPU seconds of the three nimbuses, submit returned -> third holder
    floor_cpu: float = 0.0  # CPU seconds of the floor's two cp (without fsync)
    replicas: int = 0  # the record's replication once ACTIVE
    epoch: int = 0  # the leader's epoch in the record written by the submit
    notes: list[str] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)  # from the nimbus logs: STAGES
    checks: list[str] = field(default_factory=list)  # how each fetch was checked (logs)

    @property
    def ratio(self) -> float:
        return self.replication / self.floor

    @property
    def total_ratio(self) -> float:
        return self.total / self.floor


def process_cpu_secs(pid: int) -> float:
    """User + system CPU seconds of process ``pid``, all its threads (0 once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is fields[0]
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def children_cpu_secs() -> float:
    """User + system CPU seconds of this process's children that have been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def quiesce() -> None:
    """Flush dirty pages (the previous measurement's writeback) and let the disk settle."""
    os.sync()
    time.sleep(SETTLE_SECS)


def measure_submit(
    cluster: Cluster,
    reader: Any,
    name: str,
    content: bytes,
    *,
    size_mb: int,
    number: int,
    pause: float,
) -> Sample:
    """Submit, time the third holder, check the record, kill it and wait for its removal.

    ``pause``: seconds to wait first (the sync-only mode's random phase of the sync period).
    """
    conf = {
        "pipeline.min.replication.count": REPLICATION,
        "pipeline.max.replication.wait.time.sec": -1,
    }
    holders = HolderWatch(reader, cluster.paths.code_holders(name), REPLICATION)
    active = ActiveWatch(reader, cluster.paths.pipeline(name))
    time.sleep(pause)
    quiesce()
    wall = time.time()
    started = time.monotonic()
    try:
        record = cluster.client.submit(name, content, conf)
        accepted = time.monotonic()
        cpu_before = cluster.cpu_secs()
        reached = holders.reached.wait(cluster.replication_timeout)
        cpu = cluster.cpu_secs() - cpu_before
        if not reached:
            raise BenchError(
                f"{cluster.mode}: {name} reached {len(holders.times)} holders, not "
                f"{REPLICATION}, within {cluster.replication_timeout:g} s of the submit"
            )
        final = cluster.client.wait_replicated(name, poll_secs=POLL_SECS)
        active.seen.wait(WATCH_GRACE_SECS)  # the client may have read it before the watch fired
    except StratusError as exc:
        raise BenchError(f"{cluster.mode}: submit of {name} failed: {exc}") from exc
    finally:
        holders.close()
        active.close()
    if final.status is not PipelineStatus.ACTIVE or final.replication < REPLICATION:
        raise BenchError(
            f"{cluster.mode}: {name} is {final.status} with replication {final.replication} "
            f"(wanted ACTIVE with {REPLICATION}): {final.reason or 'no reason given'}"
        )
    replicated = holders.times[REPLICATION]
    notes = []
    if final.epoch != record.epoch:
        notes.append(f"the leader changed (epoch {record.epoch} -> {final.epoch})")
    cleanup = remove(cluster, reader, name, record.digest)
    return Sample(
        mode=cluster.mode,
        size_mb=size_mb,
        round=number,
        name=name,
        size_bytes=len(content),
        started_wall=wall,
        upload=accepted - started,
        replication=replicated - accepted,
        total=replicated - started,
        holders=[holders.times[count] - started for count in sorted(holders.times)],
        active=None if active.at is None else active.at - replicated,
        cleanup=cleanup,
        cpu=cpu,
        replicas=final.replication,
        epoch=record.epoch,
        notes=notes,
    )


def remove(cluster: Cluster, reader: Any, name: str, digest: str) -> float:
    """Kill ``name`` at once; seconds until its record, holders and every copy are gone."""
    began = time.monotonic()
    try:
        cluster.client.kill(name, wait_secs=0)
    except StratusError as exc:
        raise BenchError(f"{cluster.mode}: kill of {name} failed: {exc}") from exc
    deadline = began + cluster.cleanup_timeout
    while True:
        left = []
        if reader.exists(cluster.paths.pipeline(name)) is not None:
            left.append("its record")
        holders = cluster.paths.code_holders(name)
        if reader.exists(holders) is not None and reader.get_children(holders):
            left.append("holder znodes")
        if copies := cluster.copies(digest):
            left.append(f"{len(copies)} copies of its package")
        if not left:
            return time.monotonic() - began
        if time.monotonic() >= deadline:
            raise BenchError(
                f"{cluster.mode}: {cluster.cleanup_timeout:g} s after the kill of {name}, "
                f"{' and '.join(left)} still there"
            )
        time.sleep(POLL_SECS)


def measure_floor(work_dir: Path, content: bytes) -> tuple[float, float, float]:
    """Two ``cp`` of the same file on the same disk, the same with each copy fsynced; and
    the CPU seconds of the two ``cp`` without fsync."""
    source = work_dir / "floor-src.zip"
    copies = [work_dir / "floor-dst1.zip", work_dir / "floor-dst2.zip"]
    try:
        source.write_bytes(content)  # in the page cache, as the leader's stored copy is
        timings = []
        cpu = 0.0
        for fsync in (False, True):
            quiesce()
            cpu_before = children_cpu_secs()
            began = time.monotonic()
            for copy in copies:
                subprocess.run(["cp", str(source), str(copy)], check=True)
                if fsync:
                    descriptor = os.open(copy, os.O_RDONLY)
                    try:
                        os.fsync(descriptor)
                    finally:
                        os.close(descriptor)
            timings.append(time.monotonic() - began)
            if not fsync:
                cpu = children_cpu_secs() - cpu_before
            for copy in copies:
                copy.unlink()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BenchError(f"the floor's cp failed: {exc}") from exc
    finally:
        for path in (source, *copies):
            path.unlink(missing_ok=True)
    return timings[0], timings[1], cpu


def run_round(
    cluster: Cluster,
    reader: Any,
    work_dir: Path,
    packages: Packages,
    *,
    size_mb: int,
    number: int,
    sync_secs: float | None,
) -> Sample:
    """One submit and one floor, in alternating order (the warm-up has no floor).

    ``sync_secs``: the sync period of the sync-only mode, whose submits come at a random
    point of it (else right after the previous round's removal, which a sync round noticed).
    """
    slug = SLUGS[cluster.mode]
    label = f"r{number}" if number > 0 else "warmup"
    name = f"repl-{slug}-{size_mb}mb-{label}-{uuid.uuid4().hex[:6]}"
    content = packages.make(name, size_mb)
    floor_first = number > 0 and (number + size_mb) % 2 == 0
    floors = measure_floor(work_dir, content) if floor_first else None
    pause = random.uniform(0, sync_secs) if sync_secs else 0.0
    sample = measure_submit(
        cluster,
        reader,
        name,
        content,
        size_mb=size_mb,
        number=number,
        pause=pause,
    )
    if number > 0:
        sample.floor, sample.floor_fsync, sample.floor_cpu = floors or measure_floor(
            work_dir, content
        )
    return sample


def run(args: argparse.Namespace, console: Console, work_dir: Path) -> list[Sample]:
    samples: list[Sample] = []
    server = ZooKeeperServer(work_dir / "zk", port=0, tick_time_ms=TICK_TIME_MS, force_sync=False)
    reader: KazooClient | None = None
    clusters: list[Cluster] = []
    packages = Packages()
    plan = {
        WATCH: (args.rounds, args.sizes),
        API: (args.api_rounds, [size for size in args.sizes if size >= API_MIN_MB]),
        SYNC: (args.sync_rounds, [SYNC_SIZE_MB]),
    }
    try:
        server.start()
        reader = KazooClient(hosts=server.connect_string, timeout=args.session_timeout)
        reader.start(timeout=READY_TIMEOUT_SECS)
        for mode, (rounds, sizes) in plan.items():
            if rounds < 1 or not sizes:
                continue
            cluster = Cluster(
                mode,
                server.connect_string,
                work_dir,
                session=args.session_timeout,
                sync_secs=args.sync_secs,
            )
            clusters.append(cluster)
            began = time.monotonic()
            leader = cluster.start()
            console.print(
                f"{mode}: ZooKeeper on {server.connect_string}, {NIMBUSES} nimbuses "
                f"(leader {leader}) ready in {time.monotonic() - began:.1f} s; "
                + {
                    WATCH: "new code fetched on the ZooKeeper watch, from the package servers",
                    API: "nimbus.code.port=-1: no package server, copies from the API route",
                    SYNC: f"nimbus.code.watch=false, background sync every {args.sync_secs:g} s",
                }[mode]
            )
            schedule = [(0, min(sizes))] * args.warmup + [
                (number, size) for number in range(1, rounds + 1) for size in sizes
            ]
            measured: list[Sample] = []
            epoch = None
            for index, (number, size_mb) in enumerate(schedule):
                sample = run_round(
                    cluster,
                    reader,
                    work_dir,
                    packages,
                    size_mb=size_mb,
                    number=number,
                    sync_secs=args.sync_secs if mode == SYNC else None,
                )
                label = f"{number}/{rounds}" if number > 0 else f"warm-up {index + 1}"
                floor = (
                    f", 2x cp {ms(sample.floor)} ms (fsynced {ms(sample.floor_fsync)} ms), "
                    f"replication / floor {sample.ratio:.2f}x"
                    if number > 0
                    else ""
                )
                console.print(
                    f"{mode} {size_mb:>3} MB round {label:>9}: upload {ms(sample.upload)} ms, "
                    f"replication {ms(sample.replication)} ms, total {ms(sample.total)} ms"
                    f"{floor}; removed in {sample.cleanup:.1f} s"
                    + "".join(f"; {note}" for note in sample.notes)
                )
                if epoch is not None and sample.epoch != epoch:
                    sample.notes.append(f"a new leader since the previous round (epoch {epoch})")
                    console.print(
                        f"[yellow]{mode}: a new leader since the previous round (epoch {epoch} "
                        f"-> {sample.epoch}); see event=stepping_down in the nimbus logs[/]"
                    )
                epoch = sample.epoch
                if number > 0:
                    measured.append(sample)
            cluster.stop()  # before the next cluster starts: one cluster's load at a time
            clusters.remove(cluster)
            events = read_events(cluster.nimbuses)
            for sample in measured:
                sample.stages = stages(sample, events.get(sample.name, []))
                sample.checks = fetch_checks(events.get(sample.name, []))
            samples += measured
    finally:
        handle_interrupts(signal.SIG_IGN)  # let the cleanup finish (seconds at most)
        for cluster in clusters:
            cluster.stop()
        if reader is not None:
            with contextlib.suppress(Exception):
                reader.stop()
                reader.close()
        server.kill()
    return samples


# ---------------------------------------------------------------------------------------------
# Where the time goes, from the nimbus logs


LOG_LINE = re.compile(
    r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*?\bevent=(?P<event>\S+)(?P<rest>.*)$"
)
PIPELINE_FIELD = re.compile(r"\bpipeline=(?P<name>\S+)")
CHECK_FIELD = re.compile(r"\bcheck=(?P<check>\w+)")
# The stages of one round, from the nimbus logs (wall clock, millisecond resolution):
STAGES = {
    "record": "t0 -> the leader logged `submitted` (client check, upload, leader's checks)",
    "leader": "`submitted` -> the leader's `code_registered` (its store and holder znode)",
    "returned": "the leader's `code_registered` -> the submit call returned",
    "start": "the leader's `code_registered` -> the last standby's `code_fetch_started` "
    "naming a holder (watch reaction, an attempt made before any holder existed)",
    "fetch": "the last standby's `code_fetch_started` -> `code_fetched` (GET, check, write)",
    "store": "its `code_fetched` -> its `code_registered` (rename, fsync, holder znode)",
    "seen": "its `code_registered` -> the bench's watch saw the third holder",
    "other": "the other standby's fetch, `code_fetch_started` -> `code_fetched`",
}


@dataclass(frozen=True)
class LogEvent:
    at: float  # wall clock, seconds since the epoch
    node: str  # the nimbus whose log it is
    event: str
    text: str


def read_events(nimbuses: list[NimbusProcess]) -> dict[str, list[LogEvent]]:
    """Every logged event that names a pipeline, by pipeline, in time order."""
    events: dict[str, list[LogEvent]] = {}
    for nimbus in nimbuses:
        with contextlib.suppress(OSError):
            for line in nimbus.log_path.read_text(encoding="utf-8", errors="replace").splitlines():
                match = LOG_LINE.match(line)
                named = PIPELINE_FIELD.search(match["rest"]) if match else None
                if match and named:
                    at = datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                    event = LogEvent(at, nimbus.address, match["event"], match["rest"])
                    events.setdefault(named["name"], []).append(event)
    for found in events.values():
        found.sort(key=lambda event: event.at)
    return events


def stages(sample: Sample, events: list[LogEvent]) -> dict[str, float]:
    """``STAGES`` of one round, those that the logs allow (none if the events changed)."""
    submitted = next((e for e in events if e.event == "submitted"), None)
    if submitted is None:
        return {}
    leader = _first(events, submitted.node, "code_registered")
    if leader is None:
        return {"record": submitted.at - sample.started_wall}
    found = {
        "record": submitted.at - sample.started_wall,
        "leader": leader.at - submitted.at,
        "returned": sample.started_wall + sample.upload - leader.at,
    }
    standbys = sorted({e.node for e in events} - {submitted.node})
    fetches = sorted(
        (fetch for node in standbys if (fetch := _standby_fetch(events, node))),
        key=lambda fetch: fetch[2],
    )
    if len(fetches) == NIMBUSES - 1:
        (other_started, other_fetched, _), (started, fetched, registered) = fetches
        found |= {
            "start": started - leader.at,
            "fetch": fetched - started,
            "store": registered - fetched,
            "seen": sample.started_wall + sample.total - registered,
            "other": other_fetched - other_started,
        }
    return found


def fetch_checks(events: list[LogEvent]) -> list[str]:
    """The check (``blake3``, ``sha256``) that each ``code_fetched`` of a round names."""
    return [
        match["check"]
        for e in events
        if e.event == "code_fetched" and (match := CHECK_FIELD.search(e.text))
    ]


def _first(events: list[LogEvent], node: str, event: str) -> LogEvent | None:
    return next((e for e in events if e.node == node and e.event == event), None)


def _standby_fetch(events: list[LogEvent], node: str) -> tuple[float, float, float] | None:
    """When ``node`` began the fetch that worked, ended it, and registered; None if unknown."""
    registered = _first(events, node, "code_registered")
    if registered is None:
        return None
    mine = [e for e in events if e.node == node and e.at <= registered.at]
    fetched = [e for e in mine if e.event == "code_fetched"]
    if not fetched:
        return None
    started = [
        e
        for e in mine
        if e.event == "code_fetch_started" and e.at <= fetched[-1].at and "from=-" not in e.text
    ]
    if not started:
        return None
    return started[-1].at, fetched[-1].at, registered.at


# ---------------------------------------------------------------------------------------------
# Report


@dataclass(frozen=True)
class Stats:
    mode: str
    size_mb: int
    n: int
    upload: float  # p50
    replication: float
    replication_p90: float
    total: float
    total_p90: float
    floor: float
    floor_fsync: float
    ratio: float  # p50 of the per-round replication / floor
    ratio_p90: float
    total_ratio: float
    active: float | None  # p50 of the third holder -> ACTIVE

    @classmethod
    def of(cls, samples: list[Sample]) -> Stats:
        def p50(values: list[float]) -> float:
            return statistics.median(values)

        actives = [s.active for s in samples if s.active is not None]
        return cls(
            samples[0].mode,
            samples[0].size_mb,
            len(samples),
            p50([s.upload for s in samples]),
            p50([s.replication for s in samples]),
            percentile([s.replication for s in samples], 90),
            p50([s.total for s in samples]),
            percentile([s.total for s in samples], 90),
            p50([s.floor for s in samples]),
            p50([s.floor_fsync for s in samples]),
            p50([s.ratio for s in samples]),
            percentile([s.ratio for s in samples], 90),
            p50([s.total_ratio for s in samples]),
            p50(actives) if actives else None,
        )


def groups(samples: list[Sample]) -> list[Stats]:
    keys = sorted({(MODES.index(s.mode), s.size_mb) for s in samples})
    return [
        Stats.of([s for s in samples if (MODES.index(s.mode), s.size_mb) == key]) for key in keys
    ]


def report_stages(console: Console, samples: list[Sample]) -> None:
    """Print where the time of each mode and size went (p50 of each stage over rounds)."""
    table = Table(
        title="Where the time goes, from the nimbus logs: milliseconds (p50 over rounds)",
        caption=(
            "record = t0 -> the leader logged the new record; leader = -> the leader "
            "registered as a holder; returned = -> the submit call returned; start = leader "
            "registered -> the last standby began the fetch that worked; fetch = that fetch "
            "(GET, BLAKE3 or sha256 check, write); store = -> it registered; seen = -> the bench "
            "saw the third holder; start + fetch + store + seen = replication + returned; "
            "other = the other standby's fetch, in parallel. Log times have millisecond "
            "resolution. cpu = CPU time of the three nimbuses during replication; cp cpu = that "
            "of the floor's two cp (user + system, 10 ms ticks)."
        ),
        box=box.SIMPLE_HEAD,
    )
    for header in ("mode", "size", *STAGES, "cpu", "cp cpu"):
        table.add_column(header, justify="left" if header == "mode" else "right", no_wrap=True)
    keys = sorted({(MODES.index(s.mode), s.size_mb) for s in samples})
    for key in keys:
        chosen = [s for s in samples if (MODES.index(s.mode), s.size_mb) == key]
        cells = []
        for stage in STAGES:
            values = [s.stages[stage] for s in chosen if stage in s.stages]
            cells.append(ms(statistics.median(values)) if values else "-")
        cells.append(ms(statistics.median([s.cpu for s in chosen])))
        cells.append(ms(statistics.median([s.floor_cpu for s in chosen])))
        table.add_row(MODES[key[0]], f"{key[1]} MB", *cells)
    console.print(table)


def report(console: Console, samples: list[Sample], sync_secs: float) -> list[str]:
    """Print the results table, the targets and the contrast; return the verdict lines."""
    table = Table(
        title=f"Code replication to pipeline.min.replication.count = {REPLICATION}: milliseconds",
        caption=(
            "upload = submit call (client check, upload, leader's checks and store); "
            "repl(ication) = submit returned -> third holder registered in ZooKeeper; total = "
            "both; p50, and p90 beside it, over rounds; 2 cp = cp src dst1; cp src dst2 on the "
            "same disk, same round; fsync = the same, each copy fsynced; repl/cp and total/cp: "
            "per-round ratios to 2 cp (p50, p90); active = third holder -> record ACTIVE (p50)"
        ),
        box=box.SIMPLE_HEAD,
    )
    headers = (
        *("mode", "size", "n", "upload", "repl", "p90", "total", "p90", "2 cp", "fsync"),
        *("repl/cp", "p90", "total/cp", "active"),
    )
    for header in headers:
        table.add_column(header, justify="left" if header == "mode" else "right", no_wrap=True)
    stats = groups(samples)
    for st in stats:
        table.add_row(
            st.mode,
            f"{st.size_mb} MB",
            str(st.n),
            *(ms(v) for v in (st.upload, st.replication, st.replication_p90)),
            *(ms(v) for v in (st.total, st.total_p90, st.floor, st.floor_fsync)),
            f"{st.ratio:.2f}x",
            f"{st.ratio_p90:.2f}x",
            f"{st.total_ratio:.2f}x",
            "-" if st.active is None else ms(st.active),
        )
    console.print(table)
    by_key = {(st.mode, st.size_mb): st for st in stats}
    verdicts = []
    if big := by_key.get((WATCH, RATIO_TARGET_MB)):
        verdicts.append(
            f"{RATIO_TARGET_MB} MB: replication {ms(big.replication)} ms = {big.ratio:.2f}x the "
            f"floor of two cp ({ms(big.floor)} ms) at p50, {big.ratio_p90:.2f}x at p90 (target "
            f"<= {RATIO_TARGET:g}x): {'met' if big.ratio <= RATIO_TARGET else 'MISSED'}"
        )
    if mid := by_key.get((WATCH, TOTAL_TARGET_MB)):
        verdicts.append(
            f"{TOTAL_TARGET_MB} MB: total {ms(mid.total)} ms (upload {ms(mid.upload)} + "
            f"replication {ms(mid.replication)}) at p50, {ms(mid.total_p90)} ms at p90 (target "
            f"<= {TOTAL_TARGET_SECS * 1000:.0f} ms): "
            f"{'met' if mid.total <= TOTAL_TARGET_SECS else 'MISSED'}"
        )
    print_verdicts(console, verdicts)
    contrast = []
    if (sync := by_key.get((SYNC, SYNC_SIZE_MB))) and (watch := by_key.get((WATCH, SYNC_SIZE_MB))):
        contrast.append(
            f"{SYNC_SIZE_MB} MB, background sync only (nimbus.code.watch=false, every "
            f"{sync_secs:g} s; {plural(sync.n, 'round')}): replication "
            f"{ms(sync.replication)} ms, total {ms(sync.total)} ms at p50, against "
            f"{ms(watch.replication)} and {ms(watch.total)} ms with the watch "
            f"({sync.total / watch.total:.1f}x the total); no target"
        )
    if (api := by_key.get((API, RATIO_TARGET_MB))) and (
        big := by_key.get((WATCH, RATIO_TARGET_MB))
    ):
        contrast.append(
            f"{RATIO_TARGET_MB} MB through the API route alone (nimbus.code.port=-1, no package "
            f"server; {plural(api.n, 'round')}): replication {ms(api.replication)} ms = "
            f"{api.ratio:.2f}x the floor at p50 ({api.ratio_p90:.2f}x at p90), against "
            f"{ms(big.replication)} ms = {big.ratio:.2f}x from the package servers"
        )
    for line in contrast:
        console.print("[cyan]" + line + "[/]")
    return verdicts + contrast


def report_checks(console: Console, samples: list[Sample]) -> str:
    """Print (and return) how the standbys checked their copies, from ``code_fetched``."""
    counts: dict[str, int] = {}
    for sample in samples:
        for check in sample.checks:
            counts[check] = counts.get(check, 0) + 1
    line = "copies checked by: " + (
        ", ".join(
            f"{check} ({n} {'fetch' if n == 1 else 'fetches'})"
            for check, n in sorted(counts.items())
        )
        or "unknown (no code_fetched line names its check)"
    )
    console.print(line)
    return line


# ---------------------------------------------------------------------------------------------
# Main


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def work_dir_device(path: Path) -> str:
    """The filesystem that holds ``path`` (type and device, from /proc/mounts)."""
    best = ("?", "?", "")
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text(encoding="utf-8").splitlines():
            device, mount, fstype, *_ = line.split()
            inside = path.is_relative_to(mount)
            if inside and len(mount) >= len(best[2]):
                best = (device, fstype, mount)
    return f"{best[1]} on {best[0]} (mounted at {best[2] or '?'})"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every size (5)")
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[1, 10, 100], help="package sizes, MB (1 10 100)"
    )
    parser.add_argument(
        "--api-rounds",
        type=int,
        default=5,
        help=f"rounds of the API-route contrast (nimbus.code.port=-1), sizes >= {API_MIN_MB} MB "
        "only (5; 0: none)",
    )
    parser.add_argument(
        "--sync-rounds",
        type=int,
        default=2,
        help=f"rounds of the sync-only contrast, {SYNC_SIZE_MB} MB only (2; 0: none)",
    )
    parser.add_argument(
        "--sync-secs",
        type=float,
        default=5.0,
        help="nimbus.code.sync.freq.secs of the sync-only contrast (5)",
    )
    parser.add_argument(
        "--session-timeout", type=float, default=SESSION_TIMEOUT_SECS, help="nimbus session, s"
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="unmeasured rounds first, per cluster (1)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 round of 1 and 10 MB, 1 sync-only, no warm-up: a smoke run",
    )
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    parser.add_argument("--keep-logs", type=Path, help="work (and log) directory to keep")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.sizes, args.sync_rounds = 1, [1, 10], min(args.sync_rounds, 1)
        args.api_rounds, args.warmup = min(args.api_rounds, 1), 0
    if args.rounds < 1 or min(args.sync_rounds, args.api_rounds, args.warmup) < 0:
        parser.error("--rounds must be >= 1, --api-rounds, --sync-rounds and --warmup >= 0")
    if min(args.sizes) < 1 or args.sync_secs <= 0:
        parser.error("--sizes must be >= 1 MB and --sync-secs > 0")
    args.sizes = sorted(set(args.sizes))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)  # explicitly: a background job inherits an ignored SIGINT
    console = report_console(width=130)
    console.rule("Code replication: submit to 3 nimbuses vs two cp on the same disk")
    info = machine(("kazoo", "httpx", "uvicorn", "fsspec", "blake3"))
    reproduce = shlex.join(
        [".venv/bin/python", "bench/replication.py", *(sys.argv[1:] if argv is None else argv)]
    )
    sync = (
        f"{plural(args.sync_rounds, 'round')} of {SYNC_SIZE_MB} MB" if args.sync_rounds else "none"
    )
    api_sizes = ", ".join(str(size) for size in args.sizes if size >= API_MIN_MB)
    api = f"{plural(args.api_rounds, 'round')} of {api_sizes} MB" if api_sizes else "none"
    began = time.monotonic()
    try:
        with contextlib.ExitStack() as stack:
            if args.keep_logs:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                work_dir = args.keep_logs.absolute()
            else:
                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="stratus-bench-repl-"))
                work_dir = Path(tmp)
            info["work dir"] = work_dir_device(work_dir)
            for key, value in info.items():
                console.print(f"[bold]{key:>9}[/]: {value}")
            console.print(f"[bold]{'reproduce':>9}[/]: {reproduce}")
            console.print(
                f"[bold]{'run':>9}[/]: {plural(args.rounds, 'round')} of "
                f"{', '.join(map(str, args.sizes))} MB (+{args.warmup} warm-up) with the watch; "
                f"API-route contrast (no package server): {api if args.api_rounds else 'none'}; "
                f"sync-only contrast: {sync} (every {args.sync_secs:g} s, submitted at a random "
                f"point of it); {NIMBUSES} nimbuses, session {args.session_timeout:g} s; a sync "
                f"and {SETTLE_SECS:g} s pause before every measurement"
            )
            samples = run(args, console, work_dir)
    except (BenchError, ProcessStartError, ZooKeeperServerError) as exc:
        console.print(f"[bold red]benchmark failed:[/] {exc}")
        return 1
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc}); every process was stopped[/]")
        return 128 + exc.signum
    console.print(f"measured in {time.monotonic() - began:.0f} s")
    report_stages(console, samples)
    checks = report_checks(console, samples)
    verdicts = [*report(console, samples, args.sync_secs), checks]
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
    sys.exit(main())
