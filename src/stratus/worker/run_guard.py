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

Run as a script path (``python .../run_guard.py``), so it puts the directory that holds the
``stratus`` package first on its path, in place of its own: ``stratus.process`` does the work.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

if not __package__:  # run as a script: the package root, not this directory, goes on the path
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from stratus.process import (
    drain_group,
    shell_exit_code,
    stop_others_in_group,
    watch_for_eof,
)

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
    watch_for_eof(0, told.set, name="guard-stdin")
    child = subprocess.Popen(argv[1:], stdin=subprocess.DEVNULL)
    while child.poll() is None:
        if told.wait(POLL_SECS):
            _take_down(child)
            return TAKEN_DOWN_EXIT
    drain_group(DRAIN_SECS)
    return shell_exit_code(child.returncode)


def _signal_pipe(told: threading.Event) -> int:
    """A pipe the C signal handler writes to; a thread turns each byte into ``told``."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def watch() -> None:
        while os.read(read_end, 16):
            told.set()

    threading.Thread(target=watch, daemon=True).start()
    return write_end


def _take_down(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the group; SIGKILL to whoever is left after GRACE_SECS."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM reaches the guard too
    stop_others_in_group(GRACE_SECS)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=GRACE_SECS)  # reap it, SIGKILLed if it had to be


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
