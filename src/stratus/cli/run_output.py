"""How a pipeline's runs print: the table of ``stratus runs``, the last run in ``stratus
status``, and the choice of runs ``stratus logs --since`` reads.

``run_columns`` are the columns of ``cli.output.render``, so every output format shows them::

    render(out, output, client.runs("etl").runs, run_columns(time.time()), title="runs of etl")
    last_run_lines(runs[0])     # ["last run 7 on s1: FINISHED, exit code 0, ...", ...]
    parse_since("10m")          # 600.0; click.BadParameter for "ten minutes"
"""

from __future__ import annotations

import re
from itertools import takewhile

import click

from stratus.api.echo import printable
from stratus.api.records import RunOutcome, RunRecord
from stratus.cli.output import DIGEST_PREFIX, Column, when

ERROR_SHOWN_CHARS = 80  # of a run's error in the table; stratus runs --json has it whole
_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT_SECS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


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


def run_columns(now: float) -> list[Column[RunRecord]]:
    """The columns of ``stratus runs``, newest run first: where, when, how long, how it
    ended; ``-o wide`` adds the process, the code and where its log is."""
    return [
        Column("run", lambda run: str(run.run), justify="right"),
        Column("supervisor", lambda run: run.supervisor),
        Column("started", lambda run: when(run.started)),
        Column("duration", lambda run: duration(run, now), justify="right"),
        Column("outcome", outcome_text),
        Column("exit", lambda run: run.exit or "-"),
        Column("batches", lambda run: _count(run.batches), justify="right"),
        Column("rows", lambda run: _count(run.rows), justify="right"),
        Column("error", lambda run: short_error(run.error), overflow="fold"),
        Column("pid", lambda run: _count(run.pid), wide=True, justify="right"),
        Column("generation", lambda run: str(run.generation), wide=True, justify="right"),
        Column("digest", lambda run: run.digest[:DIGEST_PREFIX], wide=True),
        Column("spark ui", lambda run: run.spark_ui or "-", wide=True),
        Column("log", lambda run: run.log_dir or "-", wide=True, overflow="fold"),
    ]


def outcome_text(run: RunRecord) -> str:
    """How it ended (RUNNING while it runs), ``(inferred)`` where its end was inferred."""
    outcome = run.outcome.value if run.outcome is not None else "RUNNING"
    return outcome + (" (inferred)" if run.inferred else "")


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def last_run_lines(run: RunRecord, now: float) -> list[str]:
    """The last run of a pipeline that runs nowhere now: when, how long, how it ended."""
    ended = "-" if run.ended is None else when(run.ended)
    lines = [
        f"last run {run.run} on {run.supervisor}: {outcome_text(run)}"
        f", started {when(run.started)}, ended {ended}, ran {duration(run, now)}, "
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
