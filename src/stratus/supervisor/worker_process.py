"""One worker process: its spec, its start, its stop, and no orphan ever.

Guarantees: a worker runs as ``python -m stratus.worker.main <dir>/work/spec.json`` in a
process group of its own, with the environment its launcher gives it (``worker_env``), as
its supervisor's user or as the user it was given (``run_as``), its files owned and
protected as ``worker_access`` decides (its spec only it and its supervisor may read),
with stdout and stderr sent through a pipe to ``<dir>/worker.log``, rotated by size, one set
of files per run (``worker_log``), and its stdin a pipe that only its supervisor holds:
when the supervisor dies, even by SIGKILL, the kernel closes the pipe and the worker sees
EOF and stops (no orphans). A stop is SIGTERM to the worker, then SIGKILL to
its whole process group (the Spark JVM included) once the grace is over; once the worker
has exited, whatever is left in its group is killed too::

    paths = WorkerPaths.of(local_dir, "etl")
    spec = build_spec(settings.spec, "s1", assignment, code, paths)
    process = WorkerProcess.launch(spec, paths, env=worker_environment(os.environ, ...))
    process.poll()          # None while it runs, then its exit code
    process.terminate()     # SIGTERM
    process.kill()          # SIGKILL of the process group

A worker of another user is prepared, started and signalled through its ``RunAs``'s switch
(the supervisor itself when root, else the worker launcher); once it exited, whatever its
user left running is killed before the user is given to another pipeline.

Processes are started with ``subprocess.Popen`` (fork and exec, no Python code in the child):
the supervisor's kazoo threads are never run in a forked child.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratus.api.locations import is_local_master
from stratus.api.records import Assignment
from stratus.codedist.manifest import TRIGGER_CONF_KEY
from stratus.files import PRIVATE_DIR_MODE
from stratus.history import open_for_appending
from stratus.process import Lifeline, ProcessGroup
from stratus.supervisor.code_cache import PipelineCode
from stratus.supervisor.errors import UnfencedAssignmentError
from stratus.supervisor.run_as import RunAs
from stratus.supervisor.settings import SpecSettings
from stratus.supervisor.worker_access import WORK_DIR, prepare_worker
from stratus.supervisor.worker_log import LogPump, LogSettings, RunLog
from stratus.worker.checkpoints import checkpoint_location
from stratus.worker.spec import HEARTBEAT_FILE, SPEC_FILE, WorkerSpec

WORKER_MODULE = "stratus.worker.main"
LOG_FILE = "worker.log"
START_MARK = "==== stratus supervisor: worker started"  # a line in worker.log before each run
TAIL_READ_BYTES = 64 * 1024
TAIL_LINES = 20
TAIL_MAX_CHARS = 4000
LOG_DRAIN_SECS = 2.0  # after an exit, how long its last lines may take to reach the log


def default_worker_command() -> list[str]:
    """The command of a worker, the spec path appended."""
    return [sys.executable, "-m", WORKER_MODULE]


@dataclass(frozen=True)
class WorkerPaths:
    """The files of one pipeline's worker under ``<local>/workers/<pipeline>/`` (their
    owners and modes: ``worker_access``)."""

    directory: Path

    @classmethod
    def of(cls, local_dir: Path, pipeline: str) -> WorkerPaths:
        return cls(local_dir / "workers" / pipeline)

    def make_private(self) -> None:
        """Create the worker's directory (and its parents) if missing, and let only its
        owner enter it: it holds the spec, whose conf may hold secrets (a worker of another
        user may then pass through it: ``worker_access.prepare_worker``)."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
        self.directory.chmod(PRIVATE_DIR_MODE)

    @property
    def spec(self) -> Path:
        """The supervisor's own copy of the spec (the logs' redaction reads it)."""
        return self.directory / SPEC_FILE

    @property
    def worker_spec(self) -> Path:
        """The worker's copy, in its own directory: what it runs."""
        return self.work / SPEC_FILE

    @property
    def heartbeat(self) -> Path:
        return self.work / HEARTBEAT_FILE

    @property
    def log(self) -> Path:
        return self.directory / LOG_FILE

    @property
    def work(self) -> Path:
        return self.directory / WORK_DIR


def spark_master(settings: SpecSettings, pipeline_conf: dict[str, object]) -> str:
    """The pipeline's ``spark.master``, else its ``pipeline.spark.master``, else the cluster's."""
    for key in ("spark.master", "pipeline.spark.master"):
        value = pipeline_conf.get(key)
        if value:
            return str(value)
    return settings.spark_master


def build_spec(
    settings: SpecSettings,
    supervisor: str,
    assignment: Assignment,
    code: PipelineCode,
    paths: WorkerPaths,
) -> WorkerSpec:
    """What the worker of ``assignment`` runs; the manifest's conf under the assignment's.
    UnfencedAssignmentError if the assignment carries no fencing token."""
    if assignment.token is None:
        raise UnfencedAssignmentError(
            f"the assignment of {assignment.pipeline} (epoch {assignment.epoch}) has no "
            "fencing token: it was not read from its znode; this is a bug of the supervisor"
        )
    manifest = code.manifest
    pipeline_conf = {**manifest.pipeline_conf(), **assignment.conf}
    trigger = pipeline_conf.get(TRIGGER_CONF_KEY)
    master = spark_master(settings, pipeline_conf)
    return WorkerSpec(
        pipeline=assignment.pipeline,
        supervisor=supervisor,
        epoch=assignment.epoch,
        generation=assignment.generation,
        token=assignment.token,
        digest=assignment.digest,
        kind=manifest.kind,
        entrypoint=manifest.entrypoint,
        project=manifest.project,
        code_dir=code.directory,
        work_dir=paths.work,
        conf=pipeline_conf,
        spark_master=master,
        deps_archive=None if is_local_master(master) else code.deps_archive,
        checkpoint_location=checkpoint_location(
            settings.checkpoint_root, pipeline_conf, assignment.pipeline
        ),
        trigger_interval_secs=float(trigger) if trigger is not None else None,
        heartbeat_path=paths.heartbeat,
        heartbeat_interval_secs=settings.heartbeat_secs,
        stop_grace_secs=settings.stop_grace_secs,
        log_level=logging.getLevelName(settings.log.level),
        log_format=settings.log.format,
        history_file=settings.history.file,
        lease_path=settings.lease_path,
    )


def prepare_run(
    spec: WorkerSpec,
    paths: WorkerPaths,
    log: LogSettings | None,
    run_as: RunAs | None = None,
    checkpoint_dir: Path | None = None,
) -> RunLog:
    """Before a run of ``spec``, cold or warm: its directories, the supervisor's copy of its
    spec and the worker's, no heartbeat file left of the last run, whose log becomes the
    previous one (``worker_access``; for a worker of another user, its switch prepares the
    worker's part: ``checkpoint_dir``, the pipeline's local checkpoint directory, included);
    the new run's log, its first line the start mark."""
    paths.make_private()
    paths.heartbeat.unlink(missing_ok=True)  # a new process starts with no heartbeat
    spec.write(paths.spec)
    data = paths.spec.read_bytes()
    if run_as is None:
        prepare_worker(paths.directory, data, None, group=os.getgid(), checkpoint_dir=None)
    else:
        run_as.switch.prepare(paths.directory, data, run_as.user, checkpoint_dir)
    run_log = RunLog(paths.log, log or LogSettings())
    run_log.start_run()
    run_log.write(_start_line(spec).encode())
    return run_log


class WorkerProcess:
    """A started worker process; see the module docstring. Used by one thread."""

    def __init__(
        self,
        group: ProcessGroup,
        spec: WorkerSpec,
        pump: LogPump | None = None,
        run_as: RunAs | None = None,
    ) -> None:
        self._group = group
        self._pump = pump
        self._run_as = run_as
        self.spec = spec
        self.pid = group.pid
        self.started_wall = time.time()
        self._exit: int | None = None

    @classmethod
    def launch(
        cls,
        spec: WorkerSpec,
        paths: WorkerPaths,
        command: Sequence[str] | None = None,
        *,
        env: Mapping[str, str],
        log: LogSettings | None = None,
        run_as: RunAs | None = None,
        checkpoint_dir: Path | None = None,
        history_file: Path | None = None,
    ) -> WorkerProcess:
        """Write the spec, clear the last heartbeat file, make the last run's log the
        previous one, and start the worker with ``env`` (as ``run_as``'s user, if given),
        its output pumped into its log. A worker of another user, which may not open the
        ``history_file``, inherits a descriptor of it that can only append (``history_fd``),
        if its switch passes descriptors on."""
        fd = _history_descriptor(spec, history_file, run_as)
        if fd is None:
            return cls._launch(
                spec, paths, command, env=env, log=log, run_as=run_as, checkpoint_dir=checkpoint_dir
            )
        try:
            return cls._launch(
                spec.model_copy(update={"history_fd": fd}),
                paths,
                command,
                env=env,
                log=log,
                run_as=run_as,
                checkpoint_dir=checkpoint_dir,
                pass_fds=(fd,),
            )
        finally:
            os.close(fd)  # the worker holds its own copy

    @classmethod
    def _launch(
        cls,
        spec: WorkerSpec,
        paths: WorkerPaths,
        command: Sequence[str] | None,
        *,
        env: Mapping[str, str],
        log: LogSettings | None,
        run_as: RunAs | None,
        checkpoint_dir: Path | None,
        pass_fds: tuple[int, ...] = (),
    ) -> WorkerProcess:
        try:
            run_log = prepare_run(spec, paths, log, run_as, checkpoint_dir)
        except BaseException:
            if run_as is not None:
                run_as.finished()
            raise
        argv = [*(command or default_worker_command()), str(paths.worker_spec)]
        popen: dict[str, Any] = {"cwd": paths.work, "env": dict(env)}
        read_end, write_end = os.pipe()
        try:
            if run_as is not None:
                argv, popen = run_as.switch.command(
                    argv,
                    directory=paths.directory,
                    pipeline=spec.pipeline,
                    user=run_as.user,
                    env=env,
                )
            if pass_fds:
                popen["pass_fds"] = pass_fds
            group = ProcessGroup.start(
                argv,
                lifeline=Lifeline.PIPE,  # no Python runs in the forked child (kazoo threads)
                stdout=write_end,
                stderr=subprocess.STDOUT,
                **popen,
            )
        except BaseException:
            os.close(read_end)
            run_log.close()
            if run_as is not None:
                run_as.finished()
            raise
        finally:
            os.close(write_end)  # the worker's group holds the only write ends now
        return cls(group, spec, LogPump(read_end, run_log), run_as)

    def poll(self) -> int | None:
        """None while the worker runs; its exit code (negative: the signal) once it exited.

        At the exit, what is left of its process group is killed and its stdin closed.
        """
        if self._exit is not None:
            return self._exit
        code = self._group.poll()
        if code is None:
            return None
        self._exit = code
        self._signal(signal.SIGKILL, whole_group=True)
        self._group.close_lifeline()
        if self._run_as is not None:  # what its user left running, then the user is free
            self._run_as.finished()
        if self._pump is not None:  # its last lines (a traceback) are in its log before any tail
            self._pump.join(LOG_DRAIN_SECS)
        return code

    def terminate(self) -> None:
        """SIGTERM to the worker: it stops its queries and exits."""
        if self._exit is None:
            self._signal(signal.SIGTERM, whole_group=False)

    def kill(self) -> None:
        """SIGKILL to the worker's whole process group (its Spark JVM included)."""
        if self._exit is None:
            self._signal(signal.SIGKILL, whole_group=True)

    def _signal(self, signum: int, *, whole_group: bool) -> None:
        run_as = self._run_as
        if run_as is not None:
            run_as.switch.signal(run_as.user, self._group, signum, whole_group=whole_group)
        elif whole_group:
            self._group.signal_group(signum)
        else:
            self._group.signal(signum)


def _history_descriptor(
    spec: WorkerSpec, history_file: Path | None, run_as: RunAs | None
) -> int | None:
    """A descriptor of ``history_file`` that can only append, for a worker of another user
    whose switch passes descriptors on; None otherwise, or (logged) if it cannot be opened:
    the history never keeps a worker from starting."""
    if run_as is None or history_file is None or not run_as.switch.passes_descriptors:
        return None
    try:
        return open_for_appending(history_file)
    except OSError as exc:
        logging.getLogger(__name__).warning(
            "event=history_unavailable pipeline=%s epoch=%d path=%s error=%r",
            spec.pipeline,
            spec.epoch,
            history_file,
            exc,
        )
        return None


def _start_line(spec: WorkerSpec) -> str:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return (
        f"{START_MARK} pipeline={spec.pipeline} epoch={spec.epoch} "
        f"generation={spec.generation} token={spec.token} digest={spec.digest} at={stamp}\n"
    )


def log_tail(path: Path, lines: int = TAIL_LINES) -> str | None:
    """The last lines the latest run of a worker wrote to its log; None if it wrote none."""
    try:
        with path.open("rb") as src:
            size = src.seek(0, os.SEEK_END)
            src.seek(max(0, size - TAIL_READ_BYTES))
            text = src.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    run = text.rsplit(START_MARK, 1)[-1]
    body = run.splitlines()[1:] if START_MARK in text else run.splitlines()
    tail = "\n".join(line for line in body[-lines:] if line.strip())
    return tail[-TAIL_MAX_CHARS:] or None
