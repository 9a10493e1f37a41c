"""``stratus local``: a whole HA stratus cluster on this machine, running the examples on Spark.

It starts ZooKeeper, three nimbuses and two supervisors as real processes (``LocalCluster``),
submits the three examples (a Structured Streaming pipeline fed with JSON events, a batch
pipeline, a Spark Declarative Pipelines project) and shows live progress until Ctrl-C.

``--demo`` (what ``make run`` runs) plays a scripted failure instead: once the examples run it
kills the leader nimbus with SIGKILL and times the failover (the first leader-only call
served, and the new term's leader record against the kill), then kills the supervisor running
the streaming pipeline and times its move step by step (``stratus.local.pipeline_start``: detection,
worker start, Spark start-up, first new batch), stops feeding, checks that the rows counted
equal the rows fed, prints a summary and stops everything. Ctrl-C always stops every process
it started. Each nimbus runs under its own failover controller (``nimbus.ha.mode:
supervised``, the default): the kill, of the nimbus the controller runs, is seen by that
controller as it reaps it, and it gives up the lock at once. ``ha_mode="zkfc"`` (``stratus
local --ha zkfc``) runs each nimbus under a zkfc beside it, which sees the kill at its next
health check; ``ha_mode="self"`` waits for the dead nimbus's ZooKeeper session to expire.
With ``state_store="pacemaker"`` (``--state-store pacemaker``) the script first kills one of
the two pacemakers and restarts it empty, and shows that no pipeline moves
(``stratus.local.pacemaker_restart``).
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from stratus.api.echo import printable
from stratus.api.records import PipelineStatus, WorkerHeartbeat, WorkerState
from stratus.client import NimbusClient
from stratus.errors import StratusError
from stratus.local.cluster import HA_MODES, SUPERVISOR_TIMEOUT_SECS, LocalCluster
from stratus.local.examples_io import Feeder, window_count_total
from stratus.local.pacemaker_restart import restart_a_pacemaker
from stratus.local.pipeline_start import PHASES, follow_start
from stratus.local.user_settings import UserSettings

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"  # package data: in the wheel too
STREAMING, BATCH, SDP = "streaming-counts", "batch-report", "sdp-orders"
WAIT_SECS = 300.0  # Spark start-ups on a loaded 2-core machine take their time
POLL_SECS = 0.5
MODE_NAMES = {"supervised": "under its controller", "zkfc": "under zkfcs", "self": "self-elected"}
# Two copies before a pipeline is active: the leader can then die without taking the only one.
REPLICATION = {"pipeline.min.replication.count": 2, "pipeline.max.replication.wait.time.sec": 30}


class DemoError(StratusError):
    """The demo could not go on: a step did not happen in time."""


@dataclass(frozen=True)
class Timing:
    event: str
    detail: str
    seconds: float


class Demo:
    """The cluster, a client, the feeder, and the live view of them."""

    def __init__(
        self,
        stack: ExitStack,
        console: Console,
        *,
        state_store: str = "zookeeper",
        secure: bool = False,
        ha_mode: str = HA_MODES[0],
        user: UserSettings | None = None,
    ) -> None:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stratus-local-")))
        self.console = console
        self.cluster = LocalCluster(
            workdir, console, state_store=state_store, secure=secure, ha_mode=ha_mode, user=user
        )
        stack.callback(self.cluster.close)
        self.cluster.start()
        self.client = stack.enter_context(
            NimbusClient(self.cluster.seeds, retry_deadline=60, auth=self.cluster.client_auth)
        )
        self.input = workdir / "streaming-input"
        self.output = workdir / "streaming-output"
        self.feeder = Feeder(self.input)
        stack.callback(self.feeder.halt)  # no file written while the directory is removed
        self.timings: list[Timing] = []

    def submit_examples(self) -> None:
        self.feeder.start()
        streaming_conf = {
            "spark.stratus.example.input": str(self.input),
            "spark.stratus.example.output": str(self.output),
            **REPLICATION,
        }
        batch_conf = {"spark.stratus.example.output": str(self.cluster.workdir / "batch-out")}
        for name, conf in ((STREAMING, streaming_conf), (BATCH, batch_conf), (SDP, {})):
            record = self.client.submit(None, EXAMPLES / name.split("-")[0], conf)
            self.console.print(f"submitted {record.name}: {record.status.value}")

    def view(self) -> Group:
        """The live view: the cluster, then each pipeline's status and workers."""
        summary = self.client.cluster()
        table = Table(title=f"pipelines (leader {summary.leader.address or '-'})")
        for column in ("pipeline", "status", "supervisor", "worker", "batch", "rows", "error"):
            table.add_column(column)
        for record in summary.pipelines:
            beat = self._current(record.name)
            batch = beat.last_batch_id if beat else -1
            table.add_row(
                record.name,
                record.status.value,
                beat.supervisor if beat else "-",
                beat.state.value if beat else "-",
                str(batch) if batch >= 0 else "-",
                str(beat.rows_total) if beat else "-",
                printable((beat.error or "") if beat else (record.reason or ""))[:60],
            )
        fed = Table.grid()
        fed.add_row(f"events fed to {STREAMING}: {self.feeder.fed}")
        return Group(table, fed)

    @contextmanager
    def live(self) -> Iterator[Callable[[], None]]:
        """A live view; the function it yields refreshes it."""
        with Live(self.view(), console=self.console, refresh_per_second=2) as live:
            yield lambda: live.update(self.view())

    def wait(self, what: str, condition: Callable[[], bool], refresh: Callable[[], None]) -> float:
        """Wait for ``condition``, refreshing the view; the seconds it took."""
        started = time.monotonic()
        while not condition():
            if time.monotonic() - started > WAIT_SECS:
                raise DemoError(f"gave up after {WAIT_SECS:g} s waiting for {what}")
            refresh()
            time.sleep(POLL_SECS)
        refresh()
        return time.monotonic() - started

    def _current(self, name: str) -> WorkerHeartbeat | None:
        workers = self.client.workers(name)
        if workers.assignment is None:
            return next((b for b in workers.workers if b.state.final), None)
        return workers.on_assigned()

    def streaming_beat(self) -> WorkerHeartbeat | None:
        beat = self._current(STREAMING)
        return beat if beat is not None and beat.state is WorkerState.RUNNING else None

    def status_of(self, name: str) -> PipelineStatus:
        return self.client.status(name).status


def run_until_interrupted(demo: Demo) -> None:
    with demo.live() as refresh:
        while True:
            refresh()
            time.sleep(POLL_SECS)


def run_scripted(demo: Demo) -> tuple[int, int]:
    """The scripted failures; (events fed, events counted)."""
    with demo.live() as refresh:
        demo.wait(
            f"{STREAMING} to count rows",
            lambda: (beat := demo.streaming_beat()) is not None and beat.rows_total > 0,
            refresh,
        )
    if demo.cluster.pacemakers:  # --state-store pacemaker
        _restart_pacemaker(demo)
    _kill_leader(demo)
    _kill_streaming_supervisor(demo)
    with demo.live() as refresh:
        demo.wait(
            f"{BATCH} and {SDP} to finish",
            lambda: all(demo.status_of(n) is PipelineStatus.FINISHED for n in (BATCH, SDP)),
            refresh,
        )
        fed = demo.feeder.stop()
        demo.wait(
            "every event fed to be counted",
            lambda: window_count_total(demo.output) >= fed,
            refresh,
        )
    return fed, window_count_total(demo.output)


def _restart_pacemaker(demo: Demo) -> None:
    """kill -9 of one pacemaker, restarted empty: print what moved (nothing, or the demo
    fails) and how long its heartbeats took to come back."""
    pipelines = [record.name for record in demo.client.cluster().pipelines]
    demo.console.print("kill -9 of a pacemaker, then restarted empty on the same port")
    restart = restart_a_pacemaker(demo.cluster, demo.client, pipelines)
    demo.console.print(
        f"  → {restart.address} served again after {restart.restarted_secs:.2f}s, empty; it "
        f"held the heartbeats of all {restart.supervisors} supervisors again after "
        f"{restart.refilled_secs:.2f}s"
        + (", warming up (what it misses is unknown, not dead)" if restart.warming else "")
    )
    if restart.moved:
        moves = ", ".join(f"{n}: {a} → {b}" for n, (a, b) in sorted(restart.moved.items()))
        raise DemoError(f"a pacemaker's restart moved pipelines: {moves}")
    demo.console.print(
        f"  → [green]no pipeline moved[/] in the {restart.watched_secs:.1f}s after the kill "
        f"(the supervisor timeout is {SUPERVISOR_TIMEOUT_SECS:g}s): the other pacemaker kept "
        "every heartbeat"
    )
    event = "kill -9 of a pacemaker"
    demo.timings += [
        Timing(event, f"{restart.address} restarted, empty", restart.restarted_secs),
        Timing("", "every supervisor's heartbeats back in it", restart.refilled_secs),
        Timing("", "watched, nothing moved", restart.watched_secs),
    ]


def _kill_leader(demo: Demo) -> None:
    demo.timings += kill_leader_nimbus(demo.cluster, demo.client, demo.console, STREAMING)


def kill_leader_nimbus(
    cluster: LocalCluster, client: NimbusClient, console: Console, pipeline: str
) -> list[Timing]:
    """SIGKILL the leader nimbus alone (its controller or zkfc, if any, lives on) and time
    the failover:
    to the first leader-only call served (``activate(pipeline)``, a no-op), and to the new
    term's leader record, read from ZooKeeper."""
    old = cluster.leader_term()
    if old is None:
        raise DemoError("no nimbus leads: nothing to kill")
    mode = MODE_NAMES[cluster.ha_mode]
    console.print(f"kill -9 of the leader nimbus [bold]{old.address}[/] ({mode})")
    pid = cluster.serving_pid(old.address)
    killed_at = time.time()  # wall clock: ZooKeeper's creation times are too
    started = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    client.activate(pipeline)  # a leader-only call (a no-op): it finds the new leader
    took = time.monotonic() - started
    new = client.known_leader or "?"
    console.print(f"  → the next leader-only call was served by [green]{new}[/] in {took:.3f}s")
    event = "kill -9 of the leader nimbus"
    timings = [Timing(event, f"{old.address} → {new}: first leader-only call", took)]
    term = cluster.leader_term()
    if term is not None and term.epoch > old.epoch:
        lock = max(0.0, term.since - killed_at)
        console.print(
            f"  → {term.address} took the lock at epoch {term.epoch} (was {old.epoch}), "
            f"{lock:.3f}s after the kill (its leader record's creation time)"
        )
        timings.append(Timing("", f"new leader record, epoch {term.epoch}", lock))
    return timings


def _kill_streaming_supervisor(demo: Demo) -> None:
    beat = demo.streaming_beat()
    assert beat is not None
    victim = beat.supervisor
    last_batch = beat.last_batch_id
    demo.console.print(f"kill -9 of supervisor [bold]{victim}[/], which runs {STREAMING}")
    began = time.time()  # wall clock: the marks of the start that follows are too
    demo.cluster.supervisor(victim).signal(signal.SIGKILL)
    with demo.live() as refresh:
        start = follow_start(
            demo.client,
            STREAMING,
            began=began,
            away_from=victim,
            after_batch=last_batch,
            on_poll=refresh,
            timeout=WAIT_SECS,
            poll_secs=POLL_SECS,  # each poll also refreshes the whole view
        )
    demo.console.print(
        f"  → {STREAMING} resumed on {start.supervisor}; first new batch after {start.total:.1f}s"
    )
    events = [f"kill -9 of supervisor {victim}"] + [""] * (len(PHASES) - 1)
    demo.timings += [
        Timing(event, PHASES[phase], seconds)
        for event, (phase, seconds) in zip(events, start.phases().items(), strict=True)
    ]


def print_summary(console: Console, demo: Demo, fed: int, counted: int) -> None:
    table = Table(title="stratus local: what happened")
    for column in ("event", "step"):
        table.add_column(column)
    table.add_column("seconds", justify="right")
    for timing in demo.timings:
        table.add_row(timing.event, timing.detail, f"{timing.seconds:.3f}")
    console.print(table)
    verdict = "[green]rows in = rows out[/]" if fed == counted else "[red]MISMATCH[/]"
    console.print(f"{STREAMING}: {fed} events fed, {counted} counted in its output: {verdict}")
