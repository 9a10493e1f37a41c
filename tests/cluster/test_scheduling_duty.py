"""The leader's scheduling round against a real ZooKeeper, with the heartbeats written by the
test as supervisors would write them, and the leader's monotonic clock in the test's hands.

What is proved: new pipelines are assigned to registered supervisors; a supervisor whose
heartbeats stop is judged dead only after ``nimbus.supervisor.timeout.secs`` of the leader's
own clock, and its pipelines move; a new term waits a whole timeout before judging anything
dead; workers' outcomes make pipelines FINISHED or FAILED and their assignments go; a hot
pipeline's standby worker is placed on another supervisor than its active worker, and goes
when the pipeline is no longer hot. Every round here places standby workers: the other
scenarios prove that pipelines that are not hot see no change.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from stratus.api.records import (
    AssignmentReason,
    PipelineStatus,
    QueryProgress,
    SupervisorHeartbeat,
    SupervisorSummary,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.api.standby_workers import (
    StandbyWorkerBeat,
    StandbyWorkerPlacement,
    StandbyWorkerState,
)
from stratus.codedist.package_store import StoredPackage
from stratus.coordination.coordinator import Coordinator
from stratus.coordination.errors import LeadershipLostError, TransactionFailedError
from stratus.coordination.leadership import Leadership
from stratus.nimbus.duties.scheduling import SchedulingDuty
from stratus.nimbus.failover.beat_watch import BeatWatch
from stratus.nimbus.failover.lane import FailoverLane
from stratus.nimbus.failover.promotion import Promoter
from stratus.nimbus.failover.promotion_plan import Promotion
from stratus.nimbus.records.assignment_history import AssignmentHistoryLog
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.records.replication_policy import ReplicationPolicy
from stratus.nimbus.scheduling.assignments import AssignmentTable
from stratus.nimbus.scheduling.cordons import CordonTable, DrainMemory
from stratus.nimbus.scheduling.scheduler import assignment_of
from stratus.nimbus.scheduling.standby_workers import StandbyWorkerTable
from stratus.nimbus.settings import SchedulingSettings, StandbySettings
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.zk.ensemble import ZooKeeperEnsemble
from stratus.zk.errors import ZooKeeperUnavailableError
from stratus.zk.paths import ClusterPaths
from tests.harness.supervisor_fakes import FakeClock as LaneClock
from tests.harness.zkfixtures import chroot_for, kazoo_client, wait_until
from tests.unit.test_failover_lane import LEASE, POLL, Beats, Fence, Immediate
from tests.unit.test_failover_lane import SETTINGS as DETECTOR

PATHS = ClusterPaths("/stratus")
SETTINGS = SchedulingSettings(
    supervisor_timeout_secs=10,
    task_timeout_secs=30,
    blind_after_reconnect=True,
    # the ZooKeeper state store: no fast beats; no worker here commits a batch
    standby=StandbySettings(needs_beat_lease=False, place_wait_secs=0.0),
)
ONE_COPY = ReplicationPolicy(required=1, wait_secs=60)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Cluster:
    """A leader's scheduling duty, and the supervisors' side written by hand."""

    def __init__(self, coordinator: Coordinator, *, real_session: bool = False) -> None:
        """With ``real_session`` the duty learns of reconnections and of ZooKeeper's epoch
        from the coordinator's own session, as a nimbus does; else from this object's
        ``connections`` and ``zookeeper_epoch``."""
        client = coordinator.session.client
        self.real_session = real_session
        for parent in PATHS.all_parents():
            client.ensure_path(parent)
        self.coordinator = coordinator
        self.clock = FakeClock()
        self.ops = PipelineOps(client, PATHS, wall=lambda: 1.0)
        self.table = AssignmentTable(client, PATHS)
        self.board = HeartbeatBoard(ZooKeeperStateStore(client, PATHS.heartbeats))
        self.registered: dict[str, SupervisorSummary] = {}
        self.connections = 1  # the session's count of connections
        self.zookeeper_epoch: int | Exception | None = 1  # ZooKeeper's epoch, its failure
        self.cordons = CordonTable(client, PATHS)
        self.drains = DrainMemory()
        self.standby = StandbyWorkerTable(client, PATHS)
        self.lane: FailoverLane | None = None  # with_lane: the failover lane's
        self.promoted: list[Promotion] = []  # the round's promotions, as the trail gets them
        self.duty = self.new_duty()
        self.term = coordinator.nominate("nimbus", "leader", timeout=10)
        self.beats = 0

    def new_duty(self, settings: SchedulingSettings = SETTINGS) -> SchedulingDuty:
        """A leader's duty with no memory: a nimbus that just started leading."""
        session = self.coordinator.session
        return SchedulingDuty(
            ops=self.ops, assignments=self.table, board=self.board,
            registered=lambda: self.registered, settings=settings, clock=self.clock,
            connections=(lambda: session.connections) if self.real_session
            else (lambda: self.connections),
            zookeeper_epoch=session.zookeeper_epoch if self.real_session else self.learn_epoch,
            cordons=self.cordons, drains=self.drains, standby=self.standby,
            promoter=Promoter(
                session.client, PATHS, on_promoted=lambda _t, p, _s, _f: self.promoted.append(p)
            ),
            lane=self.lane,
        )  # fmt: skip

    def learn_epoch(self) -> int | None:
        if isinstance(self.zookeeper_epoch, Exception):
            raise self.zookeeper_epoch
        return self.zookeeper_epoch

    def new_leader(self) -> None:
        """Another term, and a duty that has seen nothing: a change of leader."""
        self.coordinator.unnominate("nimbus")
        self.term = self.coordinator.nominate("nimbus", "leader", timeout=10)
        self.duty = self.new_duty()

    def submit(self, name: str, conf: dict[str, Any] | None = None) -> None:
        self.ops.submit(
            self.term,
            name,
            conf or {},
            f"r-{name}",
            StoredPackage("d" * 64, 10),
            replication=ONE_COPY,
        )

    def supervisor(self, sid: str, slots: int = 2, host: str = "") -> None:
        self.registered[sid] = SupervisorSummary(id=sid, slots=slots, host=host)
        self.heartbeat(sid)

    def heartbeat(
        self,
        sid: str,
        *,
        stopping: bool = False,
        warm: int = 0,
        standby: list[StandbyWorkerBeat] | None = None,
    ) -> None:
        self.beats += 1
        self.board.put_supervisor(
            SupervisorHeartbeat(
                id=sid,
                time=float(self.beats),
                slots=2,
                stopping=stopping,
                warm_ready=warm,
                standby_workers=standby or [],
            )
        )

    def worker_on(self, name: str, sid: str, state: WorkerState) -> None:
        """A heartbeat of ``name``'s worker on ``sid``, whatever the assignment says."""
        record = self.ops.read(name)
        assert record is not None
        self.beats += 1
        self.board.put_worker(
            WorkerHeartbeat(
                pipeline=name, supervisor=sid, epoch=self.term.epoch,
                generation=record.generation, digest=record.digest, state=state,
                time=float(self.beats),
            )
        )  # fmt: skip

    def worker(
        self,
        name: str,
        state: WorkerState,
        error: str | None = None,
        queries: list[QueryProgress] | None = None,
    ) -> None:
        assignment = self.table.read(name)
        assert assignment is not None
        self.beats += 1
        self.board.put_worker(
            WorkerHeartbeat(
                pipeline=name, supervisor=assignment.supervisor, epoch=assignment.epoch,
                generation=assignment.generation, digest=assignment.digest, state=state,
                time=float(self.beats), error=error, queries=queries or [],
            )
        )  # fmt: skip

    def round(self, term: Leadership | None = None) -> Any:
        return self.duty.run(term or self.term)

    def where(self, name: str) -> str | None:
        assignment = self.table.read(name)
        return assignment.supervisor if assignment else None


@pytest.fixture
def cluster(zk_hosts: str) -> Iterator[Cluster]:
    coordinator = Coordinator.standalone(zk_hosts, session_timeout=4.0).start()
    try:
        yield Cluster(coordinator)
    finally:
        coordinator.close()


def test_new_pipelines_are_spread_over_registered_supervisors(cluster):
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    for name in ("a", "b"):
        cluster.submit(name)

    cluster.round()

    assert {cluster.where("a"), cluster.where("b")} == {"s1", "s2"}
    assignment = cluster.table.read("a")
    assert assignment is not None and assignment.epoch == cluster.term.epoch


def test_a_silent_supervisor_loses_its_pipelines_only_after_the_timeout(cluster):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    cluster.supervisor("s2")  # s1 falls silent from now on; s2 keeps beating

    cluster.clock.now += 9
    cluster.heartbeat("s2")
    cluster.round()
    assert cluster.where("a") == "s1"

    cluster.clock.now += 2
    cluster.heartbeat("s2")
    plan = cluster.round()
    assert cluster.where("a") == "s2"
    assert plan.moved == {"a": ("s1", "s2")}


def test_a_new_term_waits_a_whole_timeout_before_moving_anything(cluster):
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    cluster.submit("a")
    cluster.round()
    first = cluster.where("a")
    cluster.clock.now += 60  # long silence of everyone, seen by no leader
    cluster.coordinator.unnominate("nimbus")
    new_term = cluster.coordinator.nominate("nimbus", "leader", timeout=10)
    assert new_term.epoch > cluster.term.epoch

    cluster.round(new_term)
    assert cluster.where("a") == first

    cluster.clock.now += 11  # a whole timeout of the new term, still silent
    for sid in cluster.registered:
        if sid != first:
            cluster.heartbeat(sid)
    cluster.round(new_term)
    assert cluster.where("a") not in (None, first)


def test_after_a_reconnect_to_a_new_zookeeper_leader_nothing_moves_before_a_whole_timeout(
    cluster,
):
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    cluster.submit("a")
    cluster.round()
    first = cluster.where("a")
    cluster.clock.now += 60  # no round: the connection to ZooKeeper was down
    cluster.connections += 1  # and came back (a suspended term resumed, or a granted one held)
    cluster.zookeeper_epoch = 2  # the quorum was lost: a supervisor may have proved it

    plan = cluster.round()
    assert cluster.where("a") == first and not plan.moved  # the outage was blindness

    cluster.clock.now += 11  # a whole timeout of watching, first still silent
    for sid in cluster.registered:
        if sid != first:
            cluster.heartbeat(sid)
    cluster.round()
    assert cluster.where("a") not in (None, first)


def flap_while_one_is_silent(cluster) -> str:
    """Pipeline ``a`` on one of two supervisors, which then goes silent while the leader's
    connection flaps three times, more often than once per supervisor timeout, and the
    other beats on; the silent one's id."""
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    cluster.submit("a")
    cluster.round()
    first: str = cluster.where("a")
    for _ in range(3):
        cluster.clock.now += 4
        cluster.connections += 1
        for sid in cluster.registered:
            if sid != first:
                cluster.heartbeat(sid)
        cluster.round()
    return first


def test_a_reconnect_to_the_same_zookeeper_quorum_keeps_the_leaders_silences(cluster):
    """The leader's connection flaps between members of one quorum (ZooKeeper's epoch stays):
    the quorum served throughout, nobody could prove an outage, the silent one moves."""
    first = flap_while_one_is_silent(cluster)
    assert cluster.where("a") not in (None, first)


def test_with_a_standalone_zookeeper_every_reconnect_restarts_the_silences(cluster):
    """A standalone server keeps its epoch when it restarts: a reconnection may have followed
    an outage that a supervisor on its host proved by its refusals."""
    cluster.zookeeper_epoch = None
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    cluster.submit("a")
    cluster.round()
    first = cluster.where("a")
    cluster.clock.now += 60
    cluster.connections += 1
    plan = cluster.round()
    assert cluster.where("a") == first and not plan.moved


def test_zookeeper_tells_its_epoch_and_a_standalone_server_none(zk_hosts, zk_ensemble):
    for hosts, standalone in ((zk_hosts, True), (zk_ensemble.connect_string, False)):
        coordinator = Coordinator.standalone(hosts, session_timeout=4.0).start()
        try:
            coordinator.session.client.ensure_path("/stratus")
            epoch = coordinator.session.zookeeper_epoch()
            if standalone:
                assert epoch is None
            else:
                assert epoch is not None and epoch >= 1  # a quorum's epochs begin at 1
        finally:
            coordinator.close()


def test_an_epoch_that_cannot_be_learned_after_a_reconnect_restarts_every_silence(cluster):
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    cluster.submit("a")
    cluster.round()
    first = cluster.where("a")
    cluster.clock.now += 60
    cluster.connections += 1
    cluster.zookeeper_epoch = ZooKeeperUnavailableError("no answer")
    plan = cluster.round()
    assert cluster.where("a") == first and not plan.moved

    cluster.zookeeper_epoch = 1  # learned at last, unchanged: the silences run on from then
    cluster.clock.now += 11
    for sid in cluster.registered:
        if sid != first:
            cluster.heartbeat(sid)
    cluster.round()
    assert cluster.where("a") not in (None, first)


@pytest.fixture
def ensemble_cluster(zk_ensemble: ZooKeeperEnsemble, request) -> Iterator[Cluster]:
    """A leader's duty on a three-member ensemble, connected to its two followers only (so
    that stopping one of them moves the connection and keeps the quorum)."""
    leader = zk_ensemble.leader()
    followers = ",".join(s.connect_string for s in zk_ensemble.servers if s is not leader)
    chroot = chroot_for(request.node.name)
    with kazoo_client(zk_ensemble.connect_string) as admin:
        admin.ensure_path(chroot)
    coordinator = Coordinator.standalone(followers + chroot, session_timeout=4.0).start()
    try:
        yield Cluster(coordinator, real_session=True)
    finally:
        coordinator.close()


def reconnected(cluster: Cluster, since: int) -> bool:
    session = cluster.coordinator.session
    return session.connected and session.connections > since


def test_a_member_restart_that_moves_the_leaders_connection_keeps_its_silences(
    ensemble_cluster, zk_ensemble
):
    """ZooKeeper's epoch stays: a dead supervisor is moved on time across the reconnect."""
    cluster = ensemble_cluster
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    cluster.submit("a")
    cluster.round()
    first = cluster.where("a")
    session = cluster.coordinator.session
    before = session.connections
    for follower in [s for s in zk_ensemble.servers if s.mode() == "follower"]:
        follower.stop()  # the quorum holds: the leader and the other follower
        follower.start()
        if session.connections > before:
            break
    wait_until(lambda: reconnected(cluster, before), 30, "the connection to move")

    cluster.clock.now += 11  # a whole timeout since the silent one's last beat
    for sid in cluster.registered:
        if sid != first:
            cluster.heartbeat(sid)
    cluster.round()
    assert cluster.where("a") not in (None, first)


def test_a_quorum_loss_restarts_the_leaders_silences(ensemble_cluster, zk_ensemble):
    cluster = ensemble_cluster
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    cluster.submit("a")
    cluster.round()
    first = cluster.where("a")
    before = cluster.coordinator.session.connections
    for server in zk_ensemble.servers[:2]:
        server.stop()  # no quorum: a supervisor may prove it and keep its workers
    zk_ensemble.start()
    wait_until(lambda: reconnected(cluster, before), 30, "the connection to come back")

    cluster.clock.now += 11  # past a timeout since every last beat, and nothing written
    plan = cluster.round()  # since: the replies to reads still carry the old epoch
    assert cluster.where("a") == first and not plan.moved  # ZooKeeper's epoch changed

    cluster.clock.now += 11  # a whole timeout of watching since
    for sid in cluster.registered:
        if sid != first:
            cluster.heartbeat(sid)
    cluster.round()
    assert cluster.where("a") not in (None, first)


def test_supervisors_that_fence_on_outages_keep_a_flapping_leaders_silences(cluster):
    cluster.duty = SchedulingDuty(
        ops=cluster.ops, assignments=cluster.table, board=cluster.board,
        registered=lambda: cluster.registered, clock=cluster.clock,
        settings=SchedulingSettings(supervisor_timeout_secs=10, task_timeout_secs=30),
        connections=lambda: cluster.connections,
    )  # fmt: skip
    first = flap_while_one_is_silent(cluster)
    assert cluster.where("a") not in (None, first)  # moved off the silent one all the same


def test_a_read_that_waited_out_a_lost_connection_judges_nothing_by_the_wait(cluster, monkeypatch):
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    cluster.submit("a")
    cluster.round()
    first = cluster.where("a")
    read = cluster.board.read

    def read_after_an_outage():  # kazoo held the request until the connection came back
        cluster.clock.now += 60
        return read()

    monkeypatch.setattr(cluster.board, "read", read_after_an_outage)
    cluster.clock.now += 5
    plan = cluster.round()  # judged as of its start: 5 s of silence, not 65
    assert cluster.where("a") == first and not plan.moved


def test_a_supervisor_that_stopped_cleanly_keeps_its_pipelines_until_the_timeout(cluster):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    cluster.supervisor("s2")

    cluster.heartbeat("s1", stopping=True)  # its workers outlive it, to be adopted
    del cluster.registered["s1"]
    cluster.round()
    assert cluster.where("a") == "s1"
    cluster.clock.now += 9
    cluster.heartbeat("s2")
    cluster.round()
    assert cluster.where("a") == "s1"

    cluster.clock.now += 2  # 11 s of silence since its stopping heartbeat
    cluster.heartbeat("s2")
    cluster.round()
    assert cluster.where("a") == "s2"
    assert reasons(cluster, "a")[-1] == ("supervisor_dead", "s2", "s1")


def test_a_supervisor_that_is_stopping_gets_no_new_pipeline(cluster):
    cluster.supervisor("s1")
    cluster.heartbeat("s1", stopping=True)  # still registered, for a moment
    cluster.submit("a")

    cluster.round()

    assert cluster.where("a") is None


def test_a_finished_batch_and_a_failed_worker_end_their_pipelines(cluster):
    cluster.supervisor("s1")
    cluster.submit("batch")
    cluster.submit("broken")
    cluster.round()

    cluster.worker("batch", WorkerState.FINISHED)
    cluster.worker("broken", WorkerState.FAILED, error="entrypoint 'jobs:run': no module 'jobs'")
    cluster.round()

    assert cluster.ops.read("batch").status is PipelineStatus.FINISHED
    broken = cluster.ops.read("broken")
    assert broken.status is PipelineStatus.FAILED
    assert "no module 'jobs'" in (broken.reason or "")
    assert cluster.table.read_all() == {}


def test_deactivate_and_rebalance_change_the_assignment(cluster):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()

    cluster.ops.rebalance(cluster.term, "a", {"spark.sql.shuffle.partitions": 3})
    cluster.round()
    assignment = cluster.table.read("a")
    assert assignment is not None
    assert (assignment.generation, assignment.conf) == (1, {"spark.sql.shuffle.partitions": 3})

    cluster.ops.deactivate(cluster.term, "a")
    cluster.round()
    assert cluster.table.read("a") is None


def test_a_deposed_leader_writes_no_assignment(cluster):
    cluster.supervisor("s1")
    old = cluster.term
    cluster.coordinator.unnominate("nimbus")
    cluster.term = cluster.coordinator.nominate("nimbus", "leader", timeout=10)
    cluster.submit("a")

    with pytest.raises(Exception, match="no longer leads"):
        cluster.round(old)
    assert cluster.table.read("a") is None


def test_a_deposed_leader_forgets_no_heartbeat(cluster):
    cluster.supervisor("s1")
    cluster.heartbeat("s1", stopping=True)
    del cluster.registered["s1"]  # stopped cleanly and left: forgotten once judged dead
    cluster.round()
    cluster.clock.now += 11
    old = cluster.term
    cluster.coordinator.unnominate("nimbus")

    cluster.round(old)

    assert "s1" in cluster.board.supervisors()


def test_a_pipeline_record_that_does_not_decode_is_skipped_naming_it(cluster, caplog):
    cluster.supervisor("s1")
    cluster.submit("a")
    client = cluster.coordinator.session.client
    client.create(PATHS.pipeline("garbled"), b"{not json")

    with caplog.at_level(logging.WARNING, logger="stratus.nimbus.records.pipeline_ops"):
        assert set(cluster.ops.read_all()) == {"a"}
    assert "pipeline=garbled" in caplog.text
    cluster.round()  # the leader's round goes on with the others
    assert cluster.where("a") == "s1"


# ---------------------------------------------------------------------- assignment history


def reasons(cluster: Cluster, name: str) -> list[tuple[str, str | None, str | None]]:
    """``name``'s history, oldest first: (reason, supervisor, previous)."""
    changes = reversed(cluster.table.history(name))
    return [(c.reason.value, c.supervisor, c.previous) for c in changes]


def test_every_change_of_an_assignment_is_recorded_with_its_reason(cluster):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    cluster.ops.rebalance(cluster.term, "a", {"spark.sql.shuffle.partitions": 3})
    cluster.round()
    cluster.ops.deactivate(cluster.term, "a")
    cluster.round()
    cluster.ops.activate(cluster.term, "a")
    cluster.round()
    cluster.supervisor("s2")  # s1 falls silent from now on
    cluster.clock.now += 11
    cluster.heartbeat("s2")
    cluster.round()
    cluster.ops.kill(cluster.term, "a", wait_secs=60)
    cluster.round()

    assert reasons(cluster, "a") == [
        ("placed", "s1", None),
        ("rebalanced", "s1", "s1"),
        ("deactivated", None, "s1"),
        ("placed", "s1", None),
        ("supervisor_dead", "s2", "s1"),
        ("killed", None, "s2"),
    ]
    changes = cluster.table.history("a")
    assert {c.epoch for c in changes} == {cluster.term.epoch}
    assert changes[-2].generation == 1  # the rebalance's, as its assignment carried it


def test_a_round_that_changes_nothing_records_nothing(cluster):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    client = cluster.coordinator.session.client
    before = client.exists(PATHS.assignment_history("a"))

    for _ in range(3):
        cluster.heartbeat("s1")
        assert cluster.round().empty

    after = client.exists(PATHS.assignment_history("a"))
    assert (after.cversion, after.pzxid) == (before.cversion, before.pzxid)
    assert len(cluster.table.history("a")) == 1


def test_a_write_refused_for_a_stale_epoch_leaves_no_history(cluster):
    cluster.supervisor("s1")
    old = cluster.term
    cluster.coordinator.unnominate("nimbus")
    cluster.term = cluster.coordinator.nominate("nimbus", "leader", timeout=10)
    cluster.submit("a")

    with pytest.raises(Exception, match="no longer leads"):
        cluster.round(old)

    assert cluster.table.history("a") == []
    assert cluster.coordinator.session.client.exists(PATHS.assignment_history("a")) is None
    cluster.round()  # the real leader's write records its change
    assert reasons(cluster, "a") == [("placed", "s1", None)]


def test_the_history_keeps_the_newest_changes_only(cluster):
    client = cluster.coordinator.session.client
    cluster.duty = SchedulingDuty(
        ops=cluster.ops,
        assignments=AssignmentTable(client, PATHS, AssignmentHistoryLog(client, PATHS, keep=3)),
        board=cluster.board, registered=lambda: cluster.registered, settings=SETTINGS,
        clock=cluster.clock,
    )  # fmt: skip
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    for partitions in range(2, 7):
        cluster.ops.rebalance(cluster.term, "a", {"spark.sql.shuffle.partitions": partitions})
        cluster.round()

    changes = cluster.table.history("a")
    assert [c.generation for c in changes] == [5, 4, 3]  # newest first, the oldest trimmed
    assert len(client.get_children(PATHS.assignment_history("a"))) == 3


def test_an_update_applied_is_recorded_as_updated(cluster):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    new_code = StoredPackage("e" * 64, 11)
    cluster.ops.stage_update(
        cluster.term,
        "a",
        "u1",
        new_code,
        manifest_conf={},
        update_conf={},
        replication=ONE_COPY,
    )
    cluster.ops.note_update_replication(cluster.term, "a", holders=1)
    cluster.round()

    newest = cluster.table.history("a")[0]
    assert (newest.reason.value, newest.digest) == ("updated", "e" * 64)


def test_the_history_is_removed_with_the_pipeline(cluster):
    client = cluster.coordinator.session.client
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    cluster.ops.kill(cluster.term, "a", wait_secs=0)
    cluster.round()
    assert [c.reason.value for c in cluster.table.history("a")] == ["killed", "placed"]

    removed = cluster.ops.remove_due(cluster.term, {"a": cluster.ops.read("a")})

    assert set(removed) == {"a"}
    assert client.exists(PATHS.assignment_history("a")) is None
    cluster.submit("a")  # a new pipeline of the name starts a history of its own
    cluster.round()
    assert reasons(cluster, "a") == [("placed", "s1", None)]


def partial_reads(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of the heartbeats as if a configured pacemaker did not answer."""
    read = cluster.board.read
    monkeypatch.setattr(cluster.board, "read", lambda: dataclasses.replace(read(), partial=True))


def test_a_partial_read_judges_a_silent_supervisor_dead_only_once_unregistered_a_timeout(
    cluster, monkeypatch
):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    cluster.supervisor("s2")  # s1 falls silent from now on; s2 keeps beating
    partial_reads(cluster, monkeypatch)

    cluster.clock.now += 30  # silent three timeouts: its rounds may be in the other pacemaker
    cluster.heartbeat("s2")
    assert not cluster.round().moved and cluster.where("a") == "s1"

    del cluster.registered["s1"]  # its ZooKeeper session expired: its lease no longer renews
    cluster.heartbeat("s2")
    assert not cluster.round().moved
    cluster.clock.now += 9
    cluster.heartbeat("s2")
    assert not cluster.round().moved
    cluster.clock.now += 2
    cluster.heartbeat("s2")
    assert cluster.round().moved == {"a": ("s1", "s2")}


def test_a_partial_read_judges_a_supervisor_that_stopped_cleanly_as_any_other(cluster, monkeypatch):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    cluster.supervisor("s2")
    partial_reads(cluster, monkeypatch)

    cluster.heartbeat("s1", stopping=True)
    del cluster.registered["s1"]
    cluster.round()
    assert cluster.where("a") == "s1"  # not at once: its workers may outlive it

    cluster.clock.now += 11  # silent and unregistered past the timeout
    cluster.heartbeat("s2")
    cluster.round()
    assert cluster.where("a") == "s2"


# ---------------------------------------------------------------------- cordon and drain


def test_a_cordoned_supervisor_gets_no_new_pipeline_and_keeps_its_own_across_a_new_leader(
    cluster,
):
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    cluster.submit("a")
    cluster.round()
    assert cluster.where("a") == "s1"
    cluster.cordons.put(cluster.term, "s1", by="ops", drain=False, now=1.0)

    for name in ("b", "c"):
        cluster.submit(name)
    cluster.round()
    assert (cluster.where("a"), cluster.where("b"), cluster.where("c")) == ("s1", "s2", "s2")

    cluster.new_leader()
    cluster.submit("d")
    cluster.clock.now += 5
    cluster.heartbeat("s1")
    cluster.heartbeat("s2")
    cluster.round()
    assert (cluster.where("a"), cluster.where("d")) == ("s1", None)  # s2 is full

    assert cluster.cordons.remove(cluster.term, "s1")
    cluster.round()
    assert cluster.where("d") == "s1"


def test_cordoning_twice_changes_nothing_and_a_cordon_keeps_a_drain(cluster):
    first = cluster.cordons.put(cluster.term, "s1", by="ops", drain=False, now=1.0)
    again = cluster.cordons.put(cluster.term, "s1", by="other", drain=False, now=2.0)
    drained = cluster.cordons.put(cluster.term, "s1", by="other", drain=True, now=3.0)

    assert again == first
    assert drained.drain and drained.at == 1.0 and drained.by == "ops"
    assert cluster.cordons.put(cluster.term, "s1", by="ops", drain=False, now=4.0) == drained
    assert cluster.cordons.read_all() == {"s1": drained}


def test_a_drain_keeps_what_a_newer_release_wrote_into_the_cordon(cluster):
    """The cordon is read and written back: fields this release does not know survive it
    (docs/upgrades.md)."""
    cluster.cordons.put(cluster.term, "s1", by="ops", drain=False, now=1.0)
    client = cluster.coordinator.session.client
    path = PATHS.cordon("s1")
    data, stat = client.get(path)
    client.set(path, json.dumps({**json.loads(data), "until": 99.0}).encode(), stat.version)

    drained = cluster.cordons.put(cluster.term, "s1", by="other", drain=True, now=3.0)

    stored = json.loads(client.get(path)[0])
    assert stored["drain"] and stored["by"] == "ops" and stored["until"] == 99.0
    assert drained.unknown_fields == {"until": 99.0}


def test_a_deposed_leader_cannot_cordon(cluster):
    old = cluster.term
    cluster.coordinator.unnominate("nimbus")

    with pytest.raises(LeadershipLostError):
        cluster.cordons.put(old, "s1", by="ops", drain=False, now=1.0)
    assert cluster.cordons.read_all() == {}


def test_a_drain_stops_the_old_worker_before_it_places_the_pipeline_where_a_warm_one_waits(
    cluster,
):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    cluster.worker_on("a", "s1", WorkerState.RUNNING)
    cluster.supervisor("s2")
    cluster.supervisor("s3")
    cluster.heartbeat("s3", warm=1)  # s2 and s3 have the same room; s3 a warm worker ready
    cluster.cordons.put(cluster.term, "s1", by="ops", drain=True, now=1.0)

    cluster.round()
    assert cluster.where("a") is None  # first its worker on s1 stops
    assert cluster.drains.last(cluster.term.epoch).moving == {"a": "s1"}

    cluster.round()  # its worker on s1 still runs: not placed yet, whoever leads
    cluster.new_leader()
    assert cluster.drains.last(cluster.term.epoch) is None  # unknown: no "drained" too soon
    cluster.round()
    assert cluster.where("a") is None
    assert cluster.drains.last(cluster.term.epoch).moving == {"a": "s1"}

    cluster.worker_on("a", "s1", WorkerState.STOPPED)
    cluster.round()
    assert cluster.where("a") == "s3"
    assert reasons(cluster, "a")[-2:] == [("drained", None, "s1"), ("drained", "s3", "s1")]
    assert cluster.drains.last(cluster.term.epoch).moving == {}


def test_a_drained_pipeline_with_no_room_elsewhere_keeps_running_and_is_named(cluster):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    cluster.cordons.put(cluster.term, "s1", by="ops", drain=True, now=1.0)

    cluster.round()

    assert cluster.where("a") == "s1"
    assert cluster.drains.last(cluster.term.epoch).no_room == {"a": "s1"}
    cluster.supervisor("s2")
    cluster.round()
    assert cluster.where("a") is None  # room appeared: its worker on s1 stops first


def test_a_pipeline_on_the_way_waits_while_a_pacemaker_did_not_answer(cluster, monkeypatch):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    cluster.supervisor("s2")
    cluster.cordons.put(cluster.term, "s1", by="ops", drain=True, now=1.0)
    cluster.round()
    assert cluster.where("a") is None  # no heartbeat of its worker: stopped, or unseen
    partial_reads(cluster, monkeypatch)

    cluster.round()
    assert cluster.where("a") is None  # its heartbeat may be in the pacemaker not read

    monkeypatch.undo()
    cluster.round()
    assert cluster.where("a") == "s2"


def updated(cluster: Cluster, name: str, digest: str) -> None:
    """Apply an update of ``name`` to the code ``digest``, as the replication duty does."""
    cluster.ops.stage_update(
        cluster.term, name, f"u-{digest[:4]}", StoredPackage(digest, 11),
        manifest_conf={}, update_conf={}, replication=ONE_COPY,
    )  # fmt: skip
    cluster.ops.note_update_replication(cluster.term, name, holders=1)


def test_an_update_whose_worker_fails_before_its_first_batch_is_rolled_back(cluster):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    updated(cluster, "a", "e" * 64)
    cluster.round()  # version 2 assigned
    on_trial = cluster.ops.read("a")
    assert on_trial.version == 2 and on_trial.on_trial

    cluster.worker("a", WorkerState.FAILED, error="KeyError: 'region'")
    cluster.round()

    back = cluster.ops.read("a")
    assert (back.status, back.version, back.digest) == (PipelineStatus.ACTIVE, 1, "d" * 64)
    assert back.reason == (
        "rolled back from version 2 to 1: its worker failed before its first batch: "
        "KeyError: 'region'"
    )
    assert back.generation == on_trial.generation + 1
    cluster.round()
    assignment = cluster.table.read("a")
    assert assignment is not None and assignment.digest == "d" * 64
    assert cluster.table.history("a")[0].reason.value == "rolled_back"


def test_an_update_that_commits_a_batch_is_proven_and_a_later_failure_fails_it(cluster):
    cluster.supervisor("s1")
    cluster.submit("a")
    cluster.round()
    updated(cluster, "a", "e" * 64)
    cluster.round()
    assignment = cluster.table.read("a")
    assert assignment is not None
    cluster.beats += 1
    cluster.board.put_worker(
        WorkerHeartbeat(
            pipeline="a", supervisor="s1", epoch=assignment.epoch,
            generation=assignment.generation, digest=assignment.digest,
            state=WorkerState.RUNNING, time=float(cluster.beats),
            queries=[QueryProgress(name="q", batch_id=0, rows_total=3)],
        )
    )  # fmt: skip
    cluster.round()
    assert not cluster.ops.read("a").on_trial

    cluster.worker("a", WorkerState.FAILED, error="disk full")
    cluster.round()

    failed = cluster.ops.read("a")
    assert (failed.status, failed.version) == (PipelineStatus.FAILED, 2)


# ---------------------------------------------------------------------- standby workers


def test_a_hot_pipeline_gets_a_standby_worker_on_another_supervisor_until_it_is_none(cluster):
    for sid, host in (("s1", "h1"), ("s2", "h1"), ("s3", "h2")):
        cluster.supervisor(sid, host=host)
    cluster.submit("hot", {"pipeline.standby": "hot"})
    cluster.submit("plain")
    cluster.round()
    active = cluster.where("hot")
    placement = cluster.standby.read("hot")
    assert placement is not None and placement.supervisor not in (None, active)
    assert cluster.registered[placement.supervisor].host != cluster.registered[active].host
    record = cluster.ops.read("hot")
    assert (placement.epoch, placement.generation, placement.digest) == (
        cluster.term.epoch,
        record.generation,
        record.digest,
    )
    assert cluster.standby.read("plain") is None  # a pipeline that does not ask gets none

    client = cluster.coordinator.session.client
    before = client.exists(PATHS.standby_workers)
    cluster.round()  # nothing changed: nothing written
    after = client.exists(PATHS.standby_workers)
    assert (after.cversion, after.pzxid) == (before.cversion, before.pzxid)
    assert client.exists(PATHS.standby_worker("hot")).version == 0

    cluster.ops.rebalance(cluster.term, "hot", {"spark.sql.shuffle.partitions": 3})
    cluster.round()
    rewritten = cluster.standby.read("hot")
    assert rewritten is not None and rewritten.supervisor == placement.supervisor
    assert rewritten.generation == placement.generation + 1

    cluster.ops.rebalance(cluster.term, "hot", {"pipeline.standby": "none"})
    cluster.round()
    assert cluster.standby.read("hot") is None
    assert cluster.where("hot") == active  # the active worker stays where it runs


def test_a_hot_pipelines_standby_worker_waits_for_the_first_batch_of_its_assignment(cluster):
    waiting = dataclasses.replace(SETTINGS.standby, place_wait_secs=600.0)
    cluster.duty = cluster.new_duty(dataclasses.replace(SETTINGS, standby=waiting))
    for sid in ("s1", "s2"):
        cluster.supervisor(sid)
    cluster.submit("hot", {"pipeline.standby": "hot"})
    cluster.round()
    assert cluster.where("hot") is not None
    assert cluster.standby.read("hot") is None  # its worker is not even heard of
    cluster.worker("hot", WorkerState.RUNNING)
    cluster.round()
    assert cluster.standby.read("hot") is None  # running, no batch committed yet

    cluster.worker("hot", WorkerState.RUNNING, queries=[QueryProgress(name="q", batch_id=0)])
    cluster.round()
    placement = cluster.standby.read("hot")
    assert placement is not None and placement.supervisor not in (None, cluster.where("hot"))


def test_a_standby_worker_leaves_a_supervisor_judged_dead(cluster):
    for sid in ("s1", "s2", "s3"):
        cluster.supervisor(sid, slots=1)
    cluster.submit("hot", {"pipeline.standby": "hot"})
    cluster.round()
    active = cluster.where("hot")
    first = cluster.standby.read("hot")
    assert first is not None and first.supervisor not in (None, active)

    cluster.clock.now += 11  # the standby worker's supervisor falls silent
    for sid in cluster.registered:
        if sid != first.supervisor:
            cluster.heartbeat(sid)
    cluster.round()

    moved = cluster.standby.read("hot")
    assert moved is not None
    assert moved.supervisor not in (None, active, first.supervisor)
    assert cluster.where("hot") == active


def test_a_placement_planned_against_an_assignment_promoted_since_is_not_written(cluster):
    for sid in ("s1", "s2"):
        cluster.supervisor(sid, slots=2)
    cluster.submit("hot", {"pipeline.standby": "hot"})
    cluster.round()
    active, standby = cluster.where("hot"), cluster.standby.read("hot")
    assert standby is not None and standby.supervisor not in (None, active)
    client = cluster.coordinator.session.client
    read_placements = cluster.standby.read_all

    def promoted_after_the_assignments_were_read() -> Any:
        # the failover lane's promotion lands between the round's read of the assignments
        # and its read of the placements: the pipeline now runs where its standby waited
        assignment = cluster.table.read("hot")
        assert assignment is not None
        moved = assignment.model_copy(update={"supervisor": standby.supervisor})
        client.set(PATHS.assignment("hot"), moved.encode())
        client.delete(PATHS.standby_worker("hot"))
        cluster.standby.read_all = read_placements
        return read_placements()

    cluster.standby.read_all = promoted_after_the_assignments_were_read
    with pytest.raises(TransactionFailedError, match="check"):
        cluster.round()  # it would place a standby worker where the pipeline now runs
    assert cluster.standby.read("hot") is None
    cluster.round()  # the next round reads again
    again = cluster.standby.read("hot")
    assert again is not None and again.supervisor == active != cluster.where("hot")


def reported(placed: StandbyWorkerPlacement, state: StandbyWorkerState) -> list[StandbyWorkerBeat]:
    """The heartbeat's report of the standby worker ``placed``, in ``state``."""
    return [
        StandbyWorkerBeat(
            pipeline=placed.pipeline,
            generation=placed.generation,
            digest=placed.digest,
            state=state,
            since=1.0,
        )
    ]


def test_a_dead_supervisors_hot_pipeline_is_promoted_to_its_ready_standby_worker(cluster):
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    cluster.submit("hot", {"pipeline.standby": "hot"})
    cluster.round()
    active, placed = cluster.where("hot"), cluster.standby.read("hot")
    assert placed is not None and placed.supervisor not in (None, active)

    cluster.clock.now += 11  # the active's supervisor falls silent past the timeout
    cluster.heartbeat(placed.supervisor, standby=reported(placed, StandbyWorkerState.READY))
    cluster.round()

    assert cluster.where("hot") == placed.supervisor
    newest = cluster.table.history("hot")[0]
    assert newest.reason is AssignmentReason.STANDBY_PROMOTED
    assert (newest.previous, newest.supervisor) == (active, placed.supervisor)
    after = cluster.standby.read("hot")  # the promoted one is gone; no live supervisor is left
    assert after is not None and after.supervisor is None


def test_a_dead_supervisors_hot_pipeline_whose_standby_worker_is_not_ready_moves(cluster):
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    cluster.submit("hot", {"pipeline.standby": "hot"})
    cluster.round()
    active, placed = cluster.where("hot"), cluster.standby.read("hot")
    assert placed is not None and placed.supervisor not in (None, active)

    cluster.clock.now += 11
    cluster.heartbeat(placed.supervisor, standby=reported(placed, StandbyWorkerState.STARTING))
    cluster.round()

    assert cluster.where("hot") == placed.supervisor  # the only one left: a cold start
    newest = cluster.table.history("hot")[0]
    assert newest.reason is not AssignmentReason.STANDBY_PROMOTED


class LaneOnBeats:
    """The failover lane of ``cluster``'s duty, over beats the test writes, on a clock of
    its own, asking fences that answer or not (``answers``); each supervisor advertises a
    beat lease."""

    def __init__(self, cluster: Cluster, *, answers: bool) -> None:
        self.clock = LaneClock()
        self.beats = Beats()
        self.fence = Fence(answers)
        self.woken = 0  # the rounds the lane asked for at once (on_held)
        for sid, summary in cluster.registered.items():
            cluster.registered[sid] = summary.model_copy(update={"beat_lease": LEASE})
        self.lane = FailoverLane(
            BeatWatch(DETECTOR, self.beats.read, clock=self.clock),
            Promoter(cluster.coordinator.session.client, PATHS),
            lambda: cluster.registered,
            poll_secs=POLL,
            fence_pipelines=self.fence,
            fence_executor=Immediate(),
            on_held=self.wake,
            clock=self.clock,
        )
        self.term = cluster.term
        cluster.lane = self.lane
        cluster.duty = cluster.new_duty()

    def wake(self) -> None:
        self.woken += 1

    def run(self, secs: float, beating: set[str]) -> None:
        """``secs`` of the lane's polls, each supervisor of ``beating`` beating between two."""
        end = self.clock() + secs
        while self.clock() < end - 1e-9:
            self.clock.advance(POLL)
            for sid in beating:
                self.beats.beat(sid)
            assert self.lane.step(self.term) == ()  # the standby worker is never READY


def hot_with_its_standby_worker_starting(
    cluster: Cluster, *, answers: bool
) -> tuple[LaneOnBeats, str, str]:
    """ "hot" on one of s1 and s2, its standby worker STARTING on the other, and the lane
    knowing both from the round's snapshot: the lane, the active's supervisor and the
    standby worker's."""
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    lane = LaneOnBeats(cluster, answers=answers)
    cluster.submit("hot", {"pipeline.standby": "hot"})
    cluster.round()
    placed = cluster.standby.read("hot")
    assert placed is not None and placed.supervisor not in (None, cluster.where("hot"))
    cluster.heartbeat(placed.supervisor, standby=reported(placed, StandbyWorkerState.STARTING))
    cluster.round()  # the lane's snapshot: the standby worker STARTING
    active = cluster.where("hot")
    assert active is not None
    return lane, active, placed.supervisor


def test_a_pipeline_its_fence_stopped_and_its_promotion_refused_is_assigned_anew(cluster):
    """The lane fenced the active's supervisor (it answered: its worker is gone, and it holds
    the pipeline until a newer assignment), the promotion was refused: the next round writes
    a new assignment, here on the same supervisor once it is heard again (a stall, not a
    failure), whose newer fencing token ends the hold; once."""
    lane, active, standby = hot_with_its_standby_worker_starting(cluster, answers=True)
    client = cluster.coordinator.session.client
    fenced_at = client.exists(PATHS.assignment("hot"))

    lane.run(2.0, {"s1", "s2"})
    lane.run(2.0, {standby})  # the active's supervisor stalls: fenced, promotion refused
    assert lane.fence.asked and lane.lane.suspected() == {active}
    assert lane.woken == 1  # handed to the round, which runs now
    lane.run(1.0, {"s1", "s2"})  # heard again: no longer suspected
    assert lane.lane.suspected() == frozenset()
    plan = cluster.round()

    assert set(plan.assign) == {"hot"}
    assert cluster.where("hot") == active  # the most free slots: its own
    assert reasons(cluster, "hot")[-1] == ("fenced", active, active)
    moved_at = client.exists(PATHS.assignment("hot"))
    assert moved_at.mzxid > fenced_at.mzxid  # a newer fencing token: the hold ends
    assert cluster.round().empty  # once
    assert client.exists(PATHS.assignment("hot")).mzxid == moved_at.mzxid


def test_a_pipeline_its_fence_stopped_goes_to_its_standby_worker_once_that_is_ready(cluster):
    """As above, but the standby worker is READY by the round after: the round promotes it
    (``fenced``: the fence's answer proves the old worker gone) instead of a Spark start."""
    lane, active, standby = hot_with_its_standby_worker_starting(cluster, answers=True)
    placed = cluster.standby.read("hot")
    assert placed is not None

    lane.run(2.0, {"s1", "s2"})
    lane.run(2.0, {standby})  # the active's supervisor stalls: fenced, promotion refused
    lane.run(1.0, {"s1", "s2"})  # heard again before the lane promoted anything
    assert lane.fence.asked and lane.lane.suspected() == frozenset()
    cluster.heartbeat(standby, standby=reported(placed, StandbyWorkerState.READY))
    cluster.round()

    assert cluster.where("hot") == standby
    assert reasons(cluster, "hot")[-1] == ("standby_promoted", standby, active)
    behind = cluster.standby.read("hot")
    assert behind is None or behind.supervisor != standby
    (promoted,) = cluster.promoted
    assert promoted.cold_start_fenced is None  # a fence on a silence, not of a cold start


def test_a_hot_pipeline_whose_worker_starts_cold_goes_to_its_ready_standby_worker(cluster):
    """The active's worker stopped on its host (its beat lease lapsed for a stall the lane
    did not see as one) and starts again in place, a Spark start, while its standby worker
    is READY: the round hands the start to the lane, whose pipeline fence stops it, and the
    round it then runs at once promotes the standby worker (``fenced``)."""
    lane, active, standby = hot_with_its_standby_worker_starting(cluster, answers=True)
    placed = cluster.standby.read("hot")
    assert placed is not None
    cluster.heartbeat(standby, standby=reported(placed, StandbyWorkerState.READY))
    cluster.worker("hot", WorkerState.RUNNING)
    cluster.round()
    lane.run(1.0, {"s1", "s2"})
    assert lane.fence.asked == []  # running: nothing to fence

    cluster.worker("hot", WorkerState.STARTING)  # started again in place
    cluster.round()
    lane.run(POLL, {"s1", "s2"})
    assert [(sid, set(pipelines)) for sid, pipelines, *_ in lane.fence.asked] == [(active, {"hot"})]
    assert lane.woken == 1  # the answer asks for a round now
    cluster.round()

    assert cluster.where("hot") == standby
    assert reasons(cluster, "hot")[-1] == ("standby_promoted", standby, active)
    (promoted,) = cluster.promoted  # its trail line says when the fence was asked
    assert promoted.cold_start_fenced is not None


def test_no_pipeline_is_assigned_anew_while_its_fence_is_unanswered(cluster):
    """A fence that got no answer proves nothing: the worker may still run. The promotion
    refused on the floor moves nothing, and neither does the round."""
    lane, active, standby = hot_with_its_standby_worker_starting(cluster, answers=False)
    client = cluster.coordinator.session.client
    fenced_at = client.exists(PATHS.assignment("hot"))

    lane.run(2.0, {"s1", "s2"})
    lane.run(2.0, {standby})  # asked, no answer; past the floor: refused too
    assert lane.fence.asked and lane.lane.suspected() == {active}
    assert cluster.round().empty
    lane.run(1.0, {"s1", "s2"})
    assert cluster.round().empty
    assert client.exists(PATHS.assignment("hot")).mzxid == fenced_at.mzxid
    assert cluster.where("hot") == active


def drain_the_active(cluster: Cluster, standby: StandbyWorkerState) -> tuple[str, str]:
    """A hot pipeline on one of three supervisors, its standby worker on another in state
    ``standby``, and a drain of the first, whose round takes the assignment off it while its
    worker still runs: (the drained supervisor, the standby worker's)."""
    for sid in ("s1", "s2", "s3"):
        cluster.supervisor(sid)
    cluster.submit("hot", {"pipeline.standby": "hot"})
    cluster.round()
    active, placed = cluster.where("hot"), cluster.standby.read("hot")
    assert active is not None and placed is not None and placed.supervisor not in (None, active)
    cluster.worker_on("hot", active, WorkerState.RUNNING)
    cluster.heartbeat(placed.supervisor, standby=reported(placed, standby))
    cluster.cordons.put(cluster.term, active, by="ops", drain=True, now=1.0)
    cluster.round()
    assert cluster.where("hot") is None  # first its worker stops, as in every drain
    drain = cluster.drains.last(cluster.term.epoch)
    assert drain is not None and drain.moving == {"hot": active}
    assert cluster.standby.read("hot") == placed  # its standby worker waits where it was
    return active, placed.supervisor


def test_a_drained_hot_pipeline_is_promoted_to_its_ready_standby_worker_once_stopped(cluster):
    drained, standby = drain_the_active(cluster, StandbyWorkerState.READY)

    cluster.round()  # its old worker still runs: no promotion yet
    assert cluster.where("hot") is None

    cluster.worker_on("hot", drained, WorkerState.STOPPED)
    cluster.round()

    assert cluster.where("hot") == standby
    assert reasons(cluster, "hot")[-2:] == [
        ("drained", None, drained),
        ("standby_promoted", standby, drained),
    ]
    assert cluster.drains.last(cluster.term.epoch).moving == {}
    behind = cluster.standby.read("hot")  # a new standby worker, placed in the same round
    assert behind is not None and behind.supervisor not in (None, drained, standby)


def test_a_drained_hot_pipeline_whose_standby_worker_is_not_ready_moves_as_any_drained_one(
    cluster,
):
    drained, _ = drain_the_active(cluster, StandbyWorkerState.STARTING)
    cluster.worker_on("hot", drained, WorkerState.STOPPED)
    cluster.round()

    assert cluster.where("hot") not in (None, drained)
    assert reasons(cluster, "hot")[-1][0] == "drained"  # placed, not promoted


def test_a_drained_hot_pipeline_is_not_promoted_to_a_supervisor_drained_too(cluster):
    drained, standby = drain_the_active(cluster, StandbyWorkerState.READY)
    cluster.worker_on("hot", drained, WorkerState.STOPPED)
    cluster.cordons.put(cluster.term, standby, by="ops", drain=True, now=2.0)
    cluster.round()

    (other,) = {"s1", "s2", "s3"} - {drained, standby}
    assert cluster.where("hot") == other
    assert reasons(cluster, "hot")[-1] == ("drained", other, drained)


def test_a_drained_pipelines_promotion_writes_nothing_if_it_was_assigned_since(cluster):
    drained, standby = drain_the_active(cluster, StandbyWorkerState.READY)
    cluster.worker_on("hot", drained, WorkerState.STOPPED)
    (other,) = {"s1", "s2", "s3"} - {drained, standby}
    client = cluster.coordinator.session.client
    read_placements = cluster.standby.read_all

    def assigned_after_the_assignments_were_read() -> Any:
        # a write the round did not read lands before its promotion: the create must fail
        record = cluster.ops.read("hot")
        assert record is not None
        elsewhere = assignment_of("hot", record, other, epoch=cluster.term.epoch, now=2.0)
        client.create(PATHS.assignment("hot"), elsewhere.encode())
        cluster.standby.read_all = read_placements
        return read_placements()

    cluster.standby.read_all = assigned_after_the_assignments_were_read
    assert cluster.round().empty  # the promotion found the assignment there: nothing more

    assert cluster.where("hot") == other
    assert reasons(cluster, "hot")[-1] == ("drained", None, drained)  # no standby_promoted
    placed = cluster.standby.read("hot")
    assert placed is not None and placed.supervisor == standby  # its placement untouched


def test_a_pipeline_takes_the_slot_of_a_standby_worker_when_no_other_is_free(cluster):
    cluster.supervisor("s1", slots=1)
    cluster.supervisor("s2", slots=1)
    cluster.submit("hot", {"pipeline.standby": "hot"})
    cluster.round()
    standby = cluster.standby.read("hot")
    assert standby is not None and standby.supervisor is not None

    cluster.submit("plain")  # no slot free of a standby worker: it takes that one
    cluster.round()
    assert cluster.where("plain") == standby.supervisor
    unplaced = cluster.standby.read("hot")
    assert unplaced is not None and unplaced.supervisor is None
    assert unplaced.unplaced_because == (
        "no supervisor fits: runs its active worker (1), no free slot (1)"
    )


def test_with_no_hot_pipeline_a_round_lists_the_placements_once_and_writes_none(
    cluster, monkeypatch
):
    cluster.supervisor("s1")
    cluster.supervisor("s2")
    cluster.submit("a")
    client = cluster.coordinator.session.client
    touched: list[str] = []
    get_children, get_async = client.get_children, client.get_async

    def listing(path: str, *args: Any, **kwargs: Any) -> Any:
        touched.append(f"list {path}")
        return get_children(path, *args, **kwargs)

    def reading(path: str, *args: Any, **kwargs: Any) -> Any:
        touched.append(f"read {path}")
        return get_async(path, *args, **kwargs)

    monkeypatch.setattr(client, "get_children", listing)
    monkeypatch.setattr(client, "get_async", reading)
    for _ in range(2):
        cluster.round()

    assert cluster.where("a") is not None
    standby = [what for what in touched if PATHS.standby_workers in what]
    assert standby == [f"list {PATHS.standby_workers}"] * 2  # one listing a round, no read
    parent = client.exists(PATHS.standby_workers)
    assert (parent.numChildren, parent.cversion) == (0, 0)  # nothing ever written


# ---------------------------------------------------------------------- updates through the standby


def hot_updated(cluster: Cluster) -> tuple[str, str]:
    """A hot pipeline running on one of three supervisors, its standby worker READY on
    another, updated to new code, and the round that sees the update: (the active worker's
    supervisor, the standby worker's)."""
    for sid in ("s1", "s2", "s3"):
        cluster.supervisor(sid)
    cluster.submit("hot", {"pipeline.standby": "hot"})
    cluster.round()
    active, placed = cluster.where("hot"), cluster.standby.read("hot")
    assert active is not None and placed is not None and placed.supervisor not in (None, active)
    cluster.worker("hot", WorkerState.RUNNING)
    cluster.heartbeat(placed.supervisor, standby=reported(placed, StandbyWorkerState.READY))
    updated(cluster, "hot", "e" * 64)
    cluster.round()
    return active, placed.supervisor


def standby_reports(cluster: Cluster, state: StandbyWorkerState) -> None:
    """The standby worker's supervisor reports the one of its placement now in ``state``."""
    placed = cluster.standby.read("hot")
    assert placed is not None and placed.supervisor is not None
    cluster.heartbeat(placed.supervisor, standby=reported(placed, state))


def test_a_hot_pipelines_update_runs_on_while_its_standby_worker_starts_then_moves_to_it(
    cluster,
):
    active, standby = hot_updated(cluster)
    record = cluster.ops.read("hot")
    held = cluster.table.read("hot")
    assert held is not None and held.supervisor == active  # the old worker runs on
    assert (held.generation, held.digest) == (record.generation - 1, "d" * 64)
    assert reasons(cluster, "hot") == [("placed", active, None)]
    placed = cluster.standby.read("hot")  # rewritten for the new generation, where it was
    assert placed is not None and placed.supervisor == standby
    assert (placed.generation, placed.digest) == (record.generation, "e" * 64)
    standby_reports(cluster, StandbyWorkerState.STARTING)
    cluster.round()
    assert cluster.table.read("hot") == held and record.on_trial

    standby_reports(cluster, StandbyWorkerState.READY)
    cluster.round()
    assert cluster.where("hot") is None  # break before make: the old worker stops first
    assert reasons(cluster, "hot")[-1] == ("updated", None, active)
    cluster.round()  # its old worker still runs: no promotion yet
    assert cluster.where("hot") is None

    cluster.worker_on("hot", active, WorkerState.STOPPED)
    cluster.round()
    promoted = cluster.table.read("hot")
    assert promoted is not None and promoted.supervisor == standby
    assert (promoted.generation, promoted.digest) == (record.generation, "e" * 64)
    assert reasons(cluster, "hot")[-1] == ("standby_promoted", standby, active)
    assert cluster.ops.read("hot").on_trial  # judged from the promoted worker's beats
    behind = cluster.standby.read("hot")
    assert behind is not None and behind.supervisor not in (None, standby)

    cluster.beats += 1
    cluster.board.put_worker(
        WorkerHeartbeat(
            pipeline="hot", supervisor=standby, epoch=promoted.epoch,
            generation=promoted.generation, digest=promoted.digest,
            state=WorkerState.RUNNING, time=float(cluster.beats),
            queries=[QueryProgress(name="q", batch_id=0, rows_total=3)],
        )
    )  # fmt: skip
    cluster.round()
    assert not cluster.ops.read("hot").on_trial  # proven by its first batch


def test_a_hot_pipelines_update_is_applied_in_place_once_its_hold_ran_out(cluster):
    active, _ = hot_updated(cluster)
    standby_reports(cluster, StandbyWorkerState.STARTING)
    cluster.clock.now += SETTINGS.standby.update_hold_secs
    for sid in cluster.registered:
        cluster.heartbeat(sid)
    standby_reports(cluster, StandbyWorkerState.STARTING)
    cluster.worker("hot", WorkerState.RUNNING)
    cluster.round()

    assert reasons(cluster, "hot")[-1] == ("updated", active, active)
    assignment = cluster.table.read("hot")
    assert assignment is not None and assignment.digest == "e" * 64


def test_a_hot_pipelines_update_is_applied_in_place_when_its_standby_worker_is_refused(cluster):
    active, _ = hot_updated(cluster)
    standby_reports(cluster, StandbyWorkerState.REFUSED)
    cluster.round()

    assert reasons(cluster, "hot")[-1] == ("updated", active, active)


def test_a_hot_pipelines_update_whose_standby_worker_fails_is_withdrawn_its_worker_untouched(
    cluster,
):
    active, standby = hot_updated(cluster)
    held = cluster.table.read("hot")
    assert held is not None and cluster.ops.read("hot").on_trial
    standby_reports(cluster, StandbyWorkerState.FAILED)
    cluster.round()

    back = cluster.ops.read("hot")
    assert (back.status, back.version, back.digest) == (PipelineStatus.ACTIVE, 1, "d" * 64)
    assert back.generation == held.generation and not back.on_trial
    assert back.reason == (
        "rolled back from version 2 to 1: its standby worker failed for it, its running "
        "worker was not touched: no error reported"
    )
    cluster.round()
    assert cluster.table.read("hot") == held  # no restart: the assignment is as it was
    assert reasons(cluster, "hot") == [("placed", active, None)]
    placed = cluster.standby.read("hot")  # rewritten where it was, for the version that runs:
    assert placed is not None and placed.supervisor == standby  # it failed other code
    assert (placed.generation, placed.digest) == (held.generation, "d" * 64)
    assert placed.refusals == []


def test_an_update_whose_standby_worker_stopped_being_ready_is_placed_the_ordinary_way(cluster):
    active, _ = hot_updated(cluster)
    standby_reports(cluster, StandbyWorkerState.READY)
    cluster.round()
    assert reasons(cluster, "hot")[-1] == ("updated", None, active)

    standby_reports(cluster, StandbyWorkerState.STARTING)  # it restarted meanwhile
    cluster.worker_on("hot", active, WorkerState.STOPPED)
    cluster.round()

    assert cluster.where("hot") is not None
    assert reasons(cluster, "hot")[-1][0] == "placed"  # a Spark start, not a promotion
