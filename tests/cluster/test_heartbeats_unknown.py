"""The leader's scheduling round with heartbeats on a real pacemaker, when it cannot see them.

The leader's monotonic clock is the test's; the pacemaker and ZooKeeper are real. What is
proved: a heartbeat missing from a pacemaker that restarted empty (warming up) is unknown,
so nothing moves however long the leader's clock runs, until the warm-up ends and a
complete read shows it missing; every pacemaker unreachable moves nothing either, is
counted, and the stretch without heartbeats is not counted as silence once they return.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path

import pytest

from stratus.api.records import (
    SupervisorHeartbeat,
    SupervisorSummary,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.codedist.package_store import StoredPackage
from stratus.coordination.coordinator import Coordinator
from stratus.nimbus.duties.scheduling import SchedulingDuty
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.records.replication_policy import ReplicationPolicy
from stratus.nimbus.scheduling.assignments import AssignmentTable
from stratus.nimbus.scheduling.scheduler import Plan
from stratus.nimbus.settings import SchedulingSettings
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.state.errors import StateStoreUnavailableError
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.pacemaker_store import PacemakerStateStore
from stratus.zk.paths import ClusterPaths
from tests.harness.pacemaker_process import PacemakerProcess
from tests.harness.tcp_proxy import TcpProxy
from tests.harness.zkfixtures import wait_until

PATHS = ClusterPaths("/stratus")
SETTINGS = SchedulingSettings(supervisor_timeout_secs=10, task_timeout_secs=30)
ONE_COPY = ReplicationPolicy(required=1, wait_secs=60)
WARM_UP_SECS = 10  # the pacemaker's TTL: its warm-up, in real seconds (room for a slow machine)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Leader:
    """The leader's scheduling duty on real pacemakers; supervisors' beats written by hand."""

    pacemaker: PacemakerProcess  # the fixture's one pacemaker

    def __init__(self, coordinator: Coordinator, servers: Sequence[tuple[str, int]]) -> None:
        client = coordinator.session.client
        for parent in PATHS.all_parents():
            client.ensure_path(parent)
        self.clock = FakeClock()
        self.ops = PipelineOps(client, PATHS, wall=lambda: 1.0)
        self.table = AssignmentTable(client, PATHS)
        self.board = HeartbeatBoard(PacemakerStateStore(pool_of(servers)))
        self.unknown: list[str] = []
        self.registered = {sid: SupervisorSummary(id=sid, slots=2) for sid in ("s1", "s2")}
        self.duty = SchedulingDuty(
            ops=self.ops, assignments=self.table, board=self.board,
            registered=lambda: self.registered, settings=SETTINGS, clock=self.clock,
            on_unknown=self.unknown.append,
        )  # fmt: skip
        self.term = coordinator.nominate("nimbus", "leader", timeout=10)
        self.beats = 0

    def beat(self, *sids: str, board: HeartbeatBoard | None = None) -> None:
        """A period of each supervisor: its heartbeat and its workers' (to ``board``, the
        leader's pacemakers unless given)."""
        for sid in sids:
            self.beats += 1
            workers = [
                WorkerHeartbeat(
                    pipeline=a.pipeline,
                    supervisor=sid,
                    epoch=a.epoch,
                    generation=a.generation,
                    digest=a.digest,
                    state=WorkerState.RUNNING,
                    time=float(self.beats),
                )
                for a, _ in self.table.read_all().values()
                if a.supervisor == sid
            ]
            beat = SupervisorHeartbeat(id=sid, time=float(self.beats), slots=2)
            (board or self.board).put_round(beat, workers)

    def round(self) -> Plan:
        return self.duty.run(self.term)

    def where(self, name: str) -> str | None:
        assignment = self.table.read(name)
        return assignment.supervisor if assignment else None


def pool_of(servers: Sequence[tuple[str, int]]) -> BlockingPacemakerPool:
    settings = PacemakerClientSettings(servers=tuple(servers), timeout_secs=2.0)
    return BlockingPacemakerPool(settings, call_timeout_secs=5.0)


@pytest.fixture
def leader(zk_hosts: str, tmp_path: Path) -> Iterator[Leader]:
    pacemaker = PacemakerProcess(tmp_path, [f"pacemaker.pulse.ttl.secs={WARM_UP_SECS}"]).start()
    coordinator = Coordinator.standalone(zk_hosts, session_timeout=4.0).start()
    made = Leader(coordinator, [pacemaker.address])
    made.pacemaker = pacemaker
    try:
        made.ops.submit(
            made.term, "etl", {}, "r-etl", StoredPackage("d" * 64, 10), replication=ONE_COPY
        )
        made.beat("s1", "s2")
        made.round()
        made.beat("s1", "s2")
        made.round()
        yield made
    finally:
        made.board.close()
        coordinator.close()
        pacemaker.stop()


def other(sid: str) -> str:
    return "s2" if sid == "s1" else "s1"


def restart_empty(leader: Leader, alive: str) -> None:
    """Kill the pacemaker, start it again on the same port, empty (warming up), and wait for
    ``alive``'s first period written to it (the pool reconnects on its own)."""
    leader.pacemaker.kill()
    leader.pacemaker.start()
    wait_until(partial(written, leader, alive), 30, f"{alive}'s heartbeats to be written again")


def warmed_up(leader: Leader) -> bool:
    """Whether a read is complete (the warm-up ended); False while the pool has not yet
    reconnected to the restarted server (every read then fails as unavailable)."""
    try:
        return leader.board.read().complete
    except StateStoreUnavailableError:
        return False


def written(leader: Leader, sid: str) -> bool:
    try:
        leader.beat(sid)
    except StateStoreUnavailableError:  # the connection to the killed server, found dead
        return False
    return True


def test_a_heartbeat_missing_from_a_warming_pacemaker_is_unknown_until_the_warm_up_ends(
    leader: Leader,
) -> None:
    first = leader.table.read("etl")
    assert first is not None
    alive = other(first.supervisor)
    restart_empty(leader, alive)  # etl's supervisor never writes again; the other does
    assert leader.board.read().complete is False

    leader.clock.now += 3 * SETTINGS.supervisor_timeout_secs
    leader.beat(alive)
    plan = leader.round()

    assert plan.empty and leader.table.read("etl") == first  # unknown: nothing moves
    assert "warming" in leader.unknown

    wait_until(partial(warmed_up, leader), 60, "the warm-up to end")
    leader.beat(alive)
    leader.round()
    assert leader.where("etl") == alive  # now known missing: its supervisor is dead


def test_every_pacemaker_down_moves_nothing_and_the_blind_stretch_is_not_silence(
    leader: Leader,
) -> None:
    first = leader.table.read("etl")
    assert first is not None
    alive = other(first.supervisor)
    leader.pacemaker.kill()

    leader.clock.now += 10 * SETTINGS.supervisor_timeout_secs
    assert leader.round().empty
    assert leader.table.read("etl") == first
    assert leader.unknown == ["unavailable"]

    leader.pacemaker.start()  # back (empty) after the outage; etl's supervisor stays silent
    wait_until(partial(warmed_up, leader), 60, "the warm-up to end")
    wait_until(partial(written, leader, alive), 30, f"{alive}'s heartbeats to be written again")
    leader.round()
    assert leader.table.read("etl") == first  # silence restarts when the heartbeats return

    leader.clock.now += SETTINGS.supervisor_timeout_secs + 1
    leader.beat(alive)
    leader.round()
    assert leader.where("etl") == alive


def test_a_supervisor_that_only_the_unreachable_pacemaker_hears_is_not_judged_dead(
    zk_hosts: str, tmp_path: Path
) -> None:
    """Two pacemakers, A and B. Supervisor s1 reaches A alone (a partition), s2 both; the
    leader reaches A through a proxy, then loses it. s1's rounds are all in A: in the
    leader's partial reads s1 is silent, but registered, so nothing moves off it however
    long the leader's clock runs; once its registration has been gone a whole timeout (its
    session expired: it no longer renews its lease), it is judged dead."""
    a = PacemakerProcess(tmp_path, [f"pacemaker.pulse.ttl.secs={WARM_UP_SECS}"]).start()
    b = PacemakerProcess(tmp_path, [f"pacemaker.pulse.ttl.secs={WARM_UP_SECS}"]).start()
    coordinator = Coordinator.standalone(zk_hosts, session_timeout=4.0).start()
    with TcpProxy(*a.address) as to_a:
        leader = Leader(coordinator, [("127.0.0.1", to_a.port), b.address])
        only_a = HeartbeatBoard(PacemakerStateStore(pool_of([a.address])))
        try:
            leader.ops.submit(
                leader.term, "etl", {}, "r-etl", StoredPackage("d" * 64, 10), replication=ONE_COPY
            )
            s2 = leader.registered.pop("s2")
            leader.beat("s1", "s2")
            leader.round()
            assert leader.where("etl") == "s1"
            leader.registered["s2"] = s2
            s1_writes = partial(leader.beat, board=only_a)
            s1_writes("s1")
            to_a.cut()
            for _ in range(4):  # 40 s of the leader's clock: s1 writes to A alone throughout
                leader.clock.now += 10
                s1_writes("s1")
                leader.beat("s2")
                assert leader.round().moved == {}
            assert leader.where("etl") == "s1"
            assert "unreachable" in leader.unknown

            del leader.registered["s1"]  # its session expired: its lease renews no more
            leader.beat("s2")
            assert leader.round().moved == {}
            leader.clock.now += 11
            leader.beat("s2")
            assert leader.round().moved == {"etl": ("s1", "s2")}
        finally:
            only_a.close()
            leader.board.close()
            coordinator.close()
            a.stop()
            b.stop()
