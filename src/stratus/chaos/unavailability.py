"""(e) Unavailability: the gaps between a group's leaders and between a pipeline's committed
batches, judged against their bounds (``docs/reliability.md``)."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from stratus.chaos.trail_events import Event, Violation, as_began
from stratus.trail import BATCH_COMMITTED, LEADER_LOST, LEADER_WON, PROCESS_KILLED


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
    ``leader_lost``, else to its process's death (a ``process_killed`` line naming it, as of
    its signal: ``as_began``), else to its process's last line; a gap runs from the end of
    every term to the next win. Wall clocks: a gap between hosts is uncertain by
    ``skew_secs``."""
    events = list(events)
    killed = {
        (str(e.get("of_host")), int(e.get("of_pid", 0))): as_began(e)
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
