"""One worker's lifecycle under the supervisor (``supervisor/managed_worker.py``), driven by a
fake clock and fake processes: start, crash and backoff, giving up, finishing, stop, hang."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from stratus.api.records import (
    Assignment,
    QueryProgress,
    RunOutcome,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.codedist.distributor import CodeMeta
from stratus.supervisor.code_cache import CodeFailed, CodePending, CodeState, PipelineCode
from stratus.supervisor.launch_protocols import PreflightCheck
from stratus.supervisor.managed_worker import ManagedWorker, Phase
from stratus.supervisor.preflight import PreflightFailed, PreflightPassed, PreflightResult
from stratus.supervisor.reconcile import Held
from stratus.supervisor.requirements_env import EnvFailed
from stratus.supervisor.restart_policy import RestartPolicy
from stratus.supervisor.run_outcome import RunEnd, StopReason
from stratus.supervisor.settings import RestartSettings
from stratus.supervisor.worker_process import WorkerPaths
from stratus.worker.outcome import FENCED_EXIT, REFUSED_EXIT
from tests.harness.supervisor_fakes import (
    DIGEST,
    RESTART_SETTINGS,
    TIMEOUTS,
    FakeClock,
    FakeLauncher,
    FakeProcess,
    assignment,
    code,
)


def managed(
    tmp_path: Path,
    clock: FakeClock,
    launcher: FakeLauncher,
    conf: dict[str, Any] | None = None,
    **settings: float,
) -> ManagedWorker:
    restart = RestartSettings(
        backoff_secs=settings.get("backoff", 1.0),
        max_restarts=int(settings.get("max_restarts", 3)),
        reset_secs=60.0,
    )
    return ManagedWorker(
        "s1",
        assignment(conf=conf),
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
    tmp_path: Path,
    state: WorkerState,
    error: str | None = None,
    time: float = 1.0,
    batch_id: int | None = None,
) -> None:
    """The worker's own heartbeat file; ``batch_id``: its query reported that batch."""
    beat = WorkerHeartbeat(
        pipeline="etl",
        supervisor="s1",
        epoch=1,
        generation=0,
        digest=DIGEST,
        state=state,
        time=time,
        error=error,
        queries=[] if batch_id is None else [QueryProgress(name="q", batch_id=batch_id)],
    )
    heartbeat = WorkerPaths.of(tmp_path, "etl").heartbeat
    heartbeat.parent.mkdir(parents=True, exist_ok=True)  # the worker's own directory
    heartbeat.write_bytes(beat.encode())


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


def test_requirements_that_cannot_be_installed_fail_the_worker_at_once_without_restart(
    tmp_path,
) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    launcher.code_state = EnvFailed("cannot install the requirements nope>=1: ...")
    worker = managed(tmp_path, clock, launcher)
    worker.step(may_start=True)
    clock.advance(3600.0)
    worker.step(may_start=True)  # no backoff, no second try
    beat = worker.heartbeat()
    assert (phase(worker), beat.state, beat.restarts) == (Phase.FAILED, WorkerState.FAILED, 0)
    assert beat.error == "cannot install the requirements nope>=1: ..."
    assert launcher.processes == []


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


def test_secrets_in_a_crashed_workers_log_are_redacted_in_its_heartbeat_and_the_log(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    conf = {"pipeline.env.DB_PASSWORD": "hunter2-db", "spark.x": 1}
    worker = managed(tmp_path, clock, launcher, conf, max_restarts=0)
    worker.step(may_start=True)
    log = "connecting with hunter2-db\nAPI_TOKEN=tok-123456 failed\n"
    (tmp_path / "workers" / "etl" / "worker.log").write_text(log)
    launcher.last.exit_code = 1
    with caplog.at_level(logging.WARNING, logger="stratus.supervisor.managed_worker"):
        worker.step(may_start=True)
    error = worker.heartbeat().error or ""
    assert error == "the worker exited with code 1: connecting with ***\nAPI_TOKEN=*** failed"
    assert "event=worker_failed" in caplog.text
    assert "hunter2-db" not in caplog.text and "tok-123456" not in caplog.text


def test_the_workers_own_error_is_published_redacted(tmp_path) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    worker = managed(tmp_path, clock, launcher, {"spark.my.secret": "s3cr3t-x"})
    worker.step(may_start=True)
    write_beat(tmp_path, WorkerState.RUNNING, error="retrying: password=s3cr3t-x")
    worker.step(may_start=True)
    assert worker.heartbeat().error == "retrying: password=***"


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


def test_a_worker_that_stopped_itself_on_a_lease_starts_again_without_a_crash(tmp_path) -> None:
    """A hot worker whose beat lease ended exits 0, its last heartbeat STOPPED: not a crash.
    Five in a row leave no crash, no backoff and no FAILED (max.restarts is 3 here)."""
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    worker = managed(tmp_path, clock, launcher)
    worker.step(may_start=True)
    for started in range(1, 6):
        write_beat(tmp_path, WorkerState.STOPPED)
        launcher.last.exit_code = 0
        worker.step(may_start=False)  # the beat lease does not hold yet
        assert phase(worker) is Phase.PREPARING
        beat = worker.heartbeat()
        assert (beat.state, beat.restarts, beat.last_crash) == (WorkerState.STARTING, 0, None)
        assert len(launcher.processes) == started
        worker.step(may_start=True)  # it holds again: started at once, no backoff
        assert phase(worker) is Phase.RUNNING
    assert len(launcher.processes) == 6


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


def test_the_last_crash_stays_in_the_heartbeat_after_the_restart_that_follows(tmp_path) -> None:
    clock, launcher = FakeClock(), FakeLauncher(tmp_path)
    conf = {"pipeline.env.DB_PASSWORD": "hunter2-db"}
    worker = managed(tmp_path, clock, launcher, conf=conf, backoff=1.0)
    worker.step(may_start=True)
    (tmp_path / "workers" / "etl" / "worker.log").write_text("ValueError: hunter2-db broke\n")
    launcher.last.exit_code = -9
    worker.step(may_start=True)
    clock.advance(1.0)
    worker.step(may_start=True)  # started again
    write_beat(tmp_path, WorkerState.RUNNING, time=7.0)
    clock.advance(0.1)
    worker.step(may_start=True)
    beat = worker.heartbeat()
    assert (beat.state, beat.restarts) == (WorkerState.RUNNING, 1)
    crash = beat.last_crash
    assert crash is not None
    assert (crash.time, crash.exit_code, crash.signal, crash.exit) == (
        42.0,
        None,
        "SIGKILL",
        "SIGKILL",
    )
    assert "ValueError: *** broke" in crash.error and "hunter2" not in crash.error
    assert crash.last_batch_id == -1  # killed before a batch: the restart policy's
    write_beat(tmp_path, WorkerState.RUNNING, time=7.5, batch_id=68)
    clock.advance(0.1)
    worker.step(may_start=True)
    launcher.last.exit_code = 3  # the next crash replaces it, with its exit code
    clock.advance(0.1)
    worker.step(may_start=True)
    crash = worker.heartbeat().last_crash
    assert crash is not None and (crash.exit_code, crash.signal, crash.exit) == (
        3,
        None,
        "exit code 3",
    )
    assert crash.last_batch_id == 68  # after it ran a batch: a cold start its standby takes


class CodeByDigest:
    """A launcher whose code of the new digest is fetched (pending) until the test says."""

    def __init__(self, tmp_path: Path, new_digest: str) -> None:
        self.inner = FakeLauncher(tmp_path)
        self.new_digest = new_digest
        self.new_ready = False
        self.asked: list[str] = []

    def code(self, pipeline: str, meta: CodeMeta) -> CodeState | EnvFailed:
        self.asked.append(meta.digest)
        if meta.digest == self.new_digest and not self.new_ready:
            return CodePending()
        return self.inner.code(pipeline, meta)

    def spawn(self, assignment: Assignment, code: PipelineCode, paths: WorkerPaths) -> FakeProcess:
        return self.inner.spawn(assignment, code, paths)

    def preflight(self, assignment: Assignment, code: PipelineCode) -> PreflightCheck:
        return self.inner.preflight(assignment, code)


NEW_DIGEST = "e" * 64


def test_an_update_fetches_the_new_code_before_it_stops_the_old_worker(tmp_path) -> None:
    clock, launcher = FakeClock(), CodeByDigest(tmp_path, NEW_DIGEST)
    worker = ManagedWorker(
        "s1", assignment(), launcher=launcher, paths=WorkerPaths.of(tmp_path, "etl"),
        policy=RestartPolicy(RESTART_SETTINGS), timeouts=TIMEOUTS, clock=clock,
    )  # fmt: skip
    worker.step(may_start=True)
    old = launcher.inner.last
    new = assignment(generation=1, digest=NEW_DIGEST)
    worker.replace_with(new)
    assert launcher.asked[-1] == NEW_DIGEST  # the fetch started with the order
    for _ in range(3):
        clock.advance(1.0)
        worker.step(may_start=True)
    assert (phase(worker), old.signals) == (Phase.RUNNING, [])  # the old code keeps running
    assert worker.held() == Held(new)  # the plan sees the order as under way
    launcher.new_ready = True
    worker.step(may_start=True)
    assert (phase(worker), old.signals) == (Phase.STOPPING, ["TERM"])
    old.exit_code = 0
    worker.step(may_start=True)
    assert phase(worker) is Phase.STOPPED and worker.successor == new


class ScriptedPreflight:
    """An import that runs until the test gives its result."""

    def __init__(self) -> None:
        self.result: PreflightResult | None = None
        self.cancelled = False

    def poll(self) -> PreflightResult | None:
        return self.result

    def cancel(self) -> None:
        self.cancelled = True


def updating(tmp_path: Path, clock: FakeClock) -> tuple[ManagedWorker, CodeByDigest, FakeProcess]:
    """A worker running the old code, its new code already fetched; the launcher's preflight
    scripted by the test."""
    launcher = CodeByDigest(tmp_path, NEW_DIGEST)
    launcher.new_ready = True
    worker = ManagedWorker(
        "s1", assignment(), launcher=launcher, paths=WorkerPaths.of(tmp_path, "etl"),
        policy=RestartPolicy(RESTART_SETTINGS), timeouts=TIMEOUTS, clock=clock,
    )  # fmt: skip
    worker.step(may_start=True)
    return worker, launcher, launcher.inner.last


def test_the_old_worker_runs_until_the_new_entry_point_imported(tmp_path) -> None:
    clock = FakeClock()
    worker, launcher, old = updating(tmp_path, clock)
    check = ScriptedPreflight()
    launcher.inner.preflight_answer = check
    worker.replace_with(assignment(generation=1, digest=NEW_DIGEST))
    worker.step(may_start=True)
    assert launcher.inner.preflights == [NEW_DIGEST]
    assert (phase(worker), old.signals) == (Phase.RUNNING, [])  # importing: the old runs on
    check.result = PreflightPassed()
    worker.step(may_start=True)
    assert (phase(worker), old.signals) == (Phase.STOPPING, ["TERM"])


def test_an_update_whose_entry_point_fails_to_import_is_refused_and_the_old_worker_runs_on(
    tmp_path,
) -> None:
    clock = FakeClock()
    worker, launcher, old = updating(tmp_path, clock)
    check = launcher.inner.preflight_answer = ScriptedPreflight()
    worker.replace_with(assignment(generation=1, digest=NEW_DIGEST))
    worker.step(may_start=True)
    check.result = PreflightFailed("ValueError: bad setting")
    for _ in range(3):
        clock.advance(1.0)
        worker.step(may_start=True)
    assert (phase(worker), old.signals) == (Phase.RUNNING, [])
    beat = worker.heartbeat()
    assert beat.generation == 0 and beat.digest == DIGEST  # what runs: the old code
    assert beat.refused is not None
    assert (beat.refused.generation, beat.refused.digest) == (1, NEW_DIGEST)
    assert beat.refused.error == "ValueError: bad setting"
    assert launcher.inner.preflights == [NEW_DIGEST]  # imported once, not at every step


def test_a_rollback_of_a_refused_update_keeps_the_same_worker_process(tmp_path) -> None:
    clock = FakeClock()
    worker, launcher, old = updating(tmp_path, clock)
    check = launcher.inner.preflight_answer = ScriptedPreflight()
    worker.replace_with(assignment(generation=1, digest=NEW_DIGEST))
    worker.step(may_start=True)
    rolled_back = assignment(generation=2)  # the old code and conf, a newer generation
    worker.replace_with(rolled_back)
    worker.step(may_start=True)
    assert check.cancelled
    assert (phase(worker), old.signals, worker.successor) == (Phase.RUNNING, [], None)
    assert len(launcher.inner.processes) == 1
    beat = worker.heartbeat()
    assert (beat.generation, beat.pid, beat.refused) == (2, old.pid, None)


def test_a_rebalance_of_the_same_code_stops_the_old_worker_at_once(tmp_path) -> None:
    clock, launcher = FakeClock(), CodeByDigest(tmp_path, NEW_DIGEST)
    worker = ManagedWorker(
        "s1", assignment(), launcher=launcher, paths=WorkerPaths.of(tmp_path, "etl"),
        policy=RestartPolicy(RESTART_SETTINGS), timeouts=TIMEOUTS, clock=clock,
    )  # fmt: skip
    worker.step(may_start=True)
    worker.replace_with(assignment(generation=1))
    assert (phase(worker), launcher.inner.last.signals) == (Phase.STOPPING, ["TERM"])


def test_an_old_worker_that_ends_while_the_new_code_is_fetched_is_replaced_not_restarted(
    tmp_path,
) -> None:
    clock, launcher = FakeClock(), CodeByDigest(tmp_path, NEW_DIGEST)
    worker = ManagedWorker(
        "s1", assignment(), launcher=launcher, paths=WorkerPaths.of(tmp_path, "etl"),
        policy=RestartPolicy(RESTART_SETTINGS), timeouts=TIMEOUTS, clock=clock,
    )  # fmt: skip
    worker.step(may_start=True)
    new = assignment(generation=1, digest=NEW_DIGEST)
    worker.replace_with(new)
    launcher.inner.last.exit_code = 1
    worker.step(may_start=True)
    assert phase(worker) is Phase.STOPPED and worker.idle  # the sweep starts the successor
    assert worker.successor == new and worker.restarts == 0


def exit_fenced(tmp_path: Path, launcher: FakeLauncher) -> None:
    """The worker's last heartbeat says FENCED, and it exits with the fenced code."""
    beat = WorkerHeartbeat(
        pipeline="etl",
        supervisor="s1",
        epoch=1,
        generation=0,
        digest=DIGEST,
        state=WorkerState.FENCED,
        time=1.0,
        error="fenced: a worker of a newer assignment (token 1-9) claimed ...",
    )
    heartbeat = WorkerPaths.of(tmp_path, "etl").heartbeat
    heartbeat.parent.mkdir(parents=True, exist_ok=True)  # the worker's own directory
    heartbeat.write_bytes(beat.encode())
    launcher.last.exit_code = FENCED_EXIT


def test_a_fenced_worker_is_not_restarted_until_a_newer_assignment(tmp_path: Path) -> None:
    launcher = FakeLauncher(tmp_path)
    worker = managed(tmp_path, FakeClock(), launcher)
    worker.step(may_start=True)
    exit_fenced(tmp_path, launcher)
    for _ in range(3):
        worker.step(may_start=True)
    assert phase(worker) is Phase.FENCED
    assert len(launcher.processes) == 1  # not a crash: no restart, no backoff
    beat = worker.heartbeat()
    assert (beat.state, beat.restarts) == (WorkerState.FENCED, 0)
    assert beat.error is not None and beat.error.startswith("fenced:")
    assert worker.held().done  # it keeps no slot
    worker.update(assignment(zxid=1))  # the same token again: still fenced
    worker.step(may_start=True)
    assert len(launcher.processes) == 1
    worker.update(assignment(zxid=12))  # a newer assignment of the same run
    worker.step(may_start=True)
    assert phase(worker) is Phase.RUNNING
    assert len(launcher.processes) == 2


def test_a_worker_whose_checkpoint_location_is_refused_fails_at_once_without_restarts(
    tmp_path: Path,
) -> None:
    """Another cluster's or pipeline's checkpoints: starting it again cannot help, so its
    FAILED is final at once (no backoff, no restart) until its assignment changes."""
    launcher = FakeLauncher(tmp_path)
    worker = managed(tmp_path, FakeClock(), launcher)
    worker.step(may_start=True)
    error = "the checkpoint location /ck/etl is refused: they are the checkpoints of ..."
    beat = WorkerHeartbeat(
        pipeline="etl",
        supervisor="s1",
        epoch=1,
        generation=0,
        digest=DIGEST,
        state=WorkerState.FAILED,
        time=1.0,
        error=error,
    )
    heartbeat = WorkerPaths.of(tmp_path, "etl").heartbeat
    heartbeat.parent.mkdir(parents=True, exist_ok=True)
    heartbeat.write_bytes(beat.encode())
    launcher.last.exit_code = REFUSED_EXIT
    for _ in range(3):
        worker.step(may_start=True)
    assert phase(worker) is Phase.FAILED
    assert len(launcher.processes) == 1
    published = worker.heartbeat()
    assert (published.state, published.restarts, published.error) == (
        WorkerState.FAILED,
        0,
        error,
    )
    assert worker.held().done


def test_a_worker_fenced_while_its_pipeline_came_back_here_starts_again_at_once(
    tmp_path: Path,
) -> None:
    """Moved away and back while it ran: it ran with an older token than its assignment's."""
    launcher = FakeLauncher(tmp_path)
    worker = managed(tmp_path, FakeClock(), launcher)
    worker.step(may_start=True)
    worker.update(assignment(zxid=9))
    exit_fenced(tmp_path, launcher)
    worker.step(may_start=True)
    worker.step(may_start=True)
    assert phase(worker) is Phase.RUNNING
    assert len(launcher.processes) == 2
    assert worker.heartbeat().restarts == 0


class FakeRecorder:
    """Numbers runs from 0 and keeps what the worker said of each."""

    def __init__(self) -> None:
        self.opened = 0
        self.pids: dict[int, int] = {}
        self.ends: dict[int, RunEnd] = {}

    def open(self, assignment: Assignment, started: float) -> int | None:
        self.opened += 1
        return self.opened - 1

    def running(self, pipeline: str, number: int | None, pid: int) -> None:
        assert number is not None, "every run here has a number"
        self.pids[number] = pid

    def close(
        self, pipeline: str, number: int | None, end: RunEnd, conf: dict[str, object]
    ) -> None:
        assert number is not None, "every run here has a number"
        assert number not in self.ends, f"run {number} closed twice"
        self.ends[number] = end


def test_each_process_is_a_run_closed_with_the_outcome_of_its_end(tmp_path: Path) -> None:
    clock, launcher, runs = FakeClock(), FakeLauncher(tmp_path), FakeRecorder()
    worker = ManagedWorker(
        "s1", assignment(), launcher=launcher, paths=WorkerPaths.of(tmp_path, "etl"),
        policy=RestartPolicy(RESTART_SETTINGS), timeouts=TIMEOUTS, runs=runs, clock=clock,
        wall=lambda: 42.0,
    )  # fmt: skip
    worker.step(may_start=True)
    assert runs.pids == {0: launcher.last.pid}  # opened before the start, its pid noted
    exit_fenced(tmp_path, launcher)
    worker.step(may_start=True)
    fenced = runs.ends[0]
    assert (fenced.outcome, fenced.exit_code, fenced.ended) == (RunOutcome.FENCED, 3, 42.0)
    assert fenced.error is not None and fenced.error.startswith("fenced:")

    worker.update(assignment(zxid=12))  # a newer assignment: run 1
    worker.step(may_start=True)
    assert runs.pids[1] == launcher.last.pid
    worker.stop(StopReason.RESTART)
    launcher.last.exit_code = 0
    worker.step(may_start=True)
    assert runs.ends[1].outcome is RunOutcome.UPDATED

    worker = ManagedWorker(
        "s1", assignment(), launcher=launcher, paths=WorkerPaths.of(tmp_path, "etl"),
        policy=RestartPolicy(RESTART_SETTINGS), timeouts=TIMEOUTS, runs=runs, clock=clock,
    )  # fmt: skip
    worker.step(may_start=True)  # run 2, stopped as its assignment went: the recorder judges
    worker.retire(StopReason.UNASSIGNED)
    launcher.last.exit_code = 0
    worker.step(may_start=True)
    assert (runs.ends[2].outcome, runs.ends[2].exit_code) == (None, 0)
