"""The supervisor's logic alone: reconcile rules, the epoch filter, the restart policy, the
lease, a worker's lifecycle and the control loop's fencing, driven by fake clocks and fake
processes (no ZooKeeper, no Spark)."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Set
from pathlib import Path
from typing import Any

import pytest

from stratus.api.records import Assignment, WorkerHeartbeat, WorkerState
from stratus.codedist.distributor import CodeMeta
from stratus.codedist.errors import CodeUnavailableError
from stratus.codedist.manifest import parse_manifest
from stratus.codedist.package_check import PackageLimits
from stratus.codedist.package_store import hash_file
from stratus.config import config_from_mapping
from stratus.supervisor.assignment_reader import AssignmentsRead
from stratus.supervisor.code_cache import (
    CodeCache,
    CodeFailed,
    CodePending,
    CodeState,
    PipelineCode,
)
from stratus.supervisor.control_loop import ControlLoop, HeartbeatWritten, LoopSettings
from stratus.supervisor.fence import Lease, LeaseState
from stratus.supervisor.heartbeat_publisher import HeartbeatRound
from stratus.supervisor.managed_worker import ManagedWorker, Phase, StopReason, WorkerTimeouts
from stratus.supervisor.reconcile import (
    Action,
    ActionKind,
    Held,
    assignments_for,
    plan,
    waiting_for_slots,
)
from stratus.supervisor.restart_policy import GiveUp, Restart, RestartPolicy, RestartSettings
from stratus.supervisor.worker_process import WorkerPaths, build_spec, log_tail, spark_master
from tests.package_factory import valid_package
from tests.zkfixtures import wait_until

DIGEST = "a" * 64


def assignment(
    name: str = "etl",
    supervisor: str = "s1",
    *,
    epoch: int = 1,
    generation: int = 0,
    digest: str = DIGEST,
    assigned: float = 100.0,
    conf: dict[str, Any] | None = None,
) -> Assignment:
    return Assignment(
        pipeline=name,
        supervisor=supervisor,
        epoch=epoch,
        generation=generation,
        digest=digest,
        size_bytes=10,
        conf=conf or {},
        assigned=assigned,
    )


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, secs: float) -> None:
        self.now += secs


# ---------------------------------------------------------------------- the epoch filter


def test_only_assignments_naming_this_supervisor_are_kept() -> None:
    mine, _ = assignments_for(
        "s1", {"a": assignment("a", "s1"), "b": assignment("b", "s2")}, seen={}
    )
    assert set(mine) == {"a"}


def test_an_assignment_older_than_an_epoch_seen_for_its_pipeline_is_ignored() -> None:
    _, seen = assignments_for("s1", {"etl": assignment(supervisor="s2", epoch=5)}, seen={})
    mine, seen = assignments_for("s1", {"etl": assignment(supervisor="s1", epoch=4)}, seen)
    assert mine == {}
    assert seen == {"etl": 5}


def test_an_assignment_of_the_same_or_a_newer_epoch_is_kept() -> None:
    for epoch in (5, 6):
        mine, seen = assignments_for("s1", {"etl": assignment(epoch=epoch)}, {"etl": 5})
        assert set(mine) == {"etl"}
        assert seen == {"etl": epoch}


def test_epochs_seen_are_remembered_after_the_assignment_goes() -> None:
    _, seen = assignments_for("s1", {"etl": assignment(epoch=7)}, {})
    _, seen = assignments_for("s1", {}, seen)
    mine, _ = assignments_for("s1", {"etl": assignment(epoch=6)}, seen)
    assert mine == {}


# ---------------------------------------------------------------------- the plan


def kinds(actions: list[Action]) -> dict[str, ActionKind]:
    return {action.pipeline: action.kind for action in actions}


def test_missing_workers_are_started_up_to_the_slots_oldest_assignment_first() -> None:
    desired = {
        "c": assignment("c", assigned=3.0),
        "a": assignment("a", assigned=2.0),
        "b": assignment("b", assigned=1.0),
    }
    actions = plan(desired, {}, slots=2)
    assert [a.pipeline for a in actions] == ["b", "a"]
    assert waiting_for_slots(desired, {}, actions) == ["c"]


def test_workers_held_take_slots_even_while_they_stop() -> None:
    held = {"old": Held(None), "x": Held(assignment("x"))}
    actions = plan({"x": assignment("x"), "new": assignment("new")}, held, slots=2)
    assert kinds(actions) == {}


def test_done_workers_take_no_slot() -> None:
    held = {"x": Held(assignment("x"), done=True)}
    actions = plan({"x": assignment("x"), "new": assignment("new")}, held, slots=1)
    assert kinds(actions) == {"new": ActionKind.START}


def test_a_worker_whose_assignment_is_gone_or_moved_is_stopped() -> None:
    mine, _ = assignments_for("s1", {"moved": assignment("moved", "s2")}, {})
    held = {"gone": Held(assignment("gone")), "moved": Held(assignment("moved"))}
    assert kinds(plan(mine, held, slots=4)) == {
        "gone": ActionKind.STOP,
        "moved": ActionKind.STOP,
    }


def test_a_new_generation_or_digest_restarts_the_worker() -> None:
    held = {"g": Held(assignment("g")), "d": Held(assignment("d"))}
    desired = {"g": assignment("g", generation=1), "d": assignment("d", digest="b" * 64)}
    actions = plan(desired, held, slots=4)
    assert kinds(actions) == {"g": ActionKind.RESTART, "d": ActionKind.RESTART}
    assert {a.pipeline: a.assignment for a in actions} == desired


def test_a_new_epoch_alone_keeps_the_worker_running() -> None:
    desired = {"etl": assignment(epoch=2, assigned=200.0)}
    actions = plan(desired, {"etl": Held(assignment(epoch=1))}, slots=4)
    assert actions == [Action(ActionKind.UPDATE, "etl", desired["etl"])]


def test_an_unchanged_assignment_needs_nothing() -> None:
    assert plan({"etl": assignment()}, {"etl": Held(assignment())}, slots=4) == []


def test_a_failed_worker_runs_again_only_for_a_new_assignment() -> None:
    held = {"etl": Held(assignment(), done=True)}
    assert plan({"etl": assignment(epoch=2)}, held, slots=4)[0].kind is ActionKind.UPDATE
    again = plan({"etl": assignment(assigned=500.0)}, held, slots=4)
    assert kinds(again) == {"etl": ActionKind.RESTART}


def test_a_pipeline_assigned_again_while_its_worker_stops_is_restarted() -> None:
    assert kinds(plan({"etl": assignment()}, {"etl": Held(None)}, slots=4)) == {
        "etl": ActionKind.RESTART
    }


# ---------------------------------------------------------------------- the restart policy

SETTINGS = RestartSettings(backoff_secs=1.0, max_restarts=3, reset_secs=60.0)


def test_the_backoff_doubles_at_every_crash_in_a_row() -> None:
    clock = FakeClock()
    policy = RestartPolicy(SETTINGS)
    delays = []
    for _ in range(3):
        policy.started(clock())
        clock.advance(2.0)
        decision = policy.crashed(clock())
        assert isinstance(decision, Restart)
        assert decision.at == clock() + decision.delay_secs
        delays.append(decision.delay_secs)
    assert delays == [1.0, 2.0, 4.0]
    assert policy.restarts == 3


def test_the_backoff_stops_doubling_at_thirty_times_its_base() -> None:
    clock = FakeClock()
    policy = RestartPolicy(RestartSettings(backoff_secs=1.0, max_restarts=100, reset_secs=60.0))
    delays = []
    for _ in range(8):
        policy.started(clock())
        decision = policy.crashed(clock())
        assert isinstance(decision, Restart)
        delays.append(decision.delay_secs)
    assert delays == [1, 2, 4, 8, 16, 30, 30, 30]


def test_the_supervisor_gives_up_after_max_restarts_crashes_in_a_row() -> None:
    clock = FakeClock()
    policy = RestartPolicy(SETTINGS)
    decisions = []
    for _ in range(4):
        policy.started(clock())
        clock.advance(1.0)
        decisions.append(policy.crashed(clock()))
    assert [type(d) for d in decisions] == [Restart, Restart, Restart, GiveUp]
    assert decisions[-1] == GiveUp(crashes_in_row=4)


def test_no_restart_at_all_with_max_restarts_zero() -> None:
    policy = RestartPolicy(RestartSettings(backoff_secs=1.0, max_restarts=0, reset_secs=60.0))
    policy.started(0.0)
    assert isinstance(policy.crashed(1.0), GiveUp)


def test_a_crash_after_running_long_enough_starts_a_new_row() -> None:
    clock = FakeClock()
    policy = RestartPolicy(SETTINGS)
    for _ in range(3):
        policy.started(clock())
        clock.advance(1.0)
        policy.crashed(clock())
    policy.started(clock())
    clock.advance(SETTINGS.reset_secs)
    decision = policy.crashed(clock())
    assert isinstance(decision, Restart)
    assert decision.crashes_in_row == 1
    assert decision.delay_secs == SETTINGS.backoff_secs
    assert policy.restarts == 4  # the count since the assignment goes on


# ---------------------------------------------------------------------- the lease


def test_no_lease_before_the_first_heartbeat_is_written() -> None:
    lease = Lease(timeout_secs=6.0)
    assert lease.state is LeaseState.UNLEASED
    assert not lease.may_start(read_started=100.0)
    assert not lease.check(now=1000.0)


def test_a_write_gains_the_lease_and_only_a_newer_read_may_start_workers() -> None:
    lease = Lease(timeout_secs=6.0)
    assert lease.renewed(write_started=10.0, now=10.1)
    assert not lease.may_start(read_started=9.0)
    assert lease.may_start(read_started=10.5)


def test_the_lease_lapses_timeout_after_the_start_of_the_last_write() -> None:
    lease = Lease(timeout_secs=6.0)
    lease.renewed(write_started=10.0, now=10.5)
    assert not lease.check(now=15.9)
    assert lease.remaining(now=15.0) == pytest.approx(1.0)
    assert lease.check(now=16.0)
    assert lease.state is LeaseState.UNLEASED
    assert not lease.check(now=17.0)  # fenced once
    assert lease.fences == 1


def test_a_write_that_landed_too_late_does_not_regain_the_lease() -> None:
    lease = Lease(timeout_secs=6.0)
    lease.renewed(write_started=10.0, now=10.1)
    lease.check(now=16.0)
    assert not lease.renewed(write_started=11.0, now=17.5)
    assert lease.state is LeaseState.UNLEASED


def test_after_a_fence_workers_start_only_on_a_read_newer_than_the_regained_lease() -> None:
    lease = Lease(timeout_secs=6.0)
    lease.renewed(write_started=10.0, now=10.1)
    lease.check(now=16.0)
    assert lease.renewed(write_started=30.0, now=30.2)
    assert not lease.may_start(read_started=29.0)  # read while cut off
    assert lease.may_start(read_started=30.3)


# ---------------------------------------------------------------------- the worker spec

CLUSTER = config_from_mapping(
    {"pipeline.spark.master": "spark://cluster:7077", "pipeline.checkpoint.root": "/ck/"}
)


def code(
    tmp_path: Path, manifest_text: str = "name: etl\nkind: app\nentrypoint: m:run\n"
) -> PipelineCode:
    return PipelineCode(DIGEST, tmp_path / "code", parse_manifest(manifest_text))


def test_spark_master_is_the_pipelines_then_its_pipeline_key_then_the_clusters() -> None:
    assert spark_master(CLUSTER, {"spark.master": "local[2]", "pipeline.spark.master": "x"}) == (
        "local[2]"
    )
    assert spark_master(CLUSTER, {"pipeline.spark.master": "yarn"}) == "yarn"
    assert spark_master(CLUSTER, {}) == "spark://cluster:7077"


def test_the_spec_carries_the_assignment_the_code_and_where_to_checkpoint(tmp_path) -> None:
    paths = WorkerPaths.of(tmp_path, "etl")
    spec = build_spec(
        CLUSTER, "s1", assignment(epoch=3, generation=2, conf={"spark.x": 1}), code(tmp_path), paths
    )
    assert (spec.pipeline, spec.supervisor, spec.epoch, spec.generation) == ("etl", "s1", 3, 2)
    assert (spec.kind, spec.entrypoint, spec.code_dir) == ("app", "m:run", tmp_path / "code")
    assert spec.checkpoint_location == "/ck/etl"
    assert spec.spark_master == "spark://cluster:7077"
    assert spec.heartbeat_path == tmp_path / "workers" / "etl" / "heartbeat.json"
    assert spec.conf == {"spark.x": 1}
    assert spec.trigger_interval_secs is None


def test_the_pipelines_own_checkpoint_root_and_the_manifests_trigger_are_used(tmp_path) -> None:
    manifest = "name: etl\nkind: sdp\ntrigger:\n  interval_secs: 5\nconf:\n  spark.a: manifest\n"
    pipeline_conf = {"pipeline.checkpoint.root": "s3://bucket/ck", "spark.a": "submit"}
    spec = build_spec(
        CLUSTER,
        "s1",
        assignment(conf=pipeline_conf),
        code(tmp_path, manifest),
        WorkerPaths.of(tmp_path, "etl"),
    )
    assert spec.checkpoint_location == "s3://bucket/ck/etl"
    assert spec.trigger_interval_secs == 5.0
    assert spec.conf["spark.a"] == "submit"  # the assignment's conf over the manifest's
    assert (spec.kind, spec.project) == ("sdp", "spark-pipeline.yml")


def test_the_log_tail_is_that_of_the_last_run(tmp_path) -> None:
    log = tmp_path / "worker.log"
    mark = "==== stratus supervisor: worker started"
    log.write_text(f"{mark} run=1\nold error\n{mark} run=2\nline a\n\nline b\n")
    assert log_tail(log) == "line a\nline b"
    assert log_tail(tmp_path / "none.log") is None


# ---------------------------------------------------------------------- a worker's lifecycle


class FakeProcess:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.started_wall = 5.0
        self.exit_code: int | None = None
        self.signals: list[str] = []

    def poll(self) -> int | None:
        return self.exit_code

    def terminate(self) -> None:
        self.signals.append("TERM")

    def kill(self) -> None:
        self.signals.append("KILL")


class FakeLauncher:
    """Code ready (or not) at once; every spawn a FakeProcess."""

    def __init__(self, tmp_path: Path) -> None:
        self.code_state: CodeState = code(tmp_path)
        self.processes: list[FakeProcess] = []
        self.retained: set[str] = set()

    def code(self, pipeline: str, meta: CodeMeta) -> CodeState:
        return self.code_state

    def spawn(self, assignment: Assignment, code: PipelineCode, paths: WorkerPaths) -> FakeProcess:
        paths.directory.mkdir(parents=True, exist_ok=True)
        self.processes.append(FakeProcess(100 + len(self.processes)))
        return self.processes[-1]

    def retain(self, digests: Set[str]) -> None:
        self.retained = set(digests)

    @property
    def last(self) -> FakeProcess:
        return self.processes[-1]


TIMEOUTS = WorkerTimeouts(stop_secs=3.0, hang_secs=20.0)


def managed(
    tmp_path: Path, clock: FakeClock, launcher: FakeLauncher, **settings: float
) -> ManagedWorker:
    restart = RestartSettings(
        backoff_secs=settings.get("backoff", 1.0),
        max_restarts=int(settings.get("max_restarts", 3)),
        reset_secs=60.0,
    )
    return ManagedWorker(
        "s1",
        assignment(),
        launcher=launcher,
        paths=WorkerPaths.of(tmp_path, "etl"),
        policy=RestartPolicy(restart),
        timeouts=TIMEOUTS,
        clock=clock,
        wall=lambda: 42.0,
    )


def phase(worker: ManagedWorker) -> Phase:
    """The worker's phase, read through a call (mypy would narrow the attribute)."""
    return worker.phase


def write_beat(
    tmp_path: Path, state: WorkerState, error: str | None = None, time: float = 1.0
) -> None:
    beat = WorkerHeartbeat(
        pipeline="etl",
        supervisor="s1",
        epoch=1,
        generation=0,
        digest=DIGEST,
        state=state,
        time=time,
        error=error,
    )
    WorkerPaths.of(tmp_path, "etl").heartbeat.write_bytes(beat.encode())


def test_a_worker_starts_once_its_code_is_there_and_allowed(tmp_path) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    launcher.code_state = CodePending()
    worker = managed(tmp_path, clock, launcher)
    worker.step(may_start=True)
    assert phase(worker) is Phase.PREPARING
    launcher.code_state = code(tmp_path)
    worker.step(may_start=False)
    assert phase(worker) is Phase.PREPARING
    worker.step(may_start=True)
    assert phase(worker) is Phase.RUNNING
    beat = worker.heartbeat()
    assert (beat.state, beat.pid, beat.time) == (WorkerState.STARTING, 100, 42.0)


def test_code_that_cannot_be_fetched_is_reported_in_the_heartbeat(tmp_path) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    launcher.code_state = CodeFailed("no nimbus holds it", retry_at=2000.0, failures=2)
    worker = managed(tmp_path, clock, launcher)
    worker.step(may_start=True)
    beat = worker.heartbeat()
    assert beat.state is WorkerState.STARTING
    assert beat.error == "no nimbus holds it (failed 2 times)"


def test_the_workers_own_heartbeat_is_published_with_what_the_supervisor_vouches_for(
    tmp_path,
) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    worker = managed(tmp_path, clock, launcher)
    worker.step(may_start=True)
    write_beat(tmp_path, WorkerState.RUNNING, time=7.0)
    worker.step(may_start=True)
    worker.update(assignment(epoch=9))
    beat = worker.heartbeat()
    assert (beat.state, beat.time, beat.epoch, beat.restarts) == (WorkerState.RUNNING, 7.0, 9, 0)


def test_a_crashed_worker_restarts_after_its_backoff_and_counts_restarts(tmp_path) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    worker = managed(tmp_path, clock, launcher, backoff=2.0)
    worker.step(may_start=True)
    launcher.last.exit_code = 1
    clock.advance(1.0)
    worker.step(may_start=True)
    assert phase(worker) is Phase.BACKOFF
    beat = worker.heartbeat()
    assert (beat.state, beat.restarts) == (WorkerState.RESTARTING, 1)
    assert beat.error is not None and "exited with code 1" in beat.error
    clock.advance(1.9)
    worker.step(may_start=True)
    assert phase(worker) is Phase.BACKOFF
    clock.advance(0.1)
    worker.step(may_start=True)
    assert phase(worker) is Phase.RUNNING
    assert len(launcher.processes) == 2


def test_after_max_restarts_the_worker_is_failed_with_its_own_error(tmp_path) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    worker = managed(tmp_path, clock, launcher, max_restarts=1)
    for _ in range(2):
        worker.step(may_start=True)
        write_beat(tmp_path, WorkerState.FAILED, error="entrypoint 'm:run': no module named 'm'")
        launcher.last.exit_code = 1
        worker.step(may_start=True)
        clock.advance(10.0)
    assert phase(worker) is Phase.FAILED
    beat = worker.heartbeat()
    assert beat.state is WorkerState.FAILED
    assert beat.restarts == 1
    assert beat.error == "the worker exited with code 1: entrypoint 'm:run': no module named 'm'"
    worker.step(may_start=True)
    assert len(launcher.processes) == 2  # never started again


def test_a_failed_workers_error_falls_back_to_its_log(tmp_path) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    worker = managed(tmp_path, clock, launcher, max_restarts=0)
    worker.step(may_start=True)
    (tmp_path / "workers" / "etl" / "worker.log").write_text("Traceback\nValueError: boom\n")
    launcher.last.exit_code = -9
    worker.step(may_start=True)
    assert (
        worker.heartbeat().error == "the worker was killed by SIGKILL: Traceback\nValueError: boom"
    )


def test_exit_zero_with_a_finished_heartbeat_is_a_finished_batch(tmp_path) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    worker = managed(tmp_path, clock, launcher)
    worker.step(may_start=True)
    write_beat(tmp_path, WorkerState.FINISHED)
    launcher.last.exit_code = 0
    worker.step(may_start=True)
    assert phase(worker) is Phase.FINISHED
    assert worker.heartbeat().state is WorkerState.FINISHED
    assert worker.held() == Held(assignment(), done=True)


def test_exit_zero_without_finishing_is_a_crash(tmp_path) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    worker = managed(tmp_path, clock, launcher)
    worker.step(may_start=True)
    launcher.last.exit_code = 0
    worker.step(may_start=True)
    assert phase(worker) is Phase.BACKOFF


def test_a_stop_is_sigterm_then_sigkill_of_the_group_after_the_grace(tmp_path) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    worker = managed(tmp_path, clock, launcher)
    worker.step(may_start=True)
    worker.retire(StopReason.UNASSIGNED)
    assert launcher.last.signals == ["TERM"]
    clock.advance(TIMEOUTS.stop_secs - 0.1)
    worker.step(may_start=True)
    assert launcher.last.signals == ["TERM"]
    clock.advance(0.1)
    worker.step(may_start=True)
    assert launcher.last.signals == ["TERM", "KILL"]
    launcher.last.exit_code = -9
    worker.step(may_start=True)
    assert phase(worker) is Phase.STOPPED
    assert worker.idle
    assert worker.heartbeat().state is WorkerState.STOPPED


def test_a_worker_whose_heartbeat_stops_changing_is_killed_and_restarted(tmp_path) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    worker = managed(tmp_path, clock, launcher)
    worker.step(may_start=True)
    write_beat(tmp_path, WorkerState.RUNNING, time=1.0)
    worker.step(may_start=True)
    clock.advance(TIMEOUTS.hang_secs - 1)
    write_beat(tmp_path, WorkerState.RUNNING, time=2.0)  # a change: alive
    worker.step(may_start=True)
    clock.advance(TIMEOUTS.hang_secs)
    worker.step(may_start=True)
    assert phase(worker) is Phase.STOPPING
    assert launcher.last.signals == ["TERM"]
    launcher.last.exit_code = -15
    worker.step(may_start=True)
    assert phase(worker) is Phase.BACKOFF  # a hang counts as a crash
    assert worker.restarts == 1
    assert "did not change for 20s" in (worker.heartbeat().error or "")


def test_a_restart_order_stops_then_hands_over_to_the_new_assignment(tmp_path) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    worker = managed(tmp_path, clock, launcher)
    worker.step(may_start=True)
    new = assignment(generation=1)
    worker.replace_with(new)
    assert worker.held() == Held(new)
    assert not worker.idle
    launcher.last.exit_code = 0
    worker.step(may_start=True)
    assert phase(worker) is Phase.STOPPED
    assert worker.successor == new


# ---------------------------------------------------------------------- the control loop


def control_loop(
    tmp_path: Path, clock: FakeClock, launcher: FakeLauncher
) -> tuple[ControlLoop, list[HeartbeatRound], list[str]]:
    rounds: list[HeartbeatRound] = []
    reads: list[str] = []
    loop = ControlLoop(
        "s1",
        2,
        launcher=launcher,
        paths_of=lambda name: WorkerPaths.of(tmp_path, name),
        lease=Lease(timeout_secs=6.0),
        settings=LoopSettings(heartbeat_secs=1.0, restart=SETTINGS, timeouts=TIMEOUTS),
        request_read=lambda: reads.append("read"),
        offer=rounds.append,
        clock=clock,
        wall=clock,
    )
    return loop, rounds, reads


def feed(loop: ControlLoop, *messages: object) -> None:
    for message in messages:
        loop._apply(message)  # type: ignore[arg-type]
    loop.tick()


def test_workers_start_only_once_the_lease_is_held_and_a_newer_read_came(tmp_path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    loop, rounds, _ = control_loop(tmp_path, clock, launcher)
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
    loop, rounds, _ = control_loop(tmp_path, clock, launcher)
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
    loop, _, _ = control_loop(tmp_path, clock, launcher)
    feed(loop, HeartbeatWritten(100.0), AssignmentsRead(100.2, {"etl": assignment(epoch=5)}))
    feed(loop, AssignmentsRead(100.1, {}))  # older than the read applied
    feed(loop, AssignmentsRead(100.3, {"etl": assignment(epoch=4, generation=9)}))
    assert loop.workers["etl"].phase is Phase.STOPPING  # the stale one counts as absent
    assert loop.workers["etl"].held() == Held(None)


def test_a_slot_freed_asks_for_a_read_for_the_pipelines_that_wait(tmp_path) -> None:
    clock, launcher = FakeClock(100.0), FakeLauncher(tmp_path)
    loop, _, reads = control_loop(tmp_path, clock, launcher)
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


# ---------------------------------------------------------------------- the code cache


class CopyDistributor:
    """A distributor that 'downloads' by writing the bytes it was given."""

    def __init__(self, data: bytes | None) -> None:
        self.data = data
        self.downloads = 0

    def download(self, dest: Path, pipeline: str, meta: CodeMeta) -> list[Path]:
        self.downloads += 1
        if self.data is None:
            raise CodeUnavailableError(f"no holder of {pipeline}")
        target = dest / f"{meta.digest}.pkg"
        target.write_bytes(self.data)
        return [target]


LIMITS = PackageLimits(
    max_bytes=1 << 20, max_unpacked_bytes=1 << 20, max_ratio=200, max_entries=100
)


def fetch(cache: CodeCache, meta: CodeMeta) -> CodeState:
    state: list[CodeState] = []

    def done() -> bool:
        state[:] = [cache.get("etl", meta)]
        return not isinstance(state[0], CodePending)

    wait_until(done, 10, "the fetch")
    return state[0]


def test_code_is_fetched_checked_and_unpacked_once(tmp_path) -> None:
    data = valid_package("etl")
    (tmp_path / "p").write_bytes(data)
    meta = CodeMeta(hash_file(tmp_path / "p")[0], len(data))
    dist = CopyDistributor(data)
    cache = CodeCache(dist, tmp_path / "code", LIMITS, backoff_secs=1.0)  # type: ignore[arg-type]
    try:
        ready = fetch(cache, meta)
        assert isinstance(ready, PipelineCode)
        assert ready.directory == tmp_path / "code" / meta.digest
        assert (ready.directory / "pipeline_main.py").is_file()
        assert ready.manifest.entrypoint == "pipeline_main:run"
        assert cache.get("etl", meta) == ready
        assert dist.downloads == 1
        cache.retain(set())
        assert not (tmp_path / "code" / meta.digest).exists()
    finally:
        cache.close()


def test_code_that_is_unavailable_or_wrong_is_retried_after_a_backoff(tmp_path) -> None:
    clock = FakeClock()
    data = valid_package("etl")
    meta = CodeMeta("b" * 64, len(data))  # not the digest of these bytes
    dist = CopyDistributor(None)
    cache = CodeCache(dist, tmp_path / "code", LIMITS, backoff_secs=1.0, clock=clock)  # type: ignore[arg-type]
    try:
        first = fetch(cache, meta)
        assert isinstance(first, CodeFailed)
        assert "no holder of etl" in first.error
        assert cache.get("etl", meta) == first  # not before the backoff
        clock.advance(1.0)
        dist.data = data
        second = fetch(cache, meta)
        assert isinstance(second, CodeFailed)
        assert "hashes to" in second.error
        assert second.failures == 2
        assert second.retry_at == clock() + 2.0
        assert not (tmp_path / "code" / f"{meta.digest}.pkg").exists()
    finally:
        cache.close()


def test_a_package_that_fails_its_check_is_never_unpacked(tmp_path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("../evil.py", "x = 1\n")
    data = buffer.getvalue()
    (tmp_path / "p").write_bytes(data)
    meta = CodeMeta(hash_file(tmp_path / "p")[0], len(data))
    cache = CodeCache(CopyDistributor(data), tmp_path / "code", LIMITS, backoff_secs=1.0)  # type: ignore[arg-type]
    try:
        failed = fetch(cache, meta)
        assert isinstance(failed, CodeFailed)
        assert "fails its check" in failed.error
        assert not (tmp_path / "evil.py").exists()
        assert sorted(p.name for p in (tmp_path / "code").iterdir()) == []
    finally:
        cache.close()
