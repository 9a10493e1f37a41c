"""Warm workers: per free slot, a process whose SparkSession is already up, waiting for a pipeline.

With ``supervisor.worker.warm``, the control loop keeps as many warm workers as it has free
slots (slots less the workers whose process runs), so a warm worker and the pipelines' workers
together never pass ``supervisor.slots``, and as many as memory allows (``warm_memory``: a
budget, the machine's available memory; they start one at a time). A warm worker is ready once
its Spark is up (it creates ``ready-<pid>`` in the pool's directory). When a worker is to
start, the launcher asks ``cold_reason`` whether its pipeline fits the warm session; if it
does, ``hand_over`` writes its spec as for a cold start and gives the hand-over to a ready warm
worker's monitor (``worker_monitor``: each warm worker runs under one, in ``<warm>/<n>/``, as a
cold worker does) on its stdin, a pipe only the supervisor holds; the monitor switches the log
to the pipeline's run log, then gives the spec's path to the warm worker. From then on the
process is that pipeline's worker like any other (a ``WorkerProcess``: its heartbeat file, its
log, its stop and kill, its adoption by a supervisor started again), and the pool starts
another warm worker once a slot is free again.

A warm worker that exits before a hand-over is replaced after a back-off that doubles at
every such death in a row (up to ``MAX_BACKOFF_FACTOR`` times
``supervisor.worker.restart.backoff.secs``). Warm workers are never pipelines: they are in no
heartbeat and take no slot in the cluster's view. Before a hand-over they die with the
supervisor: ``stop`` closes their monitors' stdin, and so does the kernel when the
supervisor is killed, and a monitor that sees EOF before a hand-over SIGKILLs its warm
worker's group (nothing to adopt there)::

    pool = WarmPool(settings.warm, "local[*]", local_dir / "warm", env=env, monitor=monitor,
                    budget=warm_budget(None, read_machine(), os.environ))
    pool.keep(free_slots)                   # every tick of the control loop
    pool.memory                             # what its supervisor's registration shows
    cold_reason(spec, code, "local[*]")     # None: a warm worker can run it
    pool.hand_over(spec, paths)             # a WorkerProcess, or None if none is ready
    pool.stop()
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stratus.api.clock import Clock
from stratus.api.pipeline_conf import env_entries
from stratus.api.records import MIB, WarmHeld, WarmMemory
from stratus.files import PRIVATE_DIR_MODE
from stratus.process import KILL_WAIT_SECS
from stratus.supervisor.adoption import ProcessRecord, identity, warm_identity
from stratus.supervisor.code_cache import PipelineCode
from stratus.supervisor.errors import WorkerStartError
from stratus.supervisor.settings import WarmSettings
from stratus.supervisor.warm_memory import (
    ESTIMATE_BYTES,
    MEASURE_SECS,
    Budget,
    Machine,
    WarmInputs,
    WarmPlan,
    groups_rss,
    plan_warm,
    read_machine,
)
from stratus.supervisor.worker_log import WorkerLogSettings
from stratus.supervisor.worker_monitor import (
    Handover,
    MonitorOrder,
    read_exit,
)
from stratus.supervisor.worker_monitor import clear as clear_monitor_files
from stratus.supervisor.worker_process import (
    MonitorSettings,
    WorkerPaths,
    WorkerProcess,
    await_record,
    prepare_run,
    start_monitor,
)
from stratus.worker.session_conf import static_mismatch
from stratus.worker.spec import WARM_READY_PREFIX, WorkerSpec, warm_ready_file

log = logging.getLogger(__name__)

WARM_MODULE = "stratus.worker.warm"
WARM_LOG = "warm.log"  # a warm worker's output before its hand-over, in its own directory
MAX_BACKOFF_FACTOR = 30.0


def warm_command(master: str) -> list[str]:
    """The command of a warm worker of the cluster's ``master``."""
    return [sys.executable, "-m", WARM_MODULE, master]


def cold_reason(spec: WorkerSpec, code: PipelineCode, master: str) -> str | None:
    """Why ``spec``'s pipeline cannot run in a warm worker of ``master``; None if it can."""
    if spec.kind != "app":
        return "an sdp project runs spark-pipelines in a process of its own"
    if code.python is not None:
        return "it runs in the environment of its requirements"
    if env_entries(spec.conf):
        return "its conf sets pipeline.env.* variables"
    if spec.spark_master != master:
        return f"its spark.master {spec.spark_master!r} is not the cluster's {master!r}"
    key = static_mismatch(spec.conf, master)
    if key is not None:
        return f"its static Spark conf key {key} is not the warm session's"
    return None


@dataclass
class _Warm:
    directory: Path  # <warm>/<n>/: its monitor's files, its ready file, its log
    monitor: subprocess.Popen[bytes]
    record: ProcessRecord
    rss: int | None = None  # bytes, its monitor's and its own process groups, once ready

    @property
    def pid(self) -> int:
        return self.record.worker.pid


class WarmPool:
    """The supervisor's warm workers; see the module docstring. Used by the control loop's
    thread only."""

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        settings: WarmSettings,
        master: str,
        directory: Path,
        *,
        env: Mapping[str, str],
        monitor: MonitorSettings,
        log: WorkerLogSettings | None = None,
        command: Sequence[str] | None = None,
        budget: Budget,
        machine: Callable[[], Machine | None] = read_machine,
        rss: Callable[[Iterable[int]], dict[int, int]] = groups_rss,
        clock: Clock = time.monotonic,
    ) -> None:
        self.master = master
        self._settings = settings
        self._budget = budget
        self._read_machine = machine
        self._read_rss = rss
        self._machine: Machine | None = None
        self._next_measure = 0.0
        self._estimate = ESTIMATE_BYTES
        self._held: WarmHeld | None = None
        self.memory = WarmMemory(machine_mb=None, budget_mb=budget.mb)  # at every ``keep``
        self._directory = directory
        self._env = dict(env)
        self._monitor = monitor
        self._log_settings = log or WorkerLogSettings()
        self._command = list(command or warm_command(master))
        self._clock = clock
        self._warm: list[_Warm] = []
        self._deaths = 0  # in a row, before a hand-over
        self._next_start = 0.0
        self._started = 0  # warm workers started: the next one's directory
        self._swept = False

    @property
    def pids(self) -> list[int]:
        """The warm workers' pids, oldest first."""
        return [warm.pid for warm in self._warm]

    def ready_count(self) -> int:
        """How many warm workers have their Spark up: what the supervisor's heartbeat tells
        the leader, which prefers such a supervisor as a drained pipeline's target. Safe from
        another thread (it reads a copy of the list and the ready files)."""
        return sum(self._is_ready(warm) for warm in list(self._warm))

    def keep(
        self,
        wanted: int,
        *,
        pipelines_starting: bool = False,
        plan: Callable[[WarmInputs], WarmPlan] = plan_warm,
    ) -> None:
        """Notice the warm workers that died; stop those past ``wanted`` or past what memory
        allows (``plan``: ``plan_warm``, or the spare budget's decision, which gives the
        standby workers their share first); start one if fewer, when none is starting (JVMs
        start one at a time) and no pipeline's worker is (``pipelines_starting``: a spare
        never slows a pipeline's start)."""
        now = self._clock()
        self._reap(now)
        if now >= self._next_measure:
            self._measure(now)
        plan_ = plan(self._inputs(wanted, pipelines_starting))
        while len(self._warm) > plan_.keep:
            past_wanted = len(self._warm) > max(0, wanted)
            reason = "not_needed" if past_wanted or plan_.held is None else plan_.held.value
            self._kill(self._warm.pop(), reason)
            self._next_measure = now  # what it freed shows in the next measurement
        if plan_.start and now >= self._next_start:
            self._start()
        self._note(plan_)

    def why_cold(self) -> str:
        """Why no warm worker was ready for a pipeline, for the cold start's log line."""
        why = self.memory.why
        return f"no warm worker is ready ({why})" if why else "no warm worker is ready"

    def hand_over(self, spec: WorkerSpec, paths: WorkerPaths) -> WorkerProcess | None:
        """Run ``spec`` in a warm worker that is ready (its Spark up); None if none is. The
        caller checked ``cold_reason``."""
        self._reap(self._clock())
        while ready := [warm for warm in self._warm if self._is_ready(warm)]:
            warm = ready[0]
            self._warm.remove(warm)
            self._ready_file(warm).unlink(missing_ok=True)
            prepare_run(spec, paths, self._log_settings).close()  # the monitor appends
            clear_monitor_files(paths.directory)
            handover = Handover(
                spec=str(paths.worker_spec),
                directory=str(paths.directory),
                log_path=str(paths.log),
                identity=identity(self._monitor.cluster, spec, None),
            )
            stdin = warm.monitor.stdin
            assert stdin is not None  # a pipe: it was started so
            try:
                stdin.write(handover.encode())
                stdin.flush()
                record = await_record(paths.directory, warm.monitor, spec.pipeline)
            except (OSError, WorkerStartError):  # it died since the look: the next one
                self._kill(warm, "died")
                continue
            if not self._monitor.lifeline:  # adoptable: the supervisor's end must not stop it
                with contextlib.suppress(OSError):
                    stdin.close()
            self._deaths = 0
            log.info(
                "event=warm_worker_handed_over pipeline=%s epoch=%d pid=%d warm_left=%d",
                spec.pipeline,
                spec.epoch,
                warm.pid,
                len(self._warm),
            )
            shutil.rmtree(warm.directory, ignore_errors=True)  # its record is the pipeline's now
            return WorkerProcess(paths.directory, record, spec, monitor=warm.monitor)
        return None

    def stop(self) -> None:
        """Stop every warm worker (nothing of theirs is worth a grace), all at once: every
        monitor hears EOF first, then each is waited for."""
        stopping, self._warm = self._warm, []
        for warm in stopping:
            self._hang_up(warm)
        for warm in stopping:
            self._await_end(warm, "supervisor_stopping")

    # ------------------------------------------------------------------ memory

    def _measure(self, now: float) -> None:
        """The machine's memory, and each ready warm worker's (its monitor's process group
        and its own: the worker and its JVM); the estimate of the next one follows the
        largest measured."""
        self._next_measure = now + MEASURE_SECS
        self._machine = self._read_machine()
        ready = [warm for warm in self._warm if self._is_ready(warm)]
        if not ready:
            return
        groups = self._read_rss(
            {pid for warm in ready for pid in (warm.record.monitor.pid, warm.pid)}
        )
        for warm in ready:
            warm.rss = groups.get(warm.record.monitor.pid, 0) + groups.get(warm.pid, 0)
        self._estimate = max(warm.rss for warm in ready if warm.rss is not None)

    def _inputs(self, wanted: int, pipelines_starting: bool = False) -> WarmInputs:
        costs = [self._estimate if warm.rss is None else warm.rss for warm in self._warm]
        return WarmInputs(
            wanted=wanted,
            costs=costs,
            starting=sum(warm.rss is None for warm in self._warm) + pipelines_starting,
            budget=self._budget.bytes,
            estimate=self._estimate,
            machine=self._machine,
        )

    def _note(self, plan: WarmPlan) -> None:
        """The report of ``memory``, and a log line when memory starts or stops holding
        warm workers back."""
        machine = self._machine
        costs = self._inputs(0).costs
        self.memory = WarmMemory(
            machine_mb=None if machine is None else machine.total // MIB,
            budget_mb=self._budget.mb,
            used_mb=sum(costs) // MIB,
            up=len(self._warm),
            ready=sum(self._is_ready(warm) for warm in self._warm),
            held=plan.held,
            why=plan.why,
        )
        if plan.held is not self._held:
            self._held = plan.held
            if plan.held is None:
                log.info("event=warm_workers_not_held up=%d", len(self._warm))
            else:
                log.warning(
                    "event=warm_workers_held reason=%s up=%d why=%r",
                    plan.held.value,
                    len(self._warm),
                    plan.why,
                )

    # ------------------------------------------------------------------ its processes

    def _start(self) -> None:
        self._directory.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
        if not self._swept:  # the first start: what a previous supervisor's pool left
            self._sweep()
        self._started += 1
        directory = self._directory / str(self._started)
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(mode=PRIVATE_DIR_MODE)
        order = MonitorOrder(
            argv=self._command,
            popen={"cwd": str(directory), "env": self._env},
            log_path=str(directory / WARM_LOG),
            log_max_bytes=self._log_settings.max_bytes,
            log_backups=self._log_settings.backups,
            identity=warm_identity(self._monitor.cluster, self._monitor.supervisor),
            lifeline=self._monitor.lifeline,
            warm=True,
        )
        try:
            monitor = start_monitor(directory, order, pipe=True)
            record = await_record(directory, monitor, "a warm worker")
        except (OSError, WorkerStartError) as exc:
            self._died(f"could not be started: {exc}")
            return
        self._warm.append(_Warm(directory, monitor, record))
        log.info("event=warm_worker_started pid=%d master=%s", record.worker.pid, self.master)

    def _sweep(self) -> None:
        """Remove the directories of warm workers whose monitor is gone, and every stale
        ready file (a warm worker of a previous supervisor whose monitor still runs stops
        at EOF on its stdin, which that supervisor held)."""
        self._swept = True
        for stale in self._directory.glob(f"*/{WARM_READY_PREFIX}*"):
            stale.unlink(missing_ok=True)
        for old in self._directory.iterdir():
            if not old.is_dir():
                continue
            with contextlib.suppress(ValueError):  # no new one takes a live one's number
                self._started = max(self._started, int(old.name))
            record = ProcessRecord.read(old)
            if record is None or not record.monitor_alive():
                shutil.rmtree(old, ignore_errors=True)

    def _reap(self, now: float) -> None:
        for warm in list(self._warm):
            if warm.monitor.poll() is not None:
                self._warm.remove(warm)
                ended = read_exit(warm.directory)
                self._kill(warm, "exited")
                code = ended.code if ended is not None else warm.monitor.returncode
                self._died(f"exited with code {code}", now)

    def _died(self, what: str, now: float | None = None) -> None:
        self._deaths += 1
        factor = min(MAX_BACKOFF_FACTOR, 2.0 ** (self._deaths - 1))
        delay = self._settings.backoff_secs * factor
        self._next_start = (self._clock() if now is None else now) + delay
        log.warning(
            "event=warm_worker_died what=%r deaths_in_row=%d restart_in_secs=%g log=%s",
            what,
            self._deaths,
            delay,
            self._directory / "*" / WARM_LOG,
        )

    def _is_ready(self, warm: _Warm) -> bool:
        return self._ready_file(warm).exists()

    def _ready_file(self, warm: _Warm) -> Path:
        return warm.directory / warm_ready_file(warm.pid)

    def _kill(self, warm: _Warm, reason: str) -> None:
        """EOF on its monitor's stdin before a hand-over: the monitor SIGKILLs the warm
        worker's group, records its end and exits."""
        self._hang_up(warm)
        self._await_end(warm, reason)

    @staticmethod
    def _hang_up(warm: _Warm) -> None:
        if warm.monitor.stdin is not None:
            with contextlib.suppress(OSError):
                warm.monitor.stdin.close()

    def _await_end(self, warm: _Warm, reason: str) -> None:
        try:
            warm.monitor.wait(KILL_WAIT_SECS)
        except subprocess.TimeoutExpired:
            warm.monitor.kill()
            warm.monitor.wait()
        self._ready_file(warm).unlink(missing_ok=True)
        log.info("event=warm_worker_stopped pid=%d reason=%s", warm.pid, reason)
