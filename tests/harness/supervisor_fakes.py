"""Fakes and builders shared by the supervisor's unit tests: assignments, a clock that a
test moves, and a launcher whose workers are fake processes (no ZooKeeper, no Spark); and
where a supervisor's tests find a pipeline's newest run log (``newest_run_log``)."""

from __future__ import annotations

from collections.abc import Set
from pathlib import Path
from typing import Any

from stratus.api.records import Assignment, FencingToken
from stratus.api.standby_workers import StandbyWorkerPlacement
from stratus.codedist.distributor import CodeMeta
from stratus.codedist.manifest import parse_manifest
from stratus.supervisor.code_cache import CodeState, PipelineCode
from stratus.supervisor.launch_protocols import PreflightCheck
from stratus.supervisor.preflight import PreflightPassed
from stratus.supervisor.requirements_env import EnvFailed
from stratus.supervisor.run_logs import kept_runs, pick_kept
from stratus.supervisor.settings import RestartSettings, WorkerTimeouts
from stratus.supervisor.worker_process import WorkerPaths

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
    zxid: int = 1,
) -> Assignment:
    """An assignment as a supervisor reads it: with its fencing token (``zxid``)."""
    return Assignment(
        pipeline=name,
        supervisor=supervisor,
        epoch=epoch,
        generation=generation,
        digest=digest,
        size_bytes=10,
        conf=conf or {},
        assigned=assigned,
        token=FencingToken(era=1, zxid=zxid),
    )


def newest_run_log(local_dir: Path, pipeline: str) -> Path:
    """The log of the newest run of ``pipeline``'s worker on the supervisor whose local
    directory is ``local_dir`` (``workers/<pipeline>/runs/<n>/worker.log``), as ``stratus
    logs`` picks it; the log of an unnumbered run when no run's log is kept (a file that
    exists only if such a run wrote it)."""
    paths = WorkerPaths.of(local_dir, pipeline)
    return paths.for_run(pick_kept(kept_runs(paths.directory), None, previous=False)).log


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, secs: float) -> None:
        self.now += secs


def code(
    tmp_path: Path, manifest_text: str = "name: etl\nkind: app\nentrypoint: m:run\n"
) -> PipelineCode:
    return PipelineCode(DIGEST, tmp_path / "code", parse_manifest(manifest_text))


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

    def release(self) -> None:
        self.signals.append("RELEASE")


class FakeLauncher:
    """Code ready (or not) at once; every spawn a FakeProcess."""

    def __init__(self, tmp_path: Path) -> None:
        self.code_state: CodeState | EnvFailed = code(tmp_path)
        self.processes: list[FakeProcess] = []
        self.retained: set[str] = set()
        self.preflights: list[str] = []  # the digests whose entry point was imported
        self.preflight_answer: PreflightCheck = PreflightPassed()

    def code(self, pipeline: str, meta: CodeMeta) -> CodeState | EnvFailed:
        return self.code_state

    def spawn(self, assignment: Assignment, code: PipelineCode, paths: WorkerPaths) -> FakeProcess:
        paths.directory.mkdir(parents=True, exist_ok=True)
        self.processes.append(FakeProcess(100 + len(self.processes)))
        return self.processes[-1]

    def preflight(self, assignment: Assignment, code: PipelineCode) -> PreflightCheck:
        self.preflights.append(assignment.digest)
        return self.preflight_answer

    def spawn_standby(
        self, placement: StandbyWorkerPlacement, code: PipelineCode, paths: WorkerPaths, era: int
    ) -> FakeProcess:
        raise AssertionError("no standby worker is placed in these tests")

    def promote(self, assignment: Assignment, code: PipelineCode, paths: WorkerPaths) -> None:
        raise AssertionError("no standby worker is placed in these tests")

    def retain(self, digests: Set[str]) -> None:
        self.retained = set(digests)

    @property
    def last(self) -> FakeProcess:
        return self.processes[-1]


TIMEOUTS = WorkerTimeouts(stop_secs=3.0, hang_secs=20.0)
RESTART_SETTINGS = RestartSettings(backoff_secs=1.0, max_restarts=3, reset_secs=60.0)
