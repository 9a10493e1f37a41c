"""One worker process: its spec, its start, its stop, its adoption, and no orphan ever.

Guarantees: a worker runs as ``python -m stratus.worker.main <dir>/work/spec.json`` in a
process group of its own, with the environment its launcher gives it (``worker_env``), as
its supervisor's user or as the user it was given (``run_as``), its files owned and
protected as ``worker_access`` decides (its spec only it and its supervisor may read). It
is the child of its monitor (``worker_monitor``), a process in a session of its own that
the supervisor starts: the monitor holds the worker's stdin (a killed monitor means a
stopped worker), pumps its stdout and stderr to ``<dir>/worker.log``, rotated by size, one
set of files per run (``worker_log``), and records its processes (``process.json``) and
its end (``exit.json``). So a worker outlives its supervisor, on the lease it was handed
(``stratus.worker.lease_file``), and a supervisor started again adopts it
(``WorkerProcess.adopt``, after ``adoption``'s proof); with ``supervisor.worker.adopt``
false, the monitor's stdin is a pipe only the supervisor holds, and EOF there (the
supervisor died, even by SIGKILL) stops the worker. A stop is SIGTERM to the worker, then
SIGKILL to its whole process group (the Spark JVM included) once the grace is over; once the
worker has exited, its monitor kills whatever is left in its group::

    paths = WorkerPaths.of(local_dir, "etl")
    spec = build_spec(settings.spec, "s1", assignment, code, paths)
    process = WorkerProcess.launch(spec, paths, env=..., monitor=..., assignment=assignment)
    process.poll()          # None while it runs, then its exit code
    process.terminate()     # SIGTERM
    process.kill()          # SIGKILL of the process group

A worker of another user is prepared, started and signalled through its ``RunAs``'s switch
(the supervisor itself when root, else the worker launcher); once it exited, whatever its
user left running is killed before the user is given to another pipeline.

Processes are started with ``subprocess.Popen`` (fork and exec, no Python code in the child):
the supervisor's kazoo threads are never run in a forked child. A process the supervisor
did not start is signalled only once proven (its pid and start time), through a pidfd.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from stratus.api.records import Assignment, ClusterIdentity
from stratus.api.standby_workers import wants_standby_worker
from stratus.checkpoints import checkpoint_location
from stratus.codedist.manifest import TRIGGER_CONF_KEY
from stratus.files import PRIVATE_DIR_MODE
from stratus.process import KILL_WAIT_SECS, NOT_REAPED_EXIT, same_process
from stratus.supervisor.adoption import Found, ProcessRecord, identity
from stratus.supervisor.code_cache import PipelineCode
from stratus.supervisor.errors import UnfencedAssignmentError, WorkerStartError
from stratus.supervisor.run_as import RunAs
from stratus.supervisor.run_logs import make_run_dir, prune, run_dir, write_run_number
from stratus.supervisor.settings import SpecSettings
from stratus.supervisor.worker_access import WORK_DIR, prepare_worker
from stratus.supervisor.worker_log import RunLog, WorkerLogSettings
from stratus.supervisor.worker_monitor import (
    MONITOR_LOG,
    MONITOR_MODULE,
    ExitRecord,
    MonitorOrder,
    read_exit,
    write_order,
)
from stratus.supervisor.worker_monitor import clear as clear_monitor_files
from stratus.trail import open_for_appending
from stratus.worker.spec import HEARTBEAT_FILE, SPEC_FILE, WorkerSpec

WORKER_MODULE = "stratus.worker.main"
LOG_FILE = "worker.log"
START_MARK = "==== stratus supervisor: worker started"  # a line in worker.log before each run
TAIL_READ_BYTES = 64 * 1024
TAIL_LINES = 20
TAIL_MAX_CHARS = 4000
MONITOR_START_SECS = 10.0  # how long a monitor may take to start its worker
MONITOR_POLL_SECS = 0.01


def default_worker_command() -> list[str]:
    """The command of a worker, the spec path appended."""
    return [sys.executable, "-m", WORKER_MODULE]


@dataclass(frozen=True)
class WorkerPaths:
    """The files of one pipeline's worker under ``<local>/workers/<pipeline>/`` (their
    owners and modes: ``worker_access``)."""

    directory: Path
    run: int | None = None  # the run its worker is (``RunRecord``); None: unrecorded

    @classmethod
    def of(cls, local_dir: Path, pipeline: str) -> WorkerPaths:
        return cls(local_dir / "workers" / pipeline)

    def for_run(self, run: int | None) -> WorkerPaths:
        """The same worker's files for run ``run``: its log in that run's directory."""
        return dataclasses.replace(self, run=run)

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
        """The run's log: in its own directory (``run_logs``), or beside the spec when the
        run has no number (then one run before is kept, as ``worker.previous.log``)."""
        if self.run is None:
            return self.directory / LOG_FILE
        return run_dir(self.directory, self.run) / LOG_FILE

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
        cluster=settings.cluster,
        legacy_checkpoint_location=(
            None
            if settings.legacy_checkpoint_root is None
            else checkpoint_location(
                settings.legacy_checkpoint_root, pipeline_conf, assignment.pipeline
            )
        ),
        trigger_interval_secs=float(trigger) if trigger is not None else None,
        heartbeat_path=paths.heartbeat,
        heartbeat_interval_secs=settings.heartbeat_secs,
        stop_grace_secs=settings.stop_grace_secs,
        log_level=logging.getLevelName(settings.log.level),
        log_format=settings.log.format,
        history_file=settings.history.file,
        lease_path=settings.lease_path,
        **_beat_lease_fields(settings, pipeline_conf),
    )


def _beat_lease_fields(settings: SpecSettings, conf: Mapping[str, object]) -> dict[str, Any]:
    """A hot worker's (a pipeline with a standby worker, the pacemaker store) beat lease:
    the file it watches, how often, and the grace before its group is SIGKILLed."""
    beat = settings.beat
    if beat is None or not wants_standby_worker(conf):
        return {}
    return {
        "beat_lease_path": beat.lease_path,
        "beat_poll_secs": beat.poll_secs,
        "beat_stop_secs": beat.stop_secs,
    }


def prepare_run(
    spec: WorkerSpec,
    paths: WorkerPaths,
    log: WorkerLogSettings | None,
    run_as: RunAs | None = None,
    checkpoint_dir: Path | None = None,
) -> RunLog:
    """Before a run of ``spec``, cold or warm: its directories, the supervisor's copy of its
    spec and the worker's, no heartbeat file left of the last run, whose log becomes the
    previous one (``worker_access``; for a worker of another user, its switch prepares the
    worker's part: ``checkpoint_dir``, the pipeline's local checkpoint directory, included);
    the new run's log, its first line the start mark, in its own directory if it has a
    number (the logs of the oldest runs beyond ``runs_keep`` deleted)."""
    settings = log or WorkerLogSettings()
    paths.make_private()
    write_run_number(paths.directory, paths.run)
    if paths.run is not None:
        make_run_dir(paths.directory, paths.run)
        prune(paths.directory, settings.runs_keep)
    paths.heartbeat.unlink(missing_ok=True)  # a new process starts with no heartbeat
    spec.write(paths.spec)
    data = paths.spec.read_bytes()
    if run_as is None:
        prepare_worker(paths.directory, data, None, group=os.getgid(), checkpoint_dir=None)
    else:
        run_as.switch.prepare(paths.directory, data, run_as.user, checkpoint_dir)
    run_log = RunLog(paths.log, settings)
    run_log.start_run()
    run_log.write(_start_line(spec).encode())
    return run_log


@dataclass(frozen=True)
class MonitorSettings:
    """What every worker's monitor is told besides its worker (``worker_monitor``)."""

    supervisor: str
    cluster: ClusterIdentity
    lifeline: bool = False  # supervisor.worker.adopt false: the worker dies with the supervisor


class ProvenProcess:
    """A process the supervisor did not start, proven by its pid and start time, and
    signalled through a pidfd once opened: a pid reused since is never signalled."""

    def __init__(self, pid: int, started: int | None) -> None:
        self.pid = pid
        self._started = started
        self._fd: int | None = None
        if started is not None:
            with contextlib.suppress(OSError):
                self._fd = os.pidfd_open(pid)
            if not self.alive():  # the pidfd may name a process that reused the pid
                self.close()

    @property
    def returncode(self) -> int | None:
        """None while it lives (the ``SignalTarget`` of a user switch), else 0."""
        return None if self.alive() else 0

    def alive(self) -> bool:
        return self._started is not None and same_process(self.pid, self._started)

    def signal(self, signum: int) -> None:
        if self._fd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._fd, signum)

    def signal_group(self, signum: int) -> None:
        """``signum`` to its process group while it lives: the group's id is its pid, which
        is not reused while it lives; once it is gone its monitor kills what is left."""
        if self._fd is not None and self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signum)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class WorkerProcess:
    """A worker under its monitor (started now, or adopted); see the module docstring.
    Used by one thread."""

    def __init__(
        self,
        directory: Path,
        record: ProcessRecord,
        spec: WorkerSpec | None,
        *,
        monitor: subprocess.Popen[bytes] | None = None,
        run_as: RunAs | None = None,
        exited: ExitRecord | None = None,
    ) -> None:
        self.directory = directory
        self.record = record
        self.spec = spec
        self.pid = record.worker.pid
        self.started_wall = time.time()
        self._monitor = monitor  # the supervisor's own child (None: adopted)
        self._run_as = run_as
        self._worker = ProvenProcess(record.worker.pid, record.worker.start)
        self._exit: int | None = None
        self._ended = exited

    @classmethod
    def launch(  # noqa: PLR0913 keyword-only options
        cls,
        spec: WorkerSpec,
        paths: WorkerPaths,
        command: Sequence[str] | None = None,
        *,
        env: Mapping[str, str],
        monitor: MonitorSettings,
        log: WorkerLogSettings | None = None,
        run_as: RunAs | None = None,
        checkpoint_dir: Path | None = None,
        history_file: Path | None = None,
    ) -> WorkerProcess:
        """Write the spec, clear the last heartbeat file, make the last run's log the
        previous one, and start the worker's monitor, which starts the worker with ``env``
        (as ``run_as``'s user, if given), its output pumped into its log. A worker of another
        user, which may not open the ``history_file``, inherits a descriptor of it that can
        only append (``history_fd``), if its switch passes descriptors on."""
        fd = _history_descriptor(spec, history_file, run_as)
        if fd is not None:
            spec = spec.model_copy(update={"history_fd": fd})
        try:
            try:
                run_log = prepare_run(spec, paths, log, run_as, checkpoint_dir)
            except BaseException:
                if run_as is not None:
                    run_as.finished()
                raise
            run_log.close()  # the monitor appends to it from now on
            argv = [*(command or default_worker_command()), str(paths.worker_spec)]
            popen: dict[str, Any] = {"cwd": str(paths.work), "env": dict(env)}
            group_kill: list[str] | None = None
            if run_as is not None:
                argv, popen = run_as.switch.command(
                    argv,
                    directory=paths.directory,
                    pipeline=spec.pipeline,
                    user=run_as.user,
                    env=env,
                )
                popen = {key: str(v) if key == "cwd" else v for key, v in popen.items()}
                group_kill = run_as.switch.group_kill_command(run_as.user)
            settings = log or WorkerLogSettings()
            order = MonitorOrder(
                argv=list(argv),
                popen=popen,
                log_path=str(paths.log),
                log_max_bytes=settings.max_bytes,
                log_backups=settings.backups,
                identity=identity(
                    monitor.cluster, spec, run_as.user.name if run_as is not None else None
                ),
                lifeline=monitor.lifeline,
                group_kill=group_kill,
                pass_fds=[fd] if fd is not None else [],
            )
            try:
                process = start_monitor(paths.directory, order)
                record = await_record(paths.directory, process, spec.pipeline)
                return cls(paths.directory, record, spec, monitor=process, run_as=run_as)
            except BaseException:
                if run_as is not None:
                    run_as.finished()
                raise
        finally:
            if fd is not None:
                os.close(fd)  # the monitor holds its own copy

    @classmethod
    def adopt(cls, found: Found, run_as: RunAs | None = None) -> WorkerProcess:
        """The handle of a worker a previous supervisor started, proven (``adoption``)."""
        spec: WorkerSpec | None
        try:
            spec = WorkerSpec.read(found.directory / SPEC_FILE)
        except (OSError, ValueError):
            spec = None
        return cls(found.directory, found.record, spec, run_as=run_as, exited=found.exit)

    def poll(self) -> int | None:
        """None while the worker runs; its exit code (negative: the signal) once it exited
        and its monitor recorded it (``exit.json``); ``NOT_REAPED_EXIT`` when the monitor
        is gone without a record (killed) and so is the worker. What its user left running
        is killed then, and the user freed."""
        if self._exit is not None:
            return self._exit
        ended = self._ended
        if ended is None:
            if self._monitor_alive():  # one look a tick; exit.json only once it has gone
                return None
            ended = read_exit(self.directory)  # written just before it exited
        if ended is None:
            if self._worker.alive():  # without its monitor: no log, no record of its end
                self._worker.signal_group(signal.SIGKILL)
                return None
            monitor_code = None if self._monitor is None else self._monitor.poll()
            logging.getLogger(__name__).warning(
                "event=worker_monitor_lost pipeline=%s monitor_pid=%d monitor_exit=%s "
                "worker_pid=%d reason=%r",
                self.record.pipeline,
                self.record.monitor.pid,
                "unknown" if monitor_code is None else monitor_code,
                self.pid,
                f"its monitor ended without recording the worker's exit (killed, or see "
                f"{self.directory / MONITOR_LOG}): the worker's exit is unknown",
            )
            code = NOT_REAPED_EXIT
        else:
            code = ended.code
        self._exit = code
        if self._monitor is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._monitor.wait(KILL_WAIT_SECS)
            if self._monitor.stdin is not None:
                with contextlib.suppress(OSError):
                    self._monitor.stdin.close()
        self._worker.close()
        if self._run_as is not None:  # what its user left running, then the user is free
            self._run_as.finished()
        return code

    def terminate(self) -> None:
        """SIGTERM to the worker: it stops its queries and exits."""
        if self._exit is None:
            self._signal(signal.SIGTERM, whole_group=False)

    def kill(self) -> None:
        """SIGKILL to the worker's whole process group (its Spark JVM included)."""
        if self._exit is None:
            self._signal(signal.SIGKILL, whole_group=True)

    def release(self) -> None:
        """Leave the worker to run on without this supervisor (it stops at the lease's end
        unless a supervisor adopts it): the monitor, the supervisor's child, is not reaped
        here, and its stdin is left as it is."""
        self._worker.close()

    def _monitor_alive(self) -> bool:
        if self._monitor is not None:
            return self._monitor.poll() is None
        return self.record.monitor_alive()

    def _signal(self, signum: int, *, whole_group: bool) -> None:
        run_as = self._run_as
        if run_as is not None:
            run_as.switch.signal(run_as.user, self._worker, signum, whole_group=whole_group)
        elif whole_group:
            self._worker.signal_group(signum)
        else:
            self._worker.signal(signum)


def start_monitor(
    directory: Path, order: MonitorOrder, *, pipe: bool | None = None
) -> subprocess.Popen[bytes]:
    """Start the monitor of the worker ``order`` describes, in ``directory``, in a session
    of its own; its stdin a pipe the supervisor holds if ``pipe`` (by default: the order's
    lifeline), else /dev/null."""
    clear_monitor_files(directory)
    write_order(directory, order)
    with (directory / MONITOR_LOG).open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", MONITOR_MODULE, str(directory)],
            start_new_session=True,  # it outlives the supervisor and its group's signals
            stdin=subprocess.PIPE
            if (order.lifeline if pipe is None else pipe)
            else subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=tuple(order.pass_fds),
            cwd=directory,
        )


def await_record(directory: Path, monitor: subprocess.Popen[bytes], what: str) -> ProcessRecord:
    """The ``process.json`` the monitor writes in ``directory`` once its worker runs;
    WorkerStartError (the monitor SIGKILLed) if it exits, or takes too long, first."""
    deadline = time.monotonic() + MONITOR_START_SECS
    while True:
        record = ProcessRecord.read(directory)
        if record is not None:
            return record
        ended = read_exit(directory)
        if ended is not None or monitor.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(MONITOR_POLL_SECS)
    if monitor.poll() is None:
        monitor.kill()  # a worker it started sees EOF on its stdin and stops
    monitor.wait()
    why = ended.error if ended is not None and ended.error else "see its log"
    raise WorkerStartError(
        f"the worker monitor of {what} exited with code {monitor.returncode} before its "
        f"worker ran ({why}; {directory / MONITOR_LOG})"
    )


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
