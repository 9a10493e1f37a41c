"""The trail as the oracle reads it: its lines as events, the moments they name on each host's
clocks, what the clocks prove about their order, and a broken guarantee with the lines that
prove it (``stratus.chaos.oracle`` and its checks).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


def began_at(event: Event) -> Instant:
    """When what a line records began (``began_wall``, ``began_mono``), else the line's own
    time: a leader's write was sent then (ZooKeeper applied it between this and its line), a
    fault applied then (its line is written once it is undone)."""
    return Instant(
        event.at.host,
        float(event.get("began_wall", event.at.wall)),
        float(event.get("began_mono", event.at.mono)),
    )


def as_began(event: Event) -> Event:
    """``event`` as if its line were written when what it records began (``began_at``): a
    kill's line, written once the daemon runs again, as the moment of the signal."""
    began = began_at(event)
    return Event({**event.fields, "wall": began.wall, "mono": began.mono}, event.source)
