"""An outage of ZooKeeper under a running streaming pipeline: what it stops, and how soon the
pipeline is seen again once ZooKeeper returns.

Real processes: ZooKeeper, one nimbus and two supervisors (``stratus.local.cluster``, its
short timeouts: fence 2 s, supervisor timeout 4 s), the ``stratus/examples/streaming`` pipeline on
Spark (``local[1]``), fed a file of events a second. ZooKeeper is a standalone server or a
three-member ensemble on loopback (``--zookeeper``, both by default, each on a cluster of its
own). For each outage of ``--outages`` seconds (20 and 60 by default) the standalone server
is stopped, or two of the ensemble's members (the quorum is lost, the third answers that it
serves nothing), kept down, and started again with their data; the pipeline's worker is
watched during the outage (is its process still there?), and after it the benchmark times
ZooKeeper's return → the first heartbeat that shows a batch committed after the one last
seen before the outage. Reported per outage: whether the worker was stopped, whether the same
worker runs after, the batches committed between the last one seen before and the first one
seen after (those of the outage itself with ``ride``), and that time.

The policy (``--policy``) is set on the nimbus and the supervisors alike; by default the
configuration's own (``ride``: a supervisor that proves the outage keeps its workers), given
as no setting at all. ``fence`` (every worker stops after the fence timeout, and starts
again, cold, after ZooKeeper returns) is the baseline of ``--policy both``. Targets for
``ride``: pipelines stopped 0, and the first batch seen after ZooKeeper returns within a few
heartbeat periods, well ahead of ``fence``'s cold restart.

    .venv/bin/python bench/zk_outage.py                       # the defaults: minutes
    .venv/bin/python bench/zk_outage.py --outages 10 --zookeeper ensemble --policy both

The exit code is 0 even when a target is missed; 1 only when the benchmark could not run.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
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
from reassign import POLL_SECS, BenchError, cold_start, poll_until, running_beat, wait_steady
from stratus.client import NimbusClient
from stratus.config import StratusConfig, load_config
from stratus.errors import StratusError
from stratus.local.cluster import LocalCluster
from stratus.local.examples_io import Feeder
from stratus.local.user_settings import UserSettings
from stratus.process import live_in_group
from stratus.zk.ensemble import ZooKeeperEnsemble

POLICIES = {"ride": ("ride",), "fence": ("fence",), "both": ("ride", "fence")}
DEFAULT_POLICY = str(StratusConfig.model_fields["supervisor_zookeeper_outage"].default)
SETUPS = {"standalone": (1,), "ensemble": (3,), "both": (1, 3)}  # ZooKeeper's members
RETURN_WAIT_SECS = 180.0  # ZooKeeper back → a new batch seen: a cold restart under load
RIDE_TARGET_SECS = 5.0  # ride: first batch seen this soon after ZooKeeper returns


@dataclass
class Outage:
    """One outage of ZooKeeper and what the pipeline did through it."""

    zookeeper: str  # standalone, or ensemble (a quorum loss)
    policy: str
    secs: float  # how long ZooKeeper was down
    stopped: bool  # the worker's process was gone at some point of the outage
    same_worker: bool  # the worker seen after is the one seen before
    batches: int  # batches committed between the last seen before and the first seen after
    seen_after_secs: float  # ZooKeeper back → the first heartbeat showing a new batch


def one_outage(
    cluster: LocalCluster, client: NimbusClient, pipeline: str, secs: float, policy: str
) -> Outage:
    """Stop ZooKeeper for ``secs``, watching the worker; start it; time the next batch seen."""
    before = running_beat(client, pipeline)
    if before is None or before.pid is None:
        raise BenchError(f"{pipeline} does not run before the outage")
    stopped = False
    zookeeper = cluster.zookeeper
    if isinstance(zookeeper, ZooKeeperEnsemble):  # a majority: the quorum is lost
        for member in zookeeper.servers[: len(zookeeper.servers) // 2 + 1]:
            member.stop()
    else:
        zookeeper.stop()
    down_until = time.monotonic() + secs
    while time.monotonic() < down_until:  # the outage itself: its length is the experiment
        stopped = stopped or not live_in_group(before.pid)  # the worker leads its group
        time.sleep(POLL_SECS)
    zookeeper.start()  # an ensemble's: the members stopped, until every member serves
    back = time.monotonic()
    seen: list[Any] = []

    def new_batch() -> bool:
        try:
            beat = running_beat(client, pipeline)
        except StratusError:  # the nimbus may still be reconnecting
            return False
        if beat is not None and beat.last_batch_id > before.last_batch_id:
            seen[:] = [beat]
            return True
        return False

    poll_until(f"a batch of {pipeline} after ZooKeeper returned", new_batch, RETURN_WAIT_SECS)
    after = seen[0]
    return Outage(
        zookeeper=setup_name(zookeeper),
        policy=policy,
        secs=secs,
        stopped=stopped or after.pid != before.pid,
        same_worker=after.pid == before.pid,
        batches=after.last_batch_id - before.last_batch_id,
        seen_after_secs=time.monotonic() - back,
    )


def setup_name(zookeeper: object) -> str:
    return "ensemble" if isinstance(zookeeper, ZooKeeperEnsemble) else "standalone"


def run_policy(
    args: argparse.Namespace, console: Console, policy: str, members: int
) -> list[Outage]:
    """A cluster whose supervisors have ``policy`` (none given: the default), on ZooKeeper of
    ``members``; the outages one after the other."""
    given = [] if policy == DEFAULT_POLICY else [f"supervisor.zookeeper.outage={policy}"]
    shown = "ensemble of 3" if members > 1 else "standalone"
    console.rule(f"ZooKeeper {shown}, supervisor.zookeeper.outage: {policy}")
    workdir = Path(tempfile.mkdtemp(prefix="stratus-bench-zk-outage-"))
    user = UserSettings.of(load_config(overrides=given, environ={}))  # nimbus and supervisors
    cluster = LocalCluster(
        workdir, console, nimbuses=1, supervisors=2, user=user, zookeeper_members=members
    )
    feeder = Feeder(workdir / "input")
    outages: list[Outage] = []
    try:
        cluster.start()
        feeder.start()
        with NimbusClient(cluster.seeds, retry_deadline=120) as client:
            start = cold_start(client, workdir, console)
            for secs in args.outages:
                wait_steady(client, start)
                outage = one_outage(cluster, client, start.pipeline, secs, policy)
                console.print(describe(outage))
                outages.append(outage)
                again = running_beat(client, start.pipeline)
                if again is not None:  # steady again where it runs now, before the next outage
                    start = replace(
                        start, batch_id=again.last_batch_id, supervisor=again.supervisor
                    )
    except (StratusError, BenchError) as exc:
        raise BenchError(f"{shown}, {policy}: {exc} (logs kept in {workdir})") from exc
    finally:
        handle_interrupts(signal.SIG_IGN)  # let the cleanup finish (seconds at most)
        feeder.stop()
        cluster.close()
        handle_interrupts(raise_interrupted)
    shutil.rmtree(workdir, ignore_errors=True)
    return outages


def describe(outage: Outage) -> str:
    return (
        f"{outage.zookeeper}, {outage.policy}, ZooKeeper down {outage.secs:g} s: worker "
        f"{'stopped' if outage.stopped else 'kept running'}"
        f"{'' if outage.same_worker else ' (a new one after)'}; {outage.batches} batches "
        f"across it; first batch seen {outage.seen_after_secs:.2f} s after ZooKeeper returned"
    )


def report(console: Console, outages: list[Outage]) -> list[str]:
    table = Table(box=box.SIMPLE_HEAD, title="ZooKeeper outage under a streaming pipeline")
    columns = ("zookeeper", "policy", "down (s)", "worker stopped", "same worker")
    for column in (*columns, "batches across"):
        table.add_column(column, justify="right")
    table.add_column("first batch seen after return (s)", justify="right")
    for o in outages:
        table.add_row(
            o.zookeeper,
            o.policy,
            f"{o.secs:g}",
            "yes" if o.stopped else "no",
            "yes" if o.same_worker else "no",
            str(o.batches),
            f"{o.seen_after_secs:.2f}",
        )
    console.print(table)
    verdicts = []
    ride = [o for o in outages if o.policy == "ride"]
    if ride:
        stopped = sum(o.stopped for o in ride)
        verdicts.append(
            f"ride: pipelines stopped {stopped} of {len(ride)} outages (target 0): "
            f"{'met' if stopped == 0 else 'MISSED'}"
        )
        slowest = max(o.seen_after_secs for o in ride)
        verdicts.append(
            f"ride: first batch seen after ZooKeeper returned, at most {slowest:.2f} s "
            f"(target {RIDE_TARGET_SECS:g} s): {'met' if slowest <= RIDE_TARGET_SECS else 'MISSED'}"
        )
    fence = {(o.zookeeper, o.secs): o for o in outages if o.policy == "fence"}
    for o in ride:
        if (o.zookeeper, o.secs) in fence:
            baseline = fence[(o.zookeeper, o.secs)]
            ratio = baseline.seen_after_secs / max(o.seen_after_secs, 1e-3)
            verdicts.append(
                f"{o.zookeeper} down {o.secs:g} s: first batch after the return, "
                f"fence/ride = {ratio:.1f}x"
            )
    return verdicts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--outages",
        type=float,
        nargs="+",
        default=[20.0, 60.0],
        help="seconds ZooKeeper stays down, one outage each (20 60)",
    )
    parser.add_argument(
        "--policy",
        choices=tuple(POLICIES),
        default=DEFAULT_POLICY,
        help=f"supervisor policy ({DEFAULT_POLICY}, the default: given as no setting)",
    )
    parser.add_argument(
        "--zookeeper",
        choices=tuple(SETUPS),
        default="both",
        help="a standalone server, a three-member ensemble losing its quorum, or both (both)",
    )
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    args = parser.parse_args(argv)
    if min(args.outages) <= 0:
        parser.error("--outages must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)
    console = report_console(width=120)
    console.rule("ZooKeeper outage")
    info, reproduce = print_header(console, "zk_outage.py", argv, ("kazoo", "pyspark"))
    outages: list[Outage] = []
    try:
        for members in SETUPS[args.zookeeper]:
            for policy in POLICIES[args.policy]:
                outages += run_policy(args, console, policy, members)
    except BenchError as exc:
        console.print(f"[bold red]benchmark failed:[/] {exc}")
        return 1
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc})[/]")
        return 1
    print_verdicts(console, report(console, outages))
    write_json(
        args.json, args, machine=info, reproduce=reproduce, samples=[asdict(o) for o in outages]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
