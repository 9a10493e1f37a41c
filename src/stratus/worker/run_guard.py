"""Runs a command in this process group, and takes the whole group down when told to.

    python run_guard.py -- COMMAND [ARG...]

A worker starts it in a new session, so the group holds the guard, the command, and
everything the command starts (``spark-pipelines`` is a JVM that starts Python that starts
another JVM). The guard's stdin is a pipe that only the worker holds. EOF on it (the worker
stops the run, or died, even by SIGKILL) or SIGTERM takes the group down: SIGTERM to the
group, then SIGKILL to whoever is left after ``GRACE_SECS``. When the command exits by
itself, what is left in the group (a JVM still shutting down) gets ``DRAIN_SECS``, then
SIGKILL. The guard exits with the command's code (128 + N if signal N ended it), or 143
when it took the group down.

Standard library only, and run as a script path: it needs nothing of stratus importable.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

GRACE_SECS = 5.0
DRAIN_SECS = 10.0
POLL_SECS = 0.1
USAGE_EXIT = 2
TAKEN_DOWN_EXIT = 128 + signal.SIGTERM


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--":
        print("usage: run_guard.py -- COMMAND [ARG...]", file=sys.stderr)
        return USAGE_EXIT
    told = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: None)  # seen by the poll loop below
    signal.set_wakeup_fd(_signal_pipe(told), warn_on_full_buffer=False)
    threading.Thread(target=_wait_for_eof, args=(told,), daemon=True).start()
    child = subprocess.Popen(argv[1:], stdin=subprocess.DEVNULL)
    while child.poll() is None:
        if told.wait(POLL_SECS):
            _take_down(child)
            return TAKEN_DOWN_EXIT
    _drain(DRAIN_SECS)
    code = child.returncode
    return 128 - code if code < 0 else code


def _signal_pipe(told: threading.Event) -> int:
    """A pipe the C signal handler writes to; a thread turns each byte into ``told``."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def watch() -> None:
        while os.read(read_end, 16):
            told.set()

    threading.Thread(target=watch, daemon=True).start()
    return write_end


def _wait_for_eof(told: threading.Event) -> None:
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    told.set()


def _take_down(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the group; SIGKILL to whoever is left after GRACE_SECS."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM reaches the guard too
    deadline = time.monotonic() + GRACE_SECS
    with contextlib.suppress(ProcessLookupError):
        os.killpg(0, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=GRACE_SECS)
    _drain(deadline - time.monotonic())
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=GRACE_SECS)  # reap it, SIGKILLed by _drain if it had to be


def _drain(timeout: float) -> None:
    """Wait until the guard is alone in its group; SIGKILL whoever is left at ``timeout``."""
    deadline = time.monotonic() + max(0.0, timeout)
    while others_in_group() and time.monotonic() < deadline:
        time.sleep(POLL_SECS)
    kill_others_in_group()


def kill_others_in_group() -> None:
    """SIGKILL every live process of this process group but the calling one."""
    for pid in others_in_group():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def others_in_group() -> list[int]:
    """Live processes of this process group other than the calling process."""
    me = os.getpid()
    return [pid for pid in live_in_group(os.getpgrp()) if pid != me]


def live_in_group(group: int) -> list[int]:
    """Live processes (zombies left out) of process group ``group`` (Linux: /proc; elsewhere
    none). A worker is a group of its own, so this tells whether any of it is left."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == group and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
