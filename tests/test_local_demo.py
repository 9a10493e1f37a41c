"""``stratus local --demo`` (what ``make run`` runs) completes and leaves no process behind."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import pytest

from tests.zkfixtures import process_gone, process_parents


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``."""
    children: dict[int, list[int]] = {}
    for child, parent in process_parents().items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


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
    started: set[int] = set()
    while demo.poll() is None:
        started |= descendants(demo.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            demo.wait(timeout=0.2)
    output = log.read_text()
    assert demo.returncode == 0, output
    assert "kill -9 of the leader nimbus" in output
    assert "kill -9 of supervisor" in output
    assert "rows in = rows out" in output
    assert "all processes stopped" in output
    assert len(started) >= 6  # ZooKeeper, three nimbuses, two supervisors, at least
    assert all(process_gone(pid) for pid in started)
