"""Each benchmark's quick mode runs to the end, so that ``make bench`` does not rot.

Only that it runs and prints its verdicts is checked here: timings are never asserted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# No quick mode starts Spark: they run beside the Spark tests (CI's other worker), not after them.
pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize(
    ("script", "args", "expected"),
    [
        ("election_failover.py", ["--quick"], "crash"),
        ("summary.py", ["--quick", "--pipelines", "10"], "ZooKeeper operations per nimbus request"),
        ("failover.py", ["--quick", "--only", "stratus"], "stratus p99"),
        ("replication.py", ["--quick"], "10 MB: total"),
        ("reassign.py", ["--quick"], "schedule, steady"),
        ("pacemaker.py", ["--quick", "--writers", "1"], "pacemaker/ZooKeeper"),
        ("zkfc_failover.py", ["--quick"], "kill -9, zkfc p99"),
        ("pacemaker_scale.py", ["--quick"], "derived safe supervisor timeout"),
        ("pacemaker_scale.py", ["--quick", "--part", "beats"], "beats, acknowledgement p99"),
        ("cli_start.py", ["--quick"], "stratus --version: "),
    ],
)
def test_the_benchmark_runs_in_its_quick_mode(script, args, expected, tmp_path):
    result = subprocess.run(
        [sys.executable, str(BENCH / script), *args, "--json", str(tmp_path / "out.json")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert expected in result.stdout
    assert (tmp_path / "out.json").stat().st_size > 0
