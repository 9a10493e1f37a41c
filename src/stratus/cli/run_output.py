"""How a pipeline's runs print: the table of ``stratus runs``, the last run in ``stratus
status``, and the choice of runs ``stratus logs --since`` reads.

``runs_table`` takes the rows alone, so any output format can be given them::

    print_table(out, runs_table("etl", client.runs("etl").runs))
    last_run_lines(runs[0])     # ["last run 7 on s1: FINISHED, exit code 0, ...", ...]
    parse_since("10m")          # 600.0; click.BadParameter for "ten minutes"
"""

from __future__ import annotations

import re
from itertools import takewhile

import click
from rich.table import Table

from stratus.api.echo import printable
from stratus.api.records import RunOutcome, RunRecord
from stratus.cli.output import when

ERROR_SHOWN_CHARS = 80  # of a run's error in the table; stratus runs --json has it whole
_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT_SECS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
RUN_COLUMNS = ("run", "supervisor", "started", "duration", "outcome", "exit", "batches", "rows")


def parse_since(text: str) -> float:
    """``10m``, ``2h``, ``30s``, ``1d`` as seconds; click.BadParameter naming the form."""
    match = _SINCE.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise click.BadParameter(
            f"{text!r} is not a duration: a positive number and a unit, s, m, h or d "
            "(30s, 10m, 2h, 1d)",
            param_hint="'--since'",
        )
    return float(match.group(1)) * _UNIT_SECS[match.group(2)]


def runs_since(runs: list[RunRecord], cutoff: float) -> list[RunRecord]:
    """The runs (newest first) that ran at or after ``cutoff``: still open, or ended
    then; oldest first, as their logs are printed."""
    return [run for run in reversed(runs) if run.ended is None or run.ended >= cutoff]


def duration(run: RunRecord, now: float) -> str:
    """How long it ran (``2m 05s``), or runs so far (``+``)."""
    secs = run.duration_secs
    running = secs is None
    total = int(now - run.started if secs is None else secs)
    hours, rest = divmod(max(0, total), 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {seconds:02d}s"
    return text + (" +" if running else "")


def short_error(error: str | None) -> str:
    """A run's error on one line, cut to ``ERROR_SHOWN_CHARS``; its first line is the
    pipeline's own exception where one was found."""
    if not error:
        return ""
    line = " ".join(error.split())
    line = line if len(line) <= ERROR_SHOWN_CHARS else line[: ERROR_SHOWN_CHARS - 1] + "…"
    return printable(line)


def runs_table(pipeline: str, runs: list[RunRecord], now: float) -> Table:
    """One row per run, newest first: where, when, how long, how it ended."""
    table = Table(title=f"runs of {pipeline}")
    for column in RUN_COLUMNS:
        numeric = column in ("run", "batches", "rows", "duration")
        table.add_column(column, justify="right" if numeric else "left")
    table.add_column("error", overflow="fold")
    for run in runs:
        outcome = run.outcome.value if run.outcome is not None else "RUNNING"
        table.add_row(
            str(run.run),
            run.supervisor,
            when(run.started),
            duration(run, now),
            outcome + (" (inferred)" if run.inferred else ""),
            run.exit or "-",
            "-" if run.batches is None else str(run.batches),
            "-" if run.rows is None else str(run.rows),
            short_error(run.error),
        )
    return table


def last_run_lines(run: RunRecord, now: float) -> list[str]:
    """The last run of a pipeline that runs nowhere now: when, how long, how it ended."""
    outcome = run.outcome.value if run.outcome is not None else "RUNNING"
    ended = "-" if run.ended is None else when(run.ended)
    lines = [
        f"last run {run.run} on {run.supervisor}: {outcome}"
        + (" (inferred)" if run.inferred else "")
        + f", started {when(run.started)}, ended {ended}, ran {duration(run, now)}, "
        f"{run.exit or 'no exit'}, rows {'-' if run.rows is None else run.rows}"
    ]
    if run.error:
        lines.append(f"error: {printable(run.error)}")
    return lines


def failed_runs_lines(runs: list[RunRecord]) -> list[str]:
    """The restarts of a pipeline's newest runs of one assignment (newest first: those in
    a row on one supervisor, of one generation and code) and each one's crash."""
    same = list(takewhile(lambda r: _same_assignment(r, runs[0]), runs)) if runs else []
    lines = [f"restarts: {max(0, len(same) - 1)}"] if same else []
    for run in same:
        if run.outcome is RunOutcome.FAILED:
            lines.append(
                f"crash of run {run.run} on {run.supervisor} at "
                f"{when(run.ended or run.started)} ({run.exit or 'not started'}): "
                f"{short_error(run.error)}"
            )
    return lines


def _same_assignment(run: RunRecord, newest: RunRecord) -> bool:
    return (run.supervisor, run.generation, run.digest) == (
        newest.supervisor,
        newest.generation,
        newest.digest,
    )
