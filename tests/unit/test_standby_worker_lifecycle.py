"""The supervisor's state machine of one standby worker (``ManagedStandbyWorker``) alone,
with a fake launcher and fake processes: READY only once ``standby.json`` names its live
process, exits restarted with backoff then FAILED with the error in its beat, a stop, and
refusal by the spare budget. The real processes on Spark are ``test_standby_supervisor``'s."""

from __future__ import annotations

from pathlib import Path

from stratus.api.records import Assignment
from stratus.api.standby_workers import StandbyWorkerPlacement, StandbyWorkerState
from stratus.supervisor.adoption import Pid, ProcessRecord
from stratus.supervisor.code_cache import PipelineCode
from stratus.supervisor.restart_policy import RestartPolicy
from stratus.supervisor.standby_worker import ManagedStandbyWorker, Stage, StandbyWorkers
from stratus.supervisor.warm_memory import Budget, Machine
from stratus.supervisor.worker_process import WorkerPaths
from stratus.worker.outcome import REFUSED_EXIT
from stratus.worker.promotion import StandbyReady, write_standby_ready
from tests.harness.supervisor_fakes import (
    DIGEST,
    RESTART_SETTINGS,
    TIMEOUTS,
    FakeClock,
    FakeLauncher,
    FakeProcess,
)
from tests.harness.supervisor_fakes import assignment as supervisor_assignment

MIB = 1 << 20
PLACEMENT = StandbyWorkerPlacement(
    pipeline="etl", supervisor="s2", epoch=1, generation=3, digest=DIGEST, size_bytes=10, placed=1.0
)


class StandbyProcess(FakeProcess):
    def __init__(self, pid: int) -> None:
        super().__init__(pid)
        self.record = ProcessRecord.model_validate(
            {
                "supervisor": "s2",
                "cluster": {"servers": ["127.0.0.1:2181"], "root": "/t"},
                "pipeline": "etl",
                "epoch": 1,
                "generation": 3,
                "token": None,
                "digest": DIGEST,
                "monitor": Pid(pid=pid - 1, start=1),
                "worker": Pid(pid=pid, start=1),
                "boot_id": "b",
                "role": "standby",
            }
        )


class StandbyLauncherFake(FakeLauncher):
    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.standby: list[StandbyProcess] = []
        self.promoted: list[Assignment] = []

    def spawn_standby(
        self, placement: StandbyWorkerPlacement, code: PipelineCode, paths: WorkerPaths, era: int
    ) -> StandbyProcess:
        self.standby.append(StandbyProcess(200 + len(self.standby)))
        return self.standby[-1]

    def promote(self, assignment: Assignment, code: PipelineCode, paths: WorkerPaths) -> None:
        self.promoted.append(assignment)


def standby(tmp_path: Path, clock: FakeClock) -> tuple[ManagedStandbyWorker, StandbyLauncherFake]:
    launcher = StandbyLauncherFake(tmp_path)
    worker = ManagedStandbyWorker(
        "s2",
        PLACEMENT,
        launcher=launcher,
        paths=WorkerPaths.of(tmp_path, "etl"),
        era=7,
        policy=RestartPolicy(RESTART_SETTINGS),
        timeouts=TIMEOUTS,
        clock=clock,
        wall=clock,
    )
    return worker, launcher


def stage(worker: ManagedStandbyWorker) -> Stage:
    """Its stage now (a call: each step may change it)."""
    return worker.stage


def ready_file(tmp_path: Path, pid: int, generation: int = 3) -> None:
    work = WorkerPaths.of(tmp_path, "etl").work
    work.mkdir(parents=True, exist_ok=True)
    ready = StandbyReady(pipeline="etl", generation=generation, digest=DIGEST, pid=pid, since=1.0)
    write_standby_ready(work, ready)


def started(tmp_path: Path, clock: FakeClock) -> tuple[ManagedStandbyWorker, StandbyLauncherFake]:
    worker, launcher = standby(tmp_path, clock)
    worker.step(may_start=True)  # its code, at once
    assert worker.asking
    worker.admit(may_start=True)
    assert stage(worker) is Stage.STARTING
    return worker, launcher


def test_it_is_ready_only_once_standby_json_names_its_live_process(tmp_path: Path) -> None:
    clock = FakeClock()
    worker, launcher = started(tmp_path, clock)
    ready_file(tmp_path, pid=999)  # a previous process's
    worker.step(may_start=True)
    assert stage(worker) is Stage.STARTING
    ready_file(tmp_path, pid=launcher.standby[0].pid, generation=2)  # another generation's
    worker.step(may_start=True)
    assert stage(worker) is Stage.STARTING
    ready_file(tmp_path, pid=launcher.standby[0].pid)
    worker.step(may_start=True)
    assert stage(worker) is Stage.READY and worker.held().ready
    beat = worker.beat()
    assert beat is not None and beat.state is StandbyWorkerState.READY
    assert beat.pid == launcher.standby[0].pid and beat.error is None


def test_exits_before_promotion_back_off_then_fail_with_the_error_in_the_beat(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    worker, launcher = started(tmp_path, clock)
    for attempt in range(RESTART_SETTINGS.max_restarts):
        launcher.standby[-1].exit_code = 1
        worker.step(may_start=True)
        assert stage(worker) is Stage.BACKOFF
        beat = worker.beat()
        assert beat is not None and beat.state is StandbyWorkerState.STARTING
        assert beat.error is not None and "exited with code 1" in beat.error
        clock.advance(60.0)
        worker.step(may_start=True)  # the backoff is over: its code again
        worker.admit(may_start=True)
        assert stage(worker) is Stage.STARTING, attempt
    launcher.standby[-1].exit_code = 1
    worker.step(may_start=True)
    assert stage(worker) is Stage.FAILED and not worker.held().takes_slot
    beat = worker.beat()
    assert beat is not None and beat.state is StandbyWorkerState.FAILED
    assert beat.error is not None and "exited with code 1" in beat.error
    assert len(launcher.standby) == RESTART_SETTINGS.max_restarts + 1


def test_a_checkpoint_location_of_another_fails_it_at_once(tmp_path: Path) -> None:
    worker, launcher = started(tmp_path, FakeClock())
    launcher.standby[0].exit_code = REFUSED_EXIT
    worker.step(may_start=True)
    assert stage(worker) is Stage.FAILED and len(launcher.standby) == 1


def test_a_stop_terminates_it_and_it_is_stopped_once_it_exited(tmp_path: Path) -> None:
    clock = FakeClock()
    worker, launcher = started(tmp_path, clock)
    worker.stop()
    assert stage(worker) is Stage.STOPPING and launcher.standby[0].signals == ["TERM"]
    assert worker.beat() is None and worker.held().placement is None
    clock.advance(TIMEOUTS.stop_secs)
    worker.step(may_start=True)
    assert launcher.standby[0].signals == ["TERM", "KILL"]
    launcher.standby[0].exit_code = -9
    worker.step(may_start=True)
    assert stage(worker) is Stage.STOPPED and worker.idle


def test_a_ready_one_is_promoted_with_its_record_rewritten_as_the_pipelines_worker(
    tmp_path: Path,
) -> None:
    worker, launcher = started(tmp_path, FakeClock())
    WorkerPaths.of(tmp_path, "etl").directory.mkdir(parents=True, exist_ok=True)
    ready_file(tmp_path, pid=launcher.standby[0].pid)
    worker.step(may_start=True)
    assignment = supervisor_assignment("etl", "s2", generation=3, zxid=50)
    process = worker.promote(assignment)
    assert process is launcher.standby[0] and launcher.promoted == [assignment]
    record = ProcessRecord.read(WorkerPaths.of(tmp_path, "etl").directory)
    assert record is not None and record.role == "active" and record.runs(assignment)
    assert worker.idle and worker.beat() is None


def test_the_spare_budget_refuses_one_that_does_not_fit_and_admits_it_once_it_does(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    machine = Machine(total=16 << 30, available=12 << 30)
    workers = StandbyWorkers(
        Budget(512 * MIB, "test"), machine=lambda: machine, rss=lambda _g: {}, clock=clock
    )
    worker, _ = standby(tmp_path, clock)
    workers.workers["etl"] = worker
    workers.step(may_start=True)
    workers.plan_alone()
    beat = worker.beat()
    assert beat is not None and beat.state is StandbyWorkerState.REFUSED
    assert beat.error is not None and "would pass the spare budget: 0 of 512 MiB" in beat.error
    workers.budget = Budget(2048 * MIB, "test")
    workers.plan_alone()
    assert stage(worker) is Stage.STARTING
    assert workers.counts() == (1, 1024)
