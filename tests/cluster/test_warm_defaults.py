"""Warm workers by default, on a real cluster: a ``stratus nimbus`` process on a real
ZooKeeper, in-process supervisors with the stand-in warm worker (``test_warm_workers``) and
the recording worker (``test_drain_cluster``), ``stratus cluster`` and the supervisor's
``/metrics``.

What is proved: a supervisor with the defaults and enough memory keeps a warm worker per free
slot and shows them with their memory (its registration, ``stratus cluster``, its metrics); a
pipeline assigned to it, and one moved from a supervisor judged dead, starts in one of them;
a tiny budget starts none, says why in each of those places, and the pipeline starts cold
with the reason in the supervisor's log.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from stratus.api.records import MIB, SupervisorSummary, WarmHeld, WarmMemory
from stratus.cli.main import main
from stratus.supervisor.daemon import Supervisor
from stratus.supervisor.warm_memory import ESTIMATE_BYTES, read_machine, warm_budget
from stratus.zk.server import ZooKeeperServer
from tests.cluster.test_drain_cluster import WAIT_SECS, Drains, drains
from tests.cluster.test_warm_workers import wait_for_warm
from tests.harness.zkfixtures import wait_until

pytestmark = pytest.mark.slow

# the leader's own fence and stop defaults (6 s + 3 s) must fit below its timeout
DEAD_AFTER = ["-c", "nimbus.supervisor.timeout.secs=10"]


def derived_budget_mb() -> int:
    """The default budget on this machine; the test skips where two warm workers do not fit."""
    machine = read_machine()
    budget = warm_budget(None, machine, {})
    if machine is None or budget.bytes < 2 * ESTIMATE_BYTES:
        pytest.skip(
            f"this machine's default warm budget ({budget.source}) fits no two warm workers"
        )
    if machine.available - ESTIMATE_BYTES < machine.reserve:
        pytest.skip("this machine's available memory is short: no warm worker would start")
    return budget.mb


def registered_warm(cluster: Drains, sid: str) -> WarmMemory | None:
    data, _ = cluster.zk.get(cluster.paths.supervisor(sid))
    return SupervisorSummary.model_validate_json(data).warm


def shown(cluster: Drains, *options: str) -> str:
    seeds = ["-c", f"nimbus.seeds={','.join(cluster.nimbuses.seeds)}"]
    result = CliRunner().invoke(main, ["cluster", *options, *seeds])
    assert result.exit_code == 0, result.output
    return result.output


def metrics(supervisor: Supervisor) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The supervisor's samples now, by name and labels."""
    assert supervisor.endpoint is not None
    text = httpx.get(f"http://{supervisor.endpoint.address}/metrics").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def series(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, tuple(sorted({"supervisor": "s1", **labels}.items())))


def test_a_supervisor_with_the_defaults_keeps_warm_workers_and_a_pipeline_starts_in_one(
    warm_defaults: None, zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    budget_mb = derived_budget_mb()
    with drains(zk_server, tmp_path, request.node.name) as cluster:
        supervisor = cluster.supervisor("s1", slots=2, warm=None)  # no warm key: the defaults
        warm = wait_for_warm(supervisor, 2)

        def shows_both() -> bool:
            found = registered_warm(cluster, "s1")
            return found is not None and found.ready == 2

        wait_until(shows_both, WAIT_SECS, "the registration to show two ready warm workers")
        memory = registered_warm(cluster, "s1")
        assert memory is not None and memory.held is None and memory.up == 2
        assert memory.budget_mb == budget_mb and memory.machine_mb is not None
        assert 0 < memory.used_mb <= budget_mb  # measured: the stand-ins' processes

        def summarised() -> bool:  # the API's cluster summary: the nimbus's view, a moment later
            summary = next((s for s in cluster.client.cluster().supervisors if s.id == "s1"), None)
            return summary is not None and summary.warm is not None and summary.warm.up == 2

        wait_until(summarised, WAIT_SECS, "the cluster summary to show two warm workers up")
        row = r"^s1\t.*\t2 up, [\d.]+ [MG]iB of [\d.]+ GiB\tschedulable\tride\t-$"
        assert re.search(row, shown(cluster), re.M)
        exposed = metrics(supervisor)
        assert exposed[series("stratus_supervisor_warm_workers", state="ready")] == 2
        assert exposed[series("stratus_supervisor_warm_memory_budget_bytes")] == budget_mb * MIB
        assert exposed[series("stratus_supervisor_warm_held", reason="budget")] == 0
        assert exposed[series("stratus_supervisor_memory_available_bytes")] > 0

        cluster.submit("etl")
        assert cluster.wait_placed("etl") == "s1"
        assert cluster.wait_running("etl", "s1") in warm  # assigned: started warm


def test_a_pipeline_moved_from_a_dead_supervisor_starts_in_a_warm_worker(
    warm_defaults: None, zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    derived_budget_mb()
    with drains(zk_server, tmp_path, request.node.name, extra=DEAD_AFTER) as cluster:
        first = cluster.supervisor("s1", slots=1, warm=False)
        cluster.submit("etl")
        assert cluster.wait_placed("etl") == "s1"
        old = cluster.wait_running("etl", "s1")
        target = cluster.supervisor("s2", slots=2, warm=None)
        warm = wait_for_warm(target, 2)

        first.stop(workers=True)  # gone: judged dead after nimbus.supervisor.timeout.secs
        wait_until(lambda: cluster.where("etl") == "s2", WAIT_SECS, "etl to move to s2")
        new = cluster.wait_running("etl", "s2")
        assert new in warm and new != old
        assert cluster.reasons("etl")[-1] == ("supervisor_dead", "s2", "s1")


def test_a_tiny_budget_starts_no_warm_worker_and_says_why(
    zk_server: ZooKeeperServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="stratus.supervisor")
    with drains(zk_server, tmp_path, request.node.name) as cluster:
        supervisor = cluster.supervisor(
            "s1", slots=2, warm=None, **{"supervisor.worker.warm.memory.mb": 1}
        )

        def held() -> bool:
            found = registered_warm(cluster, "s1")
            return found is not None and found.held is WarmHeld.BUDGET

        wait_until(held, WAIT_SECS, "the registration to say the budget holds warm workers back")
        memory = registered_warm(cluster, "s1")
        assert memory is not None and memory.up == 0 and memory.budget_mb == 1
        assert memory.why is not None and "would pass the budget" in memory.why
        assert supervisor.warm is not None and supervisor.warm.pids == []
        listed = r"^s1\t.*\t0 up, 0 B of 1.0 MiB, held: budget\t"
        wait_until(  # the nimbus's view follows the registration a moment later
            lambda: re.search(listed, shown(cluster), re.M) is not None,
            WAIT_SECS,
            "the CLI to list the budget's hold",
        )
        assert "would pass the budget: 0 of 1 MiB used" in shown(cluster, "-o", "wide")
        exposed = metrics(supervisor)
        assert exposed[series("stratus_supervisor_warm_held", reason="budget")] == 1
        assert exposed[series("stratus_supervisor_warm_workers", state="ready")] == 0

        cluster.submit("etl")
        cluster.wait_running("etl", "s1")
        assert supervisor.warm.pids == []  # still none: the pipeline started cold
        assert any(
            "event=worker_cold_start pipeline=etl" in r.getMessage()
            and "would pass the budget" in r.getMessage()
            for r in caplog.records
        ), "the cold start's reason names the budget"
