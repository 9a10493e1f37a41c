"""What starts a worker for real: its code from the ``CodeCache``, its process from a spec.

``ManagedWorker`` and the control loop see this through the ``Launcher`` protocol, so their
tests use fakes::

    launcher = WorkerLauncher(settings.spec, "s1", cache)
    launcher.code("etl", CodeMeta(digest, size))          # CodePending, then PipelineCode
    launcher.spawn(assignment, code, WorkerPaths.of(local, "etl"))
"""

from __future__ import annotations

import os
from collections.abc import Sequence, Set

from stratus.api.records import Assignment
from stratus.codedist.distributor import CodeMeta
from stratus.supervisor.code_cache import CodeCache, CodeState, PipelineCode
from stratus.supervisor.settings import SpecSettings
from stratus.supervisor.worker_env import worker_environment
from stratus.supervisor.worker_process import WorkerPaths, WorkerProcess, build_spec


class WorkerLauncher:
    """Code through the cache, processes through ``WorkerProcess``."""

    def __init__(
        self,
        settings: SpecSettings,
        supervisor: str,
        cache: CodeCache,
        *,
        command: Sequence[str] | None = None,
    ) -> None:
        self._settings = settings
        self._supervisor = supervisor
        self._cache = cache
        self._command = command

    def code(self, pipeline: str, meta: CodeMeta) -> CodeState:
        return self._cache.get(pipeline, meta)

    def spawn(
        self, assignment: Assignment, code: PipelineCode, paths: WorkerPaths
    ) -> WorkerProcess:
        spec = build_spec(self._settings, self._supervisor, assignment, code, paths)
        env = worker_environment(os.environ, self._settings.env_names, spec.conf)
        return WorkerProcess.launch(spec, paths, self._command, env=env)

    def retain(self, digests: Set[str]) -> None:
        self._cache.retain(digests)
