"""The start of the ``stratus`` command, against ``python -c "import click"``, in one run.

Every ``stratus`` call pays Python's start and the imports of what it runs: ``--version``,
``--help`` and each Tab of shell completion are calls too. Each row below is a fresh process,
timed from its start to its exit (wall clock), ``--runs`` times, the rows taking turns (one
run of each row, then the next round) so that a busy machine slows them alike:

* **import click** (the baseline): ``python -c "import click"``, the least a click command
  can cost;
* **stratus --version**, **stratus --help**: the console script ``stratus`` of this
  environment;
* **python -m stratus --version**: the other way in;
* **complete a verb**: a Tab after ``stratus sta`` (the start of a verb; click's protocol:
  ``_STRATUS_COMPLETE=bash_complete``), which lists verbs from ``cli/main.py``'s table;
* **complete a pipeline**: a Tab after ``stratus status``, which imports the client and asks
  the cluster; here a port that refuses at once, so it is the imports' cost (it never waits
  more than ``COMPLETION_TIMEOUT_SECS`` for a silent cluster).

Reported per row: the median and the 90th percentile in milliseconds, and the median's ratio
to the baseline's. The target: ``--version``, ``--help`` and completing a verb at most 2x the
baseline.

    .venv/bin/python bench/cli_start.py                  # 30 runs of each row
    .venv/bin/python bench/cli_start.py --runs 100 --json out.json
    .venv/bin/python bench/cli_start.py --quick          # 3 runs: a smoke run

The exit code is 0 even when the target is missed (benchmarks never fail the build); it is 1
only when the benchmark itself could not run (a command that failed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

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

TARGET_RATIO = 2.0
PYTHON = sys.executable
STRATUS = str(Path(sys.executable).with_name("stratus"))
REFUSING_SEEDS = "nimbus.seeds=127.0.0.1:9"  # the discard port: nothing listens there


def completion(words: str) -> dict[str, str]:
    """The environment of a Tab after ``words`` (the last one being completed)."""
    return {
        "_STRATUS_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split(" ")) - 1),
    }


@dataclass
class Row:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    target: bool = False  # held to TARGET_RATIO
    secs: list[float] = field(default_factory=list)


def rows() -> list[Row]:
    return [
        Row("import click", [PYTHON, "-c", "import click"]),
        Row("stratus --version", [STRATUS, "--version"], target=True),
        Row("stratus --help", [STRATUS, "--help"], target=True),
        Row("python -m stratus --version", [PYTHON, "-m", "stratus", "--version"], target=True),
        Row("complete a verb", [STRATUS], completion("stratus sta"), target=True),
        Row(
            "complete a pipeline",
            [STRATUS],
            completion(f"stratus -c {REFUSING_SEEDS} status "),
        ),
    ]


def time_once(row: Row) -> float:
    """One process of ``row``, from its start to its exit, in seconds."""
    env = {**os.environ, **row.env}
    env.pop("STRATUS_CONF", None)
    began = time.perf_counter()
    done = subprocess.run(row.argv, env=env, capture_output=True, timeout=60, check=False)
    secs = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{row.name} exited {done.returncode}: {done.stderr[-500:]!r}")
    return secs


def run(measured: list[Row], runs: int) -> None:
    """``runs`` rounds, one process of every row each, after a round not counted."""
    for row in measured:
        time_once(row)  # the files the imports read are now in the page cache
    for _ in range(runs):
        for row in measured:
            row.secs.append(time_once(row))


def report(console: Console, measured: list[Row]) -> list[str]:
    baseline = statistics.median(measured[0].secs)
    table = Table(box=box.SIMPLE_HEAVY, title="start of a command, ms")
    for column in ("command", "median", "p90", "x import click"):
        table.add_column(column, justify="left" if column == "command" else "right")
    verdicts = []
    for row in measured:
        median = statistics.median(row.secs)
        ratio = median / baseline
        table.add_row(row.name, ms(median), ms(percentile(row.secs, 90)), f"{ratio:.2f}")
        if row.target:
            met = "met" if ratio <= TARGET_RATIO else "MISSED"
            verdicts.append(
                f"{row.name}: {ratio:.2f}x import click (target <= {TARGET_RATIO:g}x): {met}"
            )
    console.print(table)
    print_verdicts(console, verdicts)
    return verdicts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="processes of each row")
    parser.add_argument("--quick", action="store_true", help="3 runs of each: a smoke run")
    parser.add_argument("--json", type=Path, help="also write every sample to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs = 3
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    handle_interrupts(raise_interrupted)
    console = report_console(width=100)
    console.rule("stratus: the start of a command against import click")
    info, reproduce = print_header(console, "cli_start.py", argv, ("click", "pydantic", "httpx"))
    console.print(f"[bold]{'run':>9}[/]: {args.runs} processes of each row, rows taking turns")
    measured = rows()
    try:
        run(measured, args.runs)
    except Interrupted as exc:
        console.print(f"[yellow]interrupted ({exc})[/]")
        return 128 + exc.signum
    except Exception as exc:  # a command that failed
        console.print(f"[bold red]benchmark failed:[/] {type(exc).__name__}: {exc}")
        return 1
    verdicts = report(console, measured)
    write_json(
        args.json,
        args,
        machine=info,
        reproduce=reproduce,
        verdicts=verdicts,
        rows=[asdict(r) for r in measured],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
