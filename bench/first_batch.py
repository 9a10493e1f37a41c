"""A restarted streaming query's start and first batch, per Spark setting, in one run.

A promoted standby worker (docs/standby-workers.md) already holds a SparkSession, warmed up;
what it still pays is Spark's: the user's query's start and its first micro-batch, which
includes the state store's restore (each shuffle partition's state read from its last
snapshot file and the delta files after it). This benchmark measures that part alone, with
no stratus cluster, on the streaming example (``stratus/examples/streaming``: windowed
counts of JSON events into parquet, two shuffle partitions):

1. **prepare**, once per row: a fresh process runs the example's query with the row's
   settings for ``--batches`` micro-batches (a file of 50 events before each, a 0.5 s
   trigger), then stops it; its checkpoint and output are kept as they are;
2. **restart**, ``--rounds`` times per row, the rows taking turns (one restart of each row,
   then the next round) so that a busy machine slows them alike: a fresh process starts
   its session with the row's settings and runs the warm workers' warm-up query (as a
   standby worker does before it is promoted), the row's checkpoint and output are put
   back as the prepare left them (after the warm-up, ``SETTLE_SECS`` of waiting, as a READY
   standby worker waits: the JIT's compiles of the warm-up are done by then), one more input
   file is written, and the clock starts:
   *start* is the example's function (the query's ``start()``), *first batch* from there to
   the first progress event; that batch's ``triggerExecution`` and ``addBatch`` are
   Spark's own figures.

The rows (``ROWS``): ``baseline`` (``local[1]``, Spark's defaults for state snapshots:
``minDeltasForSnapshot`` 10, a maintenance every 60 s, so no snapshot in a prepare shorter
than a minute: the restore replays every delta file), ``snapshots`` (a snapshot once 2
deltas pile up, maintenance every 2 s), ``cores2`` (``local[2]``: the two partitions restore
in parallel), ``both``, and ``rocksdb`` (the RocksDB state store with changelog
checkpointing; a provider fixed in the checkpoint when the query first ran: new pipelines
only), and ``c1jit`` (the driver's JVM compiling with the JIT's first tier only,
``-XX:TieredStopAtLevel=1`` in ``spark.driver.extraJavaOptions``: no optimizing compiles
competing with the first batch for the CPU, at the cost of slower steady code), ``warm10``,
``warm20`` and ``warm40`` (Spark's defaults, the warm-up run for that many micro-batches
instead of one, as ``supervisor.standby.warmup.batches`` has a standby worker do: more of
Spark's hot code compiled before the restart) and ``c1warm20`` (the first tier only and 20
warm-up batches). Reported
per row:
the median over the rounds of each figure, the median over the rounds of the row's total
over the baseline's of the same round (``/ baseline``), and the median ``triggerExecution``
of the batch after the first (``next``: a steady batch, for scale).

    .venv/bin/python bench/first_batch.py                      # 3 rounds of 10 rows
    .venv/bin/python bench/first_batch.py --rounds 5 --json out.json
    .venv/bin/python bench/first_batch.py --rows baseline,cores2 --batches 10

The page cache is warm in every row (the files were just written on this machine): reading
a checkpoint from a remote or cold file system costs more than here, in every row alike.
The exit code is 0 whatever the figures; 1 only when a run failed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener
from rich import box
from rich.table import Table

from _harness import DRIVER_JAVA_OPTIONS  # read before the driver's JVM starts
from _report import handle_interrupts, ms, print_header, raise_interrupted, report_console
from stratus.local.examples_io import make_events, write_events
from stratus.worker.session_conf import SPARK_DEFAULTS
from stratus.worker.warm_up import warm_up

EXAMPLE_DIR = Path(__file__).resolve().parent.parent / "src/stratus/examples/streaming"
sys.path.insert(0, str(EXAMPLE_DIR))
job = importlib.import_module("streaming_counts.job")  # the example pipeline's function
PREPARE_TRIGGER_SECS = 0.5
EVENTS_PER_BATCH = 50
CHILD_TIMEOUT_SECS = 600.0
SETTLE_SECS = 5.0  # after the warm-up: a READY standby worker waits before its promotion
TRIAL_PREFIX = "trial-"  # the restart's own input files, removed before the next restart
SHOWN = ("start", "first_batch", "trigger", "add_batch", "next_trigger", "load")  # per restart

SNAPSHOTS = "spark.sql.streaming.stateStore.minDeltasForSnapshot"
MAINTENANCE = "spark.sql.streaming.stateStore.maintenanceInterval"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
C1_ONLY = "-XX:TieredStopAtLevel=1"  # the JIT's first tier only: no optimizing compiles
SPARK_SNAPSHOT_DEFAULTS = {SNAPSHOTS: "10", MAINTENANCE: "60s"}
FREQUENT_SNAPSHOTS = {SNAPSHOTS: "2", MAINTENANCE: "2s"}


@dataclass(frozen=True)
class Row:
    """One configuration under test: the session's master and the Spark keys it adds."""

    master: str
    conf: dict[str, str]
    warm_up_batches: int = 1


ROWS: dict[str, Row] = {
    "baseline": Row("local[1]", SPARK_SNAPSHOT_DEFAULTS),
    "snapshots": Row("local[1]", FREQUENT_SNAPSHOTS),
    "cores2": Row("local[2]", SPARK_SNAPSHOT_DEFAULTS),
    "both": Row("local[2]", FREQUENT_SNAPSHOTS),
    "rocksdb": Row("local[1]", {**SPARK_SNAPSHOT_DEFAULTS, PROVIDER: ROCKSDB, CHANGELOG: "true"}),
    "c1jit": Row("local[1]", {**SPARK_SNAPSHOT_DEFAULTS, DRIVER_JAVA_OPTIONS: C1_ONLY}),
    "warm10": Row("local[1]", SPARK_SNAPSHOT_DEFAULTS, warm_up_batches=10),
    "warm20": Row("local[1]", SPARK_SNAPSHOT_DEFAULTS, warm_up_batches=20),
    "warm40": Row("local[1]", SPARK_SNAPSHOT_DEFAULTS, warm_up_batches=40),
    "c1warm20": Row(
        "local[1]", {**SPARK_SNAPSHOT_DEFAULTS, DRIVER_JAVA_OPTIONS: C1_ONLY}, warm_up_batches=20
    ),
}


@dataclass
class Context:
    """What the example's function reads of a worker's pipeline context."""

    conf: dict[str, str]
    root: Path
    trigger_interval_secs: float | None = None

    def checkpoint(self, name: str) -> str:
        return str(self.root / "checkpoint" / name)


def session(row: Row, root: Path) -> Any:
    """A session as a worker's: stratus's defaults, the example's conf, the row's."""
    builder = SparkSession.builder.master(row.master).appName("first-batch")
    settings = {**SPARK_DEFAULTS, "spark.sql.shuffle.partitions": "2", **row.conf}
    for key, value in settings.items():
        builder = builder.config(key, value)
    os.chdir(root)
    return builder.getOrCreate()


def example_context(root: Path, trigger_secs: float | None) -> Context:
    return Context(
        conf={
            "spark.stratus.example.input": str(root / "input"),
            "spark.stratus.example.output": str(root / "output"),
        },
        root=root,
        trigger_interval_secs=trigger_secs,
    )


class Progress:
    """Every progress event of the session's queries, as a list a thread can wait on."""

    def __init__(self, spark: Any) -> None:
        self.events: list[dict[str, Any]] = []
        self.at: list[float] = []
        self._changed = threading.Condition()
        progress = self

        class Listener(StreamingQueryListener):  # method names are Spark's
            def onQueryStarted(self, event: Any) -> None:  # noqa: N802
                pass

            def onQueryProgress(self, event: Any) -> None:  # noqa: N802
                progress.add(json.loads(event.progress.json))

            def onQueryIdle(self, event: Any) -> None:  # noqa: N802
                pass

            def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
                pass

        spark.streams.addListener(Listener())

    def add(self, event: dict[str, Any]) -> None:
        with self._changed:
            self.at.append(time.monotonic())
            self.events.append(event)
            self._changed.notify_all()

    def wait_for(self, count: int, timeout: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.events) >= count, timeout):
                raise RuntimeError(f"{count} progress events not seen in {timeout:g} s")


def prepare(name: str, root: Path, batches: int) -> dict[str, Any]:
    """Run the example for ``batches`` micro-batches with data, then keep a pristine copy."""
    spark = session(ROWS[name], root)
    progress = Progress(spark)
    input_dir = root / "input"
    write_events(input_dir, make_events(EVENTS_PER_BATCH))
    job.run(spark, example_context(root, PREPARE_TRIGGER_SECS))
    for number in range(1, batches):
        progress.wait_for(number, CHILD_TIMEOUT_SECS)
        write_events(input_dir, make_events(EVENTS_PER_BATCH, start_id=number * EVENTS_PER_BATCH))
    progress.wait_for(batches, CHILD_TIMEOUT_SECS)
    for query in spark.streams.active:
        query.stop()
    spark.stop()
    for part in ("checkpoint", "output"):
        shutil.copytree(root / part, root / "pristine" / part)
    state = root / "checkpoint" / "window-counts" / "state" / "0" / "0"
    files = sorted(path.name for path in state.iterdir() if not path.name.startswith("."))
    return {"state_files_partition_0": files}


def write_trial(input_dir: Path, name: str, *, start_id: int) -> None:
    """A restart's own input file, whole at once (Spark's file source skips dot files)."""
    events = make_events(EVENTS_PER_BATCH, start_id=start_id)
    temporary = input_dir / f".{TRIAL_PREFIX}{name}.tmp"
    temporary.write_text("".join(json.dumps(event) + "\n" for event in events))
    os.replace(temporary, input_dir / f"{TRIAL_PREFIX}{name}.json")


def restart(name: str, root: Path) -> dict[str, Any]:
    """Restart the prepared query in a fresh, warmed-up session; time its start and batch."""
    spark = session(ROWS[name], root)
    warm_up(spark, batches=ROWS[name].warm_up_batches)
    time.sleep(SETTLE_SECS)
    progress = Progress(spark)
    for path in (root / "input").glob(f"{TRIAL_PREFIX}*"):
        path.unlink()
    for part in ("checkpoint", "output"):
        shutil.rmtree(root / part)
        shutil.copytree(root / "pristine" / part, root / part)
    write_trial(root / "input", "first", start_id=10**6)
    began = time.monotonic()
    job.run(spark, example_context(root, None))
    started = time.monotonic()
    progress.wait_for(1, CHILD_TIMEOUT_SECS)
    event = progress.events[0]
    durations = event.get("durationMs", {})
    state = (event.get("stateOperators") or [{}])[0]
    write_trial(root / "input", "next", start_id=2 * 10**6)
    progress.wait_for(2, CHILD_TIMEOUT_SECS)
    steady = progress.events[1].get("durationMs", {})
    for query in spark.streams.active:
        query.stop()
    spark.stop()
    return {
        "start": started - began,
        "first_batch": progress.at[0] - started,
        "total": progress.at[0] - began,
        "trigger": durations.get("triggerExecution", 0) / 1000,
        "add_batch": durations.get("addBatch", 0) / 1000,
        "batch_id": event.get("batchId"),
        "rows": event.get("numInputRows"),
        "state": state,
        "next_trigger": steady.get("triggerExecution", 0) / 1000,
        "next_add_batch": steady.get("addBatch", 0) / 1000,
    }


def child(args: argparse.Namespace) -> None:
    """One prepare or restart, its figures as one JSON line on stdout."""
    root = Path(args.root)
    if args.child == "prepare":
        result = prepare(args.row, root, args.batches)
    else:
        result = restart(args.row, root)
    print("RESULT " + json.dumps(result), flush=True)


def run_child(kind: str, row: str, root: Path, batches: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", kind, "--row", row, "--root", str(root)]
    done = subprocess.run(
        [*command, "--batches", str(batches)],
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_SECS,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
            return result
    sys.stderr.write(done.stderr[-4000:])
    raise RuntimeError(f"the {kind} of row {row} failed (exit {done.returncode})")


@dataclass
class Figures:
    row: str
    prepared: dict[str, Any] = field(default_factory=dict)
    restarts: list[dict[str, Any]] = field(default_factory=list)

    def median(self, key: str) -> float:
        return statistics.median(float(run[key]) for run in self.restarts)

    def paired_ratio(self, baseline: Figures) -> float:
        """The median, over the rounds, of this row's total over the baseline's of the same
        round (the two ran one after the other, under about the same load)."""
        pairs = zip(self.restarts, baseline.restarts, strict=True)
        return statistics.median(float(own["total"]) / float(base["total"]) for own, base in pairs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=20, help="micro-batches prepared")
    parser.add_argument("--rows", default=",".join(ROWS), help="rows, comma-separated")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", choices=("prepare", "restart"), help=argparse.SUPPRESS)
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    rows = [name.strip() for name in args.rows.split(",") if name.strip()]
    unknown = [name for name in rows if name not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; choose among {list(ROWS)}")
    handle_interrupts(raise_interrupted)
    console = report_console(110)
    info, reproduce = print_header(console, "first_batch.py", argv, ("pyspark",))
    figures = {name: Figures(name) for name in rows}
    loads: list[float] = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="first-batch-") as scratch:
        try:
            for name in rows:
                root = Path(scratch, name)
                root.mkdir()
                figures[name].prepared = run_child("prepare", name, root, args.batches)
                console.print(f"prepared {name}: {figures[name].prepared}")
            for number in range(args.rounds):
                for name in rows:
                    result = run_child("restart", name, Path(scratch, name), args.batches)
                    result["load"] = os.getloadavg()[0]
                    loads.append(result["load"])
                    figures[name].restarts.append(result)
                    shown = {key: result[key] for key in SHOWN}
                    console.print(f"round {number + 1} {name}: {json.dumps(shown)}")
        except RuntimeError as exc:
            console.print(f"[red]{exc}[/]")
            return 1
    table = Table(box=box.SIMPLE, title="restart of the example's query (median ms)")
    columns = ("row", "start", "first batch", "trigger", "addBatch", "total", "/ baseline", "next")
    for column in columns:
        table.add_column(column, justify="left" if column == "row" else "right")
    reference = figures.get("baseline")
    for name, row in figures.items():
        ratio = row.paired_ratio(reference) if reference else float("nan")
        table.add_row(
            name,
            *(ms(row.median(key)) for key in ("start", "first_batch", "trigger", "add_batch")),
            ms(row.median("total")),
            f"{ratio:.2f}",
            ms(row.median("next_trigger")),
        )
    console.print(table)
    console.print(f"load average (1 min) from {min(loads):.1f} to {max(loads):.1f}")
    if args.json is not None:
        payload = {
            "machine": info,
            "reproduce": reproduce,
            "rows": {name: vars(row) for name, row in figures.items()},
            "load": loads,
        }
        args.json.write_text(json.dumps(payload, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
