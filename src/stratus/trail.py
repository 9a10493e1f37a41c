"""The trail: one JSON line per event that a reliability oracle needs, appended to a file.

Daemons, workers and a test's driver record what they did (a worker started, committed a
batch, stopped; a leader won, wrote, lost; a client's submit was acknowledged) to the file
named by ``history.file``; ``stratus.chaos.oracle`` reads the lines of every process back
and judges the run. With no file set, ``TrailRecorder.disabled()`` records nothing, at the cost
of one attribute test per event::

    trail = TrailRecorder.open(Path("/tmp/h.jsonl"), Actor("worker", "p1"))
    trail.record("batch_committed", pipeline="p1", epoch=4, batch_id=7, rows=120)
    trail.close()

Each line holds ``wall`` (``time.time()``) and ``mono`` (``time.monotonic()``: on Linux one
clock for every process of a machine, so lines of one host compare exactly), ``host``,
``pid``, the process's ``kind`` and ``id`` (a nimbus's address, a worker's pipeline, a
client's name), ``event`` and the event's own fields. ``stratus.chaos.trail_events.load_events``
reads the files back.

Several processes of one host may share one file: it is opened ``O_APPEND`` and every line
is one ``write`` of at most ``MAX_LINE_BYTES`` (a longer event is cut down to its identity
and ``truncated: true``), which the kernel appends whole, never interleaved with another
process's line. A line is in the kernel once ``record`` returns, so a process killed with
SIGKILL right after it loses nothing it reported as done (a machine's crash may: no fsync).
A failed write is logged once and the recorder goes on: the trail must never stop the
work it watches.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 4096  # an event is small: a cap keeps one bad field from bloating the file
FILE_MODE = 0o600

# The events, by name: who records each and the fields it carries (besides the common ones).
WORKER_STARTED = "worker_started"  # worker: pipeline, epoch, generation
WORKER_STOPPED = "worker_stopped"  # worker: pipeline, epoch, generation, state
BATCH_COMMITTED = "batch_committed"  # worker: pipeline, epoch, generation, query, batch_id, rows,
# duration_secs (the batch's triggerExecution; null: unknown)
LEADER_WON = "leader_won"  # nimbus: epoch
LEADER_LOST = "leader_lost"  # nimbus: epoch, reason
LEADER_WRITE = "leader_write"  # nimbus: epoch, started_wall, started_mono, ops
SUBMIT_ACKNOWLEDGED = "submit_acknowledged"  # client (a test's driver): pipeline, request_id
PROCESS_KILLED = "process_killed"  # whoever kills a process (a test, a fault injector): of_host,
# of_pid; the victim's death, which its own trail cannot say; a fault injector adds target (the
# kind of process: supervisor, worker, nimbus...) and supervisor (the id of the victim's host's)
PROCESS_PAUSED = "process_paused"  # a fault injector, once it continued a process it stopped:
# of_host, of_pid, target, supervisor, secs (stopped for), began_wall, began_mono (the SIGSTOP)
HOST_CUT = "host_cut"  # a fault injector, once it healed a host it cut off the network:
# supervisor (the host's), secs, began_wall, began_mono
HOST_STRESSED = "host_stressed"  # a fault injector, once it stopped loading a host's CPU and
# disk: supervisor (the host's), secs, burners (CPU burners), cpu (stress-ng or python),
# began_wall, began_mono
WORKER_PROMOTED = "worker_promoted"  # the leader nimbus: pipeline, from_supervisor,
# to_supervisor, how (fenced, floor, dead, stopped), silent_secs, floor_secs


@dataclass(frozen=True)
class Actor:
    """The process that records: its kind (nimbus, supervisor, worker, client) and its id."""

    kind: str
    id: str


@dataclass(frozen=True)
class TrailSettings:
    """``history.file``: where a process appends its trail (None: nothing is recorded)."""

    file: Path | None = None


class TrailRecorder:
    """Appends one process's events to the trail's file; thread-safe."""

    def __init__(
        self,
        fd: int | None,
        actor: Actor,
        *,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
        host: str | None = None,
        pid: int | None = None,
    ) -> None:
        self._fd = fd
        self._actor = actor
        self._wall = wall
        self._mono = mono
        self._host = host or socket.gethostname()
        self._pid = os.getpid() if pid is None else pid
        self._lock = threading.Lock()
        self._failed = False

    @classmethod
    def disabled(cls) -> TrailRecorder:
        """A recorder that records nothing (``history.file`` not set)."""
        return cls(None, Actor("none", ""), host="-", pid=0)

    @classmethod
    def open(cls, path: Path | None, actor: Actor) -> TrailRecorder:
        """A recorder appending to ``path`` (created 0600 if missing), or a disabled one."""
        if path is None:
            return cls.disabled()
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        return cls(os.open(path, flags, FILE_MODE), actor)

    @classmethod
    def inherited(cls, fd: int, actor: Actor) -> TrailRecorder:
        """A recorder appending to ``fd``, a descriptor of the trail's file this process
        inherited (open for appending only: it cannot read the other processes' lines),
        kept from the processes it starts in turn; disabled, with a warning, if ``fd`` is
        not open for writing."""
        if not _appends(fd):
            log.warning("event=history_unavailable fd=%d reason=not_open_for_appending", fd)
            return cls.disabled()
        os.set_inheritable(fd, False)
        return cls(fd, actor)

    @classmethod
    def from_settings(cls, settings: TrailSettings, actor: Actor) -> TrailRecorder:
        return cls.open(settings.file, actor)

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    @property
    def actor(self) -> Actor:
        return self._actor

    def now(self) -> tuple[float, float]:
        """The wall and monotonic times now: what an event that spans a call records as its
        start (a leader's write: its commit happened between this and the line's times)."""
        return self._wall(), self._mono()

    def record(self, event: str, **fields: Any) -> None:
        """Append one event; returns once the line is in the file (the kernel's page cache)."""
        if self._fd is None:
            return
        line = self._line(event, fields)
        with self._lock:
            self._write_locked(event, line)

    def _write_locked(self, event: str, line: bytes) -> None:
        if self._fd is None:  # closed meanwhile
            return
        try:
            os.write(self._fd, line)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                log.warning("event=history_not_written history_event=%s error=%r", event, exc)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _line(self, event: str, fields: dict[str, Any]) -> bytes:
        head = {
            "wall": self._wall(),
            "mono": self._mono(),
            "host": self._host,
            "pid": self._pid,
            "kind": self._actor.kind,
            "id": self._actor.id,
            "event": event,
        }
        line = _encode(head | {k: v for k, v in fields.items() if k not in head})
        if len(line) > MAX_LINE_BYTES:
            line = _encode({**head, "truncated": True})
        return line


def _encode(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()


def open_for_appending(path: Path) -> int:
    """A descriptor of the trail's file ``path`` (created 0600 if missing) that can only
    append, for a process that may not open the file itself (a worker of another user);
    the caller closes it once handed over. Inheritable: pass it with ``pass_fds``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
    os.set_inheritable(fd, True)
    return fd


def _appends(fd: int) -> bool:
    """Whether ``fd`` is open for writing, in append mode."""
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        return False
    return flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR) and bool(flags & os.O_APPEND)
