"""``stratus local``: everything that exists so far, running for real on this machine.

Until supervisors exist this shows the foundation: a real ZooKeeper, three ``stratus elect``
contender processes in one group, the leader killed with SIGKILL (failover bounded by the
session timeout), then the new leader stopped with SIGTERM (a clean hand-over), each failover
printed with its time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from stratus.command_options import with_config
from stratus.config import StratusConfig
from stratus.coordination import Coordinator
from stratus.zk.server import ZooKeeperServer

GROUP = "demo"
CONTENDERS = 3
DEMO_SESSION_TIMEOUT = 3.0
DEMO_GRACE = 0.5

# The command each contender runs while it leads: it notes when it started serving.
SERVE = (
    "import os, sys, time\n"
    "with open(sys.argv[1], 'a') as f:\n"
    "    f.write(f\"{os.environ['STRATUS_ELECT_ID']} {time.monotonic()!r}\\n\")\n"
    "time.sleep(3600)\n"
)


@dataclass
class Contender:
    member_id: str
    process: subprocess.Popen[bytes]


def _started(log_file: Path) -> list[tuple[str, float]]:
    if not log_file.exists():
        return []
    entries = []
    for line in log_file.read_text().splitlines():
        member, _, at = line.partition(" ")
        entries.append((member, float(at)))
    return entries


def _wait_for_new_leader(log_file: Path, seen: int, timeout: float) -> tuple[str, float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entries = _started(log_file)
        if len(entries) > seen:
            return entries[seen]
        time.sleep(0.01)
    raise click.ClickException(f"no contender started serving within {timeout:g}s")


def _spawn(member_id: str, zk: str, log_file: Path) -> Contender:
    stratus = Path(sys.executable).parent / "stratus"
    command = [
        str(stratus),
        "elect",
        GROUP,
        "--id",
        member_id,
        "-c",
        f"zookeeper.servers={zk}",
        "-c",
        f"zookeeper.session.timeout.secs={DEMO_SESSION_TIMEOUT}",
        "-c",
        f"elect.stop.grace.secs={DEMO_GRACE}",
        "--",
        sys.executable,
        "-c",
        SERVE,
        str(log_file),
    ]
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    return Contender(member_id, process)


def run_election_demo(console: Console, conf: StratusConfig) -> list[tuple[str, str, float]]:
    """Run the demo; returns (what happened, new leader, seconds) rows."""
    rows: list[tuple[str, str, float]] = []
    with tempfile.TemporaryDirectory(prefix="stratus-local-") as tmp:
        log_file = Path(tmp) / "serving.log"
        server = ZooKeeperServer(
            Path(tmp) / "zookeeper", port=0, tick_time_ms=conf.zookeeper_server_tick_time_ms
        )
        contenders: dict[str, Contender] = {}
        try:
            with console.status("starting ZooKeeper"):
                server.start()
            console.print(f"ZooKeeper serving at [bold]{server.connect_string}[/]")
            for index in range(1, CONTENDERS + 1):
                member = f"contender-{index}"
                contenders[member] = _spawn(member, server.connect_string, log_file)
            console.print(
                f"{CONTENDERS} contenders queued in group [bold]{GROUP}[/] "
                f"(session timeout {DEMO_SESSION_TIMEOUT:g}s)"
            )
            leader, _ = _wait_for_new_leader(log_file, 0, 60)
            console.print(f"leader: [green]{leader}[/]")
            for label, sig in (
                ("kill -9 of the leader", signal.SIGKILL),
                ("SIGTERM of the leader (clean hand-over)", signal.SIGTERM),
            ):
                seen = len(_started(log_file))
                killed_at = time.monotonic()
                contenders[leader].process.send_signal(sig)
                console.print(f"{label}: {leader}")
                new_leader, started_at = _wait_for_new_leader(
                    log_file, seen, DEMO_SESSION_TIMEOUT * 4
                )
                took = started_at - killed_at
                console.print(f"  → [green]{new_leader}[/] serving after [bold]{took:.3f}s[/]")
                rows.append((label, new_leader, took))
                contenders[leader].process.wait(timeout=30)
                leader = new_leader
            with Coordinator(server.connect_string, session_timeout=5) as observer:
                for current in observer.get_leaders(GROUP):
                    console.print(
                        f"ZooKeeper says: {current.member_id} leads, epoch {current.epoch}"
                    )
        finally:
            for contender in contenders.values():
                if contender.process.poll() is None:
                    contender.process.send_signal(signal.SIGTERM)
            for contender in contenders.values():
                try:
                    contender.process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    contender.process.kill()
            server.stop()
    return rows


@click.command()
@click.option("--demo", is_flag=True, default=True, hidden=True)
@with_config
def local(conf: StratusConfig, demo: bool) -> None:
    """Run stratus on this machine: a real ZooKeeper and three contenders, with failovers."""
    console = Console()
    console.rule("stratus local")
    rows = run_election_demo(console, conf)
    table = Table(title="failovers")
    table.add_column("event")
    table.add_column("new leader")
    table.add_column("time to serve", justify="right")
    for label, leader, took in rows:
        table.add_row(label, leader, f"{took * 1000:.0f} ms")
    console.print(table)
    console.print(f"all processes stopped (pid {os.getpid()} exits)")
