"""``stratus local --demo`` (what ``make run`` runs) completes and leaves no process behind;
``stratus local`` stopped with Ctrl-C or SIGTERM, then Ctrl-C again, leaves none either."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stratus.process import same_process, start_time
from tests.zkfixtures import process_parents, wait_until

pytestmark = pytest.mark.spark

WORKER_MODULE = b"stratus.worker.main"


def descendants(pid: int) -> dict[int, int]:
    """Every live process below ``pid``, with its start time: the pid alone may name another
    process (or a thread) minutes later, when a busy machine wraps its pids around."""
    children: dict[int, list[int]] = {}
    for child, parent in process_parents().items():
        children.setdefault(parent, []).append(child)
    found: dict[int, int] = {}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            started = start_time(child)
            if started is not None:
                found[child] = started
            todo.append(child)
    return found


def left_behind(started: dict[int, int]) -> list[str]:
    """The processes of ``started`` still alive: their pids and command lines."""
    return [f"{pid}: {command_line(pid)}" for pid, at in started.items() if same_process(pid, at)]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:300]
    except OSError:
        return "(gone)"


def is_worker(pid: int) -> bool:
    """Whether ``pid`` is a stratus worker (a PySpark driver that a supervisor started)."""
    try:
        return WORKER_MODULE in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.mark.timeout(600)
def test_stratus_local_demo_survives_both_kills_with_rows_in_equal_rows_out(tmp_path):
    log = tmp_path / "local.log"
    with log.open("w") as out:
        demo = subprocess.Popen(
            [sys.executable, "-m", "stratus", "local", "--demo"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "COLUMNS": "200"},
        )
    started: dict[int, int] = {}
    while demo.poll() is None:
        started.update(descendants(demo.pid))
        with contextlib.suppress(subprocess.TimeoutExpired):
            demo.wait(timeout=0.2)
    output = log.read_text()
    assert demo.returncode == 0, output
    assert "kill -9 of the leader nimbus" in output
    assert "kill -9 of supervisor" in output
    assert "rows in = rows out" in output
    assert "all processes stopped" in output
    assert len(started) >= 6  # ZooKeeper, three nimbuses, two supervisors, at least
    left = left_behind(started)
    assert not left, left


@pytest.mark.timeout(600)
@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_and_then_ctrl_c_while_pipelines_run_leave_no_process_behind(tmp_path, first):
    log = tmp_path / "local.log"
    with log.open("w") as out:
        local = subprocess.Popen(
            [sys.executable, "-m", "stratus", "local"], stdout=out, stderr=subprocess.STDOUT
        )
    started: dict[int, int] = {}

    def workers_running() -> bool:
        started.update(descendants(local.pid))
        return local.poll() is None and any(is_worker(pid) for pid in started)

    try:
        wait_until(workers_running, 300, "stratus local to run its pipelines' workers")
        local.send_signal(first)
        wait_until(lambda: "stopping" in log.read_text(), 30, "the graceful stop to begin")
        started.update(descendants(local.pid))
        local.send_signal(signal.SIGINT)  # impatient: a second Ctrl-C must not cut the stop short
        code = local.wait(timeout=120)
    finally:
        local.kill()
    output = log.read_text()
    assert code == 0, output
    assert "all processes stopped" in output
    assert len(started) >= 7  # ZooKeeper, three nimbuses, two supervisors, a worker at least
    left = left_behind(started)
    assert not left, left
