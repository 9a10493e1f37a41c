"""Process groups on real processes: a stop takes the whole group, SIGKILL follows the grace,
a child tied to its parent dies with it, and stopping what is already gone is harmless."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from stratus.process import (
    NOT_REAPED_EXIT,
    Lifeline,
    ProcessGroup,
    live_in_group,
    shell_exit_code,
)
from tests.harness.zkfixtures import process_gone, wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

WAIT_SECS = 20.0

# A child that starts a grandchild ignoring SIGTERM, prints the grandchild's pid, and sleeps.
WITH_GRANDCHILD = """
import signal, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); "
    "time.sleep(60)"], stdout=subprocess.PIPE)
grandchild.stdout.readline()
print(grandchild.pid, flush=True)
time.sleep(60)
"""
IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"""
SLEEPS = "import time; print('ready', flush=True); time.sleep(60)"
STOPS_AT_EOF = """
import threading
from stratus.process import watch_for_eof
eof = threading.Event()
watch_for_eof(0, eof.set)
print("ready", flush=True)
eof.wait(60)
"""
# A parent that starts CHILD tied to it by the lifeline named in argv[1], prints its pid, sleeps.
PARENT = """
import subprocess, sys, time
from stratus.process import Lifeline, ProcessGroup
child = ProcessGroup.start([sys.executable, "-c", sys.argv[2]], lifeline=Lifeline[sys.argv[1]],
                           stdout=subprocess.PIPE)
child.process.stdout.readline()
print(child.pid, flush=True)
time.sleep(60)
"""


@contextlib.contextmanager
def started(script: str, *args: str, lifeline: Lifeline = Lifeline.NONE) -> Iterator[ProcessGroup]:
    """A python ``script`` as a process group, SIGKILLed whole at the end whatever happens."""
    group = ProcessGroup.start(
        [sys.executable, "-c", script, *args], lifeline=lifeline, stdout=subprocess.PIPE
    )
    try:
        yield group
    finally:
        group.kill()
        if group.process.stdout is not None:
            group.process.stdout.close()


def first_line(group: ProcessGroup) -> str:
    assert group.process.stdout is not None
    return group.process.stdout.readline().decode().strip()


def test_a_stop_takes_the_whole_group_grandchildren_included() -> None:
    with started(WITH_GRANDCHILD) as group:
        grandchild = int(first_line(group))
        assert grandchild in live_in_group(group.pid)

        code = group.stop(grace=0.5)

        assert code == -signal.SIGTERM  # the child went at SIGTERM ...
        wait_until(lambda: process_gone(grandchild), WAIT_SECS, "the grandchild to be killed")
        assert live_in_group(group.pid) == []  # ... and its grandchild at the SIGKILL after


def test_a_child_that_ignores_sigterm_is_sigkilled_after_the_grace() -> None:
    with started(IGNORES_SIGTERM) as group:
        assert first_line(group) == "ready"  # its handler is in place

        assert group.stop(grace=0.3) == -signal.SIGKILL
        assert shell_exit_code(group.returncode) == 128 + signal.SIGKILL


def test_sigterm_to_the_child_alone_leaves_the_group_to_the_sigkill() -> None:
    with started(WITH_GRANDCHILD) as group:
        grandchild = int(first_line(group))

        group.terminate(whole_group=False)

        assert group.wait(WAIT_SECS) == -signal.SIGTERM
        assert not process_gone(grandchild)  # SIGTERM reached the child only
        assert group.kill() == -signal.SIGTERM
        wait_until(lambda: process_gone(grandchild), WAIT_SECS, "the grandchild to be killed")


@pytest.mark.parametrize(
    ("lifeline", "child"), [(Lifeline.DEATH_SIGNAL, SLEEPS), (Lifeline.PIPE, STOPS_AT_EOF)]
)
def test_a_child_tied_to_its_parent_dies_when_the_parent_is_sigkilled(
    lifeline: Lifeline, child: str
) -> None:
    with started(PARENT, lifeline.name, child) as parent:
        child_pid = int(first_line(parent))
        assert not process_gone(child_pid)

        os.kill(parent.pid, signal.SIGKILL)

        try:
            wait_until(lambda: process_gone(child_pid), WAIT_SECS, "the child to die")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child_pid, signal.SIGKILL)


def test_stopping_a_group_that_already_exited_is_harmless(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    group = ProcessGroup.start([sys.executable, "-c", "raise SystemExit(3)"])
    assert group.wait(WAIT_SECS) == 3
    signalled: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "killpg", lambda pgid, signum: signalled.append((pgid, signum)))

    assert group.stop(grace=1.0) == 3
    assert group.stop(grace=1.0) == 3
    assert group.kill() == 3
    group.terminate()
    group.close_lifeline()
    assert shell_exit_code(group.returncode) == 3
    assert signalled == [], "a reaped group's id was signalled: it may be another group's now"


def test_others_in_the_group_are_stopped_from_inside_it() -> None:
    script = """
import signal, subprocess, sys
from stratus.process import others_in_group, stop_others_in_group
stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)"],
    stdout=subprocess.PIPE)
stubborn.stdout.readline()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
stop_others_in_group(0.3)
stubborn.wait(10)
print(stubborn.returncode, others_in_group(), flush=True)
"""
    with started(script) as group:
        assert first_line(group) == f"{-signal.SIGKILL} []"
        assert group.wait(WAIT_SECS) == 0


def test_a_child_that_could_not_be_reaped_is_never_a_clean_exit() -> None:
    assert shell_exit_code(None) == NOT_REAPED_EXIT != 0
    assert shell_exit_code(-signal.SIGTERM) == 128 + signal.SIGTERM


SUPERVISING = """
import sys, time
from stratus.ha.supervision import Supervision, SupervisionSettings
child = Supervision(SupervisionSettings(("sleep", "600")))
child.start()
while child.pid is None:
    time.sleep(0.05)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_supervised_child_dies_with_its_killed_supervisor() -> None:
    """``stratus zkfc --supervise`` starts its child from its supervision thread: the
    kernel's death signal, armed from that thread, still kills the child when the zkfc is
    SIGKILLed (armed only from the main thread, it was not armed at all)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", SUPERVISING], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert not process_gone(child)
        parent.kill()
        parent.wait()
        wait_until(lambda: process_gone(child), 10, f"the supervised child {child} to die")
    finally:
        parent.kill()
        parent.wait()
