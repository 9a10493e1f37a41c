"""A hot pipeline moves to its standby worker, planned (a drain) and not (its host dies): the
whole chain on real processes. One nimbus, two supervisors of two slots, three pacemakers
(``cluster.state.store: pacemaker``), the streaming example with ``pipeline.standby: hot``, a
0.5 s trigger and a steady input, every process recording the trail. The tests share
that cluster and its stream (a module fixture: a cluster and two Spark drivers cost a minute),
the drain first, then the updates, the host's death last. The updates' tests run with
``STRATUS_HOT_UPDATE_E2E=1`` (``make standby-e2e``), not in ``make test``, whose time each
would take a Spark driver's start more; the round's rules they follow are tested on a real
ZooKeeper in ``tests/cluster/test_scheduling_duty.py`` there.

The drain and the host's death start once the standby worker is READY on the other
supervisor (as the API shows it) and the pacemakers are past their warm-up (one pulse TTL
after their start, during which the leader judges no silence on the beats, as in a cluster
that has run for a while); the update starts as soon as the pipeline runs, its standby worker
placed (a Spark driver's start spared: the update replaces it anyway).

- **A drain** of the active worker's supervisor: its worker stops gracefully, and once the
  leader sees it stopped it promotes the standby worker (``standby_promoted`` after
  ``drained``, the trail's promotion ``how: stopped``); the same process runs on, batches
  go on, the trail shows a single run at a time. Uncordoned, the drained supervisor gets the
  new standby worker placed behind the promoted one.
- **An update** (new code): the old worker runs on while the standby worker is replaced by
  one of the new generation; once that one is READY the leader deletes the assignment
  (``updated``, to no supervisor), the old worker stops, and the leader promotes the standby
  worker (``standby_promoted``, the trail's promotion ``how: stopped``): the new generation
  runs in the process that waited as the standby worker, never in place, and every window
  closed so far is counted once.
- **An update whose standby worker fails** (its requirements cannot be installed): the
  leader withdraws it; the record is back at the version that runs, with that worker's
  generation, and the worker runs on untouched, its pid and assignment the same
  (``make standby-e2e`` too).
- **A kill of the hot worker** alone (``kill -9``, as the kernel's OOM killer does): its
  supervisor starts it again in place, the leader fences that start and promotes the standby
  worker (``how: fenced``), whose process runs the next batch (``make standby-e2e`` too).
- **The host's death**: the active worker's supervisor is killed with every process of its
  host (the supervisor, its workers' monitors and their process groups, its beat agent), all
  with SIGKILL. The leader's failover lane promotes the standby worker (``how: floor``), the
  process that runs the pipeline after is the standby worker's own, batches go on; at the end
  every event fed since the module's start is counted once on the output, and the trail shows
  a single run at a time and no promotion without the kill or the drain that explains it.
  The metrics say so too: before the kill the standby worker's supervisor shows one READY
  standby worker and the leader a whole coverage and the active supervisor's phi; after it,
  the leader has counted one promotion, ``floor``.

The leader counts the drain's promotion as ``stopped``. The times from the drain and from the
kill to the first batch after each are printed (``-s``), for information only.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
import pytest
import yaml
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from stratus.api.records import AssignmentReason, WorkerHeartbeat
from stratus.api.standby_workers import StandbyWorkerState
from stratus.chaos.oracle import (
    check_exactly_once,
    check_single_run,
    streaming_counted,
    streaming_expected,
)
from stratus.chaos.promotions import check_promotions_explained
from stratus.chaos.trail_events import Clocks, Event, load_events
from stratus.client.errors import RolloutFailedError
from stratus.codedist.package_build import build_package
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
from stratus.zk.server import ZooKeeperServer
from tests.harness.pacemaker_process import PacemakerProcess
from tests.harness.pipeline_cluster import PipelineCluster, pipeline_cluster
from tests.harness.spark_packages import example_package, unpack
from tests.harness.zkfixtures import chroot_for, process_gone, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]
UPDATE_E2E = "STRATUS_HOT_UPDATE_E2E"  # set: the update's test runs too (make standby-e2e)

PIPELINE = "streaming-counts"  # the example's name
READY_SECS = 300.0  # two Spark drivers starting on a loaded 2-core machine
MOVE_SECS = 120.0  # far past the floor and the round's own timeout (4 s)
DRAIN_SECS = 300.0
TASK_TIMEOUT_SECS = 25  # the cluster harness's 60, lowered so that the pulse TTL can be
PULSE_TTL_SECS = 30  # above it: a pacemaker warms up for one TTL, which this test waits out


@dataclass(frozen=True)
class HotPipeline:
    """The module's cluster, running the hot streaming pipeline: its input, its output, the
    trail every process records and the test's own recorder on it."""

    cluster: PipelineCluster
    pacemakers: list[PacemakerProcess]
    feeder: Feeder
    output: Path
    trail: Path
    driver: TrailRecorder


@pytest.fixture(scope="module")
def hot(
    zk_server: ZooKeeperServer, _zk_admin: KazooClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HotPipeline]:
    tmp_path = tmp_path_factory.mktemp("hot-standby")
    chroot = chroot_for("test_hot_standby")
    _zk_admin.ensure_path(chroot)
    pacemakers = [
        PacemakerProcess(tmp_path, [f"pacemaker.pulse.ttl.secs={PULSE_TTL_SECS}"]).start()
        for _ in range(3)
    ]
    trail = tmp_path / "trail.jsonl"
    extra = hot_options(pacemakers, trail)
    try:
        with pipeline_cluster(
            zk_server.connect_string + chroot, tmp_path, "test_hot_standby", extra=extra
        ) as cluster:
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
            driver = TrailRecorder.open(trail, Actor("client", "test"))
            try:
                yield HotPipeline(cluster, pacemakers, feeder, output, trail, driver)
            finally:
                feeder.halt()
    finally:
        for pacemaker in pacemakers:
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
        "-c", "supervisor.standby.warmup.batches=3",  # the cores go to the tests' drivers
        "-c", f"nimbus.standby.update.hold.secs={READY_SECS:g}",  # a driver's start, loaded
        "-c", f"history.file={trail}",
        "-c", "supervisor.deps.offline=true",  # an unresolvable requirement fails at once
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


def batches_after(
    trail: Path, whose: str | int | None, mono: float, *, by: str = "supervisor"
) -> list[float]:
    """The monotonic times of the pipeline's batches committed after ``mono`` on supervisor
    ``whose`` (with ``by="pid"``: by process ``whose``)."""
    return sorted(
        event.at.mono
        for event in load_events([trail])
        if event.name == BATCH_COMMITTED
        and event.get("pipeline") == PIPELINE
        and event.get(by) == whose
        and event.at.mono > mono
    )


def steady(hot: HotPipeline) -> tuple[WorkerHeartbeat, str, int]:
    """Once the pipeline runs, the pacemakers are past their warm-up, its standby worker is
    READY on the other supervisor and the worker running now committed two batches (the
    backlog of a first batch is done): the active worker, and the standby worker's
    supervisor and pid. Each is read again until all hold at once: a loaded machine may
    stall a beat agent past its beat lease meanwhile, and the pipeline then goes to its
    standby worker."""
    cluster = hot.cluster
    cluster.wait_running(PIPELINE, timeout=READY_SECS)
    for pacemaker in hot.pacemakers:  # a cluster that has run for a while
        wait_until(partial(warmed_up, pacemaker), MOVE_SECS, "a pacemaker's warm-up")
    _, before = hot.driver.now()
    found: list[tuple[WorkerHeartbeat, str, int]] = []

    def settled() -> bool:
        active = cluster.running_on(PIPELINE)
        standby = standby_ready(cluster, active.supervisor) if active is not None else None
        if active is None or standby is None:
            return False
        found[:] = [(active, *standby)]
        return len(batches_after(hot.trail, active.pid, before, by="pid")) >= 2

    wait_until(settled, READY_SECS, "two batches of the active worker, its standby READY")
    return found[0]


def promotions_after(trail: Path, mono: float) -> list[object]:
    """The ``how`` of each promotion the leader recorded after ``mono``."""
    return [
        event.get("how")
        for event in load_events([trail])
        if event.name == WORKER_PROMOTED and event.at.mono > mono
    ]


def first_after(events: list[Event], name: str, mono: float, **fields: str) -> float:
    """The monotonic time of the first ``name`` event after ``mono`` with ``fields``."""
    return min(
        event.at.mono
        for event in events
        if event.name == name
        and event.at.mono > mono
        and all(event.get(key) == value for key, value in fields.items())
    )


def broke_before_make(
    hot: HotPipeline, active: WorkerHeartbeat, standby_supervisor: str, since: float
) -> tuple[float, float, float]:
    """After a move to the standby worker (at ``since``, on the driver's clock): batches go
    on there, the trail holds a single run, and the old worker's last line came before the
    promotion. The times of that last line, of the promotion and of the first batch there."""
    wait_until(
        lambda: len(batches_after(hot.trail, standby_supervisor, since)) >= 3,
        MOVE_SECS,
        "batches to go on after the promotion",
    )
    events = load_events([hot.trail])
    assert check_single_run(events, Clocks()) == []
    promoted = first_after(events, WORKER_PROMOTED, since, pipeline=PIPELINE)
    stopped = max(  # its stop, or its last batch if its stop's grace ran out
        e.at.mono for e in events if e.get("kind") == "worker" and e.process[1] == active.pid
    )
    assert stopped < promoted  # break before make: the old worker's last line came first
    return stopped, promoted, batches_after(hot.trail, standby_supervisor, since)[0]


def test_a_drain_moves_a_hot_pipeline_to_its_standby_worker_once_its_old_worker_stopped(
    hot: HotPipeline,
) -> None:
    cluster = hot.cluster
    active, standby_supervisor, standby_pid = steady(hot)

    _, drained_at = hot.driver.now()
    cluster.client.drain(active.supervisor)
    try:
        moved = cluster.wait_running(PIPELINE, not_on=active.supervisor, timeout=MOVE_SECS)
        assert moved.supervisor == standby_supervisor
        assert moved.pid == standby_pid  # the standby worker's own process runs it
        changes = cluster.client.history(PIPELINE).changes
        assert [(c.reason, c.previous, c.supervisor) for c in changes[:2]] == [
            (AssignmentReason.STANDBY_PROMOTED, active.supervisor, standby_supervisor),
            (AssignmentReason.DRAINED, active.supervisor, None),  # its old worker stops first
        ]
        assert promotions_after(hot.trail, drained_at) == ["stopped"]
        leader = cluster.nimbuses.nimbuses[0].url
        assert metric(leader, "stratus_nimbus_promotions_total", how="stopped") == 1.0
        cluster.client.wait_drained(active.supervisor, timeout=MOVE_SECS)
        stopped, promoted, first = broke_before_make(hot, active, standby_supervisor, drained_at)
    finally:
        _, uncordoned_at = hot.driver.now()
        cluster.client.uncordon(active.supervisor)

    def placed_behind() -> bool:  # on the supervisor it left, the only other one
        view = cluster.workers(PIPELINE).standby_worker
        return view is not None and view.supervisor == active.supervisor

    # placed, not waited READY: the update that follows replaces it with one of its own code
    wait_until(placed_behind, MOVE_SECS, "a new standby worker placed behind the promoted one")
    _, placed_at = hot.driver.now()
    print(
        f"\ndrain -> old worker's last line: {stopped - drained_at:.2f} s, promoted: "
        f"{promoted - drained_at:.2f} s, first batch on the promoted worker: "
        f"{first - drained_at:.2f} s; uncordon -> new standby worker placed: "
        f"{placed_at - uncordoned_at:.2f} s (at most: the test polls)"
    )


def new_code(directory: Path) -> bytes:
    """The streaming example with one file more: other code (another digest), same pipeline."""
    code = unpack(example_package("streaming"), directory / "code")
    (code / "RELEASE").write_text("2\n")
    return build_package(code, directory / "package.zip").read_bytes()


update_e2e = pytest.mark.skipif(
    not os.environ.get(UPDATE_E2E),
    reason=f"set {UPDATE_E2E}=1 (make standby-e2e does) to run it: a Spark driver's start more",
)


@update_e2e
def test_an_update_runs_its_new_generation_in_the_process_that_was_its_standby_worker(
    hot: HotPipeline, tmp_path: Path
) -> None:
    cluster = hot.cluster
    active = cluster.wait_running(PIPELINE, timeout=READY_SECS)  # its standby worker may be
    package = new_code(tmp_path)  # starting still: the update replaces it with one of its code

    _, updated_at = hot.driver.now()
    record = cluster.client.wait_updated(cluster.client.update(PIPELINE, package))
    new = record.generation
    seen: list[tuple[str, int]] = []

    def ready_for_the_new_generation() -> bool:  # seen until its promotion deletes it
        view = cluster.workers(PIPELINE).standby_worker
        if (
            view is not None
            and view.generation == new
            and view.supervisor not in (None, active.supervisor)
            and view.state is StandbyWorkerState.READY
            and view.pid is not None
        ):
            seen[:] = [(view.supervisor, view.pid)]
        return bool(seen)

    wait_until(ready_for_the_new_generation, READY_SECS, "a standby worker of the new code")
    moved = cluster.wait_running(PIPELINE, not_on=active.supervisor, timeout=MOVE_SECS)
    ((standby_supervisor, standby_pid),) = seen
    assert (moved.supervisor, moved.pid) == (standby_supervisor, standby_pid)
    assert (moved.generation, moved.digest) == (new, record.digest)
    changes = cluster.client.history(PIPELINE).changes
    assert [(c.reason, c.previous, c.supervisor, c.generation) for c in changes[:2]] == [
        (AssignmentReason.STANDBY_PROMOTED, active.supervisor, standby_supervisor, new),
        (AssignmentReason.UPDATED, active.supervisor, None, new),  # not rewritten in place
    ]
    assert promotions_after(hot.trail, updated_at) == ["stopped"]
    _, promoted, first = broke_before_make(hot, active, standby_supervisor, updated_at)
    counted = streaming_counted(read_rows(hot.output))
    fed = streaming_expected(range(hot.feeder.fed))  # every window written is closed: all fed
    assert check_exactly_once({cell: fed[cell] for cell, _ in counted}, counted) == []
    print(
        f"\nupdate -> promoted: {promoted - updated_at:.2f} s, first batch of the new code: "
        f"{first - updated_at:.2f} s (the standby worker's start included)"
    )


def unresolvable_code(directory: Path) -> bytes:
    """The streaming example requiring a project that no index has (the supervisors install
    offline): a standby worker of that code FAILS as soon as its environment is built."""
    code = unpack(example_package("streaming"), directory / "code")
    manifest = yaml.safe_load((code / "stratus.yaml").read_text())
    manifest["requirements"] = ["no-such-project-anywhere>=1"]
    (code / "stratus.yaml").write_text(yaml.safe_dump(manifest))
    return build_package(code, directory / "package.zip").read_bytes()


@update_e2e
def test_an_update_its_standby_worker_fails_is_withdrawn_and_the_running_worker_runs_on(
    hot: HotPipeline, tmp_path: Path
) -> None:
    cluster = hot.cluster
    running = cluster.wait_running(PIPELINE, timeout=READY_SECS)

    def placed() -> bool:  # the update is held for it, not applied in place
        view = cluster.workers(PIPELINE).standby_worker
        return view is not None and view.supervisor not in (None, running.supervisor)

    wait_until(placed, READY_SECS, "a standby worker placed on the other supervisor")
    before = cluster.client.status(PIPELINE)
    changes_before = cluster.client.history(PIPELINE).changes
    _, updated_at = hot.driver.now()
    record = cluster.client.wait_updated(
        cluster.client.update(PIPELINE, unresolvable_code(tmp_path))
    )
    assert record.version == before.version + 1

    with pytest.raises(RolloutFailedError, match="its standby worker failed for it"):
        cluster.client.wait_running(record, timeout=READY_SECS)

    back = cluster.client.status(PIPELINE)
    assert (back.version, back.digest) == (before.version, before.digest)
    assert back.generation == running.generation  # the generation that runs, not a new one
    assert "no-such-project-anywhere" in (back.reason or "")
    still = cluster.wait_running(PIPELINE, timeout=MOVE_SECS)
    assert (still.supervisor, still.pid) == (running.supervisor, running.pid)  # never stopped
    assert cluster.client.history(PIPELINE).changes == changes_before  # nothing reassigned
    wait_until(
        lambda: len(batches_after(hot.trail, running.supervisor, updated_at)) >= 3,
        MOVE_SECS,
        "the running worker's batches to go on",
    )


@update_e2e
def test_a_killed_hot_worker_is_replaced_by_its_standby_worker_not_a_start_in_place(
    hot: HotPipeline,
) -> None:
    cluster, driver = hot.cluster, hot.driver
    active, standby_supervisor, standby_pid = steady(hot)
    assert active.pid is not None

    _, killed_at = driver.now()
    driver.record(
        PROCESS_KILLED,
        of_pid=active.pid,
        target="worker",
        supervisor=active.supervisor,
        pipeline=PIPELINE,
    )
    os.kill(active.pid, signal.SIGKILL)  # as the kernel's OOM killer would

    promoted = cluster.wait_running(PIPELINE, not_on=active.supervisor, timeout=MOVE_SECS)
    assert (promoted.supervisor, promoted.pid) == (standby_supervisor, standby_pid)
    history = cluster.client.history(PIPELINE).changes
    assert (history[0].reason, history[0].previous, history[0].supervisor) == (
        AssignmentReason.STANDBY_PROMOTED,
        active.supervisor,
        standby_supervisor,
    )
    assert promotions_after(hot.trail, killed_at) == ["fenced"]  # its start in place fenced
    _, promoted_at, first = broke_before_make(hot, active, standby_supervisor, killed_at)
    assert check_promotions_explained(load_events([hot.trail]), Clocks()) == []
    print(
        f"\nkill of the hot worker -> promoted: {promoted_at - killed_at:.2f} s, first batch "
        f"on the promoted worker: {first - killed_at:.2f} s"
    )


def test_a_dead_hosts_hot_pipeline_is_promoted_to_its_standby_worker_exactly_once(
    hot: HotPipeline,
) -> None:
    cluster, trail, driver = hot.cluster, hot.trail, hot.driver
    try:
        active, standby_supervisor, standby_pid = steady(hot)
        leader = metrics_before_the_kill(cluster, active.supervisor, standby_supervisor)

        _, killed_at = driver.now()
        for pid in kill_host(cluster, active.supervisor, driver):
            wait_until(partial(process_gone, pid), 30, f"process {pid} to be gone")

        promoted = cluster.wait_running(PIPELINE, not_on=active.supervisor, timeout=MOVE_SECS)
        assert promoted.supervisor == standby_supervisor
        assert promoted.pid == standby_pid  # the standby worker's own process runs it
        history = cluster.client.history(PIPELINE).changes
        assert history[0].reason is AssignmentReason.STANDBY_PROMOTED
        assert promotions_after(trail, killed_at) == ["floor"]  # the lane's, on the beats
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
        fed = hot.feeder.stop()

    expected = streaming_expected(range(fed))
    wait_until(
        lambda: sum(count for _, count in streaming_counted(read_rows(hot.output))) >= fed,
        DRAIN_SECS,
        f"the output to count the {fed} events fed",
    )
    assert check_exactly_once(expected, streaming_counted(read_rows(hot.output))) == []
    events = load_events([trail])
    assert check_single_run(events, Clocks()) == []
    assert check_promotions_explained(events, Clocks()) == []
