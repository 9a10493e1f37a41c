"""The supervisor's control loop (``supervisor/control_loop.py``) fed messages by hand: workers
start only under a held lease and a newer read, a lapsed lease stops them all, and so does a
leader's fence, unless its epoch is older than one the supervisor has seen."""

from __future__ import annotations

from stratus.api.records import Assignment, WorkerState
from stratus.supervisor.assignment_reader import AssignmentsRead
from stratus.supervisor.code_cache import PipelineCode
from stratus.supervisor.control_loop import ControlLoop
from stratus.supervisor.heartbeat_publisher import HeartbeatRound
from stratus.supervisor.loop_messages import SHUTDOWN, FenceOrder, FenceVerdict, HeartbeatWritten
from stratus.supervisor.managed_worker import Phase
from stratus.supervisor.reconcile import Held
from stratus.supervisor.worker_process import WorkerPaths
from stratus.worker.lease_file import read_lease, since_path, write_lease
from tests.harness.supervisor_fakes import (
    DIGEST,
    TIMEOUTS,
    FakeClock,
    FakeLauncher,
    FakeProcess,
    assignment,
)
from tests.unit.test_adoption_unit import control_loop, feed


def test_workers_start_only_once_the_lease_is_held_and_a_newer_read_came(tmp_path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    rounds: list[HeartbeatRound] = []
    loop = control_loop(tmp_path, clock, launcher, offer=rounds.append)
    feed(loop, AssignmentsRead(99.0, {"etl": assignment()}))
    assert launcher.processes == []
    assert rounds[-1].workers["etl"].state is WorkerState.STARTING
    feed(loop, HeartbeatWritten(100.0))
    assert launcher.processes == []  # that read is older than the lease
    feed(loop, AssignmentsRead(100.5, {"etl": assignment()}))
    assert len(launcher.processes) == 1
    assert rounds[-1].supervisor.running == ["etl"]
    assert rounds[-1].used == 1
    assert launcher.retained == {DIGEST}


def test_a_lapsed_lease_stops_every_worker_and_starts_none_before_a_fresh_read(tmp_path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    rounds: list[HeartbeatRound] = []
    loop = control_loop(tmp_path, clock, launcher, offer=rounds.append)
    both = {"a": assignment("a"), "b": assignment("b")}
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.1, both))
    assert [p.signals for p in launcher.processes] == [[], []]
    clock.advance(6.0)  # no heartbeat written since
    feed(loop)
    assert [p.signals for p in launcher.processes] == [["TERM"], ["TERM"]]
    assert rounds[-1].supervisor.running == []
    clock.advance(TIMEOUTS.stop_secs)
    feed(loop)
    assert [p.signals for p in launcher.processes] == [["TERM", "KILL"], ["TERM", "KILL"]]
    for process in launcher.processes:
        process.exit_code = -9
    feed(loop, AssignmentsRead(clock() - 5, both))  # a read from before: nothing starts
    assert len(launcher.processes) == 2
    feed(loop, HeartbeatWritten(clock()))
    assert len(launcher.processes) == 2
    feed(loop, AssignmentsRead(clock() + 0.1, {"a": assignment("a")}))  # b moved away meanwhile
    assert len(launcher.processes) == 3
    assert set(loop.workers) == {"a"}


def test_stale_reads_and_stale_epochs_change_nothing(tmp_path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    loop = control_loop(tmp_path, clock, launcher)
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.2, {"etl": assignment(epoch=5)}))
    feed(loop, AssignmentsRead(100.1, {}))  # older than the read applied
    feed(loop, AssignmentsRead(100.3, {"etl": assignment(epoch=4, generation=9)}))
    assert loop.workers["etl"].phase is Phase.STOPPING  # the stale one counts as absent
    assert loop.workers["etl"].held() == Held(None)


def test_a_slot_freed_asks_for_a_read_for_the_pipelines_that_wait(tmp_path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    reads: list[str] = []
    loop = control_loop(tmp_path, clock, launcher, request_read=lambda: reads.append("read"))
    three = {name: assignment(name, assigned=i) for i, name in enumerate("abc")}
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.1, three))
    assert set(loop.workers) == {"a", "b"}
    del three["a"]
    feed(loop, AssignmentsRead(100.2, three))
    launcher.processes[0].exit_code = 0
    reads.clear()
    feed(loop)
    assert reads == ["read"]
    feed(loop, AssignmentsRead(100.3, three))
    assert set(loop.workers) == {"b", "c"}


def test_a_leaders_fence_stops_every_worker_and_is_answered_once_none_is_left(tmp_path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    rounds: list[HeartbeatRound] = []
    loop = control_loop(tmp_path, clock, launcher, offer=rounds.append)
    both = {"a": assignment("a"), "b": assignment("b")}
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.1, both))
    order = FenceOrder(epoch=1)
    feed(loop, order)
    assert [p.signals for p in launcher.processes] == [["TERM"], ["TERM"]]
    assert order.verdict is FenceVerdict.PENDING  # their processes still run
    assert rounds[-1].supervisor.running == []
    clock.advance(TIMEOUTS.stop_secs)
    feed(loop)
    assert [p.signals for p in launcher.processes] == [["TERM", "KILL"], ["TERM", "KILL"]]
    assert order.verdict is FenceVerdict.PENDING
    launcher.processes[0].exit_code = -9
    feed(loop)
    assert order.verdict is FenceVerdict.PENDING  # b still runs
    launcher.processes[1].exit_code = -9
    feed(loop)
    assert order.wait(0) is FenceVerdict.STOPPED
    assert order.stopped == ["a", "b"]
    assert loop._lease.fences == 1


def test_a_fenced_supervisor_starts_nothing_before_a_newer_heartbeat_and_a_read_after_it(
    tmp_path,
) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    loop = control_loop(tmp_path, clock, launcher)
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.1, {"etl": assignment()}))
    clock.advance(1.0)
    fenced_at = clock()
    feed(loop, FenceOrder(epoch=1))
    launcher.processes[0].exit_code = 0
    feed(loop)
    assert "etl" not in loop.workers
    feed(loop, AssignmentsRead(fenced_at - 0.5, {"etl": assignment()}))  # begun before it
    feed(loop, HeartbeatWritten(fenced_at - 0.1))  # a round that began before the fence
    feed(loop, AssignmentsRead(fenced_at + 0.1, {"etl": assignment()}))
    assert len(launcher.processes) == 1  # no lease: a write begun before the fence renews none
    feed(loop, HeartbeatWritten(fenced_at + 0.2))
    assert len(launcher.processes) == 1  # the lease is back, but those reads are older
    feed(loop, AssignmentsRead(fenced_at + 0.3, {}))  # the leader moved etl meanwhile
    assert len(launcher.processes) == 1 and "etl" not in loop.workers


def test_a_fence_of_an_older_epoch_than_seen_is_refused_and_stops_nothing(tmp_path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    loop = control_loop(tmp_path, clock, launcher)
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.1, {"etl": assignment(epoch=5)}))
    stale = FenceOrder(epoch=4)
    feed(loop, stale)
    assert stale.wait(0) is FenceVerdict.REFUSED and stale.newest_epoch == 5
    assert launcher.processes[0].signals == []
    assert loop.workers["etl"].phase is Phase.RUNNING
    feed(loop, FenceOrder(epoch=7))
    launcher.processes[0].exit_code = 0
    feed(loop)
    late = FenceOrder(epoch=6)  # a leader older than the one that fenced last
    feed(loop, late)
    assert late.verdict is FenceVerdict.REFUSED and late.newest_epoch == 7


# ---------------------------------------------------------------------- the code cache


def test_the_lease_is_handed_to_the_workers_before_they_start_and_its_lapse_too(tmp_path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    lease_file = tmp_path / "lease"
    write_lease(lease_file, 103.0)  # a previous supervisor's, which its workers run on
    loop = control_loop(tmp_path, clock, launcher, lease_file=lease_file)
    feed(loop)
    assert read_lease(lease_file) == 103.0  # not held yet: the old lease stands, untouched
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.1, {"etl": assignment()}))
    assert len(launcher.processes) == 1
    assert read_lease(lease_file) == 106.0  # the write's start plus the fence timeout
    clock.advance(1.0)
    feed(loop, HeartbeatWritten(101.0))
    assert read_lease(lease_file) == 107.0
    clock.advance(6.0)  # no heartbeat written since
    feed(loop)
    assert read_lease(lease_file) == 0.0


def test_a_loop_stalled_past_its_lease_fences_though_a_heartbeat_was_written_meanwhile(
    tmp_path,
) -> None:
    """The heartbeat thread wrote while the loop did not run (a stalled machine): that write
    began after the lease's end, so the loop fences on waking and hands the lease gained
    again by a later write with the moment of its gain (``lease.since``), which the workers
    that did not look across the gap judge by."""
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    lease_file = tmp_path / "lease"
    loop = control_loop(tmp_path, clock, launcher, lease_file=lease_file)
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.1, {"etl": assignment()}))
    assert read_lease(since_path(lease_file)) == 100.0
    clock.advance(7.0)  # the loop is not scheduled past the lease's end (106.0)
    feed(loop, HeartbeatWritten(106.5))
    assert launcher.processes[0].signals == ["TERM"]
    clock.advance(0.5)
    feed(loop, HeartbeatWritten(107.5))
    assert read_lease(since_path(lease_file)) == 107.5
    assert read_lease(lease_file) == 113.5


def test_a_shutdown_posted_during_a_tick_starts_no_further_worker(tmp_path) -> None:
    """A start can take seconds (its monitor's); a stop posted meanwhile, from the daemon's
    thread, must not wait behind the starts of every other pipeline of that tick."""
    clock = FakeClock(100.0)
    launcher = PostingLauncher(tmp_path)
    loop = control_loop(tmp_path, clock, launcher)
    launcher.loop = loop
    both = {"a": assignment("a"), "b": assignment("b")}
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.1, both))
    assert len(launcher.processes) == 1  # the first start, during which the stop came
    loop.run()  # the shutdown: every worker stopped, none started
    assert len(launcher.processes) == 1
    assert all(worker.phase is Phase.STOPPED for worker in loop.workers.values())


class PostingLauncher(FakeLauncher):
    """Posts the daemon's shutdown while it spawns the first worker."""

    loop: ControlLoop | None = None

    def spawn(self, assignment: Assignment, code: PipelineCode, paths: WorkerPaths) -> FakeProcess:
        super().spawn(assignment, code, paths)
        self.processes[-1] = process = StopsOnTerm(self.processes[-1].pid)
        if self.loop is not None:
            self.loop.post(SHUTDOWN)
        return process


class StopsOnTerm(FakeProcess):
    def terminate(self) -> None:
        super().terminate()
        self.exit_code = 0
