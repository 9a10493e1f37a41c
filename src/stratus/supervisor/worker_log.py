"""A worker's log: one set of files per run, rotated by size, and read back as one stream.

Guarantees: a worker's stdout and stderr reach the supervisor through a pipe, and a
``LogPump`` thread writes them to ``worker.log``; past ``max_bytes`` the file becomes
``worker.log.1`` (``.1`` becomes ``.2``, and so on; the oldest past ``backups`` is
deleted), so a run's log never holds more than ``(backups + 1) * max_bytes``. A new run
first moves the last run's files to ``worker.previous.log`` (and ``.1``, ...): the log of
the worker before the last restart stays readable. ``read_run`` reads a run's files
oldest first, and with ``follow`` goes on reading the current file as it grows, across
rotations and the next restart (as ``tail -F``)::

    log = RunLog(paths.log, WorkerLogSettings(max_bytes=64 << 20, backups=3))
    log.start_run()                      # the last run's files become the previous ones
    pump = LogPump(read_fd, log)         # a thread: pipe -> rotating files
    pump.join(timeout=2.0)               # after the worker exited: its last lines are in
    for chunk in read_run(log.files(previous=False), follow=False): ...
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

READ_BYTES = 64 * 1024
PREVIOUS_INFIX = ".previous"  # worker.log -> worker.previous.log


@dataclass(frozen=True)
class WorkerLogSettings:
    """How a worker's log rotates (``supervisor.worker.log.*``)."""

    max_bytes: int = 64 * 1024 * 1024  # supervisor.worker.log.max.bytes
    backups: int = 3  # supervisor.worker.log.backups
    runs_keep: int = 10  # supervisor.worker.log.runs.keep: runs whose logs are kept


class RunLog:
    """The files of one worker's log under its directory; written by one ``LogPump`` at a
    time."""

    def __init__(self, path: Path, settings: WorkerLogSettings) -> None:
        self.path = path  # worker.log: the current run's newest file
        self.settings = settings
        self._lock = threading.Lock()
        self._out: int | None = None
        self._size = 0

    @property
    def previous_path(self) -> Path:
        """``worker.previous.log``: the newest file of the run before the current one."""
        return self.path.with_name(self.path.stem + PREVIOUS_INFIX + self.path.suffix)

    def files(self, *, previous: bool) -> list[Path]:
        """The files of the current (or the previous) run that exist, oldest first."""
        newest = self.previous_path if previous else self.path
        candidates = [_backup(newest, n) for n in range(self.settings.backups, 0, -1)]
        return [path for path in [*candidates, newest] if path.exists()]

    def start_run(self) -> None:
        """Make the last run's files the previous run's (dropping the run before it), and
        start an empty current file."""
        with self._lock:
            self._close()
            for old in self._all(self.previous_path):
                old.unlink(missing_ok=True)
            for n in range(self.settings.backups, -1, -1):
                source = _backup(self.path, n)
                if source.exists():
                    source.replace(_backup(self.previous_path, n))
            self._open()

    def write(self, data: bytes) -> None:
        """Append ``data``; a file that is full is rotated, so none passes ``max_bytes`` (a
        line may be cut between two files)."""
        with self._lock:
            if self._out is None:
                self._open()
            view = memoryview(data)
            while view:
                room = self.settings.max_bytes - self._size
                if room <= 0:
                    self._rotate()
                    continue
                assert self._out is not None
                written = os.write(self._out, view[:room])
                view = view[written:]
                self._size += written

    def close(self) -> None:
        with self._lock:
            self._close()

    def _rotate(self) -> None:
        self._close()
        if self.settings.backups == 0:
            self.path.unlink(missing_ok=True)
        else:
            _backup(self.path, self.settings.backups).unlink(missing_ok=True)
            for n in range(self.settings.backups - 1, -1, -1):
                source = _backup(self.path, n)
                if source.exists():
                    source.replace(_backup(self.path, n + 1))
        self._open()

    def _open(self) -> None:
        self._out = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = os.fstat(self._out).st_size

    def _close(self) -> None:
        if self._out is not None:
            os.close(self._out)
            self._out = None

    def _all(self, newest: Path) -> list[Path]:
        """Every file of a run, rotated ones past ``backups`` (a smaller setting) too."""
        return [newest, *newest.parent.glob(f"{newest.name}.*")]


def _backup(newest: Path, n: int) -> Path:
    return newest if n == 0 else newest.with_name(f"{newest.name}.{n}")


class LogPump:
    """A daemon thread that copies everything read from ``fd`` into ``log`` until EOF (every
    process of the worker's group has exited), then closes ``fd``."""

    def __init__(self, fd: int, log: RunLog) -> None:
        self._fd = fd
        self._log = log
        self._lock = threading.Lock()  # the log may be switched while the thread writes
        self._thread = threading.Thread(target=self._run, name="worker-log", daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> bool:
        """Wait until the pump has written everything (EOF); False if it is still reading."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def switch_to(self, log: RunLog) -> None:
        """Write what comes next into ``log`` and close the current one: a warm worker's
        output goes to the log of the pipeline handed to it from then on."""
        with self._lock:
            old, self._log = self._log, log
        old.close()

    def _run(self) -> None:
        try:
            while data := os.read(self._fd, READ_BYTES):
                with self._lock, contextlib.suppress(OSError):  # a full disk loses lines only
                    self._log.write(data)
        except OSError:
            pass
        finally:
            os.close(self._fd)
            with self._lock:
                self._log.close()


def read_run(
    files: list[Path], *, follow: bool, newest: Path | None = None, from_end: bool = False
) -> Generator[bytes | None, None, None]:
    """The bytes of a run's ``files``, oldest first; with ``follow``, then whatever is
    appended to ``newest`` (the current file's path), reopened when it is replaced (a
    rotation, a restart): ``None`` each time nothing new is there, so that the caller may
    wait before asking again. Never ends while following. With ``from_end``, following
    begins at the current file's end (what it held was read otherwise: a tail)."""
    following = follow and newest is not None
    whole = [path for path in files if not (following and path == newest)]
    for path in whole:
        with contextlib.suppress(FileNotFoundError), path.open("rb") as done:
            while chunk := done.read(READ_BYTES):
                yield chunk
    if not following or newest is None:
        return
    current: BinaryIO | None = None
    try:
        while True:
            if current is None:
                try:
                    current = newest.open("rb")
                except FileNotFoundError:
                    yield None
                    continue
                if from_end:
                    current.seek(0, os.SEEK_END)
                    from_end = False
            chunk = current.read(READ_BYTES)
            if chunk:
                yield chunk
                continue
            if _replaced(current, newest):
                current.close()
                current = None  # the rest of the old file was read: on to the new one
                continue
            yield None
    finally:
        if current is not None:
            current.close()


def tail_lines(files: list[Path], lines: int) -> bytes:
    """The last ``lines`` lines of a run's ``files`` (oldest first), read from the end."""
    wanted = lines + 1  # the newline before the first line wanted
    kept: list[bytes] = []
    found = 0
    for path in reversed(files):
        with contextlib.suppress(FileNotFoundError), path.open("rb") as src:
            end = src.seek(0, os.SEEK_END)
            while end > 0 and found < wanted:
                start = max(0, end - READ_BYTES)
                src.seek(start)
                block = src.read(end - start)
                found += block.count(b"\n") - (1 if not kept and block.endswith(b"\n") else 0)
                kept.insert(0, block)
                end = start
        if found >= wanted:
            break
    text = b"".join(kept)
    return b"".join(text.splitlines(keepends=True)[-lines:]) if lines > 0 else b""


def _replaced(src: BinaryIO, path: Path) -> bool:
    """Whether ``path`` no longer names the file ``src`` reads (renamed or deleted)."""
    try:
        now = path.stat()
    except FileNotFoundError:
        return False  # not there yet: keep reading the old one until it is
    then = os.fstat(src.fileno())
    return (now.st_ino, now.st_dev) != (then.st_ino, then.st_dev)
