"""The reliability oracle: judges a run from the trail its processes recorded.

Pure logic over the lines of ``history.file`` (``stratus.trail``), from one file or from
one per host. Every check returns its violations, each with the trail's lines that prove
it; an empty list is a pass. ``docs/reliability.md`` gives the precise definitions::

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
import json
import math
from collections import Counter, defaultdict
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from stratus.local.examples_io import EVENT_EPOCH, EVENT_SPACING, FLUSH_KEY, KEYS
from stratus.trail import (
    BATCH_COMMITTED,
    HOST_CUT,
    HOST_STRESSED,
    LEADER_LOST,
    LEADER_WON,
    LEADER_WRITE,
    PROCESS_KILLED,
    PROCESS_PAUSED,
    SUBMIT_ACKNOWLEDGED,
    WORKER_PROMOTED,
    WORKER_STARTED,
    WORKER_STOPPED,
)

STREAMING_WINDOW_SECS = 10  # the streaming example's event-time windows

Cell = TypeVar("Cell", bound=Hashable)  # an output cell of a pipeline: what one row counts
StreamingCell = tuple[int, str]  # the streaming example's: (window start, UTC seconds; key)


# ---------------------------------------------------------------------- events and clocks


@dataclass(frozen=True)
class Instant:
    """A moment as one host saw it: its wall and monotonic clocks."""

    host: str
    wall: float
    mono: float


@dataclass(frozen=True)
class Event:
    """One line of a trail, and where it was read (``file:line``)."""

    fields: Mapping[str, Any]
    source: str = ""

    @property
    def name(self) -> str:
        return str(self.fields.get("event", ""))

    @property
    def process(self) -> tuple[str, int]:
        return str(self.fields.get("host", "")), int(self.fields.get("pid", 0))

    @property
    def at(self) -> Instant:
        return Instant(
            str(self.fields.get("host", "")),
            float(self.fields.get("wall", 0.0)),
            float(self.fields.get("mono", 0.0)),
        )

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def __str__(self) -> str:
        return f"{self.source}: {json.dumps(dict(self.fields), sort_keys=True)}"


def load_events(paths: Sequence[Path]) -> list[Event]:
    """Every event of the trail's files; a torn line (a machine's crash) is skipped."""
    events: list[Event] = []
    for path in paths:
        with path.open("rb") as lines:
            for number, raw in enumerate(lines, 1):
                try:
                    fields = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(fields, dict):
                    events.append(Event(fields, f"{path}:{number}"))
    return events


def events_of(records: Iterable[Mapping[str, Any]], source: str = "history") -> list[Event]:
    """Events from records already parsed (a test's synthetic trail)."""
    return [Event(record, f"{source}:{n}") for n, record in enumerate(records, 1)]


@dataclass(frozen=True)
class Clocks:
    """What the clocks prove: ``skew_secs`` bounds the difference of two hosts' wall clocks."""

    skew_secs: float = 0.0

    def before(self, a: Instant, b: Instant) -> bool:
        """``a`` surely happened before ``b``."""
        if a.host == b.host:
            return a.mono < b.mono
        return a.wall + self.skew_secs < b.wall


@dataclass(frozen=True)
class Violation:
    """A broken guarantee: which check, what happened, and the lines that prove it."""

    check: str
    message: str
    lines: tuple[Event, ...] = ()

    def __str__(self) -> str:
        return "\n  ".join([f"{self.check}: {self.message}", *map(str, self.lines)])


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


def began_at(event: Event) -> Instant:
    """When what a line records began (``began_wall``, ``began_mono``), else the line's own
    time: a leader's write was sent then (ZooKeeper applied it between this and its line), a
    fault applied then (its line is written once it is undone)."""
    return Instant(
        event.at.host,
        float(event.get("began_wall", event.at.wall)),
        float(event.get("began_mono", event.at.mono)),
    )


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


# ---------------------------------------------------------------------- (e) unavailability


@dataclass(frozen=True)
class Gap:
    """A time without service: from the line that ended it to the line that restored it."""

    start: Event
    end: Event
    moved: bool = False  # a pipeline's gap across a change of worker

    @property
    def secs(self) -> float:
        return max(0.0, self.end.at.wall - self.start.at.wall)


@dataclass(frozen=True)
class Unavailability:
    """The gaps of one subject (the leader, a pipeline) against their bound."""

    subject: str
    bound_secs: float
    gaps: tuple[Gap, ...]

    def percentile(self, q: float) -> float:
        """The nearest-rank ``q``-th percentile of the gaps' lengths (0 without gaps)."""
        lengths = sorted(gap.secs for gap in self.gaps)
        if not lengths:
            return 0.0
        return lengths[max(0, math.ceil(q / 100 * len(lengths)) - 1)]

    @property
    def violations(self) -> list[Violation]:
        return [
            Violation(
                "unavailability",
                f"{self.subject} was unavailable for {gap.secs:.3f} s, over its bound of "
                f"{self.bound_secs:g} s",
                (gap.start, gap.end),
            )
            for gap in self.gaps
            if gap.secs > self.bound_secs
        ]

    def summary(self) -> str:
        return (
            f"{self.subject}: {len(self.gaps)} gaps, p50 {self.percentile(50):.3f} s, "
            f"p90 {self.percentile(90):.3f} s, p99 {self.percentile(99):.3f} s, "
            f"max {self.percentile(100):.3f} s; bound {self.bound_secs:g} s, "
            f"{len(self.violations)} over"
        )


def leader_unavailability(
    events: Iterable[Event], bound_secs: float, group: str = "nimbus"
) -> Unavailability:
    """(e) The gaps between leaders of ``group``: a term lasts from its ``leader_won`` to its
    ``leader_lost``, else to its process's death (a ``process_killed`` line naming it), else
    to its process's last line; a gap runs from the end of every term to the next win.
    Wall clocks: a gap between hosts is uncertain by ``skew_secs``."""
    events = list(events)
    killed = {
        (str(e.get("of_host")), int(e.get("of_pid", 0))): e
        for e in events
        if e.name == PROCESS_KILLED
    }
    last_line: dict[tuple[str, int], Event] = {}
    for event in events:
        known = last_line.get(event.process)
        if known is None or event.at.mono > known.at.mono:
            last_line[event.process] = event
    terms: list[tuple[Event, Event]] = []
    holding: dict[tuple[str, int], Event] = {}
    for event in sorted(events, key=lambda e: e.at.wall):
        if event.get("group") != group:
            continue
        if event.name == LEADER_WON and event.process not in holding:
            holding[event.process] = event
        elif event.name == LEADER_LOST and event.process in holding:
            terms.append((holding.pop(event.process), event))
    for process, won in holding.items():
        terms.append((won, killed.get(process) or last_line[process]))
    return Unavailability(f"the leader of {group!r}", bound_secs, tuple(_gaps(terms)))


def _gaps(terms: list[tuple[Event, Event]]) -> list[Gap]:
    """The gaps between the union of the intervals ``terms``, by wall time."""
    gaps = []
    terms.sort(key=lambda term: term[0].at.wall)
    covered_to: Event | None = None
    for start, end in terms:
        if covered_to is not None and start.at.wall > covered_to.at.wall:
            gaps.append(Gap(covered_to, start))
        if covered_to is None or end.at.wall > covered_to.at.wall:
            covered_to = end
    return gaps


def pipeline_unavailability(events: Iterable[Event], bound_secs: float) -> list[Unavailability]:
    """(e) Each pipeline's gaps between consecutive committed batches, by wall time, across
    the moves of its worker too (``Gap.moved``). A pipeline fed continuously commits a batch
    every trigger; a longer gap is time it did not process."""
    batches: dict[str, list[Event]] = defaultdict(list)
    for event in events:
        if event.name == BATCH_COMMITTED:
            batches[str(event.get("pipeline"))].append(event)
    reports = []
    for pipeline, lines in sorted(batches.items()):
        lines.sort(key=lambda e: e.at.wall)
        gaps = tuple(
            Gap(before, after, moved=before.process != after.process)
            for before, after in itertools.pairwise(lines)
        )
        reports.append(Unavailability(f"pipeline {pipeline!r}", bound_secs, gaps))
    return reports


# ---------------------------------------------------------------------- (f) promotions explained

PLANNED_STOP = "stopped"  # a promotion's ``how`` when its supervisor was stopped on purpose
FAULT_EVENTS = (PROCESS_KILLED, PROCESS_PAUSED, HOST_CUT, HOST_STRESSED)
SILENCING_TARGETS = frozenset({"supervisor", "host"})  # the victims whose supervisor goes silent
# The longest the leader may hear a supervisor's last beat after it was sent (a beat's interval,
# a pacemaker's answer, a read's poll, with room to spare): a fault that ended this much before
# the silence began may still be its cause.
HEARING_LAG_SECS = 1.0


@dataclass(frozen=True)
class Outage:
    """A fault of the trail that concerns a supervisor (``line``): it began at ``began``, ended
    by its line, and kept the supervisor silent for ``secs`` (a kill: until its process is
    started again, unbounded here; a fault that does not silence it, such as a stress or a
    pause of its worker: zero)."""

    supervisor: str
    began: Instant
    line: Event
    secs: float


def outages(events: Iterable[Event]) -> list[Outage]:
    """The faults the trail records, with the supervisor each concerns: a kill or a pause of
    its process or its host, a cut of its host (each silences it: ``Outage.secs``), and what
    leaves it beating (a stress of its host, a fault of another process of its host)."""
    return [
        Outage(str(event.get("supervisor")), began_at(event), event, _silenced_secs(event))
        for event in events
        if event.name in FAULT_EVENTS and event.get("supervisor")
    ]


def _silenced_secs(fault: Event) -> float:
    """How long the fault of line ``fault`` kept its supervisor silent."""
    if fault.name == HOST_CUT:
        return float(fault.get("secs", 0.0))
    if fault.name == HOST_STRESSED or fault.get("target") not in SILENCING_TARGETS:
        return 0.0
    if fault.name == PROCESS_KILLED:
        return math.inf
    return float(fault.get("secs", 0.0))


def check_promotions_explained(
    events: Iterable[Event], clocks: Clocks, lag_secs: float = HEARING_LAG_SECS
) -> list[Violation]:
    """(f) Never a promotion without a failure: every ``worker_promoted`` that took a pipeline
    off a supervisor follows a kill, a cut or a pause of that supervisor (its process or its
    host) that kept it silent for the promotion's ``floor_secs`` at least, or was a planned
    stop (``how: stopped``: a drain, an update). The fault began before the promotion and
    was still going when the supervisor fell silent (``silent_secs`` before the promotion,
    ``lag_secs`` earlier still: see ``HEARING_LAG_SECS``), as far as the clocks tell. Any
    other promotion is a false suspicion: the failure detector acted on a silence that no
    failure made (a loaded host, a pause shorter than the floor). Its violation holds the
    promotion and the faults of that supervisor near it. A run without promotions passes."""
    events = list(events)
    by_supervisor: dict[str, list[Outage]] = defaultdict(list)
    for outage in outages(events):
        by_supervisor[outage.supervisor].append(outage)
    violations = []
    for promotion in events:
        if promotion.name != WORKER_PROMOTED or promotion.get("how") == PLANNED_STOP:
            continue
        old = str(promotion.get("from_supervisor", ""))
        floor = float(promotion.get("floor_secs", 0.0))
        silent = float(promotion.get("silent_secs", 0.0))
        fell_silent = _earlier(promotion.at, silent + lag_secs)
        near = [
            outage
            for outage in by_supervisor.get(old, [])
            if not clocks.before(promotion.at, outage.began)
            and not clocks.before(outage.line.at, fell_silent)
        ]
        if any(outage.secs >= floor for outage in near):
            continue
        violations.append(
            Violation(
                "promotions_explained",
                f"pipeline {promotion.get('pipeline')!r} was promoted from supervisor {old!r} "
                f"to {promotion.get('to_supervisor')!r} at {_utc(promotion.at.wall)} (how: "
                f"{promotion.get('how')}, silent {silent:.3f} s) with no kill, cut or pause "
                f"of {old!r} lasting its floor of {floor:g} s: an unexplained promotion",
                (promotion, *(outage.line for outage in near)),
            )
        )
    return violations


def _earlier(moment: Instant, secs: float) -> Instant:
    """``moment`` less ``secs`` on both of its host's clocks."""
    return Instant(moment.host, moment.wall - secs, moment.mono - secs)


def _utc(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds")
