"""What starts a worker for real: its code from the ``CodeCache``, the environment of its
requirements from ``RequirementEnvs`` (a package that lists none runs with the supervisor's
interpreter), its process from a spec: handed to a warm worker when there is one and the
pipeline fits it (``warm_pool``), else started cold.

With worker users (``supervisor.worker.run.as`` `pool` or `shared`), each cold start takes a
user from the ``UserPool`` and the worker's environment says who and where it is (its HOME,
USER, a private TMPDIR: ``worker_access.worker_identity``); its Spark writes the checkpoints
with umask 007 as well, so that the daemons' group can delete them (a purge).

``ManagedWorker`` and the control loop see this through the ``Launcher`` protocol, so their
tests use fakes::

    launcher = WorkerLauncher(settings.spec, "s1", cache, envs=envs, monitor=monitor)
    launcher.code("etl", CodeMeta(digest, size))          # CodePending, then PipelineCode
    launcher.spawn(assignment, code, WorkerPaths.of(local, "etl"))
    launcher.preflight(update, new_code).poll()        # an update's entry point imported?
    launcher.spawn_standby(placement, code, paths, era)  # a standby worker (standby_worker)
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Sequence, Set

from stratus.api.locations import is_local_master
from stratus.api.pipeline_conf import env_entries
from stratus.api.records import Assignment, FencingToken
from stratus.api.standby_workers import StandbyWorkerPlacement
from stratus.checkpoints import local_pipeline_directory
from stratus.codedist.distributor import CodeMeta
from stratus.supervisor.code_cache import CodeCache, CodePending, CodeState, PipelineCode
from stratus.supervisor.launch_protocols import PreflightCheck, RunningProcess
from stratus.supervisor.preflight import PreflightPassed, start_preflight
from stratus.supervisor.requirements_env import EnvFailed, EnvPending, RequirementEnvs
from stratus.supervisor.run_as import UserPool
from stratus.supervisor.settings import SpecSettings
from stratus.supervisor.warm_pool import WarmPool, cold_reason
from stratus.supervisor.worker_access import hand_to_worker, worker_identity
from stratus.supervisor.worker_env import worker_environment
from stratus.supervisor.worker_log import WorkerLogSettings
from stratus.supervisor.worker_process import (
    WORKER_MODULE,
    MonitorSettings,
    WorkerPaths,
    WorkerProcess,
    build_spec,
    default_worker_command,
)
from stratus.worker.promotion import PROMOTE_FILE
from stratus.worker.spec import WorkerSpec

PYSPARK_PYTHON = "PYSPARK_PYTHON"
STANDBY_MODULE = "stratus.worker.standby"
# Hadoop's own umask, for what Spark writes (checkpoints): as the worker's, so that the
# daemons' group may delete a pipeline's checkpoints written by a worker of another user
HADOOP_UMASK_KEY = "spark.hadoop.fs.permissions.umask-mode"
HADOOP_UMASK = "007"

log = logging.getLogger(__name__)


class WorkerLauncher:
    """Code through the cache, processes through ``WorkerProcess``."""

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        settings: SpecSettings,
        supervisor: str,
        cache: CodeCache,
        *,
        envs: RequirementEnvs | None = None,
        command: Sequence[str] | None = None,
        log: WorkerLogSettings | None = None,
        warm: WarmPool | None = None,
        users: UserPool | None = None,
        monitor: MonitorSettings,
    ) -> None:
        self._settings = settings
        self._warm = warm
        self._users = users  # None: workers run as the supervisor
        # pipeline -> the assignment last handed to a warm worker: if that run crashes, its
        # restart starts cold, so a pipeline the warm session does not suit cannot loop on it
        self._warm_runs: dict[str, tuple[int, int, str, float]] = {}
        self._supervisor = supervisor
        self._cache = cache
        self._envs = envs
        self._command = command  # a test's stand-in worker: its argv[0] is an interpreter
        self._log = log or WorkerLogSettings()
        self._monitor = monitor  # who the workers' monitors say they belong to

    def code(self, pipeline: str, meta: CodeMeta) -> CodeState | EnvFailed:
        """The code, with its environment's interpreter once built; pending meanwhile."""
        state = self._cache.get(pipeline, meta)
        requirements = state.manifest.requirements if isinstance(state, PipelineCode) else []
        if not isinstance(state, PipelineCode) or not requirements or self._envs is None:
            return state
        env = self._envs.get(pipeline, requirements)
        if isinstance(env, EnvPending):
            return CodePending()
        if isinstance(env, EnvFailed):
            return env
        return dataclasses.replace(state, python=env.python, deps_archive=env.archive)

    def spawn(
        self, assignment: Assignment, code: PipelineCode, paths: WorkerPaths
    ) -> RunningProcess:
        spec = build_spec(self._settings, self._supervisor, assignment, code, paths)
        if self._users is not None:
            spec = _walled(spec)
        if self._warm is not None:
            run = (assignment.epoch, assignment.generation, assignment.digest, assignment.assigned)
            reason = cold_reason(spec, code, self._warm.master)
            if reason is None and self._warm_runs.get(assignment.pipeline) == run:
                reason = "a restart of a run that started warm starts cold"
            process = self._warm.hand_over(spec, paths) if reason is None else None
            if process is not None:
                self._warm_runs[assignment.pipeline] = run
                return process
            log.info(
                "event=worker_cold_start pipeline=%s epoch=%d supervisor=%s reason=%r",
                spec.pipeline,
                spec.epoch,
                self._supervisor,
                reason or self._warm.why_cold(),
            )
        return self._start_cold(spec, code, paths, list(self._command or default_worker_command()))

    def spawn_standby(
        self, placement: StandbyWorkerPlacement, code: PipelineCode, paths: WorkerPaths, era: int
    ) -> RunningProcess:
        """Start the standby worker of ``placement`` (``python -m stratus.worker.standby``)
        under a monitor, as a cold worker starts: its spec of role ``standby`` names
        ``<work>/promote.json`` (any left there by an earlier process removed first); its
        token carries the cluster's ``era``, and it claims nothing with it."""
        spec = standby_spec(self._settings, self._supervisor, placement, code, paths, era)
        if self._users is not None:
            spec = _walled(spec)
        (paths.work / PROMOTE_FILE).unlink(missing_ok=True)
        # the checkpoints stay the active worker's (another user's) until the promotion
        return self._start_cold(
            spec, code, paths, standby_command(self._command), take_checkpoints=False
        )

    def promote(self, assignment: Assignment, code: PipelineCode, paths: WorkerPaths) -> None:
        """Promote the standby worker in ``paths``: write, whole and by a rename, the active
        worker's spec of ``assignment`` (as ``spawn`` would) to its ``promote.json``. A
        worker of another user is first given the pipeline's local checkpoint directory,
        which its start left to the active worker's user, then gets the file as
        ``worker_access.hand_to_worker`` hands it (its own file from a root supervisor, else
        the supervisor's that only the worker's user may read); it inherits the standby
        process's history descriptor. WorkerUserError if the checkpoints cannot be given."""
        spec = build_spec(self._settings, self._supervisor, assignment, code, paths)
        if self._users is None:
            spec.write(paths.work / PROMOTE_FILE)
            return
        spec = _walled(spec)
        with contextlib.suppress(OSError, ValueError):
            spec = spec.model_copy(update={"history_fd": WorkerSpec.read(paths.spec).history_fd})
        checkpoints = local_pipeline_directory(self._settings.checkpoint_root, spec.pipeline)
        if checkpoints is not None:  # the old worker is gone: its user gives them up
            self._users.switch.take_checkpoints(spec.pipeline, paths.work, checkpoints)
        hand_to_worker(paths.work, PROMOTE_FILE, spec.model_dump_json(indent=2).encode())

    def _start_cold(
        self,
        spec: WorkerSpec,
        code: PipelineCode,
        paths: WorkerPaths,
        command: list[str],
        *,
        take_checkpoints: bool = True,
    ) -> RunningProcess:
        env = worker_environment(os.environ, self._settings.env_names, spec.conf)
        if code.python is not None:  # the command's interpreter is the environment's
            command[0] = str(code.python)
            # Spark's Python workers too, when they run here; a cluster's executors keep the
            # Python of their own hosts and get the requirements as an archive (spec)
            local = is_local_master(spec.spark_master)
            if local and PYSPARK_PYTHON not in env_entries(spec.conf):
                env[PYSPARK_PYTHON] = str(code.python)
            if not local and spec.deps_archive is None:
                log.warning(
                    "event=env_not_shipped pipeline=%s epoch=%d supervisor=%s master=%s reason=%r",
                    spec.pipeline,
                    spec.epoch,
                    self._supervisor,
                    spec.spark_master,
                    "this supervisor's pipeline.spark.master(s) name no cluster master, so "
                    "it packs no environment for executors: configure it as the nimbuses",
                )
        run_as = None if self._users is None else self._users.take(spec.pipeline)
        if run_as is not None:
            env.update(worker_identity(run_as.user, paths.directory))
        return WorkerProcess.launch(
            spec,
            paths,
            command,
            env=env,
            log=self._log,
            monitor=self._monitor,
            run_as=run_as,  # the rest is for a worker of another user only
            checkpoint_dir=(
                local_pipeline_directory(self._settings.checkpoint_root, spec.pipeline)
                if take_checkpoints
                else None
            ),
            history_file=self._settings.history.file,
        )

    def preflight(self, assignment: Assignment, code: PipelineCode) -> PreflightCheck:
        """Import the entry point of an update's ``code`` in its environment, as its worker
        would (``preflight``); none with worker users: the package's code never runs as the
        supervisor's user."""
        if self._users is not None:
            return PreflightPassed()
        conf = {**code.manifest.pipeline_conf(), **assignment.conf}
        env = worker_environment(os.environ, self._settings.env_names, conf)
        return start_preflight(
            list(self._command or default_worker_command()),
            code,
            env,
            timeout_secs=self._settings.preflight_timeout_secs,
        )

    def retain(self, digests: Set[str]) -> None:
        self._cache.retain(digests)
        if self._envs is not None:
            self._envs.forget_failures()  # a failed set is tried again by a new assignment


def standby_spec(
    settings: SpecSettings,
    supervisor: str,
    placement: StandbyWorkerPlacement,
    code: PipelineCode,
    paths: WorkerPaths,
    era: int,
) -> WorkerSpec:
    """The spec of ``placement``'s standby worker: the active worker's (``build_spec``) of
    its ``placement_assignment``, of role ``standby``, waiting on ``<work>/promote.json``,
    warming up for ``supervisor.standby.warmup.batches``."""
    spec = build_spec(settings, supervisor, placement_assignment(placement, era), code, paths)
    return spec.model_copy(
        update={
            "role": "standby",
            "promote_path": paths.work / PROMOTE_FILE,
            "warm_up_batches": settings.standby_warm_up_batches,
        }
    )


def placement_assignment(placement: StandbyWorkerPlacement, era: int) -> Assignment:
    """The assignment a standby worker's spec is built from: the placement's pipeline, code,
    conf and generation, a token of the cluster's ``era`` with zxid 0 (below every claim:
    a standby worker claims nothing with it, and a promotion brings the real one)."""
    return Assignment(
        pipeline=placement.pipeline,
        supervisor=placement.supervisor or "",
        epoch=placement.epoch,
        generation=placement.generation,
        digest=placement.digest,
        size_bytes=placement.size_bytes,
        blake3=placement.blake3,
        conf=placement.conf,
        assigned=placement.placed,
        token=FencingToken(era=era, zxid=0),
    )


def standby_command(command: Sequence[str] | None) -> list[str]:
    """A standby worker's command: the worker's (a test's stand-in included) with
    ``stratus.worker.standby`` for its module."""
    argv = list(command or default_worker_command())
    if argv[1:3] == ["-m", WORKER_MODULE]:
        argv[2] = STANDBY_MODULE
    return argv


def _walled(spec: WorkerSpec) -> WorkerSpec:
    """``spec`` for a worker of another user: its Spark writes with Hadoop's umask 007 (unless
    the pipeline's conf says otherwise), and it does not open the history file, which is
    the supervisor's and would show it the other pipelines' lines (it may inherit a
    descriptor that only appends: ``WorkerProcess.launch``)."""
    conf = {HADOOP_UMASK_KEY: HADOOP_UMASK, **spec.conf}
    return spec.model_copy(update={"conf": conf, "history_file": None})
