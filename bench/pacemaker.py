"""Heartbeat writes per second: the pacemaker against ZooKeeper, side by side in one run.

Each writer is its own process, sending ``--size``-byte pulses (200 B, a worker heartbeat)
to ``--paths`` paths in turn, as fast as the server acknowledges them, with up to ``--window``
writes in flight (both clients are asynchronous: kazoo's ``set_async``, and the pacemaker's
pipelined connection). The pacemaker is measured twice: one pulse per message
(``send_pulse``, as ZooKeeper gets them), and ``--batch`` pulses per message
(``send_pulses``, the way a supervisor sends its workers' heartbeats of one period).
Writers start together and count the acknowledged writes of ``--secs`` seconds; the row
is their sum over the time. Runs with 1 and 4 writer processes.

The baseline is a real ZooKeeper (``stratus.zk.server.ZooKeeperServer``, the embedded server,
durable: the transaction log fsynced before each acknowledgement, as ``stratus zookeeper``
runs by default; ``--zk-no-fsync`` for the kinder baseline without it) measured in the
same run; the pacemaker is a real ``stratus pacemaker`` process. The target is a ratio of
at least 10.

    .venv/bin/python bench/pacemaker.py [--secs 5] [--writers 1 4] [--json out.json]
    .venv/bin/python bench/pacemaker.py --zk-no-fsync
    .venv/bin/python bench/pacemaker.py --quick      # 1 s per row: a smoke run

The exit code is 0 even when the target is missed (benchmarks never fail the build); it is 1
only when the benchmark itself could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from rich import box
from rich.table import Table

from _report import (
    Interrupted,
    handle_interrupts,
    machine,
    print_verdicts,
    raise_interrupted,
    report_console,
    write_json,
)
from stratus.pacemaker.connection import PacemakerConnection
from stratus.pacemaker.protocol import Op
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.zk.server import ZooKeeperServer

TARGET_RATIO = 10.0
ROOT = "/bench-heartbeats"


@dataclass(frozen=True)
class Row:
    """One number of writers against both stores."""

    writers: int
    zookeeper_per_sec: float
    pacemaker_per_sec: float  # one pulse per message
    batched_per_sec: float  # --batch pulses per message, as a supervisor sends its period's

    @property
    def ratio(self) -> float:
        return self.pacemaker_per_sec / self.zookeeper_per_sec if self.zookeeper_per_sec else 0.0

    @property
    def batched_ratio(self) -> float:
        return self.batched_per_sec / self.zookeeper_per_sec if self.zookeeper_per_sec else 0.0


# ------------------------------------------------------------------------- writers


def _zookeeper_writer(
    hosts: str, index: int, args: dict[str, Any], start: Any, result: Any
) -> None:
    client = KazooClient(hosts=hosts, timeout=30)
    client.start(timeout=30)
    paths = [f"{ROOT}/w{index}-{n}" for n in range(args["paths"])]
    data = b"x" * args["size"]
    for path in paths:
        client.ensure_path(path)
    slots = threading.Semaphore(args["window"])
    done = [0]
    failed: list[BaseException] = []

    def acknowledged(async_result: Any) -> None:
        try:
            async_result.get()
            done[0] += 1
        except Exception as exc:
            failed.append(exc)
        slots.release()

    start.wait()
    ends = time.monotonic() + args["secs"]
    sent = 0
    while time.monotonic() < ends:
        slots.acquire()
        client.set_async(paths[sent % len(paths)], data).rawlink(acknowledged)
        sent += 1
    counted = done[0]  # writes acknowledged within the time
    for _ in range(args["window"]):
        slots.acquire()
    client.stop()
    client.close()
    result.put(("error", repr(failed[0])) if failed else ("ok", counted))


def _pacemaker_writer(port: int, index: int, args: dict[str, Any], start: Any, result: Any) -> None:
    async def write() -> int:
        settings = PacemakerClientSettings(servers=(("127.0.0.1", port),), timeout_secs=30)
        connection = PacemakerConnection("127.0.0.1", port, settings)
        await connection.open()
        paths = [f"{ROOT}/w{index}-{n}" for n in range(args["paths"])]
        data = b"x" * args["size"]
        batch = args["batch"]
        slots = asyncio.Semaphore(args["window"])
        done = 0
        failed: list[str] = []

        def acknowledged(future: asyncio.Future[dict[str, Any]]) -> None:
            nonlocal done
            slots.release()
            if future.exception() is None and future.result().get("ok"):
                done += batch
            else:
                failed.append(repr(future.exception() or future.result()))

        await asyncio.get_running_loop().run_in_executor(None, start.wait)
        ends = time.monotonic() + args["secs"]
        sent = 0
        while time.monotonic() < ends:
            await slots.acquire()
            if batch == 1:
                future = connection.submit(
                    Op.SEND_PULSE, path=paths[sent % len(paths)], data=data, time=time.time()
                )
            else:
                now = time.time()
                pulses = [[paths[(sent + n) % len(paths)], data, now] for n in range(batch)]
                future = connection.submit(Op.SEND_PULSES, pulses=pulses)
            future.add_done_callback(acknowledged)
            sent += batch
        counted = done
        for _ in range(args["window"]):
            await asyncio.wait_for(slots.acquire(), 60)
        if failed:
            raise RuntimeError(failed[0])
        await connection.close()
        return counted

    try:
        result.put(("ok", asyncio.run(write())))
    except Exception as exc:
        result.put(("error", repr(exc)))


def measure(target: Any, address: Any, writers: int, args: dict[str, Any]) -> float:
    """Acknowledged writes per second of ``writers`` processes running ``target``."""
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    result = context.Queue()
    processes = [
        context.Process(target=target, args=(address, index, args, start, result))
        for index in range(writers)
    ]
    for process in processes:
        process.start()
    try:
        time.sleep(args["settle"])  # connected and paths made: not the measured part
        start.set()
        counts = []
        for _ in processes:
            kind, value = result.get(timeout=args["secs"] + 120)
            if kind != "ok":
                raise RuntimeError(f"a writer failed: {value}")
            counts.append(int(value))
        return float(sum(counts)) / float(args["secs"])
    finally:
        for process in processes:
            process.join(30)
            if process.is_alive():
                process.kill()


# ------------------------------------------------------------------------- servers


def start_pacemaker(log: Path, options: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    """A ``stratus pacemaker`` on a free port (``proc.port``); ``options``: ``-c key=value``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "stratus", "pacemaker", "--port", "0", *options],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("pacemaker: serving at "):
        proc.kill()
        raise RuntimeError(f"the pacemaker did not start: {line!r}; see {log}")
    proc.port = int(line.strip().rsplit(":", 1)[1])  # type: ignore[attr-defined]
    return proc


def run(args: argparse.Namespace) -> list[Row]:
    knobs = {
        "secs": args.secs,
        "size": args.size,
        "paths": args.paths,
        "window": args.window,
        "settle": args.settle,
        "batch": args.batch,
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="stratus-bench-pacemaker-") as tmp:
        pacemaker = start_pacemaker(Path(tmp, "pacemaker.log"))
        try:
            with ZooKeeperServer(
                Path(tmp, "zk"), port=0, force_sync=not args.zk_no_fsync
            ) as zookeeper:
                for writers in args.writers:
                    zk = measure(_zookeeper_writer, zookeeper.connect_string, writers, knobs)
                    port = pacemaker.port  # type: ignore[attr-defined]
                    pm = measure(_pacemaker_writer, port, writers, knobs | {"batch": 1})
                    batched = measure(_pacemaker_writer, port, writers, knobs)
                    rows.append(Row(writers, zk, pm, batched))
        finally:
            pacemaker.send_signal(signal.SIGTERM)
            pacemaker.wait(30)
    return rows


def report(rows: list[Row], args: argparse.Namespace) -> None:
    console = report_console(110)
    for key, value in machine(("kazoo", "msgpack")).items():
        console.print(f"[bold]{key:>9}[/]: {value}")
    table = Table(
        title=f"heartbeat writes/s, {args.size} B pulses, {args.secs:g} s per row, "
        f"{args.window} in flight per writer",
        box=box.SIMPLE,
    )
    columns = ("writers", "ZooKeeper", "pacemaker", "ratio", f"pacemaker, {args.batch}/msg")
    for column in (*columns, "ratio "):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row.writers),
            f"{row.zookeeper_per_sec:,.0f}",
            f"{row.pacemaker_per_sec:,.0f}",
            f"{row.ratio:.1f}",
            f"{row.batched_per_sec:,.0f}",
            f"{row.batched_ratio:.1f}",
        )
    console.print(table)
    verdicts = []
    for row in rows:
        for label, ratio in (
            ("one pulse per message", row.ratio),
            (f"{args.batch} pulses per message", row.batched_ratio),
        ):
            verdicts.append(
                f"{row.writers} writer(s), {label}: pacemaker/ZooKeeper {ratio:.1f} (target >= "
                f"{TARGET_RATIO:g}) " + ("met" if ratio >= TARGET_RATIO else "MISSED")
            )
    print_verdicts(console, verdicts)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--secs", type=float, default=5.0, help="measured seconds per row")
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--size", type=int, default=200, help="bytes per pulse (200)")
    parser.add_argument("--paths", type=int, default=100, help="paths per writer (100)")
    parser.add_argument("--window", type=int, default=256, help="writes in flight per writer")
    parser.add_argument(
        "--batch", type=int, default=50, help="pulses per message in the batched column (50)"
    )
    parser.add_argument("--settle", type=float, default=3.0, help="seconds to connect first")
    parser.add_argument(
        "--zk-no-fsync",
        action="store_true",
        help="run ZooKeeper without fsync (forceSync=no): a kinder baseline than production's",
    )
    parser.add_argument("--quick", action="store_true", help="1 s per row: a smoke run for CI")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.secs = 1.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)
    try:
        rows = run(args)
    except Interrupted as exc:
        print(f"interrupted ({exc}); every process was stopped")
        return 1
    except Exception as exc:
        print(f"benchmark failed: {exc}")
        return 1
    report(rows, args)
    write_json(
        args.json,
        args,
        machine=machine(("kazoo", "msgpack")),
        rows=[asdict(r) | {"ratio": r.ratio, "batched_ratio": r.batched_ratio} for r in rows],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
