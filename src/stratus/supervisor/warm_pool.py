"""Warm workers: per free slot, a process whose SparkSession is already up, waiting for a pipeline.

With ``supervisor.worker.warm``, the control loop keeps as many warm workers as it has free
slots (slots less the workers whose process runs), so a warm worker and the pipelines' workers
together never pass ``supervisor.slots``. A warm worker is ready once its Spark is up (it
creates ``ready-<pid>`` in the pool's directory). When a worker is to start, the launcher asks
``cold_reason`` whether its pipeline fits the warm session; if it does, ``hand_over`` writes
its spec as for a cold start and gives the spec's path to a ready warm worker on its stdin, a pipe
only the supervisor holds. From then on the process is that pipeline's worker like any
other (``HandedOver``: its heartbeat file, its log, its stop and kill), and the pool
starts another warm worker once a slot is free again. Unlike a cold worker it stays the
supervisor's own child and ends with it: a supervisor started again does not adopt it, but
starts the pipeline anew (cold, then warm again).

A warm worker that exits before a hand-over is replaced after a back-off that doubles at
every such death in a row (up to ``MAX_BACKOFF_FACTOR`` times
``supervisor.worker.restart.backoff.secs``). Warm workers are never pipelines: they are in no
heartbeat and take no slot in the cluster's view. They die with the supervisor: ``stop``
SIGKILLs each one's process group, and a supervisor killed by SIGKILL closes their stdin,
which ends them (``stratus.worker.warm``)::

    pool = WarmPool(settings.warm, "local[*]", local_dir / "warm", env=env, log=log)
    pool.keep(free_slots)                   # every tick of the control loop
    cold_reason(spec, code, "local[*]")     # None: a warm worker can run it
    pool.hand_over(spec, paths)             # a HandedOver, or None if none is ready
    pool.stop()
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

from stratus.api.clock import Clock
from stratus.api.pipeline_conf import env_entries
from stratus.files import PRIVATE_DIR_MODE
from stratus.process import Lifeline, ProcessGroup
from stratus.supervisor.code_cache import PipelineCode
from stratus.supervisor.settings import WarmSettings
from stratus.supervisor.worker_log import LogPump, LogSettings, RunLog
from stratus.supervisor.worker_process import WorkerPaths, prepare_run
from stratus.worker.session_conf import static_mismatch
from stratus.worker.spec import (
    WARM_READY_PREFIX,
    WorkerSpec,
    warm_ready_file,
)

log = logging.getLogger(__name__)

WARM_MODULE = "stratus.worker.warm"
WARM_LOG = "warm.log"  # every warm worker's output before its hand-over, under the pool's dir
MAX_BACKOFF_FACTOR = 30.0
LOG_DRAIN_SECS = 2.0  # after an exit, how long its last lines may take to reach the log


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


class HandedOver:
    """A warm worker handed a pipeline: that pipeline's worker (``RunningProcess``), the
    supervisor's own child, its stdin a pipe only the supervisor holds: it stops with its
    supervisor and is never adopted (a supervisor started again starts it cold)."""

    def __init__(self, group: ProcessGroup, spec: WorkerSpec, pump: LogPump) -> None:
        self._group = group
        self._pump = pump
        self.spec = spec
        self.pid = group.pid
        self.started_wall = time.time()
        self._exit: int | None = None

    def poll(self) -> int | None:
        """None while it runs; its exit code once it exited (what is left of its process
        group killed, its stdin closed, its last lines in the log)."""
        if self._exit is not None:
            return self._exit
        code = self._group.poll()
        if code is None:
            return None
        self._exit = code
        self._group.signal_group(signal.SIGKILL)
        self._group.close_lifeline()
        self._pump.join(LOG_DRAIN_SECS)
        return code

    def terminate(self) -> None:
        if self._exit is None:
            self._group.signal(signal.SIGTERM)

    def kill(self) -> None:
        if self._exit is None:
            self._group.signal_group(signal.SIGKILL)

    def release(self) -> None:
        """The supervisor leaves: its worker sees EOF on its stdin and stops."""


@dataclass
class _Warm:
    group: ProcessGroup
    pump: LogPump


class WarmPool:
    """The supervisor's warm workers; see the module docstring. Used by the control loop's
    thread only."""

    def __init__(
        self,
        settings: WarmSettings,
        master: str,
        directory: Path,
        *,
        env: Mapping[str, str],
        log: LogSettings | None = None,
        command: Sequence[str] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.master = master
        self._settings = settings
        self._directory = directory
        self._env = dict(env)
        self._log_settings = log or LogSettings()
        self._command = list(command or warm_command(master))
        self._clock = clock
        self._warm: list[_Warm] = []
        self._deaths = 0  # in a row, before a hand-over
        self._next_start = 0.0
        self._log: RunLog | None = None

    @property
    def pids(self) -> list[int]:
        """The warm workers' pids, oldest first."""
        return [warm.group.pid for warm in self._warm]

    def keep(self, wanted: int) -> None:
        """Notice the warm workers that died; stop those past ``wanted``; start one if fewer
        (one per call: the control loop calls often, and JVMs start one at a time)."""
        now = self._clock()
        self._reap(now)
        while len(self._warm) > max(0, wanted):
            self._kill(self._warm.pop(), "not_needed")
        if len(self._warm) < wanted and now >= self._next_start:
            self._start()

    def hand_over(self, spec: WorkerSpec, paths: WorkerPaths) -> HandedOver | None:
        """Run ``spec`` in a warm worker that is ready (its Spark up); None if none is. The
        caller checked ``cold_reason``."""
        self._reap(self._clock())
        while ready := [warm for warm in self._warm if self._is_ready(warm)]:
            warm = ready[0]
            self._warm.remove(warm)
            self._ready_file(warm).unlink(missing_ok=True)
            run_log = prepare_run(spec, paths, self._log_settings)
            stdin = warm.group.process.stdin
            assert stdin is not None and self._log is not None  # a PIPE lifeline; it started
            warm.pump.switch_to(run_log)  # before the spec: the run's first line is the run's
            try:
                stdin.write(f"{paths.worker_spec}\n".encode())
                stdin.flush()
            except OSError:  # it died since the look: the next one, else a cold start
                warm.pump.switch_to(self._log)  # its last words are a warm worker's
                self._kill(warm, "died")
                continue
            self._deaths = 0
            log.info(
                "event=warm_worker_handed_over pipeline=%s epoch=%d pid=%d warm_left=%d",
                spec.pipeline,
                spec.epoch,
                warm.group.pid,
                len(self._warm),
            )
            return HandedOver(warm.group, spec, warm.pump)
        return None

    def stop(self) -> None:
        """SIGKILL every warm worker's process group (nothing of theirs is worth a grace)."""
        while self._warm:
            self._kill(self._warm.pop(), "supervisor_stopping")

    # ------------------------------------------------------------------ its processes

    def _start(self) -> None:
        self._directory.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
        if self._log is None:  # the first start: no ready file of a killed run may stay
            for stale in self._directory.glob(f"{WARM_READY_PREFIX}*"):
                stale.unlink(missing_ok=True)
            self._log = RunLog(self._directory / WARM_LOG, self._log_settings)
        read_end, write_end = os.pipe()
        try:
            group = ProcessGroup.start(
                self._command,
                lifeline=Lifeline.PIPE,
                stdout=write_end,
                stderr=subprocess.STDOUT,
                cwd=self._directory,
                env=self._env,
            )
        except OSError as exc:
            os.close(read_end)
            self._died(f"could not be started: {exc}")
            return
        finally:
            os.close(write_end)
        self._warm.append(_Warm(group, LogPump(read_end, self._log)))
        log.info("event=warm_worker_started pid=%d master=%s", group.pid, self.master)

    def _reap(self, now: float) -> None:
        for warm in list(self._warm):
            code = warm.group.poll()
            if code is not None:
                self._warm.remove(warm)
                self._kill(warm, "exited")
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
            self._directory / WARM_LOG,
        )

    def _is_ready(self, warm: _Warm) -> bool:
        return self._ready_file(warm).exists()

    def _ready_file(self, warm: _Warm) -> Path:
        return self._directory / warm_ready_file(warm.group.pid)

    def _kill(self, warm: _Warm, reason: str) -> None:
        warm.group.kill()
        warm.group.close_lifeline()
        self._ready_file(warm).unlink(missing_ok=True)
        log.info("event=warm_worker_stopped pid=%d reason=%s", warm.group.pid, reason)
