"""``stratus local`` stopped with Ctrl-C or SIGTERM, then Ctrl-C again, leaves no process
behind. ``stratus local --demo`` (what ``make run`` runs) is run from the wheel, with the same
check: tests/cluster/test_wheel.py."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.zkfixtures import descendants, left_behind, wait_until

pytestmark = pytest.mark.spark

WORKER_MODULE = b"stratus.worker.main"


def is_worker(pid: int) -> bool:
    """Whether ``pid`` is a stratus worker (a PySpark driver that a supervisor started)."""
    try:
        return WORKER_MODULE in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


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
