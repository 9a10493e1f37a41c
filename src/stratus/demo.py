"""``stratus local``: a stratus cluster on this machine, as real processes, with failovers.

Until supervisors exist this runs what the control plane has: a real ZooKeeper and three
``stratus nimbus`` processes. It submits an example pipeline through the client and waits
until two nimbuses hold its code, shows the cluster, then kills the leader with SIGKILL and
times how long until the client's next leader-only call succeeds on a new leader; it
restarts the killed nimbus, stops the new leader with SIGTERM (a clean hand-over) and times
that too. Everything is stopped at the end, and on Ctrl-C.
"""

from __future__ import annotations

import signal
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from stratus.client import NimbusClient
from stratus.client_commands import print_cluster
from stratus.codedist.package_build import package_bytes
from stratus.command_options import with_config
from stratus.config import StratusConfig
from stratus.local_processes import NimbusProcess
from stratus.nimbus.records import PipelineRecord
from stratus.zk.server import ZooKeeperServer, pick_free_port

NIMBUSES = 3
DEMO_SESSION_TIMEOUT = 3.0
EXAMPLE = "example"
# Two copies before the pipeline is active: the leader can then die without taking the only one.
REPLICATION = {"pipeline.min.replication.count": 2, "pipeline.max.replication.wait.time.sec": 30}


@dataclass(frozen=True)
class Failover:
    event: str
    old_leader: str
    new_leader: str
    seconds: float


def example_package() -> bytes:
    """The demo pipeline's package: a manifest and a small PySpark batch job."""
    return package_bytes(
        {
            "stratus.yaml": f"name: {EXAMPLE}\nkind: app\nentrypoint: example:run\n",
            "example.py": "def run(spark, context):\n    spark.range(10).show()\n",
        }
    )


class LocalCluster:
    """ZooKeeper and the nimbus processes of ``stratus local``, all stopped by ``close()``."""

    def __init__(self, workdir: Path, conf: StratusConfig, console: Console) -> None:
        self.console = console
        self.zookeeper = ZooKeeperServer(
            workdir / "zookeeper", port=0, tick_time_ms=conf.zookeeper_server_tick_time_ms
        )
        self._workdir = workdir
        self.nimbuses: list[NimbusProcess] = []

    def start(self) -> None:
        with self.console.status("starting ZooKeeper"):
            self.zookeeper.start()
        self.console.print(f"ZooKeeper serving at [bold]{self.zookeeper.connect_string}[/]")
        options = [
            "-c", f"zookeeper.servers={self.zookeeper.connect_string}",
            "-c", f"zookeeper.session.timeout.secs={DEMO_SESSION_TIMEOUT}",
        ]  # fmt: skip
        self.nimbuses = [
            NimbusProcess(options, port=pick_free_port(), log_dir=self._workdir)
            for _ in range(NIMBUSES)
        ]
        with self.console.status(f"starting {NIMBUSES} nimbus processes"):
            for nimbus in self.nimbuses:
                nimbus.start()
            for nimbus in self.nimbuses:
                nimbus.wait_ready()
        self.console.print(f"{NIMBUSES} nimbuses serving: {', '.join(self.seeds)}")

    @property
    def seeds(self) -> list[str]:
        return [nimbus.address for nimbus in self.nimbuses]

    def nimbus_at(self, address: str) -> NimbusProcess:
        return next(nimbus for nimbus in self.nimbuses if nimbus.address == address)

    def close(self) -> None:
        for nimbus in self.nimbuses:
            nimbus.stop()
        self.zookeeper.stop()


def _leader_of(client: NimbusClient, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        address = client.leader().address
        if address is not None:
            return address
        time.sleep(0.05)
    raise click.ClickException(f"no nimbus became leader within {timeout:g}s")


def _time_failover(
    cluster: LocalCluster,
    client: NimbusClient,
    event: str,
    stop: Callable[[NimbusProcess], object],
    call: Callable[[], PipelineRecord | None],
) -> Failover:
    old = _leader_of(client)
    cluster.console.print(f"{event}: [bold]{old}[/]")
    started = time.monotonic()
    stop(cluster.nimbus_at(old))
    record = call()  # the client finds the new leader by itself
    took = time.monotonic() - started
    new = client.known_leader or "?"
    status = record.status.value if record else "?"
    cluster.console.print(
        f"  → leader-only call served by [green]{new}[/] after [bold]{took:.3f}s[/] "
        f"(pipeline {EXAMPLE} now {status})"
    )
    return Failover(event, old, new, took)


def run_demo(console: Console, conf: StratusConfig) -> list[Failover]:
    """Run the demo; the failovers it timed."""
    failovers: list[Failover] = []
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stratus-local-")))
        cluster = LocalCluster(workdir, conf, console)
        stack.callback(cluster.close)
        cluster.start()
        client = stack.enter_context(NimbusClient(cluster.seeds, retry_deadline=60))
        client.submit(EXAMPLE, example_package(), REPLICATION)
        record = client.wait_replicated(EXAMPLE)
        console.print(
            f"submitted {EXAMPLE}: {record.status.value}, its code on {record.replication} "
            f"nimbuses (pipeline.min.replication.count={record.replication_required})"
        )
        print_cluster(console, client.cluster())
        crash = _time_failover(
            cluster, client, "kill -9 of the leader",
            lambda nimbus: nimbus.signal(signal.SIGKILL),
            lambda: client.deactivate(EXAMPLE),
        )  # fmt: skip
        restarted = cluster.nimbus_at(crash.old_leader)
        restarted.kill()
        restarted.start()
        restarted.wait_ready()
        console.print(f"restarted {restarted.address}; it rejoins as a standby")
        handover = _time_failover(
            cluster, client, "SIGTERM of the leader (clean hand-over)",
            lambda nimbus: nimbus.signal(signal.SIGTERM),
            lambda: client.activate(EXAMPLE),
        )  # fmt: skip
        print_cluster(console, client.cluster())
        failovers += [crash, handover]
    return failovers


@click.command()
@with_config
def local(conf: StratusConfig) -> None:
    """Run stratus on this machine: ZooKeeper and three nimbuses, with failovers."""
    console = Console()
    console.rule("stratus local")
    failovers = run_demo(console, conf)
    table = Table(title=f"failovers (session timeout {DEMO_SESSION_TIMEOUT:g}s)")
    for column in ("event", "old leader", "new leader"):
        table.add_column(column)
    table.add_column("first leader-only call served after", justify="right")
    for failover in failovers:
        table.add_row(
            failover.event,
            failover.old_leader,
            failover.new_leader,
            f"{failover.seconds * 1000:.0f} ms",
        )
    console.print(table)
    console.print("all processes stopped")
