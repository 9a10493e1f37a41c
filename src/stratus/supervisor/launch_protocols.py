"""What a managed worker needs from its supervisor, as protocols: its code, a process
(``WorkerProcess``), and the import of a new version's entry point before the old worker
stops (``preflight.Preflight``); the supervisor's ``launcher.py`` gives them, a test's fakes
stand in::

    launcher: Launcher = WorkerLauncher(settings, "s1", cache, monitor=monitor)
    process: RunningProcess = launcher.spawn(assignment, code, paths)
    check: PreflightCheck = launcher.preflight(assignment, new_code)
"""

from __future__ import annotations

from typing import Protocol

from stratus.api.records import Assignment
from stratus.codedist.distributor import CodeMeta
from stratus.supervisor.code_cache import CodeState, PipelineCode
from stratus.supervisor.preflight import PreflightPassed, PreflightResult
from stratus.supervisor.requirements_env import EnvFailed
from stratus.supervisor.worker_process import WorkerPaths


class RunningProcess(Protocol):
    """A started worker process (``WorkerProcess``, or a fake in tests)."""

    pid: int
    started_wall: float

    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    def release(self) -> None:
        """The supervisor leaves while it runs: let it run on (a worker that outlives its
        supervisor), or let it see its supervisor gone (a warm worker handed over)."""
        ...


class Launcher(Protocol):
    """What a managed worker needs from its supervisor: its code, and a process."""

    def code(self, pipeline: str, meta: CodeMeta) -> CodeState | EnvFailed: ...

    def spawn(
        self, assignment: Assignment, code: PipelineCode, paths: WorkerPaths
    ) -> RunningProcess: ...

    def preflight(self, assignment: Assignment, code: PipelineCode) -> PreflightCheck:
        """Start importing the entry point of ``assignment``'s new ``code`` (``preflight``)."""
        ...


class RunningPreflight(Protocol):
    """An import under way (``preflight.Preflight``, or a fake in tests)."""

    def poll(self) -> PreflightResult | None: ...

    def cancel(self) -> None: ...


PreflightCheck = RunningPreflight | PreflightPassed
