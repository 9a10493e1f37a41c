"""Per-pipeline and fencing metrics: the leader's scheduling round on a real ZooKeeper feeding
the collector, a real nimbus pair showing them, a refused fenced write counted, and the
supervisor's per-worker series.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from stratus.api.records import (
    QueryProgress,
    SupervisorHeartbeat,
    SupervisorSummary,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.codedist.package_store import StoredPackage
from stratus.coordination.coordinator import Coordinator
from stratus.coordination.errors import LeadershipLostError
from stratus.nimbus.duties.scheduling import SchedulingDuty
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.records.replication_policy import ReplicationPolicy
from stratus.nimbus.scheduling.assignments import AssignmentTable
from stratus.nimbus.scheduling.pipeline_metrics import ObservedRound, PipelineMetrics
from stratus.nimbus.settings import SchedulingSettings
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.supervisor.metrics import SupervisorMetrics
from stratus.zk.paths import ClusterPaths
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import wait_until

PATHS = ClusterPaths("/stratus")
SETTINGS = SchedulingSettings(supervisor_timeout_secs=10, task_timeout_secs=30)
ONE_COPY = ReplicationPolicy(required=1, wait_secs=60)


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def coordinator(zk_hosts: str) -> Iterator[Coordinator]:
    started = Coordinator.standalone(zk_hosts, session_timeout=4.0).start()
    try:
        yield started
    finally:
        started.close()


def test_the_leaders_round_shows_each_pipelines_worker(coordinator: Coordinator) -> None:
    client = coordinator.session.client
    for parent in PATHS.all_parents():
        client.ensure_path(parent)
    ops = PipelineOps(client, PATHS, wall=lambda: 1.0)
    table = AssignmentTable(client, PATHS)
    board = HeartbeatBoard(ZooKeeperStateStore(client, PATHS.heartbeats))
    term = coordinator.nominate("nimbus", "leader", timeout=10)
    metrics = PipelineMetrics(
        pipelines=ops.read_all, replication=lambda _record: 1, leading_epoch=lambda: term.epoch
    )
    standby = PipelineMetrics(  # as a nimbus that does not lead that epoch
        pipelines=ops.read_all, replication=lambda _record: 1, leading_epoch=lambda: None
    )
    registry, other = CollectorRegistry(), CollectorRegistry()
    registry.register(metrics)
    other.register(standby)

    def observed(round_: ObservedRound) -> None:
        metrics.observe(round_)
        standby.observe(round_)

    duty = SchedulingDuty(
        ops=ops, assignments=table, board=board, settings=SETTINGS,
        registered=lambda: {"s1": SupervisorSummary(id="s1", slots=2)},
        on_observed=observed,
    )  # fmt: skip
    board.put_supervisor(SupervisorHeartbeat(id="s1", time=1.0, slots=2))
    for name in ("etl", "idle"):
        ops.submit(term, name, {}, f"r-{name}", StoredPackage("d" * 64, 10), replication=ONE_COPY)
    duty.run(term)  # assigns both to s1
    assignment = table.read("etl")
    assert assignment is not None
    query = QueryProgress(batch_id=7, rows_total=1200, processed_rows_per_second=40.0)
    board.put_worker(
        WorkerHeartbeat(
            pipeline="etl", supervisor="s1", epoch=assignment.epoch,
            generation=assignment.generation, digest=assignment.digest,
            state=WorkerState.RUNNING, time=2.0, restarts=2, queries=[query],
        )
    )  # fmt: skip
    duty.run(term)

    seen = samples(registry)
    worker = (("pipeline", "etl"), ("supervisor", "s1"))
    assert seen[("stratus_pipeline_up", (("pipeline", "etl"),))] == 1.0
    assert seen[("stratus_pipeline_up", (("pipeline", "idle"),))] == 0.0  # assigned, no worker
    assert seen[("stratus_pipeline_restarts_total", worker)] == 2.0
    assert seen[("stratus_pipeline_batch", worker)] == 7.0
    assert seen[("stratus_pipeline_rows_total", worker)] == 1200.0
    assert seen[("stratus_pipeline_rows_per_second", worker)] == 40.0
    assert seen[("stratus_pipeline_heartbeat_age_seconds", worker)] >= 0.0
    assert seen[("stratus_pipeline_status", (("pipeline", "etl"), ("status", "ACTIVE")))] == 1.0
    assert not any(name == "stratus_pipeline_up" for name, _ in samples(other))


def test_a_refused_fenced_write_is_counted(zk_hosts: str) -> None:
    refused: list[int] = []
    coordinator = Coordinator.standalone(zk_hosts, session_timeout=4.0)
    coordinator = Coordinator(
        coordinator.session, owns_session=True, on_fence_refused=lambda: refused.append(1)
    ).start()
    try:
        term = coordinator.nominate("nimbus", "old", timeout=10)
        client = coordinator.session.client
        client.set(term.epoch_path, b"moved")  # another term's bump, as a deposing would
        with pytest.raises(LeadershipLostError):
            term.transaction().create("/stratus-refused", b"").commit()
        assert refused == [1]
        assert client.exists("/stratus-refused") is None
    finally:
        coordinator.close()


def test_a_nimbus_shows_status_and_replication_and_only_the_leader_shows_up(
    zk_hosts: str, tmp_path: Path
) -> None:
    with nimbus_cluster(zk_hosts, tmp_path, "pipeline-metrics", size=2) as cluster:
        leader = cluster.by_address(cluster.wait_for_agreed_leader())
        standby = next(n for n in cluster.nimbuses if n is not leader)
        response = cluster.http.post(
            f"{leader.url}/api/v1/pipelines",
            data={"name": "orders"},
            files={"package": ("package.zip", valid_package("orders"))},
        )
        assert response.status_code == 201, response.text

        def shown(url: str, line: str) -> bool:
            return line in httpx.get(f"{url}/metrics", timeout=10.0).text

        up = 'stratus_pipeline_up{pipeline="orders"} 0.0'  # active, and no supervisor to run it
        wait_until(lambda: shown(leader.url, up), 30, "the leader to show the pipeline down")
        active = 'stratus_pipeline_status{pipeline="orders",status="ACTIVE"} 1.0'
        for nimbus in (leader, standby):
            url = nimbus.url
            wait_until(partial(shown, url, active), 30, "the status on every nimbus")
            assert shown(nimbus.url, 'stratus_pipeline_replication_required{pipeline="orders"}')
        wait_until(
            lambda: shown(standby.url, 'stratus_pipeline_replication{pipeline="orders"} 2.0'),
            30,
            "the standby to count both copies",
        )
        assert not shown(standby.url, 'stratus_pipeline_up{pipeline="orders"}')
        assert shown(leader.url, "stratus_nimbus_epoch_refusals_total 0.0")


def test_a_supervisor_shows_each_worker_and_its_fences() -> None:
    beat = WorkerHeartbeat(
        pipeline="etl", supervisor="s1", epoch=3, generation=1, state=WorkerState.RUNNING,
        time=100.0, restarts=1,
        queries=[QueryProgress(batch_id=4, rows_total=50, processed_rows_per_second=5.0)],
    )  # fmt: skip
    metrics = SupervisorMetrics(
        "s1", workers=lambda: [beat], fences=lambda: 2, lease_held=lambda: False, wall=lambda: 103.0
    )
    seen = samples(metrics.registry)
    worker = (("pipeline", "etl"), ("supervisor", "s1"))
    assert seen[("stratus_supervisor_worker_up", worker)] == 1.0
    assert seen[("stratus_supervisor_worker_restarts_total", worker)] == 1.0
    assert seen[("stratus_supervisor_worker_batch", worker)] == 4.0
    assert seen[("stratus_supervisor_worker_rows_total", worker)] == 50.0
    assert seen[("stratus_supervisor_worker_heartbeat_age_seconds", worker)] == 3.0
    assert seen[("stratus_supervisor_workers", (("phase", "running"), ("supervisor", "s1")))] == 1
    assert seen[("stratus_supervisor_fenced_total", ())] == 2.0
    assert seen[("stratus_supervisor_lease_held", (("supervisor", "s1"),))] == 0.0
