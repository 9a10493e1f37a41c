"""The leader's failover lane against a real ZooKeeper, a real ``stratus pacemaker`` process
and an in-process nimbus, with the supervisors' side written by the test: registrations with
a beat lease, fast beats through ``BeatBoard`` and heartbeats whose standby workers are READY.

What is proved: a supervisor holding a hot pipeline's active worker that falls silent past its
floor has the pipeline promoted to its standby worker's supervisor, in one transaction (the
assignment names it, the history says ``standby_promoted``, the placement it had is gone) and
with a ``worker_promoted`` line in the nimbus's trail, long before the round could judge the
supervisor dead; a pipeline that is not hot on that same supervisor is not moved by the lane;
beats that keep coming, with gaps below the floor, promote nothing.
"""

from __future__ import annotations

import io
import json
import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from stratus.api.records import AssignmentReason, SupervisorHeartbeat, SupervisorSummary
from stratus.api.standby_workers import BeatLease, StandbyWorkerBeat, StandbyWorkerState
from stratus.config import config_from_mapping
from stratus.nimbus.daemon import Nimbus
from stratus.nimbus.failover.beat_watch import ReadOutcome
from stratus.nimbus.records.assignment_history import AssignmentHistoryLog
from stratus.nimbus.scheduling.assignments import AssignmentTable
from stratus.nimbus.scheduling.standby_workers import StandbyWorkerTable
from stratus.nimbus.settings import NimbusSettings
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.state.beats import BeatBoard
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.pacemaker_store import PacemakerStateStore
from stratus.trail import WORKER_PROMOTED
from stratus.zk.paths import ClusterPaths
from tests.harness.nimbus_cluster import SESSION_SECS
from tests.harness.pacemaker_process import PacemakerProcess
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

PATHS = ClusterPaths("/stratus")
LEASE = BeatLease(lease_secs=0.8, stop_secs=0.1, poll_secs=0.02)  # a floor of 1.02 s
TICK_SECS = 0.1  # the hand-written supervisors' beat and heartbeat period
SUPERVISOR_TIMEOUT_SECS = 30  # far past the floor: the round judges no supervisor dead here
PULSE_TTL_SECS = 3  # the pacemaker's own: beats and heartbeats renew far more often
HOT = '{"pipeline.standby": "hot"}'


@pytest.fixture(scope="module")
def pacemaker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PacemakerProcess]:
    # A short time to live: a pacemaker warms up for one after its start, judging nothing.
    server = PacemakerProcess(
        tmp_path_factory.mktemp("failover-lane"), [f"pacemaker.pulse.ttl.secs={PULSE_TTL_SECS}"]
    ).start()
    yield server
    server.stop()


class HotSupervisor:
    """A supervisor's side written by the test, on a thread: its ephemeral registration with
    a beat lease, a fast beat every tick while ``beating`` is set, and a heartbeat every tick
    while ``heartbeating`` is set, reporting READY every standby worker placed on it.
    ``jitter_secs`` adds a random pause of up to that much after each tick."""

    def __init__(
        self, client: KazooClient, pacemaker: PacemakerProcess, sid: str, jitter_secs: float = 0.0
    ) -> None:
        self.id = sid
        self.jitter_secs = jitter_secs
        summary = SupervisorSummary(id=sid, host=f"host-{sid}", slots=2, beat_lease=LEASE)
        client.create(PATHS.supervisor(sid), summary.encode(), ephemeral=True, makepath=True)
        self._placements = StandbyWorkerTable(client, PATHS)
        settings = PacemakerClientSettings(servers=(pacemaker.address,), timeout_secs=5.0)
        self._pool = BlockingPacemakerPool(settings, call_timeout_secs=5.0)
        self._beats = BeatBoard(self._pool)
        self._heartbeats = HeartbeatBoard(PacemakerStateStore(self._pool, owner=sid))
        self._boot = uuid.uuid4().hex
        self._seq = 0
        self.beating, self.heartbeating = threading.Event(), threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"supervisor-{sid}", daemon=True)

    def __enter__(self) -> HotSupervisor:
        self.beating.set()
        self.heartbeating.set()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._closed.set()
        self._thread.join()
        self._pool.close()

    def fall_silent(self) -> None:
        """As its host dies: no beat, no heartbeat."""
        self.beating.clear()
        self.heartbeating.clear()

    def _run(self) -> None:
        pause = TICK_SECS
        while not self._closed.wait(pause):
            if self.beating.is_set():
                self._seq += 1
                self._beats.beat(self.id, self._boot, self._seq, LEASE.lease_secs)
            if self.heartbeating.is_set():
                self._heartbeats.put_round(self._heartbeat(), [])
            pause = TICK_SECS + random.uniform(0.0, self.jitter_secs)

    def _heartbeat(self) -> SupervisorHeartbeat:
        ready = [
            StandbyWorkerBeat(
                pipeline=name,
                generation=placement.generation,
                digest=placement.digest,
                state=StandbyWorkerState.READY,
                since=time.time(),
                pid=4242,
            )
            for name, (placement, _) in self._placements.read_all().items()
            if placement is not None and placement.supervisor == self.id
        ]
        return SupervisorHeartbeat(id=self.id, time=time.time(), slots=2, standby_workers=ready)


@pytest.fixture
def nimbus(zk_hosts: str, tmp_path: Path, pacemaker: PacemakerProcess) -> Iterator[Nimbus]:
    conf = config_from_mapping(
        {
            "zookeeper.servers": [zk_hosts],
            "zookeeper.session.timeout.secs": SESSION_SECS,
            "nimbus.port": 0,
            "nimbus.code.port": 0,
            "nimbus.local.dir": str(tmp_path / "nimbus"),
            "nimbus.lead.check.secs": 0.05,
            "nimbus.monitor.freq.secs": 0.1,
            "nimbus.supervisor.timeout.secs": SUPERVISOR_TIMEOUT_SECS,
            "nimbus.task.timeout.secs": SUPERVISOR_TIMEOUT_SECS,
            "cluster.state.store": "pacemaker",
            "pacemaker.servers": [f"127.0.0.1:{pacemaker.port}"],
            "pacemaker.client.timeout.secs": 1,
            "history.file": str(tmp_path / "trail.jsonl"),
            "nimbus.standby.place.wait.secs": 0,  # no worker here commits a batch
        }
    )
    daemon = Nimbus(NimbusSettings.from_config(conf))
    daemon.start()
    try:
        wait_until(daemon.controller.accepted_term, 10, "the nimbus to lead")
        yield daemon
    finally:
        daemon.stop()


def submit(nimbus: Nimbus, name: str, conf: str = "{}") -> None:
    nimbus.service.submit(name, conf, uuid.uuid4().hex, io.BytesIO(valid_package(name)))


def promotions(trail: Path) -> list[dict[str, object]]:
    if not trail.exists():
        return []
    lines = [json.loads(line) for line in trail.read_text().splitlines() if line.strip()]
    return [line for line in lines if line.get("event") == WORKER_PROMOTED]


def placed_on(client: KazooClient, supervisor: str, pipeline: str) -> bool:
    """Whether ``pipeline``'s standby worker is placed on ``supervisor`` (which reports it
    READY from its next heartbeat on)."""
    placement = StandbyWorkerTable(client, PATHS).read(pipeline)
    return placement is not None and placement.supervisor == supervisor


def test_a_silent_supervisor_has_its_hot_pipeline_promoted_and_its_other_pipeline_kept(
    zk_hosts: str, tmp_path: Path, pacemaker: PacemakerProcess, nimbus: Nimbus
) -> None:
    with kazoo_client(zk_hosts) as client, HotSupervisor(client, pacemaker, "s1") as s1:
        assignments = AssignmentTable(client, PATHS)
        submit(nimbus, "orders", HOT)
        submit(nimbus, "web")  # not hot, on the same supervisor: s1 is the only one
        wait_until(lambda: assignments.read("orders") is not None, 20, "orders to be assigned")
        wait_until(lambda: assignments.read("web") is not None, 20, "web to be assigned")
        with HotSupervisor(client, pacemaker, "s2"):
            wait_until(
                lambda: placed_on(client, "s2", "orders"),
                20,
                "orders' standby worker to be placed on s2",
            )
            s1.fall_silent()  # the rounds of the next floor read s2's READY report
            wait_until(
                lambda: (a := assignments.read("orders")) is not None and a.supervisor == "s2",
                30,
                "orders to be promoted to s2",
            )
            history = AssignmentHistoryLog(client, PATHS).read("orders")
            assert history[0].reason is AssignmentReason.STANDBY_PROMOTED
            assert (history[0].previous, history[0].supervisor) == ("s1", "s2")
            placed = StandbyWorkerTable(client, PATHS).read("orders")
            assert placed is None or placed.supervisor != "s2"  # the promoted one is gone
            web = assignments.read("web")
            assert web is not None and web.supervisor == "s1"  # not hot: the lane leaves it
            trail = tmp_path / "trail.jsonl"  # written just after the promotion's commit
            wait_until(lambda: promotions(trail), 10, "the promotion's line in the trail")
            (promoted,) = promotions(trail)
            assert promoted["pipeline"] == "orders"
            assert (promoted["from_supervisor"], promoted["to_supervisor"]) == ("s1", "s2")
            assert promoted["how"] == "floor"
            assert float(str(promoted["silent_secs"])) >= float(str(promoted["floor_secs"]))


@pytest.mark.solo  # the hand-written beats must keep their gaps below the floor
def test_beats_with_jitter_below_the_floor_promote_nothing(
    zk_hosts: str, tmp_path: Path, pacemaker: PacemakerProcess, nimbus: Nimbus
) -> None:
    with (
        kazoo_client(zk_hosts) as client,
        HotSupervisor(client, pacemaker, "s1", jitter_secs=0.4),
    ):
        assignments = AssignmentTable(client, PATHS)
        submit(nimbus, "orders", HOT)
        wait_until(lambda: assignments.read("orders") is not None, 20, "orders to be assigned")
        with HotSupervisor(client, pacemaker, "s2"):
            wait_until(
                lambda: placed_on(client, "s2", "orders"),
                20,
                "orders' standby worker to be placed on s2",
            )
            lane = nimbus.lane
            assert lane is not None
            wait_until(lambda: lane.outcome is ReadOutcome.JUDGED, 20, "the lane to judge s1")
            judged = 0
            deadline = time.monotonic() + 8.0  # many floors of jittered beats
            while time.monotonic() < deadline:
                assigned = assignments.read("orders")
                assert assigned is not None and assigned.supervisor == "s1"
                judged += lane.outcome is ReadOutcome.JUDGED
                time.sleep(TICK_SECS)
            assert judged > 0
            assert promotions(tmp_path / "trail.jsonl") == []
