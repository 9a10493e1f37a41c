"""The leader's fence of a silent supervisor (``nimbus/scheduling/supervisor_fencing.py``) before it
moves the supervisor's pipelines: the verdicts alone, then the scheduling duty on a real
ZooKeeper with the leader's clock in the test's hands.

What is proved: a supervisor that holds pipelines and is silent past
``nimbus.supervisor.fence.after.secs`` is fenced once, off the round; a graceful stop
through a real supervisor's endpoint stops its worker and the pipeline moves at once, well
before ``nimbus.supervisor.timeout.secs``, and the fenced supervisor, back, does not start
it again; a ``shell`` method fences when the endpoint cannot, and counts only
``supervisor.worker.stop.secs`` later; when every way fails the timeout is waited out; a
fence under way is never started twice.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stratus.api.records import SupervisorHeartbeat, SupervisorSummary, WorkerState
from stratus.codedist.package_store import StoredPackage
from stratus.coordination.coordinator import Coordinator
from stratus.ha.errors import FencingConfigError
from stratus.ha.fencing import MethodSpec
from stratus.nimbus.duties.scheduling import SchedulingDuty
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.records.replication_policy import ReplicationPolicy
from stratus.nimbus.scheduling.assignments import AssignmentTable
from stratus.nimbus.scheduling.supervisor_fencing import (
    FenceAttempt,
    FenceState,
    Silence,
    SupervisorFencing,
    fence_verdicts,
)
from stratus.nimbus.settings import FencingSettings, SchedulingSettings, supervisor_fencing_methods
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.zk.paths import ClusterPaths
from tests.cluster.test_supervisor import Cluster as SupervisorCluster
from tests.cluster.test_supervisor import running
from tests.harness.zkfixtures import kazoo_client, process_gone, wait_until

PATHS = ClusterPaths("/stratus")
SETTINGS = SchedulingSettings(supervisor_timeout_secs=10, task_timeout_secs=30)
ONE_COPY = ReplicationPolicy(required=1, wait_secs=60)
STOP_SECS = 1.0


def fencing_settings(*methods: MethodSpec) -> FencingSettings:
    return FencingSettings(after_secs=5, methods=methods, timeout_secs=10, stop_secs=STOP_SECS)


# ---------------------------------------------------------------------- the verdicts (pure)


def verdicts(silence: Silence, attempt: FenceAttempt | None = None, now: float = 100.0) -> Any:
    return fence_verdicts(
        {"s1": silence},
        {} if attempt is None else {"s1": attempt},
        epoch=3,
        after_secs=5,
        timeout_secs=10,
        now=now,
    )


def test_a_supervisor_silent_past_the_threshold_is_fenced_once_per_silence() -> None:
    assert verdicts(Silence(since=96, secs=4)).start == frozenset()
    assert verdicts(Silence(since=94, secs=6)).start == {"s1"}
    assert verdicts(Silence(since=89, secs=11)).start == frozenset()  # the lease covers it
    under_way = FenceAttempt("s1", 3, 94, FenceState.FENCING)
    assert verdicts(Silence(since=94, secs=6), under_way) == verdicts(Silence(96, 4))
    failed = FenceAttempt("s1", 3, 94, FenceState.FAILED)
    assert not verdicts(Silence(since=94, secs=9), failed).start  # the lease is waited out


def test_only_a_fence_of_this_term_and_this_silence_moves_pipelines() -> None:
    fenced = FenceAttempt("s1", 3, 94, FenceState.FENCED, safe_from=100.0)
    assert verdicts(Silence(since=94, secs=6), fenced).fenced == {"s1"}
    assert not verdicts(Silence(since=94, secs=6), fenced, now=99.9).fenced  # not safe yet
    back = verdicts(Silence(since=99, secs=1), fenced)  # a heartbeat seen since
    assert not back.fenced and not back.start
    again = verdicts(Silence(since=99, secs=6), fenced)  # silent again: a new fence
    assert not again.fenced and again.start == {"s1"}
    older_term = FenceAttempt("s1", 2, 94, FenceState.FENCED)
    assert verdicts(Silence(since=94, secs=6), older_term).start == {"s1"}


def test_a_fence_under_way_is_never_started_twice_even_for_a_new_silence() -> None:
    under_way = FenceAttempt("s1", 3, 90, FenceState.FENCING)
    assert verdicts(Silence(since=94, secs=6), under_way) == verdicts(Silence(96, 4))


def test_the_supervisor_methods_leave_out_graceful_and_epoch() -> None:
    assert supervisor_fencing_methods("") == ()
    assert supervisor_fencing_methods("shell(exit 0), process") == (
        MethodSpec("shell", "exit 0"),
        MethodSpec("process"),
    )
    with pytest.raises(FencingConfigError, match="leave out graceful: the graceful stop"):
        supervisor_fencing_methods("graceful, shell(x)")
    with pytest.raises(FencingConfigError, match="leave out epoch"):
        supervisor_fencing_methods("epoch")
    with pytest.raises(FencingConfigError, match=r"nimbus\.supervisor\.fencing\.methods: unknown"):
        supervisor_fencing_methods("stonith")


def test_a_fence_under_way_is_not_started_again(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # connects, never answers
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        summary = SupervisorSummary(id="s1", host="127.0.0.1", endpoint=address)
        fencing = SupervisorFencing(fencing_settings())
        try:
            assert fencing.start(summary, epoch=3, silent_since=94)
            assert not fencing.start(summary, epoch=3, silent_since=94)
            assert not fencing.start(summary, epoch=4, silent_since=99)
            assert fencing.attempts()["s1"].state is FenceState.FENCING
        finally:
            silent.close()  # the graceful stop fails; nothing else is configured
            wait_until(
                lambda: fencing.attempts()["s1"].state is FenceState.FAILED,
                20,
                "the fence to fail",
            )
            fencing.close()


# ---------------------------------------------------------------------- the duty


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Leader:
    """A leader's scheduling duty with fencing; the heartbeats it sees are the test's to
    write (in a board of their own), so a live supervisor can look silent to it."""

    def __init__(self, coordinator: Coordinator, fencing: FencingSettings) -> None:
        client = coordinator.session.client
        for parent in PATHS.all_parents():
            client.ensure_path(parent)
        self.clock = FakeClock()
        self.ops = PipelineOps(client, PATHS, wall=lambda: 1.0)
        self.table = AssignmentTable(client, PATHS)
        self.board = HeartbeatBoard(ZooKeeperStateStore(client, "/leader-view/heartbeats"))
        self.registered: dict[str, SupervisorSummary] = {}
        self.outcomes: list[tuple[str, str]] = []
        self.fencing = SupervisorFencing(
            fencing, clock=self.clock, on_outcome=lambda *outcome: self.outcomes.append(outcome)
        )
        self.duty = SchedulingDuty(
            ops=self.ops, assignments=self.table, board=self.board,
            registered=lambda: self.registered, settings=SETTINGS, clock=self.clock,
            fencing=self.fencing,
        )  # fmt: skip
        self.term = coordinator.nominate("nimbus", "leader", timeout=10)
        self.beats = 0

    def submit(self, name: str, package: StoredPackage | None = None) -> None:
        stored = package or StoredPackage("d" * 64, 10)
        self.ops.submit(self.term, name, {}, f"r-{name}", stored, replication=ONE_COPY)

    def supervisor(self, summary: SupervisorSummary) -> None:
        self.registered[summary.id] = summary
        self.heartbeat(summary.id)

    def heartbeat(self, sid: str, *, stopping: bool = False) -> None:
        self.beats += 1
        self.board.put_supervisor(
            SupervisorHeartbeat(id=sid, time=float(self.beats), slots=2, stopping=stopping)
        )

    def round(self) -> Any:
        return self.duty.run(self.term)

    def where(self, name: str) -> str | None:
        assignment = self.table.read(name)
        return assignment.supervisor if assignment else None

    def wait_for_fence(self, sid: str, state: FenceState) -> None:
        def reached() -> bool:
            attempt = self.fencing.attempts().get(sid)
            return attempt is not None and attempt.state is state

        wait_until(reached, 30, f"the fence of {sid} to be {state.value}")


@pytest.fixture
def coordinator(zk_hosts: str) -> Iterator[Coordinator]:
    made = Coordinator.standalone(zk_hosts, session_timeout=4.0).start()
    try:
        yield made
    finally:
        made.close()


def refusing_endpoint() -> str:
    """An address where nothing listens: the graceful stop fails at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


@pytest.mark.slow
def test_a_graceful_fence_stops_the_worker_and_the_pipeline_moves_before_the_timeout(
    coordinator, zk_hosts, tmp_path
) -> None:
    leader = Leader(coordinator, fencing_settings())
    with kazoo_client(zk_hosts) as zk:
        side = SupervisorCluster(zk, zk_hosts, tmp_path)
        meta = side.code.upload("etl")
        with running(side.conf("s1"), side) as s1:
            summary = side.registration("s1")
            assert summary is not None and summary.endpoint is not None
            leader.supervisor(summary)
            leader.submit("etl", StoredPackage(meta.digest, meta.size_bytes))
            leader.round()
            assert leader.where("etl") == "s1"
            first = side.wait_for_worker(WorkerState.RUNNING)
            assert first.pid is not None

            leader.supervisor(SupervisorSummary(id="s2", slots=2))
            leader.clock.now += 6  # s1 silent to the leader (its own beats go elsewhere)
            leader.heartbeat("s2")
            plan = leader.round()
            assert not plan.moved  # the fence runs off the round
            leader.wait_for_fence("s1", FenceState.FENCED)
            assert process_gone(first.pid)  # stopped before the fence counted

            plan = leader.round()  # still 6 s of silence: the timeout is 10
            assert plan.moved == {"etl": ("s1", "s2")}
            # s1 is back (its own heartbeats went on all along) and reads the move before
            # it starts anything: a pipeline assigned to it after the move runs, etl not
            probe = side.code.upload("probe")
            side.assign(probe, name="probe", epoch=leader.term.epoch)
            side.wait_for_worker(WorkerState.RUNNING, "probe")
            assert set(s1.control.workers) == {"probe"}
            assert s1.lease.fences == 1


def test_a_shell_method_fences_when_the_endpoint_cannot_and_counts_after_the_stop_grace(
    coordinator, tmp_path, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="stratus.nimbus.scheduling.supervisor_fencing")
    told = tmp_path / "told"
    method = MethodSpec("shell", f'echo "$STRATUS_FENCE_TARGET_ID" > {told}')
    leader = Leader(coordinator, fencing_settings(method))
    leader.supervisor(SupervisorSummary(id="s1", slots=2, endpoint=refusing_endpoint()))
    leader.submit("etl")
    leader.round()
    leader.supervisor(SupervisorSummary(id="s2", slots=2))
    leader.clock.now += 6
    leader.heartbeat("s2")
    leader.round()
    leader.wait_for_fence("s1", FenceState.FENCED)
    assert told.read_text() == "s1\n"
    assert "event=supervisor_fenced supervisor=s1 method=shell(echo" in caplog.text
    assert leader.outcomes == [("fenced", "shell")]

    assert not leader.round().moved  # its workers may outlive it for the stop grace
    leader.clock.now += STOP_SECS
    leader.heartbeat("s2")
    assert leader.round().moved == {"etl": ("s1", "s2")}  # at 7 s: before the timeout


def test_when_every_way_fails_the_timeout_is_waited_out(coordinator, caplog) -> None:
    caplog.set_level(logging.INFO, logger="stratus.nimbus.scheduling.supervisor_fencing")
    leader = Leader(coordinator, fencing_settings(MethodSpec("shell", "exit 1")))
    leader.supervisor(SupervisorSummary(id="s1", slots=2, endpoint=refusing_endpoint()))
    leader.submit("etl")
    leader.round()
    leader.supervisor(SupervisorSummary(id="s2", slots=2))
    leader.clock.now += 6
    leader.heartbeat("s2")
    leader.round()
    leader.wait_for_fence("s1", FenceState.FAILED)
    assert "event=supervisor_fence_failed supervisor=s1" in caplog.text
    assert "action=wait_for_its_lease" in caplog.text
    assert leader.outcomes == [("failed", "-")]

    leader.clock.now += 3.9  # 9.9 s of silence
    leader.heartbeat("s2")
    assert not leader.round().moved
    assert leader.fencing.attempts()["s1"].state is FenceState.FAILED  # tried once, only
    leader.clock.now += 0.2
    leader.heartbeat("s2")
    assert leader.round().moved == {"etl": ("s1", "s2")}


def test_a_supervisor_heard_from_after_its_fence_keeps_its_pipelines(coordinator) -> None:
    method = MethodSpec("shell", "exit 0")
    leader = Leader(coordinator, fencing_settings(method))
    leader.supervisor(SupervisorSummary(id="s1", slots=2, endpoint=refusing_endpoint()))
    leader.submit("etl")
    leader.round()
    leader.supervisor(SupervisorSummary(id="s2", slots=2))
    leader.clock.now += 6
    leader.heartbeat("s2")
    leader.round()
    leader.wait_for_fence("s1", FenceState.FENCED)
    leader.clock.now += STOP_SECS
    leader.heartbeat("s1")  # back: its workers start only on a read newer than this beat
    leader.heartbeat("s2")
    assert not leader.round().moved
    assert leader.where("etl") == "s1"


def test_a_supervisor_silent_after_saying_it_stops_is_waited_out_not_fenced(coordinator) -> None:
    """A restart (its last heartbeat says stopping, its workers run on) slower than the fence
    threshold on a loaded machine: a fence would stop the workers the restart keeps."""
    leader = Leader(coordinator, fencing_settings(MethodSpec("shell", "exit 0")))
    leader.supervisor(SupervisorSummary(id="s1", slots=2, endpoint=refusing_endpoint()))
    leader.submit("etl")
    leader.round()
    assert leader.where("etl") == "s1"
    leader.heartbeat("s1", stopping=True)
    leader.round()
    leader.supervisor(SupervisorSummary(id="s2", slots=2))
    leader.clock.now += 6
    leader.heartbeat("s2")
    assert not leader.round().moved
    assert leader.fencing.attempts() == {}

    leader.clock.now += 4.1  # past the timeout: judged dead, as any silent supervisor
    leader.heartbeat("s2")
    assert leader.round().moved == {"etl": ("s1", "s2")}


def test_a_deposed_leader_fences_no_supervisor(coordinator) -> None:
    leader = Leader(coordinator, fencing_settings(MethodSpec("shell", "exit 0")))
    leader.supervisor(SupervisorSummary(id="s1", slots=2, endpoint=refusing_endpoint()))
    leader.submit("etl")
    leader.round()
    coordinator.unnominate("nimbus")  # deposed: its round reads, judges, and asks nothing
    leader.clock.now += 6

    leader.round()

    assert leader.fencing.attempts() == {}
