"""Logging set-up of the daemons: one key=value line per event, on stderr.

A flood of the same error (a client hammering a closed port, an accept loop out of file
descriptors) must not become a flood of log lines: ``RepeatLimit`` lets the first
``REPEAT_MAX`` records of a kind (logger and message template) through in each
``REPEAT_INTERVAL_SECS``, drops the rest, and says how many it dropped when the kind is
next let through. It applies to warnings and above; information lines are not repeated
errors.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

FORMAT = "%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"
REPEAT_MAX = 10  # records of one kind let through per interval
REPEAT_INTERVAL_SECS = 60.0
MAX_KINDS = 1024  # kinds remembered at once; the oldest interval's are forgotten first


class RepeatLimit(logging.Filter):
    """Let ``limit`` records of a kind through per ``interval_secs``; count the others."""

    def __init__(
        self,
        limit: int = REPEAT_MAX,
        interval_secs: float = REPEAT_INTERVAL_SECS,
        *,
        level: int = logging.WARNING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.limit = limit
        self.interval_secs = interval_secs
        self.level = level
        self._clock = clock
        self._lock = threading.Lock()
        # kind -> [interval start, records let through, records dropped]
        self._kinds: dict[tuple[str, str], list[float]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return True
        kind = (record.name, str(record.msg))
        now = self._clock()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is None or now - seen[0] >= self.interval_secs:
                dropped = 0 if seen is None else int(seen[2])
                self._remember(kind, [now, 1, 0])
                if dropped:
                    record.msg = f"{record.msg} suppressed_before={dropped}"
                return True
            if seen[1] < self.limit:
                seen[1] += 1
                return True
            seen[2] += 1
            return False

    def _remember(self, kind: tuple[str, str], state: list[float]) -> None:
        if kind not in self._kinds and len(self._kinds) >= MAX_KINDS:
            oldest = min(self._kinds, key=lambda k: self._kinds[k][0])
            del self._kinds[oldest]
        self._kinds[kind] = state


def configure_daemon_logging(level: int = logging.INFO) -> None:
    """Log ``level`` and above to stderr, repeated warnings limited; kazoo's from warnings up."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(RepeatLimit())
    # Only where nothing logs yet (a daemon's process): a command run inside another program
    # (a test's CliRunner) leaves that program's handlers, and their filters, alone.
    logging.basicConfig(level=level, handlers=[handler])
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
