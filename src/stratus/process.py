"""Process groups: start a child in a group of its own, tie its life to its parent's, stop it.

Guarantees: a :class:`ProcessGroup` is a child started in a new session, so the group's id is
the child's pid and everything the child starts (a Spark JVM, a shell's background jobs) is in
it. :meth:`ProcessGroup.stop` is SIGTERM, a wait of at most ``grace`` seconds, SIGKILL to
the whole group, and a bounded reap of the child; it is safe on a group that already exited.
A child can be tied to its parent by a :class:`Lifeline`: a pipe on its stdin that only the
parent holds (the child stops at EOF, which the kernel delivers even when the parent is
SIGKILLed), or the kernel's parent-death signal (Linux)::

    group = ProcessGroup.start(["java", ...], lifeline=Lifeline.DEATH_SIGNAL)
    group.poll()            # None while the child runs, then its exit code
    group.stop(grace=5.0)   # SIGTERM, SIGKILL to the group after 5 s; the exit code

A process that is itself a member of the group it must take down (a guard running a command
in its own group) uses the ``*_in_group`` functions instead, which read ``/proc`` (Linux).
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

KILL_WAIT_SECS = 10.0  # how long a SIGKILLed child may take to be reaped before we give up
POLL_SECS = 0.02
NOT_REAPED_EXIT = 125  # the exit code of a child that could not be reaped (as timeout(1) uses)
_PR_SET_PDEATHSIG = 1


class Lifeline(enum.Enum):
    """How a child learns that its parent died."""

    NONE = "none"
    # stdin is a pipe that only the parent holds: the child must stop at EOF (see
    # watch_for_eof). Works whatever the parent runs, and runs no Python in the forked child.
    PIPE = "pipe"
    # The kernel SIGKILLs the child when the parent's forking thread exits (Linux, armed only
    # from the main thread, which lives as long as the process). Runs a preexec hook in the
    # forked child: only for parents whose other threads cannot hold locks the hook needs.
    DEATH_SIGNAL = "death-signal"
    # The same, armed from any thread: the kernel SIGKILLs the child when the thread that
    # started it exits, so only for a thread that outlives its children (a supervision loop).
    THREAD_DEATH_SIGNAL = "thread-death-signal"


class ProcessGroup:
    """A child process leading a process group of its own; see the module docstring.

    Used by one thread at a time (``subprocess.Popen`` is not meant for concurrent waits).
    """

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.pid = process.pid  # also the group's id: the child leads a new session

    @classmethod
    def start(
        cls, argv: Sequence[str], *, lifeline: Lifeline = Lifeline.NONE, **popen: Any
    ) -> ProcessGroup:
        """Start ``argv`` in a new session; ``popen`` are further ``subprocess.Popen`` options."""
        if lifeline is Lifeline.PIPE:
            popen["stdin"] = subprocess.PIPE  # close_fds (the default) keeps it ours alone
        elif lifeline is Lifeline.DEATH_SIGNAL:
            popen["preexec_fn"] = die_with_parent_hook()
        elif lifeline is Lifeline.THREAD_DEATH_SIGNAL:
            popen["preexec_fn"] = die_with_parent_hook(any_thread=True)
        return cls(subprocess.Popen(list(argv), start_new_session=True, **popen))

    @property
    def returncode(self) -> int | None:
        """The child's exit code once reaped (negative: the signal that ended it), else None."""
        return self.process.returncode

    def poll(self) -> int | None:
        """None while the child runs, else its exit code."""
        return self.process.poll()

    def is_running(self) -> bool:
        return self.process.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to exit (``subprocess.TimeoutExpired`` after ``timeout``)."""
        return self.process.wait(timeout)

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the child alone, if it has not exited."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signum)

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to every process of the group; nothing if the group is gone.

        The kernel does not reuse the group's id while any member of the group lives, nor
        while the child is unreaped. Once the child was reaped the id is ours only as long as
        members of the group are alive: with none left (``live_in_group``) nothing is sent,
        since an unrelated group may by now have the same id.
        """
        if self.process.returncode is not None and not live_in_group(self.pid):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def terminate(self, *, whole_group: bool = True) -> None:
        """SIGCONT (a frozen process cannot handle SIGTERM), then SIGTERM, without waiting."""
        send = self.signal_group if whole_group else self.signal
        send(signal.SIGCONT)
        send(signal.SIGTERM)

    def stop(
        self, grace: float, *, whole_group: bool = True, kill_wait: float = KILL_WAIT_SECS
    ) -> int | None:
        """SIGTERM, wait up to ``grace`` s for the child, then SIGKILL the group and reap.

        ``whole_group`` False sends SIGTERM to the child alone (it stops the rest itself);
        SIGKILL always goes to the whole group, so nothing of it is left. Returns the exit
        code, or None if the child could not be reaped within ``kill_wait`` seconds.
        """
        if self.process.poll() is None:
            self.terminate(whole_group=whole_group)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(max(0.0, grace))
        return self.kill(kill_wait)

    def kill(self, kill_wait: float = KILL_WAIT_SECS) -> int | None:
        """SIGKILL the whole group and reap the child; its exit code (None: not reaped)."""
        self.signal_group(signal.SIGKILL)
        try:
            return self.process.wait(kill_wait)
        except subprocess.TimeoutExpired:
            log.warning("event=process_not_reaped pid=%d wait_secs=%g", self.pid, kill_wait)
            return None

    def close_lifeline(self) -> None:
        """Close our end of a PIPE lifeline: the child sees EOF, as if we had died."""
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()


def shell_exit_code(returncode: int | None) -> int:
    """A Popen return code as a shell reports it: 128 + N for signal N, else the code.

    None (a child that could not be reaped, see ``ProcessGroup.kill``) is ``NOT_REAPED_EXIT``,
    never 0: nobody knows how it ended, so it must not pass for a clean exit.
    """
    if returncode is None:
        return NOT_REAPED_EXIT
    return 128 - returncode if returncode < 0 else returncode


def die_with_parent_hook(*, any_thread: bool = False) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the kernel SIGKILL the child if this process dies.

    Linux delivers the signal when the *thread* that forked exits, so it is only armed from
    the main thread (which lives as long as the process), or with ``any_thread`` from a
    thread that outlives the child; elsewhere None (no hook).
    """
    if not sys.platform.startswith("linux"):
        return None
    if not any_thread and threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return hook


def watch_for_eof(fd: int, on_eof: Callable[[], None], name: str = "lifeline") -> None:
    """The child's side of a PIPE lifeline: a daemon thread reads ``fd`` (what the parent
    writes is ignored) and calls ``on_eof`` once it is closed."""

    def read_until_eof() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 4096):
                pass
        on_eof()

    threading.Thread(target=read_until_eof, name=name, daemon=True).start()


# ---------------------------------------------------------------------------------------------
# From inside a group


def live_in_group(group: int) -> list[int]:
    """Live processes (zombies left out) of process group ``group``.

    Linux reads /proc; elsewhere none are found. A worker is a group of its own, so this
    tells whether any of it is left.
    """
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


def others_in_group() -> list[int]:
    """Live processes of the caller's process group other than the caller."""
    me = os.getpid()
    return [pid for pid in live_in_group(os.getpgrp()) if pid != me]


def kill_others_in_group() -> None:
    """SIGKILL every live process of the caller's process group but the caller."""
    for pid in others_in_group():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def drain_group(timeout: float) -> None:
    """Wait until the caller is alone in its group; SIGKILL whoever is left at ``timeout``."""
    deadline = time.monotonic() + max(0.0, timeout)
    while others_in_group() and time.monotonic() < deadline:
        time.sleep(POLL_SECS)
    kill_others_in_group()


def stop_others_in_group(grace: float) -> None:
    """SIGTERM the caller's group, wait up to ``grace`` s, SIGKILL whoever is left.

    The caller is in the group: it must ignore SIGTERM first.
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(0, signal.SIGTERM)
    drain_group(grace)


# ---------------------------------------------------------------------------------------------
# Telling one process from another (pid reuse)

BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


@functools.cache
def boot_id() -> str:
    """This boot of the machine (Linux): pids and start times of another boot mean nothing.
    Read once: it cannot change while this process runs."""
    try:
        return BOOT_ID_FILE.read_text().strip()
    except OSError:
        return ""


def start_time(pid: int, *, zombie: bool = False) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (field 22 of /proc/PID/stat);
    None if no such process lives (an exited one not reaped yet too, unless ``zombie``). A
    pid and its start time name one process for the whole boot: a reused pid starts later."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X") and not zombie:
        return None
    return int(fields[19])


def same_process(pid: int, started: int) -> bool:
    """Whether ``pid`` is still the live process that started at ``started`` (``start_time``)."""
    return start_time(pid) == started


class SignalTarget(Protocol):
    """A worker's process group as its supervisor signals it: a child it started
    (``ProcessGroup``), or a process it proved is the one it is after (an adopted worker)."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    def signal(self, signum: int) -> None: ...

    def signal_group(self, signum: int) -> None: ...
