"""Each benchmark's quick mode runs to the end, so that ``make bench`` does not rot.

Only that it runs and prints its verdicts is checked here: timings are never asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stratus.supervisor.warm_memory import BUDGET_ENV_VAR
from tests.harness.netns_hosts import unavailable

# No quick mode of the parametrized list starts Spark: they run beside the Spark tests (CI's other
# worker), not after them; the host failover's does, and is marked so.
pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "bench"
HOST_FAILOVER_SMOKE = "STRATUS_HOST_FAILOVER_SMOKE"
HOST_FAILOVER_LAYOUTS = "STRATUS_HOST_FAILOVER_SMOKE_LAYOUTS"


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
        ("pacemaker_scale.py", ["--quick"], "beats, acknowledgement p99"),  # every part
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


def smoke_rows() -> list[str]:
    """The host failover rows the smoke test runs: ``STRATUS_HOST_FAILOVER_SMOKE`` names them,
    comma-separated (``cold``, ``hot``), or is ``1`` for the cold row alone; unset: none."""
    value = os.environ.get(HOST_FAILOVER_SMOKE, "")
    return ["cold"] if value == "1" else [row.strip() for row in value.split(",") if row.strip()]


def smoke_layouts() -> list[str]:
    """The host failover layouts the smoke test runs its rows on:
    ``STRATUS_HOST_FAILOVER_SMOKE_LAYOUTS`` names them, comma-separated (``apart``,
    ``shared``); unset: the benchmark's default, apart."""
    value = os.environ.get(HOST_FAILOVER_LAYOUTS, "apart")
    return [layout.strip() for layout in value.split(",") if layout.strip()]


@pytest.mark.spark
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("layout", ["apart", "shared"])
@pytest.mark.parametrize("row", ["cold", "hot"])
def test_the_host_failover_benchmark_runs_one_round_in_its_quick_mode(row, layout, tmp_path):
    if row not in smoke_rows() or layout not in smoke_layouts():
        # Hosts and a Spark move: two to four minutes of both cores, more than the whole
        # suite's budget allows; `make bench-host-failover-smoke` runs it.
        pytest.skip(
            f"set {HOST_FAILOVER_SMOKE}={row} (1: cold) and {HOST_FAILOVER_LAYOUTS}={layout} "
            "(unset: apart), or run make bench-host-failover-smoke, to run it"
        )
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"no hosts of network namespaces here: {reason}")
    result = subprocess.run(
        [
            sys.executable,
            str(BENCH / "host_failover.py"),
            *("--quick", "--rows", row, "--layout", layout, "--json", str(tmp_path / "out.json")),
        ],
        # the supervisors' spare memory as a shell's run derives it: the tests' budget of 0
        # leaves no room for a standby worker (refused: it would pass the spare budget)
        env={k: v for k, v in os.environ.items() if k != BUDGET_ENV_VAR},
        capture_output=True,
        text=True,
        timeout=1400,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"{row}: kill → first batch elsewhere p50" in result.stdout
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["layout"] == layout
    rounds = out["samples"][row]["rounds"]
    assert len(rounds) == 1
    assert rounds[0]["target"] != rounds[0]["victim"]  # the pipeline left the killed host
    if layout == "apart":  # a worker host killed: ZooKeeper's leader and the nimbuses live on
        assert rounds[0]["victim"] in out["hosts"]["workers"]
        assert rounds[0]["zk_leader"] != rounds[0]["victim"]
    if row == "hot":  # a standby worker took it, promoted by the leader's verdict
        assert rounds[0]["how"] is not None, result.stdout[-3000:]
        assert "every promotion explained by a failure: met" in result.stdout
