"""Reassignment: how fast the leader moves pipelines, part by part.

Parts (``--part``, repeatable; all by default):

* **schedule**: one scheduling round, ``plan_round``
  (``stratus.nimbus.scheduling.scheduler``), the pure decision the leader makes every round,
  for ``--pipelines`` simulated ACTIVE pipelines on ``--supervisors`` simulated supervisors
  of ``--slots`` slots each, in three situations:

  - *fresh*: nothing assigned yet (a new cluster, or every assignment lost): every pipeline
    is placed;
  - *steady*: every pipeline assigned where the fresh round put it, every supervisor alive:
    the round finds nothing to do (the common case, every round of a healthy cluster);
  - *dead*: the steady cluster with ``--dead`` of its supervisors (0.1: every tenth, so
    spread over the ids) judged dead: their pipelines move to the others.

  Each situation is timed ``--repeats`` times (after ``--warmup`` unmeasured calls) with
  ``time.perf_counter()`` around the call alone; the inputs are built once, outside the
  timing, as the leader has them after its reads. Every round's plan is checked (fresh: all
  placed; steady: empty; dead: every pipeline of the dead supervisors moved).

  The target is a budget, not a system run beside it: one round with 1,000 pipelines on
  200 supervisors well under 1 s. The ratio is the p90 over that budget.

* **kill**: ``kill -9`` of the supervisor running a streaming pipeline, until the pipeline's
  first new batch is committed on the other supervisor, in real processes: ZooKeeper, one
  nimbus and two supervisors (``stratus.local.cluster``, its short timeouts), the
  ``stratus/examples/streaming`` pipeline on Spark (``local[1]``), fed a file of events a second.
  The move is split into its steps by ``stratus.local.pipeline_start`` (detection: the new
  assignment; worker start; Spark start-up: RUNNING with an app id; first batch: a batch id
  above the last one before the kill), each step's end taken from the records the leader,
  the supervisor and the worker wrote. ``--rounds`` kills in a row, the pipeline moving back
  and forth: each killed supervisor is started again, and the pipeline commits two batches
  where it landed before the next kill. Also timed: the kill until no process of the old
  worker is left (it stops itself when its supervisor's lease, 2 s here, has ended).

  The baseline is what a move costs without anything cleverer than a timeout: the detection
  timeout (``nimbus.supervisor.timeout.secs``) plus a cold start of the same pipeline,
  measured in the same run (its first start, with no failure, from its assignment to its
  first batch). The ratio is the kill's total over that sum.

  ``--warm`` runs the part with warm starts off (``supervisor.worker.warm=false``), on (the
  supervisors' defaults: warm workers within a budget derived from this machine's memory),
  or both (the default), each on a cluster of its own. The target for warm starts has two parts:
  the p50 of kill -9 → first new batch at most the detection timeout + 6 s (a moved query's
  first batch restores its state store and reads the outage's backlog: seconds, even on a
  warm session), and at most half the cold moves' p50 in the same run (``--warm both``).

* **update**: ``stratus update`` of the running streaming example to new code (the same
  package with one more comment line: another digest), until the first batch committed by
  the worker of the new code, on a cluster of one nimbus and one supervisor. The update is
  split into the same steps as a move (the new assignment; the new worker's start, after
  the old worker stopped; Spark start-up; first batch). ``--rounds`` updates in a row. The
  baseline is the same pipeline's cold start measured in the same run, from its submit to
  its first batch: what a kill and a submit of the new code would cost at the very least.

    .venv/bin/python bench/reassign.py [--repeats 200] [--pipelines 1000] [--supervisors 200]
    .venv/bin/python bench/reassign.py --part schedule --json out.json
    .venv/bin/python bench/reassign.py --part kill [--rounds 3]   # Java and Spark: minutes
    .venv/bin/python bench/reassign.py --part update [--rounds 3] # Java and Spark: minutes
    .venv/bin/python bench/reassign.py --quick      # schedule, 10 repeats: a smoke run

``--quick`` leaves the kill and update parts out unless named (``--part kill --quick``: one
round).
The exit code is 0 even when a target is missed (benchmarks never fail the build); it is 1
only when the benchmark itself could not run (a plan that breaks the checks above, a
pipeline that did not move or start in time).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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
    report_console,
    write_json,
)
from stratus.api.records import (
    Assignment,
    PipelineRecord,
    PipelineStatus,
    WarmMemory,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.client import NimbusClient
from stratus.errors import StratusError
from stratus.local.cluster import SLOTS, SUPERVISOR_TIMEOUT_SECS, LocalCluster
from stratus.local.demo import EXAMPLES
from stratus.local.examples_io import Feeder
from stratus.local.pipeline_start import PHASES, PipelineStart, follow_start
from stratus.nimbus.scheduling.scheduler import Plan, plan_round
from stratus.process import live_in_group
from stratus.supervisor.warm_pool import WARM_MODULE

SCHEDULE_TARGET_SECS = 1.0
WARM_TARGET_MARGIN_SECS = 6.0  # warm starts: kill -9 → first batch p50 within detection + this
WARM_TARGET_COLD_SHARE = 0.5  # ... and at most this share of the cold moves' p50 in the same run
WARM_READY_WAIT_SECS = 600.0  # two JVM starts and warm-ups on a loaded 2-core machine
WARM_MODES = {"off": (False,), "on": (True,), "both": (False, True)}
EPOCH = 2
WALL_CLOCK = 1_700_000_000.0  # the simulated records' and assignments' wall-clock times


class BenchError(Exception):
    """The benchmark could not run (not a missed target)."""


@dataclass
class PartResult:
    """What one part reports: its verdict lines and its samples for ``--json``."""

    verdicts: list[str]
    samples: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Part: schedule


@dataclass(frozen=True)
class Situation:
    """One input of ``plan_round`` and what its plan must look like."""

    name: str
    what: str
    assignments: dict[str, Assignment]
    capacity: dict[str, int]
    keep_on: frozenset[str]
    check: Callable[[Plan], str | None]  # None: as expected; else what is wrong


@dataclass
class Timing:
    situation: str
    what: str
    seconds: list[float]
    plan: str  # what the plan held: assign / moved / unassign counts

    @property
    def p50(self) -> float:
        return percentile(self.seconds, 50)

    @property
    def p90(self) -> float:
        return percentile(self.seconds, 90)


def simulated_pipelines(count: int) -> dict[str, PipelineRecord]:
    """``count`` ACTIVE pipelines, submitted one second apart, each with its own conf."""
    return {
        f"pipeline-{i:05d}": PipelineRecord(
            name=f"pipeline-{i:05d}",
            status=PipelineStatus.ACTIVE,
            digest=f"{i:064x}",
            size_bytes=1_000_000 + i,
            conf={"spark.sql.shuffle.partitions": 8, "pipeline.owner": f"team-{i % 17}"},
            submitted=WALL_CLOCK + i,
            updated=WALL_CLOCK + i,
            epoch=1,
        )
        for i in range(count)
    }


def situations(
    pipelines: dict[str, PipelineRecord], supervisors: int, slots: int, dead_share: float
) -> list[Situation]:
    """Fresh, steady and dead, built from one fresh round's plan."""
    capacity = {f"supervisor-{j:04d}": slots for j in range(supervisors)}
    everyone = frozenset(capacity)
    fresh = plan_round(
        pipelines=pipelines,
        assignments={},
        capacity=capacity,
        keep_on=everyone,
        timed_out=frozenset(),
        epoch=1,
        now=WALL_CLOCK,
    )
    steady = fresh.applied_to({})
    step = max(1, round(1 / dead_share)) if dead_share > 0 else supervisors + 1
    dead = frozenset(sid for j, sid in enumerate(sorted(capacity)) if j % step == 0)
    alive = {sid: n for sid, n in capacity.items() if sid not in dead}
    on_dead = sum(1 for a in steady.values() if a.supervisor in dead)
    placed = min(len(pipelines), supervisors * slots)

    def check_fresh(plan: Plan) -> str | None:
        ok = len(plan.assign) == placed and not plan.unassign
        return None if ok else f"placed {len(plan.assign)} of {placed}"

    def check_steady(plan: Plan) -> str | None:
        return None if plan.empty else f"not empty: {describe(plan)}"

    def check_dead(plan: Plan) -> str | None:
        moved = len(plan.assign) + len(plan.unassign)  # unassigned: no room left
        ok = len(plan.moved) == on_dead == moved
        return None if ok else f"expected {on_dead} moves: {describe(plan)}"

    return [
        Situation("fresh", "nothing assigned", {}, capacity, everyone, check_fresh),
        Situation("steady", "nothing to do", steady, capacity, everyone, check_steady),
        Situation(
            "dead",
            f"{len(dead)} of {supervisors} supervisors dead",
            steady,
            alive,
            frozenset(alive),
            check_dead,
        ),
    ]


def describe(plan: Plan) -> str:
    return f"{len(plan.assign)} / {len(plan.moved)} / {len(plan.unassign)}"


def time_situation(
    situation: Situation, pipelines: dict[str, PipelineRecord], repeats: int, warmup: int
) -> Timing:
    """``plan_round`` on ``situation``, ``warmup`` times unmeasured, then ``repeats`` times."""
    seconds = []
    plan = None
    for index in range(warmup + repeats):
        began = time.perf_counter()
        plan = plan_round(
            pipelines=pipelines,
            assignments=situation.assignments,
            capacity=situation.capacity,
            keep_on=situation.keep_on,
            timed_out=frozenset(),
            epoch=EPOCH,
            now=WALL_CLOCK,
        )
        elapsed = time.perf_counter() - began
        if index >= warmup:
            seconds.append(elapsed)
    assert plan is not None
    wrong = situation.check(plan)
    if wrong is not None:
        raise BenchError(f"schedule, {situation.name}: the plan is wrong: {wrong}")
    return Timing(situation.name, situation.what, seconds, describe(plan))


def schedule_part(args: argparse.Namespace, console: Console) -> PartResult:
    """Time ``plan_round`` in the three situations; print the table; return the verdicts."""
    pipelines = simulated_pipelines(args.pipelines)
    console.print(
        f"schedule: {args.pipelines} ACTIVE pipelines on {args.supervisors} supervisors of "
        f"{args.slots} slots, {args.repeats} timed rounds per situation "
        f"(+{args.warmup} warm-up)"
    )
    timings = [
        time_situation(situation, pipelines, args.repeats, args.warmup)
        for situation in situations(pipelines, args.supervisors, args.slots, args.dead)
    ]
    target_ms = f"{SCHEDULE_TARGET_SECS * 1000:.0f}"
    table = Table(
        title=f"One scheduling round (plan_round), {args.pipelines} pipelines on "
        f"{args.supervisors} supervisors: milliseconds",
        caption=(
            "p50, p90, max over the timed rounds; plan = assign / moved / unassign of the "
            f"round's plan; ratio = p90 / the target of {target_ms} ms per round"
        ),
        box=box.SIMPLE_HEAD,
    )
    for header in ("situation", "what", "n", "p50", "p90", "max", "plan", "target", "ratio"):
        table.add_column(header, justify="left" if header in ("situation", "what") else "right")
    verdicts = []
    for t in timings:
        ratio = t.p90 / SCHEDULE_TARGET_SECS
        cells = (ms(t.p50), ms(t.p90), ms(max(t.seconds)), t.plan, target_ms, f"{ratio:.4f}x")
        table.add_row(t.situation, t.what, str(len(t.seconds)), *cells)
        met = "met" if t.p90 <= SCHEDULE_TARGET_SECS else "MISSED"
        verdicts.append(
            f"schedule, {t.situation} ({t.what}): p50 {ms(t.p50)} ms, p90 {ms(t.p90)} ms = "
            f"{ratio:.4f}x the target of {target_ms} ms: {met}"
        )
    console.print(table)
    return PartResult(verdicts, {"schedule": [asdict(t) for t in timings]})


# ---------------------------------------------------------------------------------------------
# Part: kill

EXAMPLE = EXAMPLES / "streaming"
INPUT_KEY, OUTPUT_KEY = "spark.stratus.example.input", "spark.stratus.example.output"
STEADY_BATCHES = 2  # batches committed on the new supervisor before the next kill
OLD_WORKER_WAIT_SECS = 30.0  # past the worker's own stop grace (20 s) after its pipe closed
WAIT_SECS = 120.0  # a supervisor to register, batches to commit
POLL_SECS = 0.2
STEP_NAMES = {  # PHASES' keys as the table names them
    "detection": "detection",
    "scheduling": "worker start",
    "spark": "Spark start-up",
    "first_batch": "first batch",
}


@dataclass(frozen=True)
class KillRound:
    """One ``kill -9`` of the supervisor running the pipeline, and the start that followed."""

    number: int
    victim: str
    last_batch: int  # the last batch seen committed before the kill
    start: PipelineStart
    old_worker_gone: float | None  # seconds from the kill until no process of the old
    # worker's group was left; None: some were still there OLD_WORKER_WAIT_SECS after


class GroupWatch:
    """Notes when the last live process of one process group (a worker and its JVM) went."""

    def __init__(self, group: int | None) -> None:
        self.group = group
        self.gone_at: float | None = None  # wall clock, as the marks of a PipelineStart

    def check(self) -> bool:
        """Whether the group is gone (noting when it was first seen gone)."""
        if self.gone_at is None and self.group is not None and not live_in_group(self.group):
            self.gone_at = time.time()
        return self.gone_at is not None


def poll_until(what: str, condition: Callable[[], bool], timeout: float = WAIT_SECS) -> None:
    """Poll ``condition`` every ``POLL_SECS`` until it holds; BenchError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise BenchError(f"gave up after {timeout:g} s waiting for {what}")
        time.sleep(POLL_SECS)


def running_beat(client: NimbusClient, pipeline: str) -> WorkerHeartbeat | None:
    """The RUNNING heartbeat of the worker on the pipeline's assigned supervisor, if any."""
    beat = client.workers(pipeline).on_assigned()
    return beat if beat is not None and beat.state is WorkerState.RUNNING else None


def cold_start(client: NimbusClient, workdir: Path, console: Console) -> PipelineStart:
    """Submit the streaming example and follow its first start: the baseline's cold start."""
    conf = {INPUT_KEY: str(workdir / "input"), OUTPUT_KEY: str(workdir / "output")}
    began = time.time()
    record = client.submit(None, EXAMPLE, conf)
    console.print(f"submitted {record.name} ({record.status.value}); following its first start")
    start = follow_start(client, record.name, began=began)
    console.print(f"cold start on {start.supervisor}: {describe_start(start, 'submit')}")
    return start


def kill_round(
    cluster: LocalCluster, client: NimbusClient, pipeline: str, number: int, console: Console
) -> KillRound:
    """Kill -9 the supervisor running ``pipeline``; follow the start elsewhere."""
    beat = running_beat(client, pipeline)
    if beat is None:
        raise BenchError(f"{pipeline} does not run before round {number}")
    victim, batch = beat.supervisor, beat.last_batch_id
    old_worker = GroupWatch(beat.pid)  # the worker leads a process group of its own
    began = time.time()
    cluster.supervisor(victim).kill()
    start = follow_start(
        client,
        pipeline,
        began=began,
        away_from=victim,
        after_batch=batch,
        on_poll=old_worker.check,
        poll_secs=POLL_SECS,
    )
    with contextlib.suppress(BenchError):
        poll_until("the old worker to exit", old_worker.check, OLD_WORKER_WAIT_SECS)
    gone = None if old_worker.gone_at is None else old_worker.gone_at - began
    result = KillRound(number, victim, batch, start, gone)
    console.print(f"round {number}: {victim} → {start.supervisor}: {describe_round(result)}")
    return result


def describe_start(start: PipelineStart, first_step: str = STEP_NAMES["detection"]) -> str:
    """One start's steps, for the line printed after each round (and the cold start's, whose
    first step is its submit, not a detection)."""
    names = {**STEP_NAMES, "detection": first_step}
    steps = ", ".join(f"{names[k]} {v:.2f} s" for k, v in start.phases().items())
    return f"{steps}; batch {start.batch_id} committed {start.total:.2f} s after it began"


def describe_round(result: KillRound) -> str:
    """One round: its start's steps, the batches around the kill, the old worker's exit."""
    gone = "still there" if result.old_worker_gone is None else f"{result.old_worker_gone:.2f} s"
    return (
        f"{describe_start(result.start)}; last batch before the kill {result.last_batch}; "
        f"old worker gone after {gone}"
    )


def restart(cluster: LocalCluster, client: NimbusClient, sid: str) -> None:
    """Start the killed supervisor again; wait until the nimbus lists its registration."""
    supervisor = cluster.supervisor(sid)
    supervisor.start()
    supervisor.wait_ready()
    poll_until(
        f"{sid} to be registered",
        lambda: any(s.id == sid for s in client.cluster().supervisors),
    )


def wait_steady(client: NimbusClient, start: PipelineStart) -> None:
    """Wait until the pipeline committed ``STEADY_BATCHES`` more batches where it started."""
    target = start.batch_id + STEADY_BATCHES

    def steady() -> bool:
        beat = running_beat(client, start.pipeline)
        return (
            beat is not None
            and beat.supervisor == start.supervisor
            and beat.last_batch_id >= target
        )

    poll_until(f"{start.pipeline} to commit batch {target} on {start.supervisor}", steady)


def run_kill_rounds(
    cluster: LocalCluster, rounds: int, console: Console, *, warm: bool = False
) -> tuple[PipelineStart, list[KillRound]]:
    """The cold start, then ``rounds`` kills, each killed supervisor restarted after (with
    ``warm``, and its warm workers' Spark up before the next kill, as on a node that has run
    for a while)."""
    feeder = Feeder(cluster.workdir / "input")
    feeder.start()
    try:
        with NimbusClient(cluster.seeds, retry_deadline=60) as client:
            cold = cold_start(client, cluster.workdir, console)
            wait_steady(client, cold)
            if warm:  # the other supervisor's warm workers up before the first kill
                for supervisor in cluster.supervisors:
                    if supervisor.id != cold.supervisor:
                        wait_warm(client, supervisor.id, SLOTS)
            results: list[KillRound] = []
            for number in range(1, rounds + 1):
                results.append(kill_round(cluster, client, cold.pipeline, number, console))
                if number < rounds:  # somewhere to move to next time, and a steady pipeline
                    victim = results[-1].victim
                    restart(cluster, client, victim)
                    if warm:  # restarted empty: a warm worker per slot
                        wait_warm(client, victim, SLOTS)
                    wait_steady(client, results[-1].start)
            return cold, results
    finally:
        feeder.stop()


def kill_part(args: argparse.Namespace, console: Console) -> PartResult:
    """A real cluster; kill -9 the supervisor running a streaming pipeline, ``--rounds`` times;
    with warm starts off, then on (``--warm``), each on a cluster of its own."""
    result = PartResult([])
    totals: dict[bool, list[float]] = {}
    for warm in WARM_MODES[args.warm]:
        part, totals[warm] = kill_part_once(args, console, warm=warm)
        result.verdicts += part.verdicts
        result.samples |= part.samples
    if True in totals:
        result.verdicts += warm_verdicts(totals)
    return result


def kill_part_once(
    args: argparse.Namespace, console: Console, *, warm: bool
) -> tuple[PartResult, list[float]]:
    label = f"warm starts {'on' if warm else 'off'}"
    console.rule(f"kill, {label}")
    console.print(
        f"kill ({label}): ZooKeeper, 1 nimbus and 2 supervisors of {SLOTS} slots as processes "
        f"(stratus.local.cluster); the {EXAMPLE.name} example; kills: {args.rounds}"
    )
    workdir = Path(tempfile.mkdtemp(prefix="stratus-bench-reassign-"))
    options = [] if warm else ["-c", "supervisor.worker.warm=false"]  # warm: the default
    cluster = LocalCluster(workdir, console, nimbuses=1, supervisors=2, supervisor_options=options)
    memory: list[tuple[float, float]] = []
    try:
        cluster.start()
        cold, rounds = run_kill_rounds(cluster, args.rounds, console, warm=warm)
        if warm:
            memory = warm_memory()
            show_warm_budgets(cluster, console)
    except (StratusError, BenchError) as exc:
        raise BenchError(f"kill: {exc} (logs kept in {workdir})") from exc
    finally:
        handle_interrupts(signal.SIG_IGN)  # let the cleanup finish (seconds at most)
        cluster.close()
        handle_interrupts(raise_interrupted)
    shutil.rmtree(workdir, ignore_errors=True)
    result = kill_report(cold, rounds, console, label=label)
    if warm:
        result.verdicts.append(memory_verdict(memory))
        result.samples["kill_warm_on"]["warm_rss_mib"] = memory
    return result, [r.start.total for r in rounds]


def show_warm_budgets(cluster: LocalCluster, console: Console) -> None:
    """What each supervisor's registration says of its warm workers and their memory (the
    defaults: a budget derived from this machine)."""
    with NimbusClient(cluster.seeds, retry_deadline=30) as client:
        for supervisor in client.cluster().supervisors:
            warm = supervisor.warm
            if warm is None:
                continue
            held = f", held: {warm.held.value} ({warm.why})" if warm.held else ""
            console.print(
                f"{supervisor.id}: machine {warm.machine_mb} MiB, warm budget "
                f"{warm.budget_mb} MiB, {warm.up} warm workers up using {warm.used_mb} MiB{held}"
            )


def wait_warm(client: NimbusClient, sid: str, count: int) -> None:
    """Wait until ``sid``'s registration counts ``count`` ready warm workers (their Spark up);
    BenchError naming what holds them back, if memory does, at the wait's end."""
    shown: list[WarmMemory | None] = [None]

    def ready() -> bool:
        found = next((s for s in client.cluster().supervisors if s.id == sid), None)
        shown[0] = found.warm if found is not None else None
        return shown[0] is not None and shown[0].ready >= count

    try:
        poll_until(f"{sid}'s warm workers to be ready", ready, WARM_READY_WAIT_SECS)
    except BenchError as exc:
        why = shown[0].why if shown[0] is not None else None
        raise BenchError(f"{exc}{f' (held back: {why})' if why else ''}") from None


def warm_memory() -> list[tuple[float, float]]:
    """RSS in MiB of every warm worker on this machine: (its Python process, the rest of its
    process group: its Spark JVM)."""
    found: list[tuple[float, float]] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if WARM_MODULE.encode() not in command:
            continue
        pid = int(proc.name)
        others = [p for p in live_in_group(pid) if p != pid]
        found.append((rss_mib(pid), sum(rss_mib(p) for p in others)))
    return found


def rss_mib(pid: int) -> float:
    """The resident set of ``pid`` in MiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def memory_verdict(memory: list[tuple[float, float]]) -> str:
    if not memory:
        return "kill (warm starts on): no warm worker was found to measure"
    totals = [python + jvm for python, jvm in memory]
    return (
        f"kill (warm starts on): a warm worker's memory (RSS) p50 {percentile(totals, 50):.0f} MiB "
        f"(Python {percentile([m[0] for m in memory], 50):.0f} MiB + Spark JVM "
        f"{percentile([m[1] for m in memory], 50):.0f} MiB), over {len(memory)} warm workers"
    )


def warm_verdicts(totals: dict[bool, list[float]]) -> list[str]:
    """The warm starts' target, in two parts: their p50 within the detection timeout plus a
    margin, and at most a share of the cold moves' p50 in the same run (``--warm both``)."""
    target = SUPERVISOR_TIMEOUT_SECS + WARM_TARGET_MARGIN_SECS
    warm = percentile(totals[True], 50)
    verdicts = [
        f"kill: with warm starts, kill -9 → first new batch elsewhere p50 {warm:.2f} s; "
        f"target <= detection timeout {SUPERVISOR_TIMEOUT_SECS:g} s + "
        f"{WARM_TARGET_MARGIN_SECS:g} s = {target:g} s: {'met' if warm <= target else 'MISSED'}"
    ]
    if False not in totals:
        verdicts.append(
            f"kill: with warm starts, against cold moves: not measured (--warm both runs both "
            f"in one run; target <= {WARM_TARGET_COLD_SHARE:g}x the cold p50)"
        )
        return verdicts
    cold = percentile(totals[False], 50)
    ratio = warm / cold
    verdicts.append(
        f"kill: with warm starts, p50 {warm:.2f} s = {ratio:.2f}x the cold moves' p50 "
        f"{cold:.2f} s in this run; target <= {WARM_TARGET_COLD_SHARE:g}x: "
        f"{'met' if ratio <= WARM_TARGET_COLD_SHARE else 'MISSED'}"
    )
    return verdicts


def kill_report(
    cold: PipelineStart, rounds: list[KillRound], console: Console, *, label: str = ""
) -> PartResult:
    """The table, the baseline and its ratio, the verdict."""
    table = Table(
        title=f"kill -9 of the supervisor running {cold.pipeline} → first new batch elsewhere"
        f"{', ' + label if label else ''}: seconds",
        caption=(
            "each step lasts until what happened, as the records written by the leader, the "
            "supervisor and the worker time it; cold start: the same pipeline's first start "
            "(no failure), from its assignment"
        ),
        box=box.SIMPLE_HEAD,
    )
    for header in ("step", "until", "n", "p50", "max", "cold start"):
        table.add_column(header, justify="left" if header in ("step", "until") else "right")
    phases = [r.start.phases() for r in rounds]
    cold_phases = cold.phases()
    for key, until in PHASES.items():
        values = [p[key] for p in phases]
        cold_cell = "-" if key == "detection" else f"{cold_phases[key]:.2f}"
        table.add_row(STEP_NAMES[key], until, *stats_cells(values), cold_cell)
    totals = [r.start.total for r in rounds]
    table.add_row(
        "total", "kill -9 → first new batch", *stats_cells(totals), f"{cold.from_assignment:.2f}"
    )
    gone = [r.old_worker_gone for r in rounds if r.old_worker_gone is not None]
    table.add_row("old worker", "kill -9 → no process of its group left", *stats_cells(gone), "-")
    console.print(table)
    baseline = SUPERVISOR_TIMEOUT_SECS + cold.from_assignment
    p50, worst = percentile(totals, 50), max(totals)
    line = (
        f"kill{' (' + label + ')' if label else ''}: kill -9 → first new batch elsewhere "
        f"p50 {p50:.2f} s = {p50 / baseline:.2f}x, "
        f"max {worst:.2f} s = {worst / baseline:.2f}x the baseline of {baseline:.2f} s "
        f"(nimbus.supervisor.timeout.secs {SUPERVISOR_TIMEOUT_SECS:g} s + a cold start of "
        f"{cold.from_assignment:.2f} s, assignment → first batch)"
    )
    key = "kill_" + label.replace("warm starts ", "warm_") if label else "kill"
    return PartResult([line, old_worker_verdict(rounds)], {key: kill_samples(cold, rounds)})


def old_worker_verdict(rounds: list[KillRound]) -> str:
    """Whether each old worker was gone before its successor started: never two copies."""
    first = [
        r.old_worker_gone is not None and r.old_worker_gone < r.start.worker_started - r.start.began
        for r in rounds
    ]
    gone = [r.old_worker_gone for r in rounds if r.old_worker_gone is not None]
    when = f"p50 {percentile(gone, 50):.2f} s, max {max(gone):.2f} s" if gone else "never"
    return (
        f"kill: the old worker was gone ({when} after the kill) before its successor started "
        f"in {sum(first)} of {len(rounds)} rounds: {'met' if all(first) else 'MISSED'}"
    )


def kill_samples(cold: PipelineStart, rounds: list[KillRound]) -> dict[str, Any]:
    """Every mark of every start, for ``--json``."""
    return {
        "cold_start": start_sample(cold),
        "rounds": [{**asdict(r), "start": start_sample(r.start)} for r in rounds],
        "baseline_secs": SUPERVISOR_TIMEOUT_SECS + cold.from_assignment,
        "supervisor_timeout_secs": SUPERVISOR_TIMEOUT_SECS,
    }


def stats_cells(values: list[float]) -> tuple[str, str, str]:
    """n, p50 and max, in seconds."""
    if not values:
        return "0", "-", "-"
    return str(len(values)), f"{percentile(values, 50):.2f}", f"{max(values):.2f}"


def start_sample(start: PipelineStart) -> dict[str, Any]:
    """A start's marks with its steps and total, for ``--json``."""
    return {**asdict(start), "phases": start.phases(), "total": start.total}


# ---------------------------------------------------------------------------------------------
# Part: update


def new_version(workdir: Path, number: int) -> Path:
    """The streaming example with one more comment line: the same code, another digest."""
    package = workdir / f"streaming-v{number}"
    shutil.copytree(EXAMPLE, package)
    job = package / "streaming_counts" / "job.py"
    job.write_text(job.read_text() + f"# version {number}\n")
    return package


def update_round(
    client: NimbusClient, workdir: Path, pipeline: str, number: int, console: Console
) -> PipelineStart:
    """``update`` the running pipeline to new code; follow the new code's start."""
    beat = running_beat(client, pipeline)
    if beat is None:
        raise BenchError(f"{pipeline} does not run before update {number}")
    package = new_version(workdir, number)
    began = time.time()
    record = client.update(pipeline, package)  # the submit's input and output stay
    start = follow_start(
        client, pipeline, began=began, after_batch=beat.last_batch_id, poll_secs=POLL_SECS
    )
    console.print(
        f"update {number} (to {record.digest[:12]}) on {start.supervisor}: "
        f"{describe_start(start, 'new assignment')}"
    )
    return start


def update_part(args: argparse.Namespace, console: Console) -> PartResult:
    """A real cluster; update the streaming example to new code ``--rounds`` times."""
    console.rule("update")
    console.print(
        f"update: ZooKeeper, 1 nimbus and 1 supervisor as processes (stratus.local.cluster); "
        f"the {EXAMPLE.name} example; updates: {args.rounds}"
    )
    workdir = Path(tempfile.mkdtemp(prefix="stratus-bench-update-"))
    cluster = LocalCluster(workdir, console, nimbuses=1, supervisors=1)
    feeder = Feeder(workdir / "input")
    try:
        cluster.start()
        feeder.start()
        with NimbusClient(cluster.seeds, retry_deadline=60) as client:
            cold = cold_start(client, workdir, console)
            wait_steady(client, cold)
            updates = []
            for number in range(1, args.rounds + 1):
                updates.append(update_round(client, workdir, cold.pipeline, number, console))
                wait_steady(client, updates[-1])
    except (StratusError, BenchError) as exc:
        raise BenchError(f"update: {exc} (logs kept in {workdir})") from exc
    finally:
        handle_interrupts(signal.SIG_IGN)  # let the cleanup finish (seconds at most)
        feeder.stop()
        cluster.close()
        handle_interrupts(raise_interrupted)
    shutil.rmtree(workdir, ignore_errors=True)
    return update_report(cold, updates, console)


def update_report(
    cold: PipelineStart, updates: list[PipelineStart], console: Console
) -> PartResult:
    """The table, the baseline (the cold start from its submit) and the ratio."""
    names = {**STEP_NAMES, "detection": "new assignment"}
    table = Table(
        title=f"stratus update of {cold.pipeline} → first batch of the new code: seconds",
        caption=(
            "each step lasts until what happened, as the records written by the leader, the "
            "supervisor and the worker time it; the first step runs from the update call; "
            "cold start: the same pipeline's first start, from its submit"
        ),
        box=box.SIMPLE_HEAD,
    )
    for header in ("step", "until", "n", "p50", "max", "cold start"):
        table.add_column(header, justify="left" if header in ("step", "until") else "right")
    phases = [u.phases() for u in updates]
    cold_phases = cold.phases()
    for key, until in PHASES.items():
        cells = stats_cells([p[key] for p in phases])
        table.add_row(names[key], until, *cells, f"{cold_phases[key]:.2f}")
    totals = [u.total for u in updates]
    table.add_row(
        "total", "update → first batch of the new code", *stats_cells(totals), f"{cold.total:.2f}"
    )
    console.print(table)
    p50, worst = percentile(totals, 50), max(totals)
    line = (
        f"update: stratus update → first batch of the new code p50 {p50:.2f} s = "
        f"{p50 / cold.total:.2f}x, max {worst:.2f} s = {worst / cold.total:.2f}x the baseline "
        f"of {cold.total:.2f} s (the same pipeline's cold start, submit → first batch)"
    )
    samples = {
        "cold_start": start_sample(cold),
        "updates": [start_sample(u) for u in updates],
        "baseline_secs": cold.total,
    }
    return PartResult([line], {"update": samples})


PARTS: dict[str, Callable[[argparse.Namespace, Console], PartResult]] = {
    "schedule": schedule_part,
    "kill": kill_part,
    "update": update_part,
}
SLOW_PARTS = frozenset({"kill", "update"})  # left out of --quick unless named with --part


# ---------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--part",
        choices=tuple(PARTS),
        action="append",
        help=f"run this part only; repeatable (default: all of {', '.join(PARTS)})",
    )
    parser.add_argument("--repeats", type=int, default=200, help="timed rounds (200)")
    parser.add_argument("--warmup", type=int, default=5, help="unmeasured rounds first (5)")
    parser.add_argument("--pipelines", type=int, default=1000, help="pipelines (1000)")
    parser.add_argument("--supervisors", type=int, default=200, help="supervisors (200)")
    parser.add_argument("--slots", type=int, default=8, help="slots per supervisor (8)")
    parser.add_argument(
        "--dead", type=float, default=0.1, help="share of supervisors dead in 'dead' (0.1)"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="kill, update: kills or updates in a row (3)"
    )
    parser.add_argument(
        "--warm",
        choices=tuple(WARM_MODES),
        default="both",
        help="kill: warm starts off, on, or both, each on a cluster of its own (both)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="10 repeats; the kill part only if named (--part kill), then 1 round",
    )
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0 or min(args.pipelines, args.supervisors) < 1:
        parser.error("--repeats, --pipelines and --supervisors must be >= 1, --warmup >= 0")
    if args.slots < 1 or not 0 <= args.dead < 1 or args.rounds < 1:
        parser.error("--slots and --rounds must be >= 1 and --dead in [0, 1)")
    args.skipped = []
    if args.quick:
        args.repeats, args.warmup, args.rounds = min(args.repeats, 10), min(args.warmup, 1), 1
        if args.part is None:  # real processes and Spark take minutes: only when asked
            args.skipped = [name for name in PARTS if name in SLOW_PARTS]
    args.part = [name for name in dict.fromkeys(args.part or PARTS) if name not in args.skipped]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)  # explicitly: a background job inherits an ignored SIGINT
    console = report_console(width=120)
    console.rule("Reassignment: " + ", ".join(args.part))
    info, reproduce = print_header(console, "reassign.py", argv, ("kazoo", "pydantic", "pyspark"))
    for name in args.skipped:
        console.print(
            f"{name}: left out by --quick (real processes and Spark, minutes); "
            f"--part {name} --quick runs it once"
        )
    verdicts: list[str] = []
    samples: dict[str, Any] = {}
    try:
        for name in args.part:
            result = PARTS[name](args, console)
            verdicts += result.verdicts
            samples |= result.samples
    except BenchError as exc:
        console.print(f"[bold red]benchmark failed:[/] {exc}")
        return 1
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc})[/]")
        return 128 + exc.signum
    print_verdicts(console, verdicts)
    write_json(
        args.json, args, machine=info, reproduce=reproduce, verdicts=verdicts, samples=samples
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
