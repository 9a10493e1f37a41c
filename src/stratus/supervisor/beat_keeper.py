"""The supervisor's side of its beat agent: started, stopped, adopted, and its lease observed.

Guarantees: the control loop (its only caller, one thread) keeps one beat agent
(``beat_agent``) running while it holds a hot worker (the worker of a pipeline with a
standby worker) and its own lease, and none once it holds no hot worker; a supervisor
started again adopts the agent its predecessor left running, once proven by the pid, start
time and boot in ``beat.json`` and started with the same settings (another is stopped and
replaced). Nothing here blocks: a stop is SIGTERM now and SIGKILL at a later tick.

The keeper also tells the loop what the beat lease (``lease.beat``) says, as the loop's own
``HeartbeatLease`` does for the supervisor's lease: held or not, and whether a read of the
assignments began after it was last (re)gained, the only read a hot worker may start on::

    keeper = beat_keeper(settings)    # None unless cluster.state.store is pacemaker
    keeper.keep(True)                 # start (or adopt) the agent; False: stop it; None: as is
    change = keeper.observe(now)      # BeatChange.REGAINED: ask for a read; LAPSED: retire
    keeper.may_start(read_started)    # a hot worker may start on that read
    keeper.stop()                     # the supervisor stops with its workers
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from enum import StrEnum
from pathlib import Path

from stratus.api.clock import Clock
from stratus.api.standby_workers import BeatLease
from stratus.files import PRIVATE_FILE_MODE
from stratus.process import ProcessGroup
from stratus.state.pacemaker_store import owned_subtree
from stratus.supervisor.beat_agent import (
    AGENT_MODULE,
    CONFIG_FILE,
    LOG_FILE,
    AgentConfig,
    AgentRecord,
    write_config,
)
from stratus.supervisor.settings import BeatSettings, SupervisorSettings
from stratus.supervisor.worker_process import ProvenProcess
from stratus.worker.lease_file import read_lease

log = logging.getLogger(__name__)

RESTART_BACKOFF_SECS = 1.0  # an agent that exited is started again no sooner
STOP_GRACE_SECS = 2.0  # an agent asked to stop is SIGKILLed after this


class BeatChange(StrEnum):
    REGAINED = "regained"  # the beat lease holds again: hot workers wait for a newer read
    LAPSED = "lapsed"  # it ended: every hot worker is retired


def beat_keeper(settings: SupervisorSettings) -> BeatKeeper | None:
    """The keeper of a supervisor with the pacemaker store (its agent authenticates as the
    supervisor does, and writes in its subtree only); None with ZooKeeper: no beats."""
    beat, pacemaker = settings.beat, settings.state_store.pacemaker
    if beat is None or pacemaker is None:
        return None
    config = AgentConfig(
        supervisor=settings.id,
        interval_secs=beat.interval_secs,
        lease_secs=beat.lease_secs,
        pacemaker=replace(pacemaker, subtree=owned_subtree(settings.id)),
        log=settings.spec.log,
    )
    return BeatKeeper(beat, settings.local_dir, config)


class _Agent:
    """A running agent: the supervisor's child, or one adopted (proven, pidfd)."""

    def __init__(
        self, pid: int, *, child: ProcessGroup | None = None, proven: ProvenProcess | None = None
    ) -> None:
        self.pid = pid
        self._child = child
        self._proven = proven

    def alive(self) -> bool:
        if self._child is not None:
            return self._child.poll() is None
        return self._proven is not None and self._proven.alive()

    def exit_code(self) -> int | None:
        return None if self._child is None else self._child.returncode

    def signal(self, signum: int) -> None:
        if self._child is not None:
            self._child.signal(signum)
        elif self._proven is not None:
            self._proven.signal(signum)

    def release(self) -> None:
        if self._proven is not None:
            self._proven.close()


class BeatKeeper:
    """One supervisor's beat agent and its lease; see the module docstring."""

    def __init__(
        self,
        settings: BeatSettings,
        local_dir: Path,
        config: AgentConfig,
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        self._settings = settings
        self._local_dir = local_dir
        self._config = config
        self._clock = clock
        self._agent: _Agent | None = None
        self._stopping: list[tuple[_Agent, float]] = []  # asked to stop; SIGKILL at then
        self._started_at = -RESTART_BACKOFF_SECS
        self._held_since: float | None = None  # when the loop saw the beat lease held again
        self._adopt()

    # ------------------------------------------------------------------ the agent

    def advertised(self) -> BeatLease:
        """The beat lease the hot workers run under, as the registration and the heartbeat
        tell the leader (its floor of silence)."""
        return self._settings.advertised()

    @property
    def agent_pid(self) -> int | None:
        return self._agent.pid if self._agent is not None else None

    def keep(self, wanted: bool | None) -> None:
        """Start the agent if ``wanted`` and none runs (not sooner than a backoff after the
        last start); stop it if ``wanted`` is False; None: leave it as it is."""
        now = self._clock()
        self._reap(now)
        agent = self._agent
        if agent is not None and not agent.alive():
            log.warning(
                "event=beat_agent_exited supervisor=%s pid=%d exit=%s log=%s",
                self._config.supervisor,
                agent.pid,
                agent.exit_code(),
                self._local_dir / LOG_FILE,
            )
            agent.release()
            self._agent = agent = None
        if wanted and agent is None and now - self._started_at >= RESTART_BACKOFF_SECS:
            self._start(now)
        elif wanted is False and agent is not None:
            self._stop_agent(agent, now, "no_hot_worker")

    def stop(self) -> None:
        """The supervisor stops with its workers: the agent goes too (SIGTERM, and SIGKILL
        after the grace, waited for here)."""
        if self._agent is not None:
            self._stop_agent(self._agent, self._clock(), "supervisor_stopping")
        deadline = self._clock() + STOP_GRACE_SECS + 1.0
        while self._stopping and self._clock() < deadline:
            self._reap(self._clock())
            time.sleep(0.02)

    def leave(self) -> None:
        """The supervisor leaves its workers running: the agent beats on for them."""
        if self._agent is not None:
            self._agent.release()

    def _adopt(self) -> None:
        record = AgentRecord.read(self._local_dir)
        if record is None or not record.alive():
            self._settings.lease_path.unlink(missing_ok=True)  # no agent: nothing renews it
            return
        agent = _Agent(record.pid, proven=ProvenProcess(record.pid, record.start))
        if record.settings != self._config.fingerprint():
            log.warning(
                "event=beat_agent_not_adopted supervisor=%s pid=%d reason=%r action=replace",
                self._config.supervisor,
                record.pid,
                "it runs with other supervisor.beat.* or pacemaker.servers settings",
            )
            self._stop_agent(agent, self._clock(), "other_settings")
            return
        self._agent = agent
        log.info(
            "event=beat_agent_adopted supervisor=%s pid=%d", self._config.supervisor, agent.pid
        )

    def _start(self, now: float) -> None:
        """A new agent, in a session of its own (it outlives the supervisor); the beat lease
        file of an agent gone is removed first: nothing renews it any more."""
        self._started_at = now
        local = self._local_dir
        self._settings.lease_path.unlink(missing_ok=True)
        try:
            write_config(local, self._config)
            out = os.open(
                local / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE
            )
            try:
                os.fchmod(out, PRIVATE_FILE_MODE)
                child = ProcessGroup.start(
                    [sys.executable, "-m", AGENT_MODULE, str(local)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=local,
                )
            finally:
                os.close(out)
        except OSError as exc:
            (local / CONFIG_FILE).unlink(missing_ok=True)
            log.error(
                "event=beat_agent_not_started supervisor=%s error=%r",
                self._config.supervisor,
                exc,
            )
            return
        AgentRecord.of(child.pid, self._config).write(local)  # before anything else can stop
        self._agent = _Agent(child.pid, child=child)
        log.info(
            "event=beat_agent_starting supervisor=%s pid=%d", self._config.supervisor, child.pid
        )

    def _stop_agent(self, agent: _Agent, now: float, reason: str) -> None:
        log.info(
            "event=beat_agent_stopping supervisor=%s pid=%d reason=%s",
            self._config.supervisor,
            agent.pid,
            reason,
        )
        agent.signal(signal.SIGTERM)
        self._stopping.append((agent, now + STOP_GRACE_SECS))
        if agent is self._agent:
            self._agent = None

    def _reap(self, now: float) -> None:
        for agent, kill_at in list(self._stopping):
            if not agent.alive():
                self._stopping.remove((agent, kill_at))
                agent.release()
            elif now >= kill_at:
                with contextlib.suppress(OSError):
                    agent.signal(signal.SIGKILL)

    # ------------------------------------------------------------------ the beat lease

    def held(self, now: float) -> bool:
        """Whether the beat lease holds now (``lease.beat``'s end is still ahead)."""
        until = read_lease(self._settings.lease_path)
        return until is not None and until > now

    def observe(self, now: float) -> BeatChange | None:
        """Look at the beat lease: REGAINED when it holds and did not at the last look
        (from now on, only a read that begins later may start a hot worker), LAPSED when it
        held and does not any more, None when nothing changed."""
        held = self.held(now)
        if held and self._held_since is None:
            self._held_since = now
            return BeatChange.REGAINED
        if not held and self._held_since is not None:
            self._held_since = None
            return BeatChange.LAPSED
        return None

    def may_start(self, read_started: float | None) -> bool:
        """Whether a hot worker may start on a read of the assignments begun then: the beat
        lease holds, and held already when the read began."""
        return (
            self._held_since is not None
            and read_started is not None
            and read_started >= self._held_since
        )
