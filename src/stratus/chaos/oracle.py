"""The reliability oracle: judges a run from the trail its processes recorded.

Pure logic over the lines of ``history.file`` (``stratus.trail``), from one file or from
one per host, read as events (``stratus.chaos.trail_events``). Every check returns its
violations, each with the trail's lines that prove it; an empty list is a pass. This module
holds checks (a) to (d); ``stratus.chaos.unavailability`` holds (e) and
``stratus.chaos.promotions`` (f). ``docs/reliability.md`` gives the precise definitions::

    events = load_events([Path("host-a.jsonl"), Path("host-b.jsonl")])
    clocks = Clocks(skew_secs=0.5)                     # hosts' wall clocks within 0.5 s
    check_single_worker(events, clocks)                # (a) never two workers at once
    check_single_run(events, clocks)                   # (a) nor one outliving its lease
    check_leader_writes(events, clocks)                # (b) never a deposed leader's write
    check_submissions(events, final_pipelines={"p1"})  # (c) every acknowledged submit
    check_exactly_once(streaming_expected(fed), streaming_counted(rows))  # (d)
    leader_unavailability(events, bound_secs=5.0)      # (e) gaps, percentiles, bound
    check_promotions_explained(events, clocks)         # (f) never a promotion without a failure

Clocks: lines of one host are ordered by their ``mono`` time (Linux's monotonic clock is
one clock for every process of a machine), exactly; lines of different hosts by their
``wall`` time, and only when they are further apart than ``skew_secs``, the bound of the
hosts' clock difference. A check flags only what the clocks prove: it may miss a violation
that happened within the clocks' uncertainty, it never flags one that did not happen.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from stratus.chaos.trail_events import Clocks, Event, Instant, Violation, began_at
from stratus.local.examples_io import EVENT_EPOCH, EVENT_SPACING, FLUSH_KEY, KEYS
from stratus.trail import (
    BATCH_COMMITTED,
    LEADER_WON,
    LEADER_WRITE,
    SUBMIT_ACKNOWLEDGED,
    WORKER_STARTED,
    WORKER_STOPPED,
)

STREAMING_WINDOW_SECS = 10  # the streaming example's event-time windows

Cell = TypeVar("Cell", bound=Hashable)  # an output cell of a pipeline: what one row counts
StreamingCell = tuple[int, str]  # the streaming example's: (window start, UTC seconds; key)


# ---------------------------------------------------------------------- (a) one worker at once


@dataclass
class WorkerRun:
    """One worker process's run of one pipeline: from its start to its stop, else to the
    last line its process wrote (it was killed; it processed nothing after that line)."""

    pipeline: str
    start: Event
    end: Event
    batches: list[Event] = field(default_factory=list)

    def holds(self, event: Event, clocks: Clocks) -> bool:
        """``event`` (of another process) surely happened while this run was going."""
        return clocks.before(self.start.at, event.at) and clocks.before(event.at, self.end.at)


def worker_runs(events: Iterable[Event]) -> list[WorkerRun]:
    """Every worker run of the trail, each with its batches."""
    by_process: dict[tuple[str, int], list[Event]] = defaultdict(list)
    for event in events:
        by_process[event.process].append(event)
    runs: list[WorkerRun] = []
    for lines in by_process.values():
        lines.sort(key=lambda e: e.at.mono)
        open_runs: dict[str, WorkerRun] = {}
        for event in lines:
            pipeline = str(event.get("pipeline", ""))
            if event.name == WORKER_STARTED:
                open_runs[pipeline] = WorkerRun(pipeline, event, event)
                runs.append(open_runs[pipeline])
            elif event.name == BATCH_COMMITTED:
                run = open_runs.get(pipeline)
                if run is None:  # its start line is missing: the run starts at its first batch
                    run = open_runs[pipeline] = WorkerRun(pipeline, event, event)
                    runs.append(run)
                run.batches.append(event)
                run.end = event
            elif event.name == WORKER_STOPPED and pipeline in open_runs:
                open_runs.pop(pipeline).end = event
        for run in open_runs.values():
            run.end = lines[-1]
    return runs


def check_single_worker(events: Iterable[Event], clocks: Clocks) -> list[Violation]:
    """(a) Never two workers of one pipeline processing at once: two runs of one pipeline on
    different processes must not each have a batch committed surely inside the other's run."""
    by_pipeline: dict[str, list[WorkerRun]] = defaultdict(list)
    for run in worker_runs(events):
        by_pipeline[run.pipeline].append(run)
    violations = []
    for pipeline, runs in sorted(by_pipeline.items()):
        for i, first in enumerate(runs):
            for second in runs[i + 1 :]:
                if first.start.process == second.start.process:
                    continue
                mine = next((b for b in first.batches if second.holds(b, clocks)), None)
                theirs = next((b for b in second.batches if first.holds(b, clocks)), None)
                if mine is not None and theirs is not None:
                    violations.append(
                        Violation(
                            "single_worker",
                            f"pipeline {pipeline!r} committed batches on two workers at once "
                            f"({_who(first.start)} and {_who(second.start)})",
                            (first.start, mine, first.end, second.start, theirs, second.end),
                        )
                    )
    return violations


def check_single_run(events: Iterable[Event], clocks: Clocks) -> list[Violation]:
    """(a) Never a worker of a pipeline running past the start of the next: a run of one
    pipeline that surely started while another process's run of it was going, that run
    recording a line (a batch, its stop) surely after that start. Stricter than
    ``check_single_worker``: the old worker need not commit, nor the new one; a worker that
    outlived its lease is caught even when Structured Streaming's checkpoint kept the two
    from both committing."""
    by_pipeline: dict[str, list[WorkerRun]] = defaultdict(list)
    for run in worker_runs(events):
        by_pipeline[run.pipeline].append(run)
    violations = []
    for pipeline, runs in sorted(by_pipeline.items()):
        for old, new in itertools.permutations(runs, 2):
            if old.start.process == new.start.process or not old.holds(new.start, clocks):
                continue
            violations.append(
                Violation(
                    "single_run",
                    f"pipeline {pipeline!r} ran on two workers at once: {_who(new.start)} "
                    f"started while {_who(old.start)} still ran",
                    (old.start, new.start, old.end),
                )
            )
    return violations


def _who(event: Event) -> str:
    host, pid = event.process
    return f"pid {pid} on {host}"


# ---------------------------------------------------------------------- (b) fenced leader writes


class _Earliest:
    """The earliest line per (group, host, epoch), by each clock: enough to decide whether
    any line of a higher epoch surely came before a given moment."""

    def __init__(self, events: Iterable[Event]) -> None:
        self._by_mono: dict[tuple[str, str], dict[int, Event]] = defaultdict(dict)
        self._by_wall: dict[tuple[str, str], dict[int, Event]] = defaultdict(dict)
        for event in events:
            key, epoch = (str(event.get("group", "")), event.at.host), int(event.get("epoch", 0))
            known = self._by_mono[key].get(epoch)
            if known is None or event.at.mono < known.at.mono:
                self._by_mono[key][epoch] = event
            known = self._by_wall[key].get(epoch)
            if known is None or event.at.wall < known.at.wall:
                self._by_wall[key][epoch] = event

    def higher_before(
        self, group: str, epoch: int, moment: Instant, clocks: Clocks
    ) -> Event | None:
        """A line of ``group`` at an epoch above ``epoch`` that surely came before ``moment``."""
        for (line_group, host), epochs in self._by_mono.items():
            if line_group != group:
                continue
            table = epochs if host == moment.host else self._by_wall[(line_group, host)]
            for line_epoch, event in table.items():
                if line_epoch > epoch and clocks.before(event.at, moment):
                    return event
        return None


def check_leader_writes(events: Iterable[Event], clocks: Clocks) -> list[Violation]:
    """(b) Never a write accepted from a deposed leader. Each ``leader_write`` at epoch e:

    - its process recorded winning e (``leader_won``) before it;
    - no ``leader_won`` of a higher epoch surely came before the write was sent (the epoch
      had moved on, yet ZooKeeper applied it);
    - no ``leader_write`` of a higher epoch surely came before it was sent (epochs of
      applied writes never go back)."""
    events = list(events)
    won = [e for e in events if e.name == LEADER_WON]
    writes = [e for e in events if e.name == LEADER_WRITE]
    terms_won: dict[tuple[tuple[str, int], str, int], list[Event]] = defaultdict(list)
    for event in won:
        terms_won[(event.process, str(event.get("group")), int(event.get("epoch", 0)))].append(
            event
        )
    earliest_won, earliest_write = _Earliest(won), _Earliest(writes)
    violations = []
    for write in writes:
        group, epoch, began = (
            str(write.get("group")),
            int(write.get("epoch", 0)),
            began_at(write),
        )
        own = terms_won.get((write.process, group, epoch), [])
        if not any(term.at.mono <= began.mono for term in own):
            violations.append(
                Violation(
                    "leader_writes",
                    f"{_who(write)} wrote at epoch {epoch} of group {group!r} without having "
                    "won that term",
                    (write,),
                )
            )
        newer = earliest_won.higher_before(group, epoch, began, clocks)
        if newer is not None:
            violations.append(
                Violation(
                    "leader_writes",
                    f"a write at epoch {epoch} of group {group!r} was applied after epoch "
                    f"{newer.get('epoch')} was won: a deposed leader's write was accepted",
                    (newer, write),
                )
            )
        later = earliest_write.higher_before(group, epoch, began, clocks)
        if later is not None:
            violations.append(
                Violation(
                    "leader_writes",
                    f"the epoch of applied writes of group {group!r} went back from "
                    f"{later.get('epoch')} to {epoch}",
                    (later, write),
                )
            )
    return violations


# ---------------------------------------------------------------------- (c) submissions


def check_submissions(
    events: Iterable[Event], final_pipelines: Collection[str], killed: Collection[str] = ()
) -> list[Violation]:
    """(c) Every acknowledged submission is present at the end: each ``submit_acknowledged``
    pipeline is in ``final_pipelines``, unless the driver killed it on purpose (``killed``)."""
    return [
        Violation(
            "submissions",
            f"pipeline {event.get('pipeline')!r} was acknowledged (request "
            f"{event.get('request_id')}) but is not in the cluster at the end",
            (event,),
        )
        for event in events
        if event.name == SUBMIT_ACKNOWLEDGED
        and event.get("pipeline") not in final_pipelines
        and event.get("pipeline") not in killed
    ]


# ---------------------------------------------------------------------- (d) exactly once


def check_exactly_once(
    expected: Mapping[Cell, int], counted: Iterable[tuple[Cell, int]]
) -> list[Violation]:
    """(d) Every input counted once: each output cell (a window and key) is written once,
    with the number of inputs that fall into it; a cell missing, written twice, short or
    over is a violation."""
    violations = []
    written: Counter[Cell] = Counter()
    totals: Counter[Cell] = Counter()
    for cell, count in counted:
        written[cell] += 1
        totals[cell] += count
    for cell, times in written.items():
        if times > 1:
            violations.append(Violation("exactly_once", f"{cell!r} was written {times} times"))
    for cell in sorted(set(expected) | set(totals), key=repr):
        want, got = expected.get(cell, 0), totals.get(cell, 0)
        if want != got:
            violations.append(
                Violation(
                    "exactly_once",
                    f"{cell!r} counts {got} inputs, {want} were fed: "
                    + (f"{want - got} lost" if got < want else f"{got - want} counted twice"),
                )
            )
    return violations


def streaming_expected(
    fed_ids: Iterable[int], window_secs: int = STREAMING_WINDOW_SECS
) -> Counter[StreamingCell]:
    """The streaming example's output cells for the event ids fed (``examples_io``): event
    i falls in the window of ``event_time(i)`` with key ``KEYS[i % 3]``."""
    start = EVENT_EPOCH.timestamp()
    step = EVENT_SPACING.total_seconds()
    cells: Counter[StreamingCell] = Counter()
    for event_id in fed_ids:
        seconds = start + event_id * step
        cells[(int(seconds // window_secs * window_secs), KEYS[event_id % len(KEYS)])] += 1
    return cells


def streaming_counted(rows: Iterable[Mapping[str, Any]]) -> list[tuple[StreamingCell, int]]:
    """The cells of the streaming example's output rows (``read_rows``), flushes left out."""
    return [
        ((int(_utc_seconds(row["window"]["start"])), str(row["key"])), int(row["count"]))
        for row in rows
        if row["key"] != FLUSH_KEY
    ]


def _utc_seconds(moment: datetime) -> float:
    """A window's start as seconds since the Unix epoch; a naive time is UTC (Spark's)."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
