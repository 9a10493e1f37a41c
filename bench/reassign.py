"""Reassignment: how fast the leader moves pipelines, part by part.

Parts (``--part``, repeatable; all by default):

* **schedule**: one scheduling round, ``plan_round`` (``stratus.nimbus.scheduler``), the pure
  decision the leader makes every round, for ``--pipelines`` simulated ACTIVE pipelines on
  ``--supervisors`` simulated supervisors of ``--slots`` slots each, in three situations:

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

The target is a budget, not a system run beside it: one round with 1,000 pipelines on 200
supervisors well under 1 s. The ratio is the p90 over that budget.

    .venv/bin/python bench/reassign.py [--repeats 200] [--pipelines 1000] [--supervisors 200]
    .venv/bin/python bench/reassign.py --part schedule --json out.json
    .venv/bin/python bench/reassign.py --quick      # 10 repeats: a smoke run

The exit code is 0 even when a target is missed (benchmarks never fail the build); it is 1
only when the benchmark itself could not run (a plan that breaks the checks above).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
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
    machine,
    ms,
    percentile,
    print_verdicts,
    raise_interrupted,
    report_console,
)
from stratus.nimbus.records import Assignment, PipelineRecord, PipelineStatus
from stratus.nimbus.scheduler import Plan, plan_round

SCHEDULE_TARGET_SECS = 1.0
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


PARTS: dict[str, Callable[[argparse.Namespace, Console], PartResult]] = {
    "schedule": schedule_part,
}


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
    parser.add_argument("--quick", action="store_true", help="10 repeats: a smoke run")
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.warmup = min(args.repeats, 10), min(args.warmup, 1)
    if args.repeats < 1 or args.warmup < 0 or min(args.pipelines, args.supervisors) < 1:
        parser.error("--repeats, --pipelines and --supervisors must be >= 1, --warmup >= 0")
    if args.slots < 1 or not 0 <= args.dead < 1:
        parser.error("--slots must be >= 1 and --dead in [0, 1)")
    args.part = list(dict.fromkeys(args.part or PARTS))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)  # explicitly: a background job inherits an ignored SIGINT
    console = report_console(width=120)
    console.rule("Reassignment: " + ", ".join(args.part))
    info = machine(("kazoo", "pydantic"))
    reproduce = shlex.join(
        [".venv/bin/python", "bench/reassign.py", *(sys.argv[1:] if argv is None else argv)]
    )
    for key, value in info.items():
        console.print(f"[bold]{key:>9}[/]: {value}")
    console.print(f"[bold]{'reproduce':>9}[/]: {reproduce}")
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
    if args.json:
        doc = {
            "machine": info,
            "reproduce": reproduce,
            "args": {k: str(v) for k, v in vars(args).items()},
            "verdicts": verdicts,
            "samples": samples,
        }
        args.json.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
