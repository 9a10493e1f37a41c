"""Host failover: a host of the active worker dies; how long until its pipeline commits elsewhere.

The cluster: hosts each a Linux network namespace of its own on one bridge
(``tests/harness/netns_hosts.py``), laid out in one of two ways (``--layout``):

* **apart**, the default: three control hosts, c1, c2 and c3, each running a ZooKeeper quorum
  member, a nimbus (supervised by its failover controller, the default) and a pacemaker; three
  worker hosts, w1, w2 and w3, each running a supervisor of ``SLOTS`` slots alone, hence the
  pipeline's workers. A killed host is always a worker host: ZooKeeper's quorum, its leader
  and the leader nimbus live through every round, as in a deployment that keeps ZooKeeper,
  nimbuses and pacemakers off the worker hosts. What a round measures is then stratus's
  recovery alone;
* **shared**: three hosts, h1, h2 and h3, each running all four daemons. A killed worker host
  takes its ZooKeeper member with it, ZooKeeper's leader whenever that member led, and then no
  write commits until the quorum has elected another (2 to 4 s of ZooKeeper's own recovery,
  not stratus's): the layout of the runs before ``--layout`` existed.

Every heartbeat goes to the three pacemakers (``cluster.state.store: pacemaker``). The cluster
is built with ``tests/harness/hosts_cluster.py`` (its ``control`` hosts: those of a quorum
member and a nimbus), with tokens and pacemaker digest authentication as on a real network
(each supervisor's id is its host's name), and the test clusters' short timeouts
(``tests/harness/pipeline_cluster.py``: a silent supervisor is judged dead after
``nimbus.supervisor.timeout.secs``, 4 s). One directory every host reaches holds the
checkpoints, the input and the output. The pipeline is the streaming example
(``stratus/examples/streaming``) with ``pipeline.trigger.interval.secs=0.5``, fed 50 events a
second.

A round: wait until the cluster is steady (the pipeline running, the leader nimbus on another
host than its worker, every supervisor registered, the row's spares ready on the other worker
hosts, a pacemaker of another host past its warm-up, then ``STEADY_BATCHES`` batches
committed); kill the worker's host: cut it off the network (its veth down: packets dropped)
and SIGKILL every process running on it (its supervisor, the worker and its Spark; in the
shared layout its ZooKeeper member, nimbus and pacemaker too); wait for the pipeline's first
batch committed on another host; heal the host and start its daemons again, then record each
kill in the trail (``process_killed``, with the kill's time as ``began_wall``/``began_mono``:
a fault's line is written once it is undone). Every step's end is read from the trail the
processes record (``history.file``: one file per host, control and worker hosts alike,
``stratus.trail``), on the machine's monotonic clock, the one every host shares:

* **detection**: kill → the leader's write of the pipeline's new assignment (its
  ``leader_write`` line), or, where a standby worker was promoted, the leader's
  ``worker_promoted`` line (written once the promotion's transaction committed);
* **worker start**: → the new worker's ``worker_started`` on another host;
* **first batch**: → that worker's first ``batch_committed``;
* **kill → first batch**, the sum; and the **batch gap**, from the last batch committed before
  the kill to that first one;
* the **control plane**, kill → the new worker's start: stratus's part, before Spark's query
  start and first batch. A hot row prints it and kill → first batch over every round, and
  apart for the rounds whose kill took ZooKeeper's leader too (shared layout: each host runs a
  member, and no write, the promotion included, commits until the quorum elects another),
  which each round names; in the apart layout no round does.

The baseline is the **physical limit** of a round: the detection's timeout
(``nimbus.supervisor.timeout.secs``; for a promotion, the silence the leader's verdict waited
for, ``silent_secs`` of its ``worker_promoted`` line) + one trigger interval + that round's first
batch's own duration (Spark's ``triggerExecution``, recorded in its ``batch_committed`` line):
no failover judged after that silence commits sooner. Printed: each step's p50, p99 and max,
kill → first batch against the limit (the ratio), each row against the goal of a host failover
(p50 <= 2 s, p99 <= 4 s: met or MISSED), warm and hot against cold, hot against warm. After a
row's rounds the feeder stops and the output is checked exactly once (``check_exactly_once``:
every event counted once), the trails single-run (``check_single_run``: never a worker running
past the start of the next), both from ``stratus.chaos.oracle``, and every promotion explained
by a failure of the supervisor it took the pipeline from (``check_promotions_explained``, from
``stratus.chaos.promotions``).

Rows (``--rows``), each on a cluster of its own, of the layout chosen:

* **cold**: ``supervisor.worker.warm=false``: the new worker starts its Spark after the move;
* **warm**: the defaults: a warm worker (its Spark up) on the target takes the pipeline; a round
  waits for ``SLOTS`` ready warm workers on every other supervisor before its kill;
* **hot**: ``pipeline.standby=hot`` (warm workers off, ``supervisor.worker.warm=false``, to
  spare the cores): a standby worker is promoted; a round waits for the pipeline's standby
  worker READY on another host than the active worker's before its kill (the next round thus
  waits for the new standby worker placed after a promotion), and records its resident memory
  (``rss_mb`` of ``standby_worker`` in ``GET /api/v1/pipelines/NAME/workers``).

Needs root and ``ip`` (iproute2), Java and Spark::

    .venv/bin/python bench/host_failover.py                  # 3 rounds of each row, apart
    .venv/bin/python bench/host_failover.py --rows warm --rounds 10 --json out.json --keep
    .venv/bin/python bench/host_failover.py --quick --rows cold    # 1 round: a smoke run
    .venv/bin/python bench/host_failover.py --rows hot --rounds 3  # standby workers promoted
    .venv/bin/python bench/host_failover.py --layout shared --rows hot  # every daemon per host
    .venv/bin/python bench/host_failover.py --rows hot --driver-java-options=-XX:TieredStopAtLevel=1

The report's header and ``--json`` (``"layout"``, and the hosts of each kind) name the layout.

The exit code is 0 even when a target is missed (benchmarks never fail the build); it is 1
only when the benchmark itself could not run (no root, a daemon that did not start, a pipeline
that did not move in time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from _harness import (
    ADMIN,
    DRIVER_JAVA_OPTIONS,
    PEER,
    SPARK_CONF_DIR,
    SUBMIT,
    HostsCluster,
    NetnsHosts,
    Started,
    cluster_options,
    options,
    secret_file,
    spark_conf_dir,
    token_file,
    unavailable,
)
from _report import (
    Interrupted,
    handle_interrupts,
    percentile,
    print_header,
    print_verdicts,
    raise_interrupted,
    report_console,
    write_json,
)
from reassign import (
    EXAMPLE,
    INPUT_KEY,
    OUTPUT_KEY,
    BenchError,
    memory_verdict,
    poll_until,
    running_beat,
    wait_warm,
    warm_memory,
)
from stratus.api.standby_workers import STANDBY_CONF_KEY, StandbyWorkerState, StandbyWorkerView
from stratus.chaos.oracle import (
    check_exactly_once,
    check_single_run,
    streaming_counted,
    streaming_expected,
)
from stratus.chaos.promotions import check_promotions_explained
from stratus.chaos.trail_events import Clocks, Event
from stratus.client import NimbusClient
from stratus.errors import StratusError
from stratus.local.cluster import PULSE_TTL_SECS, pacemaker_options
from stratus.local.examples_io import Feeder, read_rows, window_count_total
from stratus.local.processes import PacemakerProcess, stop_all
from stratus.trail import (
    BATCH_COMMITTED,
    LEADER_WRITE,
    PROCESS_KILLED,
    WORKER_PROMOTED,
    WORKER_STARTED,
    Actor,
    TrailRecorder,
)

SLOTS = 2
PIPELINE = "streaming-counts"  # the example's name (its stratus.yaml)
TRIGGER_SECS = 0.5
PACEMAKER_PORT = 6699  # pacemaker.port's default: one pacemaker per host, on its address
STEADY_BATCHES = 6  # batches committed where the pipeline runs, the cluster whole, before a kill
SETTLE_TRIES = 3  # a round settles again after a move before its kill, at most this often
STANDBY_STARTED = "event=standby_worker_started"  # a standby worker's first line in its log
STANDBY_PROMOTED = "event=standby_worker_promoted"  # its line once promoted: its warm-up stops
WAIT_SECS = 300.0  # a cold start on a loaded 2-core machine, a leader, a registration
READY_SECS = 120.0  # a daemon started again on a host
DRAIN_SECS = 300.0  # the output to count every event fed, once the feeder stopped
KILL_PASSES = 10  # listings of a host's processes, killing what each finds, until none is left
KILL_PASS_SECS = 0.05
TARGET_P50_SECS = 2.0  # the goal of a host failover: kill → first batch elsewhere
TARGET_P99_SECS = 4.0
ROUNDS = 3  # per row, by default
SHOWN_VIOLATIONS = 5


# ---------------------------------------------------------------------------------------------
# Rows: the cluster configurations a host is killed under


Spares = Callable[[NimbusClient, str], None]  # waits for a supervisor's spares, before a kill


def no_spares(client: NimbusClient, supervisor: str) -> None:
    """Nothing to wait for: the new worker starts cold."""


def warm_spares(client: NimbusClient, supervisor: str) -> None:
    """A ready warm worker on each free slot of ``supervisor`` (as on a node that has run for
    a while): the target of the move hands the pipeline to one."""
    wait_warm(client, supervisor, SLOTS)


@dataclass(frozen=True)
class Row:
    """One configuration of the cluster, measured on a cluster of its own."""

    name: str
    what: str
    supervisor_settings: Mapping[str, object] = field(default_factory=dict)
    pipeline_conf: Mapping[str, object] = field(default_factory=dict)
    spares: Spares = no_spares

    @property
    def hot(self) -> bool:
        """Whether its pipeline keeps a standby worker, promoted when its host dies."""
        return self.pipeline_conf.get(STANDBY_CONF_KEY) == "hot"


ROWS: dict[str, Row] = {
    "cold": Row(
        "cold",
        "no warm worker (supervisor.worker.warm=false): the new worker starts Spark",
        supervisor_settings={"supervisor.worker.warm": False},
    ),
    "warm": Row(
        "warm",
        "the defaults: a warm worker on the target takes the pipeline",
        spares=warm_spares,
    ),
    # Its spare is a READY standby worker on another host (``wait_standby``), its detection
    # the leader's promotion (``worker_promoted``); warm workers off to spare the cores.
    "hot": Row(
        "hot",
        "a standby worker is promoted (pipeline.standby=hot, supervisor.worker.warm=false)",
        supervisor_settings={"supervisor.worker.warm": False},
        pipeline_conf={STANDBY_CONF_KEY: "hot"},
    ),
}
DEFAULT_ROWS = tuple(ROWS)  # every row


# ---------------------------------------------------------------------------------------------
# Layouts: which hosts run the control plane, which the workers


@dataclass(frozen=True)
class Layout:
    """Where the daemons run: a ZooKeeper member, a nimbus and a pacemaker on each ``control``
    host, a supervisor on each ``workers`` host (a host of both runs all four)."""

    name: str
    what: str
    control: tuple[str, ...]
    workers: tuple[str, ...]

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host, each once: the control hosts first."""
        return tuple(dict.fromkeys((*self.control, *self.workers)))

    def daemons(self, name: str) -> tuple[str, ...]:
        """What host ``name`` runs, in words."""
        control = ("a ZooKeeper member", "a nimbus", "a pacemaker") if name in self.control else ()
        return (*control, *((f"a supervisor of {SLOTS} slots",) if name in self.workers else ()))


LAYOUTS: dict[str, Layout] = {
    "apart": Layout(
        "apart",
        "the control plane off the worker hosts: a worker host's death never takes ZooKeeper's "
        "leader, a nimbus or a pacemaker with it",
        control=("c1", "c2", "c3"),
        workers=("w1", "w2", "w3"),
    ),
    "shared": Layout(
        "shared",
        "every host runs every daemon: a worker host's death may take ZooKeeper's leader too",
        control=("h1", "h2", "h3"),
        workers=("h1", "h2", "h3"),
    ),
}
DEFAULT_LAYOUT = "apart"


# ---------------------------------------------------------------------------------------------
# The cluster


def _pairs(arguments: Sequence[str]) -> dict[str, str]:
    """``["-c", "k=v", ...]`` as ``{k: v}``."""
    return dict(argument.partition("=")[::2] for argument in arguments[1::2])


# the detection's timeout: a silent supervisor's pipelines move after it
DETECTION_TIMEOUT_SECS = float(_pairs(cluster_options(Path()))["nimbus.supervisor.timeout.secs"])


class FailoverHosts(Started):
    """The hosts of ``layout``: a ZooKeeper member, a nimbus and a pacemaker on each control
    host, a supervisor on each worker host; see the module docstring. ``with`` starts them all
    and kills them all."""

    def __init__(self, hosts: NetnsHosts, workdir: Path, row: Row, layout: Layout) -> None:
        self.hosts = hosts
        self.workdir = workdir
        self.layout = layout
        self.shared = workdir / "shared"
        pacemaker_auth = {
            "pacemaker.auth.method": "digest",
            "pacemaker.auth.file": str(self._pacemaker_secrets()),
        }
        self.pacemakers = {
            name: PacemakerProcess(
                # pulses outlive the leader's timeouts, as its clients check
                options({**pacemaker_auth, "pacemaker.pulse.ttl.secs": PULSE_TTL_SECS}),
                port=PACEMAKER_PORT,
                log_dir=workdir,
                host=hosts[name].address,
                command_prefix=hosts[name].command,
            )
            for name in layout.control
        }
        self.pacemaker_started: dict[str, float] = {}  # monotonic, by host
        addresses = [pacemaker.address for pacemaker in self.pacemakers.values()]
        self.settings: dict[str, object] = {
            **_pairs(cluster_options(self.shared / "checkpoints")),
            **_pairs(pacemaker_options(addresses)),
            **pacemaker_auth,
            "nimbus.auth.tokens.file": str(token_file(workdir)),
            "client.auth.token.file": str(secret_file(workdir / "peer.token", PEER)),
            "pipeline.min.replication.count": 2,  # the code outlives a host
        }
        admin = str(secret_file(workdir / "admin.token", ADMIN))
        self.nodes = HostsCluster(
            hosts,
            workdir,
            control=layout.control,
            settings=self.settings,
            nimbus_settings={
                "nimbus.ha.mode": "supervised",  # the default
                "pacemaker.auth.principal": "nimbus",
                "client.auth.token.file": admin,  # the leader's graceful fence needs admin
            },
            supervisor_settings=row.supervisor_settings,
            # every host's processes record: its nimbus, or its supervisor and their workers
            host_settings={
                name: {"history.file": str(self.history_file(name))} for name in layout.hosts
            },
            client_settings={
                "client.auth.token.file": str(secret_file(workdir / "submit.token", SUBMIT))
            },
        )

    def _pacemaker_secrets(self) -> Path:
        """The pacemakers' digest credentials: the nimbuses', and each supervisor's (its id is
        its host's name)."""
        lines = [f"nimbus nimbus {secrets.token_hex(16)}"]
        lines += [f"{name} supervisor {secrets.token_hex(16)}" for name in self.layout.workers]
        return secret_file(self.workdir / "pacemaker.secrets", "\n".join(lines))

    def history_file(self, name: str) -> Path:
        """Where the processes of host ``name`` (or the bench, ``driver``) record their trail."""
        return self.workdir / f"history-{name}.jsonl"

    def history_files(self) -> list[Path]:
        return sorted(self.workdir.glob("history-*.jsonl"))

    def start(self) -> None:
        for directory in ("checkpoints", "input"):
            (self.shared / directory).mkdir(parents=True, exist_ok=True)
        for name, pacemaker in self.pacemakers.items():
            pacemaker.start()
            self.pacemaker_started[name] = time.monotonic()
        for pacemaker in self.pacemakers.values():
            pacemaker.wait_ready(READY_SECS)
        self.nodes.start()
        for name in self.layout.workers:
            self.nodes.add_supervisor(name, slots=SLOTS)

    def close(self) -> None:
        handle_interrupts(signal.SIG_IGN)  # let the cleanup finish (seconds at most)
        try:
            self.nodes.close()
            stop_all(list(self.pacemakers.values()))
        finally:
            handle_interrupts(raise_interrupted)

    def kill_host(self, name: str) -> list[int]:
        """Cut host ``name`` off the network, then SIGKILL every process running on it
        (listing them again until none is left: a monitor may have started one meanwhile);
        the pids killed."""
        self.hosts.cut(name)
        killed: list[int] = []
        for _ in range(KILL_PASSES):
            found = [pid for pid in self.hosts.pids(name) if pid not in killed]
            if not found:
                break
            for pid in found:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed += found
            time.sleep(KILL_PASS_SECS)
        return killed

    def restore_host(self, name: str) -> None:
        """Put host ``name`` back on the network and start its daemons again (each killed
        process reaped first), waiting until each is ready: a control host's ZooKeeper
        member, pacemaker and nimbus, a worker host's supervisor."""
        self.hosts.heal(name)
        if name in self.layout.control:
            self._restore_control(name)
        if name in self.layout.workers:
            supervisor = self.nodes.supervisors[name]
            supervisor.kill()
            supervisor.start()
            supervisor.wait_ready(READY_SECS)

    def _restore_control(self, name: str) -> None:
        zookeeper = self.nodes.zookeepers[name]
        zookeeper.kill()
        zookeeper.launch()
        zookeeper.wait_serving(READY_SECS)
        pacemaker = self.pacemakers[name]
        pacemaker.kill()
        pacemaker.start()
        self.pacemaker_started[name] = time.monotonic()
        pacemaker.wait_ready(READY_SECS)
        nimbus = self.nodes.nimbuses[name]
        nimbus.kill()
        nimbus.start()
        nimbus.wait_ready(READY_SECS)

    def warm_up_over(self, name: str) -> bool:
        """Whether a pacemaker of a host other than ``name`` has run for its pulse TTL: one
        that ran shorter may have missed beats, and while every pacemaker answering is in that
        warm-up the leader judges nobody from the beats (nor from the heartbeats)."""
        now = time.monotonic()
        return any(
            now - started >= PULSE_TTL_SECS
            for host, started in self.pacemaker_started.items()
            if host != name
        )

    def zookeeper_leader(self) -> str | None:
        """The host whose ZooKeeper member leads the quorum now (None: none answers so)."""
        return next(
            (name for name, member in self.nodes.zookeepers.items() if member.mode() == "leader"),
            None,
        )

    def leader_not_on(self, name: str) -> str:
        """The leader's host once every nimbus agrees, moved off host ``name`` if it was there:
        that nimbus stops (giving its lead up), another wins, and it starts again (never, when
        ``name`` is a worker host alone: no nimbus runs there)."""
        leader = self.nodes.wait_for_agreed_leader(timeout=WAIT_SECS)
        if leader != name:
            return leader
        nimbus = self.nodes.nimbuses[name]
        nimbus.stop()
        others = [host for host in self.layout.control if host != name]
        self.nodes.wait_for_agreed_leader(among=others, timeout=WAIT_SECS)
        nimbus.start()
        nimbus.wait_ready(READY_SECS)
        leader = self.nodes.wait_for_agreed_leader(timeout=WAIT_SECS)
        if leader == name:
            raise BenchError(f"the lead came back to {name} when its nimbus started again")
        return leader


class TrailTail:
    """Every event of the trail's files, read on as they grow (whole lines only)."""

    def __init__(self, files: Callable[[], list[Path]]) -> None:
        self._files = files
        self._read: dict[Path, tuple[int, int]] = {}  # offset, lines
        self.events: list[Event] = []

    def read(self) -> list[Event]:
        """Every event so far, the new ones read."""
        for path in self._files():
            offset, number = self._read.get(path, (0, 0))
            with path.open("rb") as lines:
                lines.seek(offset)
                data = lines.read()
            whole = data[: data.rfind(b"\n") + 1]
            for raw in whole.splitlines():
                number += 1
                with contextlib.suppress(ValueError):
                    fields = json.loads(raw)
                    if isinstance(fields, dict):
                        self.events.append(Event(fields, f"{path}:{number}"))
            self._read[path] = (offset + len(whole), number)
        return self.events


# ---------------------------------------------------------------------------------------------
# A round


@dataclass(frozen=True)
class Round:
    """One host killed under the active worker, and its pipeline's first batch elsewhere."""

    row: str
    number: int
    victim: str  # the host killed (its supervisor's id is its name)
    leader: str  # the leader nimbus's host, before and through the kill
    target: str  # where the pipeline went
    killed: int  # processes killed on the victim
    detection: float  # seconds: kill → the assignment's change (or the promotion's record)
    worker_start: float  # → the new worker's start
    first_batch: float  # → its first committed batch
    total: float  # kill → first batch
    batch_gap: float  # the last batch before the kill → the first after
    batch_secs: float | None  # that first batch's own duration (triggerExecution)
    limit: float | None  # the physical limit: timeout (or silent_secs) + trigger + batch_secs
    # the promotion of a standby worker, if one took the pipeline: the verdict's ``how``, the
    # silence it waited for and its floor; and that standby worker's RSS before the kill
    how: str | None = None
    silent_secs: float | None = None
    floor_secs: float | None = None
    standby_rss_mb: int | None = None
    zk_leader: str | None = None  # the host of ZooKeeper's leader at the kill (None: unknown)

    @property
    def zk_leader_killed(self) -> bool:
        """Whether the kill took ZooKeeper's leader too: no write commits until the quorum
        elects another (its followers notice after ``syncLimit``), the promotion included."""
        return self.zk_leader == self.victim

    @property
    def control_plane(self) -> float:
        """Kill → the new worker's start: the control plane's part, before Spark's."""
        return self.detection + self.worker_start


def _of_pipeline(event: Event, name: str) -> bool:
    return event.name == name and event.get("pipeline") == PIPELINE


def committed_on(events: Sequence[Event], supervisor: str, since: float) -> int:
    """The pipeline's batches committed on ``supervisor`` after ``since`` (monotonic)."""
    return sum(
        1
        for e in events
        if _of_pipeline(e, BATCH_COMMITTED)
        and e.get("supervisor") == supervisor
        and e.at.mono > since
    )


def first_batch_elsewhere(events: Sequence[Event], victim: str, since: float) -> Event | None:
    """The pipeline's first batch committed off ``victim`` after ``since``."""
    batches = [
        e
        for e in events
        if _of_pipeline(e, BATCH_COMMITTED) and e.get("supervisor") != victim and e.at.mono > since
    ]
    return min(batches, key=lambda e: e.at.mono, default=None)


def moved(
    events: Sequence[Event], first: Event, since: float
) -> tuple[Event | None, Event | None, Event | None]:
    """Around the first batch ``first`` after ``since``: the leader's write of the pipeline's
    assignment after ``since``, the start of the worker that committed ``first``, and the
    last batch committed before ``since``."""
    writes = [
        e
        for e in events
        if e.name == LEADER_WRITE
        and since < e.at.mono <= first.at.mono
        and any(_assigns(op) for op in e.get("ops", []))
    ]
    starts = [
        e
        for e in events
        if _of_pipeline(e, WORKER_STARTED)
        and e.process == first.process
        and e.at.mono <= first.at.mono
    ]
    before = [e for e in events if _of_pipeline(e, BATCH_COMMITTED) and e.at.mono <= since]
    return (
        min(writes, key=lambda e: e.at.mono, default=None),
        max(starts, key=lambda e: e.at.mono, default=None),
        max(before, key=lambda e: e.at.mono, default=None),
    )


def promotion(events: Sequence[Event], victim: str, since: float, until: float) -> Event | None:
    """The leader's first promotion of the pipeline's standby worker off ``victim`` between
    ``since`` and ``until`` (monotonic)."""
    promotions = [
        e
        for e in events
        if _of_pipeline(e, WORKER_PROMOTED)
        and e.get("from_supervisor") == victim
        and since < e.at.mono <= until
    ]
    return min(promotions, key=lambda e: e.at.mono, default=None)


def ready_standby(client: NimbusClient, active: str) -> StandbyWorkerView | None:
    """The pipeline's standby worker if it is READY on another supervisor than ``active``."""
    view = client.workers(PIPELINE).standby_worker
    if view is None or view.state is not StandbyWorkerState.READY:
        return None
    return view if view.supervisor not in (None, active) else None


def wait_standby(client: NimbusClient, active: str) -> StandbyWorkerView:
    """Wait until the pipeline's standby worker is READY on another host than ``active``."""
    found: list[StandbyWorkerView] = []

    def ready() -> bool:
        view = ready_standby(client, active)
        found[:] = [view] if view is not None else []
        return view is not None

    try:
        poll_until(f"{PIPELINE}'s standby worker READY off {active}", ready, WAIT_SECS)
    except BenchError as exc:
        raise BenchError(f"{exc}; last seen: {client.workers(PIPELINE).standby_worker}") from exc
    return found[0]


def wait_warmed_up(cluster: FailoverHosts, standby: StandbyWorkerView) -> None:
    """Wait until ``standby``'s warm-up has ended (``event=warm_up_done`` in its log after its
    start): a host dies at any time, and a standby worker warms up for a minute or so of the
    hours it waits (supervisor.standby.warmup.batches); a failed warm-up is an error, and a
    promotion during it (a move that no kill caused) is ``MovedBeforeKillError``."""
    assert standby.supervisor is not None  # wait_standby: READY on a supervisor
    supervisor = cluster.nodes.supervisors[standby.supervisor]
    log = supervisor.local_dir / "workers" / PIPELINE / "worker.log"

    def ended() -> bool:
        with contextlib.suppress(OSError):
            own = log.read_text(errors="replace").rpartition(STANDBY_STARTED)[2]
            if "event=warm_up_failed" in own:
                raise BenchError(f"the standby worker's warm-up failed; see {log}")
            if STANDBY_PROMOTED in own:
                raise MovedBeforeKillError(
                    f"{PIPELINE}'s standby worker on {standby.supervisor} was promoted during "
                    "its warm-up"
                )
            return "event=warm_up_done" in own
        return False

    poll_until(f"the standby worker's warm-up on {standby.supervisor}", ended, WAIT_SECS)


def _assigns(op: str) -> bool:
    """Whether a fenced write's operation (``"set_data <path>"``) writes the pipeline's
    assignment (``<root>/assignments/<pipeline>``)."""
    name, _, path = op.partition(" ")
    return name in ("create", "set_data") and path.endswith(f"/assignments/{PIPELINE}")


class MovedBeforeKillError(BenchError):
    """The pipeline moved before the round's kill."""


def wait_steady(
    cluster: FailoverHosts, client: NimbusClient, trail: TrailTail, row: Row
) -> tuple[str, str, StandbyWorkerView | None]:
    """Wait until the pipeline runs, the leader is on another host, every supervisor is
    registered, the row's spares are ready elsewhere (a hot row's: its standby worker READY
    on another host) and ``STEADY_BATCHES`` batches were committed after that; the worker's
    host, the leader's and the standby worker seen last. ``MovedBeforeKillError`` when the
    pipeline leaves its supervisor meanwhile."""
    poll_until(f"{PIPELINE} to run", lambda: running_beat(client, PIPELINE) is not None, WAIT_SECS)
    beat = running_beat(client, PIPELINE)
    if beat is None:
        raise BenchError(f"{PIPELINE} stopped running")
    active = beat.supervisor
    triggers = {query.trigger_interval_secs for query in beat.queries}
    if triggers - {None, TRIGGER_SECS}:
        raise BenchError(f"{PIPELINE} runs with a trigger of {triggers} s, not {TRIGGER_SECS} s")
    leader = cluster.leader_not_on(active)
    poll_until(
        "every supervisor to be registered",
        lambda: {s.id for s in client.cluster().supervisors} >= set(cluster.layout.workers),
        WAIT_SECS,
    )
    for other in cluster.layout.workers:
        if other != active:
            row.spares(client, other)
    if row.hot:
        wait_warmed_up(cluster, wait_standby(client, active))
    poll_until(
        f"a pacemaker off {active} past its warm-up ({PULSE_TTL_SECS:g} s)",
        lambda: cluster.warm_up_over(active),
        PULSE_TTL_SECS + WAIT_SECS,
    )
    since = time.monotonic()

    def steady() -> bool:
        beat = running_beat(client, PIPELINE)
        if beat is not None and beat.supervisor != active:
            raise MovedBeforeKillError(f"{PIPELINE} left {active} for {beat.supervisor}")
        return committed_on(trail.read(), active, since) >= STEADY_BATCHES

    poll_until(f"{STEADY_BATCHES} batches of {PIPELINE} on {active}", steady, WAIT_SECS)
    beat = running_beat(client, PIPELINE)
    if beat is None or beat.supervisor != active:
        raise MovedBeforeKillError(f"{PIPELINE} left {active} while the cluster settled")
    standby = wait_standby(client, active) if row.hot else None  # still READY: its RSS now
    return active, leader, standby


def kill_round(
    cluster: FailoverHosts,
    client: NimbusClient,
    trail: TrailTail,
    driver: TrailRecorder,
    row: Row,
    number: int,
    console: Console,
) -> Round:
    """Wait until steady, kill the worker's host, time its pipeline's move, restore the host.
    A move that no kill caused while the cluster settles (a false suspicion on a loaded
    machine) is printed, and the round settles again, up to ``SETTLE_TRIES`` times."""
    for attempt in range(1, SETTLE_TRIES + 1):
        try:
            victim, leader, standby = wait_steady(cluster, client, trail, row)
            break
        except MovedBeforeKillError as exc:
            console.print(f"{row.name} round {number}: {exc} before its kill (no kill caused it)")
            if attempt == SETTLE_TRIES:
                raise BenchError(f"{exc}, {SETTLE_TRIES} times in a row") from None
    zk_leader = cluster.zookeeper_leader()
    began_wall, began = driver.now()
    killed = cluster.kill_host(victim)
    found: list[Event] = []

    def committed_elsewhere() -> bool:
        first = first_batch_elsewhere(trail.read(), victim, began)
        found[:] = [first] if first is not None else []
        return first is not None

    poll_until(f"a batch of {PIPELINE} committed off {victim}", committed_elsewhere, WAIT_SECS)
    first = found[0]
    write, start, before = moved(trail.events, first, began)
    if write is None or start is None or before is None:
        raise BenchError(
            f"round {number}: the trail lacks the assignment's write, the new worker's start "
            f"or the last batch before the kill (found {write}, {start}, {before})"
        )
    promoted = promotion(trail.events, victim, began, first.at.mono)
    detected = write if promoted is None else promoted
    silent = float(promoted.get("silent_secs")) if promoted is not None else None
    floor = float(promoted.get("floor_secs")) if promoted is not None else None
    duration = first.get("duration_secs")
    batch_secs = float(duration) if duration is not None else None
    silence = DETECTION_TIMEOUT_SECS if silent is None else silent
    limit = silence + TRIGGER_SECS + batch_secs if batch_secs is not None else None
    result = Round(
        row=row.name,
        number=number,
        victim=victim,
        leader=leader,
        target=str(first.get("supervisor")),
        killed=len(killed),
        detection=detected.at.mono - began,
        worker_start=start.at.mono - detected.at.mono,
        first_batch=first.at.mono - start.at.mono,
        total=first.at.mono - began,
        batch_gap=first.at.mono - before.at.mono,
        batch_secs=batch_secs,
        limit=limit,
        how=None if promoted is None else str(promoted.get("how")),
        silent_secs=silent,
        floor_secs=floor,
        standby_rss_mb=None if standby is None else standby.rss_mb,
        zk_leader=zk_leader,
    )
    console.print(describe(result))
    cluster.restore_host(victim)
    for pid in killed:  # a fault's line once it is undone, with its start: the host's death
        driver.record(
            PROCESS_KILLED,
            of_host=socket.gethostname(),
            of_pid=pid,
            target="host",
            supervisor=victim,
            began_wall=began_wall,
            began_mono=began,
        )
    return result


def describe(r: Round) -> str:
    batch = "-" if r.batch_secs is None else f"{r.batch_secs:.2f} s"
    limit = "-" if r.limit is None else f"{r.limit:.2f} s"
    promoted = (
        ""
        if r.how is None
        else f" (promoted: how {r.how}, silent {r.silent_secs:.2f} s, floor {r.floor_secs:.2f} s)"
    )
    zookeeper = (
        "ZooKeeper's leader killed too"
        if r.zk_leader_killed
        else f"ZooKeeper's leader on {r.zk_leader or 'unknown'}"
    )
    return (
        f"{r.row} round {r.number}: host {r.victim} killed ({r.killed} processes; leader on "
        f"{r.leader}; {zookeeper}) → {r.target}: detection {r.detection:.2f} s{promoted}, "
        "worker start "
        f"{r.worker_start:.2f} s, first batch {r.first_batch:.2f} s (its own {batch}); "
        f"total {r.total:.2f} s, physical limit {limit}"
    )


# ---------------------------------------------------------------------------------------------
# A row


@dataclass
class RowResult:
    """A row's rounds and the checks of its whole run."""

    row: str
    rounds: list[Round]
    fed: int
    exactly_once: list[str]
    single_run: list[str]
    promotions_explained: list[str] = field(default_factory=list)
    warm_rss_mib: list[tuple[float, float]] = field(default_factory=list)


def hosts_line(layout: Layout, hosts: NetnsHosts) -> str:
    """Each kind of host of ``layout``, its hosts (name and address) and what each runs."""
    kinds: dict[tuple[str, ...], list[str]] = {}
    for host in hosts:
        kinds.setdefault(layout.daemons(host.name), []).append(f"{host.name} {host.address}")
    return "; ".join(
        f"hosts {', '.join(names)}: each {', '.join(daemons[:-1])} and {daemons[-1]}"
        if len(daemons) > 1
        else f"hosts {', '.join(names)}: each {daemons[0]}"
        for daemons, names in kinds.items()
    )


@contextlib.contextmanager
def row_cluster(
    row: Row, layout: Layout, console: Console, *, keep: bool
) -> Iterator[FailoverHosts]:
    """The row's cluster on new hosts of ``layout``; its logs and trails kept when something
    fails, or when asked (``keep``)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"stratus-bench-host-failover-{row.name}-"))
    console.rule(f"{row.name}: {row.what}")
    try:
        with (
            NetnsHosts(layout.hosts) as hosts,
            FailoverHosts(hosts, workdir, row, layout) as cluster,
        ):
            console.print(f"{hosts_line(layout, hosts)}; logs and trails in {workdir}")
            yield cluster
    except (StratusError, BenchError, AssertionError, OSError, RuntimeError) as exc:
        raise BenchError(f"{row.name}: {exc} (logs kept in {workdir})") from exc
    if keep:
        console.print(f"{row.name}: logs and trails kept in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def run_row(
    row: Row, layout: Layout, rounds: int, console: Console, *, keep: bool = False
) -> RowResult:
    """Submit the pipeline on the row's cluster, kill ``rounds`` hosts, then check the run."""
    with row_cluster(row, layout, console, keep=keep) as cluster:
        driver = TrailRecorder.open(cluster.history_file("driver"), Actor("client", "bench"))
        trail = TrailTail(cluster.history_files)
        output = cluster.shared / "output"
        feeder = Feeder(cluster.shared / "input")
        with cluster.nodes.client() as client:
            conf = {
                INPUT_KEY: str(cluster.shared / "input"),
                OUTPUT_KEY: str(output),
                "pipeline.trigger.interval.secs": TRIGGER_SECS,
                **row.pipeline_conf,
            }
            client.submit(PIPELINE, EXAMPLE, conf)
            feeder.start()
            try:
                results = [
                    kill_round(cluster, client, trail, driver, row, number, console)
                    for number in range(1, rounds + 1)
                ]
            finally:
                fed = feeder.stop()
            with contextlib.suppress(BenchError):  # what is missing, the check says
                poll_until(
                    f"all {fed} events counted",
                    lambda: window_count_total(output) >= fed,
                    DRAIN_SECS,
                )
            memory = warm_memory() if row.spares is warm_spares else []
        driver.close()
        once = check_exactly_once(
            streaming_expected(range(fed)), streaming_counted(read_rows(output))
        )
        events = trail.read()
        single = check_single_run(events, Clocks())  # one machine: one monotonic clock
        explained = check_promotions_explained(events, Clocks())
    return RowResult(
        row.name,
        results,
        fed,
        [str(v) for v in once],
        [str(v) for v in single],
        [str(v) for v in explained],
        memory,
    )


# ---------------------------------------------------------------------------------------------
# Report


def _ratio(r: Round) -> float | None:
    return None if r.limit is None else r.total / r.limit


STEPS: list[tuple[str, str, Callable[[Round], float | None]]] = [
    ("detection", "kill → the leader's new assignment or promotion", lambda r: r.detection),
    ("worker start", "→ the new worker starts on another host", lambda r: r.worker_start),
    ("control plane", "kill → that start: detection + worker start", lambda r: r.control_plane),
    ("first batch", "→ it commits its first batch", lambda r: r.first_batch),
    ("kill → first batch", "the sum", lambda r: r.total),
    ("batch gap", "last batch before the kill → first after", lambda r: r.batch_gap),
    ("first batch's own", "that batch's triggerExecution", lambda r: r.batch_secs),
    ("verdict's silence", "the promotion's silent_secs", lambda r: r.silent_secs),
    ("physical limit", "timeout or silence + trigger + batch's own", lambda r: r.limit),
    ("over the limit", "kill → first batch / physical limit", _ratio),
]


def cells(values: Sequence[float | None]) -> tuple[str, str, str]:
    """p50, p99 and max of the known values."""
    known = [v for v in values if v is not None]
    if not known:
        return "-", "-", "-"
    p50, p99, top = percentile(known, 50), percentile(known, 99), max(known)
    return f"{p50:.2f}", f"{p99:.2f}", f"{top:.2f}"


def report(results: list[RowResult], layout: Layout, timeout: float, console: Console) -> list[str]:
    table = Table(
        title=f"A host of the active worker dies → its pipeline's first batch elsewhere (layout "
        f"{layout.name}, trigger {TRIGGER_SECS:g} s, detection timeout {timeout:g} s): seconds",
        caption="each step from the trail the processes recorded; the physical limit of a "
        "round: the detection's timeout (a promotion: the verdict's silence) + one trigger + "
        "that round's first batch's own duration",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("step")
    table.add_column("until")
    for result in results:
        for stat in ("p50", "p99", "max"):
            table.add_column(f"{result.row} {stat}", justify="right")
    for name, until, value in STEPS:
        row_cells = [c for result in results for c in cells([value(r) for r in result.rounds])]
        table.add_row(name, until, *row_cells)
    console.print(table)
    return verdicts(results, timeout)


def verdicts(results: list[RowResult], timeout: float) -> list[str]:
    lines = []
    totals = {result.row: [r.total for r in result.rounds] for result in results}
    for result in results:
        total = totals[result.row]
        p50, p99 = percentile(total, 50), percentile(total, 99)
        limits = [r.limit for r in result.rounds if r.limit is not None]
        ratios = [x for x in map(_ratio, result.rounds) if x is not None]
        promoted = [r for r in result.rounds if r.how is not None]
        silences = [r.silent_secs for r in promoted if r.silent_secs is not None]
        detection = (
            f"the verdict's silence, p50 {percentile(silences, 50):.2f} s"
            if silences
            else f"timeout {timeout:g} s"
        )
        against = (
            f" = {percentile(ratios, 50):.2f}x its physical limit at p50 "
            f"({percentile(limits, 50):.2f} s: {detection} + trigger "
            f"{TRIGGER_SECS:g} s + the first batch's own)"
            if ratios
            else " (no first batch's own duration recorded: no physical limit)"
        )
        lines.append(
            f"{result.row}: kill → first batch elsewhere p50 {p50:.2f} s, p99 {p99:.2f} s, max "
            f"{max(total):.2f} s over {len(total)} rounds{against}"
        )
        lines.append(
            f"{result.row}: the host failover goal p50 <= {TARGET_P50_SECS:g} s: "
            f"{'met' if p50 <= TARGET_P50_SECS else 'MISSED'}; p99 <= {TARGET_P99_SECS:g} s: "
            f"{'met' if p99 <= TARGET_P99_SECS else 'MISSED'}"
        )
        if ROWS[result.row].hot:
            lines.extend(promotion_verdicts(result.row, result.rounds))
    p50s = {row: percentile(total, 50) for row, total in totals.items()}
    for faster, slower in (("warm", "cold"), ("hot", "cold"), ("hot", "warm")):
        if faster in p50s and slower in p50s:
            lines.append(
                f"{faster}: p50 {p50s[faster]:.2f} s = {p50s[faster] / p50s[slower]:.2f}x the "
                f"{slower} p50 {p50s[slower]:.2f} s"
            )
    for result in results:
        lines.append(
            f"{result.row}: exactly once, {result.fed} events fed: {_checked(result.exactly_once)}"
        )
        lines.append(f"{result.row}: single run on the trails: {_checked(result.single_run)}")
        if ROWS[result.row].hot:
            lines.append(
                f"{result.row}: every promotion explained by a failure: "
                f"{_checked(result.promotions_explained)}"
            )
            lines.append(f"{result.row}: {standby_memory(result.rounds)}")
        if result.warm_rss_mib:
            lines.append(f"{result.row}: {memory_verdict(result.warm_rss_mib)}")
    return lines


def promotion_verdicts(row: str, rounds: Sequence[Round]) -> list[str]:
    """How a hot row's rounds moved: every round's standby worker was READY at the kill, so
    each round should promote it (a round that moved the ordinary way, cold, is a miss), and
    by the failover lane's verdict (``floor``, ``fenced``) rather than the round's timeout
    (``dead``)."""
    promoted = [r for r in rounds if r.how is not None]
    hows = ", ".join(sorted({str(r.how) for r in promoted})) or "none"
    cold = [str(r.number) for r in rounds if r.how is None]
    lane = [r for r in promoted if r.how in ("floor", "fenced")]
    by_round = [str(r.number) for r in promoted if r not in lane]
    return [
        *control_plane_verdicts(row, rounds),
        f"{row}: standby worker promoted in {len(promoted)} of {len(rounds)} rounds (how: "
        f"{hows}), each READY at its kill: "
        + ("met" if not cold else f"MISSED (moved the ordinary way: round {', '.join(cold)})"),
        f"{row}: promoted by the failover lane (floor or fenced) in {len(lane)} of "
        f"{len(rounds)} rounds"
        + (f" (by the round's timeout: round {', '.join(by_round)})" if by_round else ""),
    ]


def control_plane_verdicts(row: str, rounds: Sequence[Round]) -> list[str]:
    """Kill → the promoted worker's start (the control plane's part, before Spark's query
    start and first batch), over every round, and apart over those whose kill left
    ZooKeeper's leader alive and those whose kill took it too (they wait for a new quorum
    leader before any write commits) when the run had both; otherwise the one line says
    which they all were (in the apart layout, every kill leaves ZooKeeper's leader alive)."""
    alive = [r for r in rounds if not r.zk_leader_killed]
    killed = [r for r in rounds if r.zk_leader_killed]
    if alive and killed:
        groups = [
            ("every round", list(rounds)),
            ("ZooKeeper's leader alive", alive),
            ("ZooKeeper's leader killed too", killed),
        ]
    else:
        each = "alive" if alive else "killed too"
        groups = [(f"every round (ZooKeeper's leader {each} in each)", list(rounds))]
    return [_control_plane_line(row, label, chosen) for label, chosen in groups if chosen]


def _control_plane_line(row: str, label: str, chosen: Sequence[Round]) -> str:
    plane = [r.control_plane for r in chosen]
    total = [r.total for r in chosen]
    return (
        f"{row}: {label} ({len(chosen)} round{'' if len(chosen) == 1 else 's'}): control "
        f"plane (kill → the new worker's start) p50 {percentile(plane, 50):.2f} s, "
        f"p99 {percentile(plane, 99):.2f} s; "
        f"kill → first batch p50 {percentile(total, 50):.2f} s, p99 "
        f"{percentile(total, 99):.2f} s"
    )


def standby_memory(rounds: Sequence[Round]) -> str:
    """The standby workers' resident memory before each kill, as their supervisors report it."""
    known = [float(r.standby_rss_mb) for r in rounds if r.standby_rss_mb is not None]
    if not known:
        return "a standby worker's memory (RSS): not reported"
    each = ", ".join(f"{mb:.0f} MiB" for mb in known)
    return (
        f"a standby worker's memory (RSS, its JVM included) p50 {percentile(known, 50):.0f} MiB, "
        f"max {max(known):.0f} MiB, over {len(known)} standby workers ({each})"
    )


def _checked(violations: list[str]) -> str:
    return f"{len(violations)} violations, MISSED" if violations else "met"


def violations_shown(results: list[RowResult], console: Console) -> None:
    for result in results:
        found = [*result.exactly_once, *result.single_run, *result.promotions_explained]
        for violation in found[:SHOWN_VIOLATIONS]:
            console.print(f"[red]{result.row}: {violation}[/]")


# ---------------------------------------------------------------------------------------------
# Main


def parse_rows(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ROWS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"rows are a comma-separated list of {', '.join(ROWS)}, not {text!r}"
        )
    return list(dict.fromkeys(names))


def with_warm_up(row: Row, batches: int | None) -> Row:
    """``row`` with its standby workers' warm-up of ``batches`` (a hot row; None: as is)."""
    if batches is None or not row.hot:
        return row
    settings = {**row.supervisor_settings, "supervisor.standby.warmup.batches": batches}
    return replace(row, supervisor_settings=settings)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--rows",
        type=parse_rows,
        default=list(DEFAULT_ROWS),
        help=f"rows to measure, comma-separated (default: {','.join(DEFAULT_ROWS)})",
    )
    parser.add_argument(
        "--layout",
        choices=list(LAYOUTS),
        default=DEFAULT_LAYOUT,
        help="apart: ZooKeeper, nimbuses and pacemakers on hosts of their own, supervisors on "
        f"the others; shared: every daemon on every host (default: {DEFAULT_LAYOUT})",
    )
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="hosts killed per row")
    parser.add_argument("--quick", action="store_true", help="one round per row: a smoke run")
    parser.add_argument("--json", type=Path, help="also write every round to this file")
    parser.add_argument(
        "--keep", action="store_true", help="keep every row's logs and trails (a temp directory)"
    )
    parser.add_argument(
        "--driver-java-options",
        metavar="OPTIONS",
        help="the workers' driver JVM options, as an operator sets them "
        "(spark.driver.extraJavaOptions in a spark-defaults.conf of the run, SPARK_CONF_DIR "
        "for every daemon), e.g. -XX:TieredStopAtLevel=1 (default: none, Spark's)",
    )
    parser.add_argument(
        "--standby-warmup-batches",
        type=int,
        metavar="N",
        help="the hot row's supervisor.standby.warmup.batches (default: the supervisor's)",
    )
    args = parser.parse_args(argv)
    if args.driver_java_options and os.environ.get(SPARK_CONF_DIR):
        parser.error(f"--driver-java-options writes a {SPARK_CONF_DIR} of its own: unset yours")
    if args.quick:
        args.rounds = 1
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)
    layout = LAYOUTS[args.layout]
    console = report_console(width=160)
    console.rule(f"Host failover, layout {layout.name}: " + ", ".join(args.rows))
    info, reproduce = print_header(console, "host_failover.py", argv, ("kazoo", "pyspark"))
    console.print(f"[bold]{'layout':>9}[/]: {layout.name}: {layout.what}")
    reason = unavailable()
    if reason is not None:
        console.print(f"[bold red]benchmark cannot run:[/] no network-namespace hosts: {reason}")
        return 1
    if args.driver_java_options:
        driver = {DRIVER_JAVA_OPTIONS: args.driver_java_options}
        os.environ[SPARK_CONF_DIR] = str(spark_conf_dir(driver))
    console.print(f"[bold]{'driver JVM':>9}[/]: {args.driver_java_options or 'Spark defaults'}")
    warm_up = args.standby_warmup_batches or "the supervisor's default"
    console.print(f"[bold]{'warm-up':>9}[/]: a standby worker's batches: {warm_up}")
    results: list[RowResult] = []
    try:
        for name in args.rows:
            row = with_warm_up(ROWS[name], args.standby_warmup_batches)
            results.append(run_row(row, layout, args.rounds, console, keep=args.keep))
    except BenchError as exc:
        console.print(f"[bold red]benchmark failed:[/] {exc}")
        return 1
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc})[/]")
        return 128 + exc.signum
    lines = report(results, layout, DETECTION_TIMEOUT_SECS, console)
    print_verdicts(console, lines)
    violations_shown(results, console)
    samples: dict[str, Any] = {result.row: asdict(result) for result in results}
    write_json(
        args.json,
        args,
        machine=info,
        reproduce=reproduce,
        layout=layout.name,
        hosts={"control": layout.control, "workers": layout.workers},
        verdicts=lines,
        samples=samples,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
