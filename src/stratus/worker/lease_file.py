"""The supervisor's lease, handed to its workers through a file, so that they fence themselves.

A supervisor stops its workers when its lease lapses (``stratus.supervisor.heartbeat_lease``),
but a supervisor that does not run (SIGSTOP, a paused VM, a stalled machine) cannot stop anything,
and the leader moves its pipelines all the same once it has been silent for the supervisor
timeout. So the supervisor writes the moment its lease ends to one file, each time that moment
changes, and every worker watches it: once that moment has passed without a newer one, the
worker stops itself as if told to (its stop grace, then SIGKILL of its process group), on the
same timeline as the supervisor's own fence::

    write_lease(path, until=time.monotonic() + 6.0)   # the supervisor, at each renewal
    watch = LeaseWatch(path, on_lapsed=stop.request)  # the worker
    watch.start()

The moment is on ``time.monotonic()``, one clock for every process of a Linux machine, and a
worker always runs on its supervisor's machine. A file that is missing or unreadable is a
lapsed lease: a worker never runs on a lease it cannot see.

A worker that was not scheduled across the end it last saw (the whole machine stalled, a VM
paused) may look again only after its supervisor has gained the lease again, and see a
lease that holds. So, each time the lease is gained, the writer first records when beside it
(``<lease>.since``, ``write_lease(..., since=)``): a lease gained after the end the worker
last saw had lapsed in between, and the worker stops as at a lapse. A lease renewed without
a break keeps its ``since``; a writer of an earlier release writes none, and the worker then
judges by the end alone, as before.

A worker of a pipeline with a standby worker (a hot worker) watches a second file, the
**beat lease** its supervisor's beat agent writes (``lease.beat``: the fast beats to the
pacemakers, ``stratus.supervisor.beat_agent``), far more often and with a far shorter grace:
once it has ended, the worker is asked to stop and its process group is SIGKILLed
``stop_secs`` later, whether or not the stop finished (``watch_beat_lease``)::

    watch_beat_lease(path, poll_secs=0.02, stop_secs=0.1, stop=stop.request, kill=die)
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

from stratus.files import write_atomically

log = logging.getLogger(__name__)

LEASE_FILE = "lease"
BEAT_LEASE_FILE = "lease.beat"  # the beat agent's, beside the supervisor's
POLL_SECS = 0.2  # how often a worker looks: the supervisor's own loop ticks as often
MAX_BYTES = 64
# Every worker reads it, whichever user it runs as; it holds a time and nothing else.
LEASE_FILE_MODE = 0o644


def write_lease(path: Path, until: float, *, since: float | None = None) -> None:
    """Record that the lease ends at ``until`` (``time.monotonic()``; 0: it has lapsed); with
    ``since``, first that the lease ending then was gained at ``since`` (a writer passes it
    when it changes: at a gain)."""
    if since is not None:
        write_atomically(since_path(path), f"{since!r}\n".encode(), mode=LEASE_FILE_MODE)
    write_atomically(path, f"{until!r}\n".encode(), mode=LEASE_FILE_MODE)


def since_path(path: Path) -> Path:
    """Where the writer of the lease in ``path`` records when it gained it."""
    return path.with_name(path.name + ".since")


def read_lease(path: Path) -> float | None:
    """When the lease in ``path`` ends, or None if the file is missing or not a lease."""
    try:
        with path.open("rb") as file:
            text = file.read(MAX_BYTES + 1)
        if len(text) > MAX_BYTES:
            return None
        until = float(text.decode("ascii"))
    except (OSError, ValueError):
        return None
    return until if math.isfinite(until) else None


class LeaseWatch:
    """A thread that calls ``on_lapsed(reason)`` once, when the lease in ``path`` has ended
    (a file missing or unreadable has at once). With ``grace_secs`` (a standby worker's, which
    ends only as an orphan), once it has ended and the file has not been written for that
    long: a supervisor writes 0 when its lease lapses, so the grace runs from the later of the
    lease's end and the file's last write (its modification time, on the wall clock), and a
    renewal starts it again."""

    def __init__(
        self,
        path: Path,
        on_lapsed: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        poll_secs: float = POLL_SECS,
        what: str = "the supervisor's lease",
        grace_secs: float = 0.0,
    ) -> None:
        if not (math.isfinite(grace_secs) and grace_secs >= 0):
            raise ValueError(f"a lease's grace must be seconds, 0 or more, not {grace_secs!r}")
        self._path = path
        self._what = what
        self._grace = grace_secs
        self._on_lapsed = on_lapsed
        self._clock = clock
        self._poll_secs = poll_secs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-watch", daemon=True)
        self._seen: float | None = None  # the lease's end at the last look that held

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def lapsed(self) -> str | None:
        """Why the lease has ended now, or None while it holds."""
        until = read_lease(self._path)
        if until is None:
            return f"{self._what} file {self._path} is missing or unreadable"
        now = self._clock()
        late = now - until
        if late < 0:
            return self._gap(now, until)
        if self._grace > 0:
            ended_for = now - max(until, self._written(now))
            if ended_for < self._grace:
                return None
            return f"{self._what} ended and was not written for {ended_for:.1f} s"
        return f"{self._what} ended {late:.1f} s ago and was not renewed"

    def _gap(self, now: float, until: float) -> str | None:
        """Why a lease that holds now had lapsed since the last look (gained again after the
        end seen then, which passed before this look), or None. A watch with a grace
        outlasts such a gap."""
        seen, self._seen = self._seen, until
        if seen is None or now < seen or self._grace > 0:
            return None
        since = read_lease(since_path(self._path))
        if since is None or since <= seen:
            return None  # unbroken since before the end seen (or a writer that records none)
        return (
            f"{self._what} ended {now - seen:.1f} s ago, while this worker was not looking, "
            f"and was gained again {since - seen:.1f} s after its end"
        )

    def _written(self, now: float) -> float:
        """When the file was last written, on the watch's clock (now if that is unknown)."""
        try:
            age = time.time() - self._path.stat().st_mtime
        except OSError:
            return now
        return now - max(0.0, age)

    def _run(self) -> None:
        while not self._stop.wait(self._poll_secs):
            reason = self.lapsed()
            if reason is not None:
                log.warning("event=worker_fenced reason=%r", reason)
                self._on_lapsed(reason)
                return


def watch_beat_lease(
    path: Path,
    *,
    poll_secs: float,
    stop_secs: float,
    stop: Callable[[str], None],
    kill: Callable[[], None],
) -> LeaseWatch:
    """A hot worker's watch of its beat lease, started: once it has ended, ``stop(reason)``
    at once and ``kill()`` (SIGKILL of the worker's process group) ``stop_secs`` later, on a
    timer of its own that nothing the stop does can hold up."""

    def lapsed(reason: str) -> None:
        timer = threading.Timer(stop_secs, kill)
        timer.daemon = True
        timer.start()  # first: the stop may block
        stop(reason)

    watch = LeaseWatch(path, on_lapsed=lapsed, poll_secs=poll_secs, what="the beat lease")
    watch.start()
    return watch
