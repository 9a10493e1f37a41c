"""Operations: the gap in a streaming pipeline's committed batches while stratus is operated.

stratus must keep a pipeline committing while its own daemons are restarted, crash or are
upgraded, and move it with the shortest gap when an operator drains its supervisor. Each
operation below is done to a real cluster (ZooKeeper, two nimbuses, two supervisors as
processes: ``stratus.local.cluster``, with the default timeouts of a production cluster
rather than its own short ones) running the streaming example on Spark (``local[1]``, a
processing-time trigger of ``TRIGGER_SECS``), fed a file of events a second:

* **supervisor-restart**: SIGTERM of the supervisor running the pipeline, started again at
  once (``systemctl restart``: an upgrade or a changed setting);
* **supervisor-crash**: ``kill -9`` of it, started again ``CRASH_RESTART_SECS`` later (a crash
  under ``Restart=always``);
* **nimbus-rolling**: every nimbus stopped and started again, one after the other, the
  leader last (a failover);
* **drain**: ``stratus drain`` of the supervisor running it: the pipeline moves to the other
  supervisor, cold (``supervisor.worker.warm=false``: no warm worker there) or warm (the
  default: a worker with its Spark up waits there).

The supervisor and nimbus operations run twice, on a cluster with worker adoption
(``supervisor.worker.adopt``, the default) and on one without, side by side in one run; the
drains run cold and warm, each on a cluster of its own.

The gap of an operation is the longest time between two consecutive commits of the query's
batches, from the last commit before the operation began until ``SETTLE_BATCHES`` batches
after it ended, read from the commit files Spark writes in the pipeline's checkpoint
(``<root>/<pipeline>/<query>/commits/<batch>``: their modification times). An undisturbed
pipeline commits once a trigger interval, so the baseline of every gap is the longest gap of
the same pipeline over the ``STEADY_SECS`` before the operation. Also reported: whether the
worker that ran before is the one that runs after (same pid and start), and the batches
committed during the operation.

Targets: a supervisor restart with adoption adds no gap beyond one trigger interval (its gap
at most the steady gap + ``TRIGGER_SECS``); a drain with a warm worker moves the pipeline
with a gap at most half that of a cold drain in the same run.

    .venv/bin/python bench/operations.py                      # every operation: ~15 minutes
    .venv/bin/python bench/operations.py --op supervisor-restart --op drain
    .venv/bin/python bench/operations.py --json out.json

The exit code is 0 even when a target is missed (benchmarks never fail the build); it is 1
only when the benchmark itself could not run (a daemon or the pipeline that did not come up).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from _report import (
    Interrupted,
    handle_interrupts,
    print_header,
    print_verdicts,
    raise_interrupted,
    report_console,
    write_json,
)
from reassign import EXAMPLE, INPUT_KEY, OUTPUT_KEY, BenchError, poll_until, running_beat, wait_warm
from stratus.api.records import WorkerHeartbeat
from stratus.client import NimbusClient
from stratus.errors import StratusError
from stratus.local.cluster import SLOTS, LocalCluster
from stratus.local.examples_io import Feeder
from stratus.local.user_settings import UserSettings

# The timeouts of a production cluster (the defaults), not stratus local's short ones: a
# supervisor started again must be back within the lease and before the leader's fence.
PRODUCTION_TIMEOUTS = {
    "zookeeper.session.timeout.secs": 10.0,
    "nimbus.supervisor.timeout.secs": 10.0,
    "nimbus.monitor.freq.secs": 2.0,
    "supervisor.fence.timeout.secs": 6.0,
    "supervisor.worker.stop.secs": 3.0,
    "worker.heartbeat.frequency.secs": 1.0,
}
TRIGGER_SECS = 2.0  # the streaming example's trigger (its stratus.yaml)
CRASH_RESTART_SECS = 2.0  # kill -9, then the start again this much later
STEADY_SECS = 20.0  # the steady gap: the longest one over this much time before an operation
STEADY_GAP_FACTOR = 2.0  # a steady window has no gap over this many trigger intervals
SETTLE_BATCHES = 3  # an operation's window ends this many batches after it ended
PIPELINE = "streaming-counts"
QUERY = "window-counts"  # the example's checkpoint name (context.checkpoint("window-counts"))
OPERATION_WAIT_SECS = 300.0  # a drain, or the batches after an operation
OPERATIONS = ("supervisor-restart", "supervisor-crash", "nimbus-rolling", "drain")
ADOPTION_OPERATIONS = ("supervisor-restart", "supervisor-crash", "nimbus-rolling")


@dataclass
class Outcome:
    """One operation on one cluster."""

    operation: str
    setting: str  # "adoption on", "adoption off", "cold", "warm"
    seconds: float  # the operation itself, from its first step to its last
    gap: float  # the longest time between two commits in its window
    steady_gap: float  # the longest over STEADY_SECS before it
    batches: int  # committed in its window
    same_worker: bool  # the worker after is the one before (pid and start)
    commits: list[float] = field(default_factory=list)  # the window's commit times


# ---------------------------------------------------------------------------------------------
# Commits


def commits_dir(cluster: LocalCluster) -> Path:
    return cluster.workdir / "checkpoints" / PIPELINE / QUERY / "commits"


def commit_times(cluster: LocalCluster) -> list[float]:
    """The modification time of every batch's commit file, in batch order."""
    found: list[tuple[int, float]] = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(commits_dir(cluster)):
            if entry.name.isdigit():
                found.append((int(entry.name), entry.stat().st_mtime))
    return [mtime for _, mtime in sorted(found)]


def longest_gap(times: Sequence[float]) -> float:
    return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


def window(times: list[float], began: float, ended: float) -> list[float]:
    """The commits from the last one before ``began`` to the ``SETTLE_BATCHES``-th after
    ``ended``."""
    first = max(0, len([t for t in times if t < began]) - 1)
    settled = [i for i, t in enumerate(times) if t >= ended][:SETTLE_BATCHES]
    return times[first : settled[-1] + 1] if settled else times[first:]


# ---------------------------------------------------------------------------------------------
# Operations


Operation = Callable[[LocalCluster, NimbusClient, str], None]


def supervisor_restart(cluster: LocalCluster, client: NimbusClient, sid: str) -> None:
    supervisor = cluster.supervisor(sid)
    supervisor.stop(workers=False)  # a SIGTERM alone, as systemd sends
    supervisor.start()
    supervisor.wait_ready()


def supervisor_crash(cluster: LocalCluster, client: NimbusClient, sid: str) -> None:
    supervisor = cluster.supervisor(sid)
    supervisor.kill()
    time.sleep(CRASH_RESTART_SECS)  # the operation itself: a restart this much later
    supervisor.start()
    supervisor.wait_ready()


def nimbus_rolling(cluster: LocalCluster, client: NimbusClient, sid: str) -> None:
    leader = client.leader().address
    order = sorted(cluster.nimbuses, key=lambda nimbus: nimbus.address == leader)
    for nimbus in order:
        nimbus.stop()
        nimbus.start()
        nimbus.wait_ready()
        poll_until("a leader", lambda: client.leader().address is not None)


def drain(cluster: LocalCluster, client: NimbusClient, sid: str) -> None:
    command = [
        sys.executable, "-m", "stratus", "drain", sid,
        "-c", f"nimbus.seeds={','.join(cluster.seeds)}",
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=OPERATION_WAIT_SECS, check=False
    )
    if done.returncode != 0:
        raise BenchError(f"stratus drain {sid} failed: {done.stderr.strip() or done.stdout}")
    uncordon = [*command[:3], "uncordon", *command[4:]]
    subprocess.run(uncordon, capture_output=True, timeout=60, check=False)


OPERATION_STEPS: dict[str, Operation] = {
    "supervisor-restart": supervisor_restart,
    "supervisor-crash": supervisor_crash,
    "nimbus-rolling": nimbus_rolling,
    "drain": drain,
}


def measure(
    cluster: LocalCluster, client: NimbusClient, operation: str, setting: str, console: Console
) -> Outcome:
    """Wait for a steady pipeline, do ``operation`` to it, and read its commits' gap."""
    before = steady_beat(cluster, client)
    steady = [t for t in commit_times(cluster) if t >= time.time() - STEADY_SECS]
    if len(steady) < 2:
        raise BenchError(f"{PIPELINE} committed fewer than 2 batches in {STEADY_SECS:g} s")
    began = time.time()
    OPERATION_STEPS[operation](cluster, client, before.supervisor)
    ended = time.time()
    poll_until(
        f"{SETTLE_BATCHES} batches after {operation}",
        lambda: len([t for t in commit_times(cluster) if t >= ended]) >= SETTLE_BATCHES,
        OPERATION_WAIT_SECS,
    )
    after = running_beat(client, PIPELINE)
    if after is None:
        raise BenchError(f"{PIPELINE} commits but no running worker is seen after {operation}")
    times = window(commit_times(cluster), began, ended)
    outcome = Outcome(
        operation,
        setting,
        ended - began,
        longest_gap(times),
        longest_gap(steady),
        max(0, len(times) - 1),
        (after.pid, after.started) == (before.pid, before.started),
        times,
    )
    console.print(
        f"{operation} ({setting}): took {outcome.seconds:.1f} s, gap {outcome.gap:.2f} s "
        f"(steady {outcome.steady_gap:.2f} s), same worker: {outcome.same_worker}"
    )
    return outcome


def steady_beat(cluster: LocalCluster, client: NimbusClient) -> WorkerHeartbeat:
    """The running worker's heartbeat once the pipeline has committed for STEADY_SECS."""
    poll_until("the pipeline to run", lambda: running_beat(client, PIPELINE) is not None)

    def steady() -> bool:  # the last operation's gap behind it: none in the window
        times = commit_times(cluster)
        recent = [t for t in times if t >= time.time() - STEADY_SECS]
        settled = longest_gap(recent) <= STEADY_GAP_FACTOR * TRIGGER_SECS
        return len(recent) >= STEADY_SECS / TRIGGER_SECS - 2 and settled

    poll_until(f"{STEADY_SECS:g} s of steady commits", steady, 600.0)
    beat = running_beat(client, PIPELINE)
    if beat is None:
        raise BenchError(f"{PIPELINE} stopped running before the operation")
    return beat


@contextlib.contextmanager
def running_cluster(
    options: list[str], console: Console, label: str
) -> Iterator[tuple[LocalCluster, NimbusClient]]:
    """A cluster of two nimbuses and two supervisors with ``options``, the example running."""
    workdir = Path(tempfile.mkdtemp(prefix="stratus-bench-operations-"))
    console.rule(label)
    cluster = LocalCluster(
        workdir,
        console,
        nimbuses=2,
        supervisors=2,
        supervisor_options=options,
        user=UserSettings(values=PRODUCTION_TIMEOUTS),
    )
    feeder = Feeder(workdir / "input")
    try:
        cluster.start()
        feeder.start()
        with NimbusClient(cluster.seeds, retry_deadline=60) as client:
            conf = {INPUT_KEY: str(workdir / "input"), OUTPUT_KEY: str(workdir / "output")}
            client.submit(None, EXAMPLE, conf)
            yield cluster, client
    except (StratusError, BenchError) as exc:
        raise BenchError(f"{label}: {exc} (logs kept in {workdir})") from exc
    finally:
        handle_interrupts(signal.SIG_IGN)  # let the cleanup finish (seconds at most)
        feeder.halt()
        cluster.close()
        handle_interrupts(raise_interrupted)
    shutil.rmtree(workdir, ignore_errors=True)


def run_adoption(args: argparse.Namespace, console: Console) -> list[Outcome]:
    operations = [op for op in args.op if op in ADOPTION_OPERATIONS]
    outcomes: list[Outcome] = []
    if not operations:
        return outcomes
    for adopt in (True, False):
        setting = f"adoption {'on' if adopt else 'off'}"
        options = ["-c", f"supervisor.worker.adopt={str(adopt).lower()}"]
        with running_cluster(options, console, setting) as (cluster, client):
            outcomes += [measure(cluster, client, op, setting, console) for op in operations]
    return outcomes


def run_drains(args: argparse.Namespace, console: Console) -> list[Outcome]:
    outcomes: list[Outcome] = []
    if "drain" not in args.op:
        return outcomes
    for warm in (False, True):
        setting = "warm" if warm else "cold"
        options = [] if warm else ["-c", "supervisor.worker.warm=false"]  # warm: the default
        with running_cluster(options, console, f"drain, {setting}") as (cluster, client):
            if warm:  # the target's warm workers up (the pipeline's own took one elsewhere)
                source = steady_beat(cluster, client).supervisor
                target = next(s.id for s in cluster.supervisors if s.id != source)
                wait_warm(client, target, SLOTS)
            outcomes.append(measure(cluster, client, "drain", setting, console))
    return outcomes


# ---------------------------------------------------------------------------------------------
# Report


def report(outcomes: list[Outcome], console: Console) -> list[str]:
    table = Table(
        title=f"The longest time between two committed batches during each operation "
        f"(trigger {TRIGGER_SECS:g} s): seconds",
        caption=(
            "gap: from the last commit before the operation until "
            f"{SETTLE_BATCHES} batches after it; steady: the longest gap over the "
            f"{STEADY_SECS:g} s before it; same worker: the same process ran throughout"
        ),
        box=box.SIMPLE_HEAD,
    )
    for header in ("operation", "setting", "took", "gap", "steady", "batches", "same worker"):
        table.add_column(header, justify="left" if header in ("operation", "setting") else "right")
    for o in outcomes:
        table.add_row(
            o.operation,
            o.setting,
            f"{o.seconds:.1f}",
            f"{o.gap:.2f}",
            f"{o.steady_gap:.2f}",
            str(o.batches),
            "yes" if o.same_worker else "no",
        )
    console.print(table)
    return verdicts(outcomes)


def verdicts(outcomes: list[Outcome]) -> list[str]:
    found = {(o.operation, o.setting): o for o in outcomes}
    lines = []
    for operation in ADOPTION_OPERATIONS:
        on, off = found.get((operation, "adoption on")), found.get((operation, "adoption off"))
        if on is None:
            continue
        limit = on.steady_gap + TRIGGER_SECS
        against = (
            f"; without adoption {off.gap:.2f} s = {off.gap / max(on.gap, 1e-9):.1f}x"
            if off
            else ""
        )
        met = "met" if on.gap <= limit else "MISSED"
        target = (
            f"target <= steady {on.steady_gap:.2f} s + one trigger {TRIGGER_SECS:g} s: {met}"
            if operation.startswith("supervisor")
            else "no target"
        )
        lines.append(
            f"{operation}: with adoption a gap of {on.gap:.2f} s, same worker "
            f"{'yes' if on.same_worker else 'no'}{against}; {target}"
        )
    cold, warm = found.get(("drain", "cold")), found.get(("drain", "warm"))
    if cold is not None and warm is not None:
        ratio = warm.gap / cold.gap
        lines.append(
            f"drain: warm gap {warm.gap:.2f} s = {ratio:.2f}x the cold gap {cold.gap:.2f} s; "
            f"target <= 0.5x: {'met' if ratio <= 0.5 else 'MISSED'}"
        )
    return lines


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--op",
        choices=OPERATIONS,
        action="append",
        help=f"run this operation only; repeatable (default: all of {', '.join(OPERATIONS)})",
    )
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    args = parser.parse_args(argv)
    args.op = list(dict.fromkeys(args.op or OPERATIONS))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)
    console = report_console(width=120)
    console.rule("Operations: " + ", ".join(args.op))
    info, reproduce = print_header(console, "operations.py", argv, ("kazoo", "pyspark"))
    try:
        outcomes = run_adoption(args, console) + run_drains(args, console)
    except BenchError as exc:
        console.print(f"[bold red]benchmark failed:[/] {exc}")
        return 1
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc})[/]")
        return 128 + exc.signum
    lines = report(outcomes, console)
    print_verdicts(console, lines)
    samples: dict[str, Any] = {"operations": [asdict(o) for o in outcomes]}
    write_json(args.json, args, machine=info, reproduce=reproduce, verdicts=lines, samples=samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
