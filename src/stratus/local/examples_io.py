"""Feed the example pipelines and read what they wrote: JSON event files in, parquet out.

The streaming example (``stratus/examples/streaming``) counts events by key in 10-second event-time
windows. A window is written once the watermark (the latest event time seen, minus 10 s)
has passed its end, so the last windows stay open until a later event arrives: a feeder
that has finished sends ``flush_event``, an event a day past the last one, and then every
window before it is written and ``window_count_total`` equals the events fed. The flush
event's own window stays open; events fed after a flush are late, and Spark drops them::

    write_events(input_dir, make_events(100))                # ids 0-99, one file, atomically
    write_events(input_dir, make_events(50, start_id=100))   # ids 100-149
    write_events(input_dir, [flush_event(150)])              # closes every window so far
    window_count_total(output_dir)                           # 150 once the windows are out
    read_rows(output_dir)                                    # [{'window': ..., 'key': ...}]

    feeder = Feeder(input_dir)      # a file of 50 events every second, on a thread
    feeder.start()
    fed = feeder.stop()             # stops, writes the flush event; the events fed

Event ``i`` happens at ``EVENT_EPOCH + i seconds``, with key ``KEYS[i % len(KEYS)]``, so a
feeder that keeps counting ids keeps event time moving forward. Output is read as a reader
that honours exactly-once must: only the files the file sink committed in its
``_spark_metadata`` log (a crashed batch's leftovers are ignored). Local paths and file://
URLs only.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs; a dependency of pyspark[connect]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

EVENT_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
EVENT_SPACING = timedelta(seconds=1)
KEYS = ("alpha", "beta", "gamma")
FLUSH_KEY = "__flush__"
FLUSH_AHEAD = timedelta(days=1)  # far past any window end plus the example's watermark delay
SINK_LOG = "_spark_metadata"
_LOG_FILE = re.compile(r"^(\d+)(\.compact)?$")
_file_numbers = itertools.count()
EVENTS_PER_FILE = 50
FEED_EVERY_SECS = 1.0


def event_time(event_id: int) -> datetime:
    """When event ``event_id`` happened."""
    return EVENT_EPOCH + event_id * EVENT_SPACING


def make_events(
    count: int, *, start_id: int = 0, keys: Sequence[str] = KEYS
) -> list[dict[str, Any]]:
    """``count`` events with ids ``start_id``...: ``{"id": int, "key": str, "ts": ISO-8601}``."""
    return [
        {"id": i, "key": keys[i % len(keys)], "ts": event_time(i).isoformat()}
        for i in range(start_id, start_id + count)
    ]


def flush_event(event_id: int) -> dict[str, Any]:
    """An event a day after event ``event_id``: every window before it closes."""
    return {
        "id": event_id,
        "key": FLUSH_KEY,
        "ts": (event_time(event_id) + FLUSH_AHEAD).isoformat(),
    }


def write_events(directory: str | Path, events: Iterable[Mapping[str, Any]]) -> Path:
    """Write ``events`` as one JSON-lines file in ``directory``, atomically: Spark's file
    source skips names starting with '.', so it never sees the file half written."""
    folder = _local(directory)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"events-{os.getpid()}-{datetime.now(UTC):%Y%m%dT%H%M%S%f}-{next(_file_numbers)}.json"
    temporary = folder / f".{name}.tmp"
    temporary.write_text("".join(json.dumps(dict(event)) + "\n" for event in events))
    final = folder / name
    os.replace(temporary, final)
    return final


@dataclass
class Feeder:
    """Writes the streaming example's input: a file of events every second, on a thread."""

    directory: Path
    fed: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="feeder", daemon=True)
        self._thread.start()

    def stop(self) -> int:
        """Stop feeding, close the open windows; the number of events fed."""
        self.halt()
        write_events(self.directory, [flush_event(self.fed)])
        return self.fed

    def halt(self) -> None:
        """Stop feeding and wait until the thread writes no more (before its directory goes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            write_events(self.directory, make_events(EVENTS_PER_FILE, start_id=self.fed))
            self.fed += EVENTS_PER_FILE
            self._stop.wait(FEED_EVERY_SECS)


def committed_files(output: str | Path) -> list[Path]:
    """The parquet files of ``output``: those a streaming file sink committed in its log,
    or, without a log (a batch job's output), every data file."""
    folder = _local(output)
    log = folder / SINK_LOG
    if not log.is_dir():
        return sorted(p for p in folder.rglob("*.parquet") if not _hidden(p, folder))
    files: dict[str, Path] = {}
    for entry in _log_entries(log):
        path = Path(unquote(urlparse(entry["path"]).path))
        if entry.get("action", "add") == "delete":
            files.pop(str(path), None)
        else:
            files[str(path)] = path
    return sorted(files.values())


def read_rows(output: str | Path) -> list[dict[str, Any]]:
    """Every row of the committed files of ``output``."""
    tables = [pq.read_table(path) for path in committed_files(output)]
    if not tables:
        return []
    rows: list[dict[str, Any]] = pa.concat_tables(tables, promote_options="default").to_pylist()
    return rows


def window_count_total(output: str | Path) -> int:
    """The sum of the ``count`` column of the streaming example's output, flushes left out."""
    return sum(row["count"] for row in read_rows(output) if row["key"] != FLUSH_KEY)


def _log_entries(log: Path) -> list[dict[str, Any]]:
    """The entries of a file sink log: the latest compaction, then the batches after it."""
    batches: dict[int, Path] = {}
    latest_compact = -1
    for path in log.iterdir():
        match = _LOG_FILE.match(path.name)
        if match:
            batch = int(match.group(1))
            batches[batch] = path
            if match.group(2):
                latest_compact = max(latest_compact, batch)
    entries: list[dict[str, Any]] = []
    for batch in sorted(b for b in batches if b >= latest_compact):
        lines = batches[batch].read_text().splitlines()[1:]  # the first line is the version
        entries.extend(json.loads(line) for line in lines if line.strip())
    return entries


def _hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(("_", ".")) for part in path.relative_to(root).parts)


def _local(location: str | Path) -> Path:
    text = str(location)
    parsed = urlparse(text)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme and len(parsed.scheme) > 1:  # one letter: a Windows drive
        raise ValueError(f"{text}: only local paths and file:// URLs can be read here")
    return Path(text)
