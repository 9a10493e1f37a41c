"""A hot pipeline's host dies and its standby worker takes over: the whole chain on real
processes. One nimbus, two supervisors of two slots, three pacemakers
(``cluster.state.store: pacemaker``), the streaming example with ``pipeline.standby: hot``, a
0.5 s trigger and a steady input, every process recording the trail.

Once the standby worker is READY on the other supervisor (as the API shows it) and the
pacemakers are past their warm-up (one pulse TTL after their start, during which the leader
judges no silence on the beats, as in a cluster that has run for a while), the active
worker's supervisor is killed with every process of its host (the supervisor, its workers'
monitors and their process groups, its beat agent), all with SIGKILL. What is proved: the
leader's failover lane promotes the standby worker (the assignment moves with reason
``standby_promoted``), the process that runs the pipeline after is the standby worker's own,
batches go on, every event is counted once on the output, and the trail shows a single run at
a time and no promotion without the kill that explains it. The metrics say so too: before the
kill the standby worker's supervisor shows one READY standby worker and the leader a whole
coverage and the active supervisor's phi; after it, the leader has counted one promotion,
``floor``. The time from the kill to the first batch after it is printed (``-s``), for
information only.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stratus.api.records import AssignmentReason
from stratus.chaos.oracle import (
    check_exactly_once,
    check_single_run,
    streaming_counted,
    streaming_expected,
)
from stratus.chaos.promotions import check_promotions_explained
from stratus.chaos.trail_events import Clocks, load_events
from stratus.local.examples_io import Feeder, read_rows
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.supervisor.adoption import ProcessRecord
from stratus.supervisor.beat_agent import AgentRecord
from stratus.trail import (
    BATCH_COMMITTED,
    PROCESS_KILLED,
    WORKER_PROMOTED,
    Actor,
    TrailRecorder,
)
from tests.harness.pacemaker_process import PacemakerProcess
from tests.harness.pipeline_cluster import PipelineCluster, pipeline_cluster
from tests.harness.spark_packages import example_package
from tests.harness.zkfixtures import process_gone, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

PIPELINE = "streaming-counts"  # the example's name
READY_SECS = 300.0  # two Spark drivers starting on a loaded 2-core machine
MOVE_SECS = 120.0  # far past the floor and the round's own timeout (4 s)
DRAIN_SECS = 300.0
TASK_TIMEOUT_SECS = 25  # the cluster harness's 60, lowered so that the pulse TTL can be
PULSE_TTL_SECS = 30  # above it: a pacemaker warms up for one TTL, which this test waits out


@pytest.fixture
def pacemakers(tmp_path: Path) -> Iterator[list[PacemakerProcess]]:
    started = [
        PacemakerProcess(tmp_path, [f"pacemaker.pulse.ttl.secs={PULSE_TTL_SECS}"]).start()
        for _ in range(3)
    ]
    yield started
    for pacemaker in started:
        pacemaker.stop()


def hot_options(pacemakers: list[PacemakerProcess], trail: Path) -> list[str]:
    servers = ",".join(f"127.0.0.1:{p.port}" for p in pacemakers)
    return [
        "-c", "cluster.state.store=pacemaker",
        "-c", f"pacemaker.servers={servers}",
        "-c", f"pacemaker.pulse.ttl.secs={PULSE_TTL_SECS}",
        "-c", f"nimbus.task.timeout.secs={TASK_TIMEOUT_SECS}",
        "-c", f"supervisor.worker.timeout.secs={TASK_TIMEOUT_SECS - 5}",  # below it, as checked
        "-c", "pacemaker.client.timeout.secs=1",
        "-c", "supervisor.worker.warm=false",  # two drivers are enough for 2 cores
        "-c", "supervisor.worker.warm.memory.mb=4096",  # room for the standby worker
        "-c", f"history.file={trail}",
    ]  # fmt: skip


def warmed_up(pacemaker: PacemakerProcess) -> bool:
    """Whether ``pacemaker`` is past its warm-up (one pulse TTL after its start): until one of
    a majority is, the leader's failover lane judges no silence, and only the round's
    ``nimbus.supervisor.timeout.secs`` moves a dead supervisor's pipelines."""
    settings = PacemakerClientSettings(servers=(pacemaker.address,), timeout_secs=5.0)
    pool = BlockingPacemakerPool(settings, call_timeout_secs=10.0)
    try:
        read = pool.get_all_pulses_for_path("/beats")
        return read.answered == 1 and not read.warming
    finally:
        pool.close()


def standby_ready(cluster: PipelineCluster, active: str) -> tuple[str, int] | None:
    """The standby worker's supervisor and pid, once the API shows it READY off ``active``."""
    standby = cluster.workers(PIPELINE).standby_worker
    if standby is None or standby.supervisor in (None, active) or standby.pid is None:
        return None
    if standby.state is None or standby.state.value != "READY":
        return None
    return standby.supervisor, standby.pid


def host_pids(local_dir: Path) -> list[int]:
    """Every process a supervisor's host runs for it, from its local directory: each worker's
    monitor and worker (their process groups too) and the beat agent."""
    pids = []
    for directory in sorted((local_dir / "workers").glob("*")):
        record = ProcessRecord.read(directory)
        if record is not None:
            pids += [record.monitor.pid, record.worker.pid]
    agent = AgentRecord.read(local_dir)
    if agent is not None:
        pids.append(agent.pid)
    return pids


def kill_host(cluster: PipelineCluster, sid: str, driver: TrailRecorder) -> list[int]:
    """SIGKILL supervisor ``sid`` and every process of its host at once, each recorded."""
    supervisor = cluster.supervisors[sid]
    pids = host_pids(supervisor.local_dir)
    assert supervisor.pid is not None
    for pid in [supervisor.pid, *pids]:
        driver.record(PROCESS_KILLED, of_pid=pid, target="host", supervisor=sid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    supervisor.kill()
    return [supervisor.pid, *pids]


def metric(url: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` with ``labels`` that ``url/metrics`` shows now."""
    response = httpx.get(f"{url}/metrics", timeout=10.0)
    response.raise_for_status()
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


def supervisor_url(cluster: PipelineCluster, sid: str) -> str:
    """The base URL of supervisor ``sid``'s endpoint, from its registration."""
    nimbuses = cluster.nimbuses
    summary = nimbuses.summary(nimbuses.nimbuses[0])
    (endpoint,) = [s.endpoint for s in summary.supervisors if s.id == sid and s.endpoint]
    return f"http://{endpoint}"


def metrics_before_the_kill(cluster: PipelineCluster, active: str, standby: str) -> str:
    """Wait for the metrics of a covered hot pipeline: its standby worker's supervisor shows
    one READY and the memory it holds, the leader a whole coverage, the phi of ``active``
    and no promotion yet. The leader's URL."""
    leader = cluster.nimbuses.nimbuses[0].url
    at = supervisor_url(cluster, standby)
    ready = partial(metric, at, "stratus_supervisor_standby_workers", supervisor=standby)
    wait_until(lambda: ready(state="ready") == 1.0, MOVE_SECS, "the supervisor's READY gauge")
    held = partial(metric, at, "stratus_supervisor_standby_memory_bytes", supervisor=standby)
    wait_until(lambda: (held() or 0.0) > 0, MOVE_SECS, "the standby worker's memory measured")
    wait_until(
        lambda: (
            metric(leader, "stratus_nimbus_hot_pipelines") == 1.0
            and metric(leader, "stratus_nimbus_standby_coverage") == 1.0
        ),
        MOVE_SECS,
        "the leader's coverage of its hot pipeline",
    )
    phi = partial(metric, leader, "stratus_nimbus_supervisor_phi", supervisor=active)
    wait_until(lambda: phi() is not None, MOVE_SECS, "the phi of the active supervisor")
    assert metric(leader, "stratus_nimbus_promotions_total", how="floor") == 0.0
    return leader


def batches_after(trail: Path, supervisor: str, mono: float) -> list[float]:
    """The monotonic times of the pipeline's batches committed on ``supervisor`` after ``mono``."""
    return sorted(
        event.at.mono
        for event in load_events([trail])
        if event.name == BATCH_COMMITTED
        and event.get("pipeline") == PIPELINE
        and event.get("supervisor") == supervisor
        and event.at.mono > mono
    )


def test_a_dead_hosts_hot_pipeline_is_promoted_to_its_standby_worker_exactly_once(
    zk_hosts: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    pacemakers: list[PacemakerProcess],
) -> None:
    trail = tmp_path / "trail.jsonl"
    extra = hot_options(pacemakers, trail)
    driver = TrailRecorder.open(trail, Actor("client", "test"))
    with pipeline_cluster(zk_hosts, tmp_path, request.node.name, extra=extra) as cluster:
        feeder = Feeder(tmp_path / "input")
        feeder.directory.mkdir()
        output = tmp_path / "output"
        conf = {
            "spark.stratus.example.input": str(feeder.directory),
            "spark.stratus.example.output": str(output),
            "pipeline.trigger.interval.secs": 0.5,
            "pipeline.standby": "hot",
        }
        cluster.client.submit(PIPELINE, example_package("streaming"), conf)
        feeder.start()
        try:
            active = cluster.wait_running(PIPELINE, timeout=READY_SECS)
            found: list[tuple[str, int]] = []

            def ready() -> bool:
                seen = standby_ready(cluster, active.supervisor)
                found[:] = [seen] if seen else []
                return bool(seen)

            wait_until(ready, READY_SECS, "the standby worker to be READY on the other supervisor")
            ((standby_supervisor, standby_pid),) = found
            for pacemaker in pacemakers:  # a cluster that has run for a while
                wait_until(partial(warmed_up, pacemaker), MOVE_SECS, "a pacemaker's warm-up")
            leader = metrics_before_the_kill(cluster, active.supervisor, standby_supervisor)
            _, before = driver.now()
            wait_until(  # steady: the backlog of the first batch is done
                lambda: len(batches_after(trail, active.supervisor, before)) >= 2,
                MOVE_SECS,
                "two batches before the kill",
            )

            _, killed_at = driver.now()
            for pid in kill_host(cluster, active.supervisor, driver):
                wait_until(partial(process_gone, pid), 30, f"process {pid} to be gone")

            promoted = cluster.wait_running(PIPELINE, not_on=active.supervisor, timeout=MOVE_SECS)
            assert promoted.supervisor == standby_supervisor
            assert promoted.pid == standby_pid  # the standby worker's own process runs it
            history = cluster.client.history(PIPELINE).changes
            assert history[0].reason is AssignmentReason.STANDBY_PROMOTED
            promotions = [e for e in load_events([trail]) if e.name == WORKER_PROMOTED]
            assert [e.get("how") for e in promotions] == ["floor"]  # the lane's, on the beats
            assert (history[0].previous, history[0].supervisor) == (
                active.supervisor,
                standby_supervisor,
            )
            assert metric(leader, "stratus_nimbus_promotions_total", how="floor") == 1.0
            assert metric(leader, "stratus_nimbus_promotions_total", how="dead") == 0.0
            wait_until(
                lambda: len(batches_after(trail, standby_supervisor, killed_at)) >= 3,
                MOVE_SECS,
                "batches to go on after the promotion",
            )
            first = batches_after(trail, standby_supervisor, killed_at)[0]
            print(f"\nkill -> first batch on the promoted worker: {first - killed_at:.2f} s")
        finally:
            fed = feeder.stop()

        expected = streaming_expected(range(fed))
        wait_until(
            lambda: sum(count for _, count in streaming_counted(read_rows(output))) >= fed,
            DRAIN_SECS,
            f"the output to count the {fed} events fed",
        )
        assert check_exactly_once(expected, streaming_counted(read_rows(output))) == []
    events = load_events([trail])
    assert check_single_run(events, Clocks()) == []
    assert check_promotions_explained(events, Clocks()) == []
