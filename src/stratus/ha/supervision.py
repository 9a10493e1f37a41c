"""Process supervision: the zkfc runs its service as its child and restarts it when it dies.

``stratus zkfc --supervise -- <command...>`` (or ``ha.zkfc.supervise.command``) starts the
command in a process group of its own that dies with the zkfc, and starts it again whenever it
exits, after ``ha.zkfc.supervise.restart.backoff.secs``, doubling at every exit in a row up to
``MAX_BACKOFF_FACTOR`` times that (a child that ran ``MAX_BACKOFF_FACTOR`` times the backoff
starts a new row). The zkfc itself does not change: the dead child's health turns
``SERVICE_NOT_RESPONDING``, the zkfc quits the election and another node takes over; the
restarted child reports healthy and rejoins as a standby. The child's pid is the self-fence's
last resort (``fence``: SIGKILL of its whole group). Stopping the zkfc stops the child
(SIGTERM, then SIGKILL after ``ha.zkfc.supervise.stop.grace.secs``).

Whoever must know at once that the child exited passes ``on_exit``: it is called, with the
exit code, as soon as the child was reaped (the zkfc tells its health monitor, so a dead
child is failed over in milliseconds rather than at the next health check)::

    child = Supervision(SupervisionSettings(("stratus", "nimbus")), on_exit=print)
    child.start()
    child.pid          # the running child's pid, or None between two runs
    child.fence()      # SIGKILL it now (it is restarted after the backoff)
    child.signal(signal.SIGHUP)
    child.stop()
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from stratus.api.clock import Clock
from stratus.process import Lifeline, ProcessGroup

log = logging.getLogger(__name__)

MAX_BACKOFF_FACTOR = 30  # the restart backoff stops doubling at 30 times its base


@dataclass(frozen=True)
class SupervisionSettings:
    """``ha.zkfc.supervise.*``: the command and its restart and stop timings.

    ``environment``: variables added to the zkfc's own for the child. ``lifeline``: how the
    child learns that the zkfc died: by default the kernel's death signal, which follows the
    forking thread, this module's, which outlives each child it starts; a child that watches
    its stdin for EOF, as a supervised nimbus does, takes ``Lifeline.PIPE``.
    """

    command: tuple[str, ...]
    restart_backoff: float = 1.0
    stop_grace: float = 10.0
    environment: tuple[tuple[str, str], ...] = ()
    lifeline: Lifeline = Lifeline.THREAD_DEATH_SIGNAL


def restart_delay(base: float, exits_in_row: int) -> float:
    """The wait before starting the child again after ``exits_in_row`` exits in a row (>= 1)."""
    return float(min(base * 2 ** (max(exits_in_row, 1) - 1), base * MAX_BACKOFF_FACTOR))


class Supervision:
    """One supervised child process; see the module docstring."""

    def __init__(
        self,
        settings: SupervisionSettings,
        *,
        on_exit: Callable[[int | None], None] = lambda _code: None,
        clock: Clock = time.monotonic,
    ) -> None:
        if not settings.command:
            raise ValueError("process supervision needs a command to run")
        self.settings = settings
        self._on_exit = on_exit
        self._clock = clock
        self._lock = threading.Lock()
        self._child: ProcessGroup | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="supervision", daemon=True)
        self.starts = 0

    @property
    def pid(self) -> int | None:
        with self._lock:
            child = self._child
        return child.pid if child is not None and child.is_running() else None

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            child = self._child
        if child is not None:
            child.terminate()
        self._thread.join(self.settings.stop_grace)
        if child is not None and child.poll() is None:
            log.warning(
                "event=supervised_kill pid=%d grace_secs=%g", child.pid, self.settings.stop_grace
            )
            child.kill()
        self._thread.join(self.settings.stop_grace)

    def fence(self) -> bool:
        """SIGKILL the running child's whole group; True once it is gone (or none runs)."""
        with self._lock:
            child = self._child
        if child is None or child.returncode is not None:
            return True  # reaped already (what it left in its group was killed then)
        log.warning("event=supervised_fence pid=%d", child.pid)
        return child.kill() is not None

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the running child alone (SIGHUP: read its token file again)."""
        with self._lock:
            child = self._child
        if child is not None:
            child.signal(signum)

    def _run(self) -> None:
        exits_in_row = 0
        while not self._stopping.is_set():
            started = self._clock()
            try:
                child = ProcessGroup.start(
                    self.settings.command,
                    lifeline=self.settings.lifeline,
                    env={**os.environ, **dict(self.settings.environment)},
                    **self._stdin(),
                )
            except OSError as exc:
                log.error(
                    "event=supervised_start_failed command=%r error=%s", self.settings.command, exc
                )
                code: int | None = None
            else:
                with self._lock:
                    self._child = child
                self.starts += 1
                log.info("event=supervised_started pid=%d starts=%d", child.pid, self.starts)
                code = child.wait()
                child.kill()  # whatever it left in its group
                child.close_lifeline()
            if self._stopping.is_set():
                break
            self._on_exit(code)
            ran = self._clock() - started
            long_run = ran >= self.settings.restart_backoff * MAX_BACKOFF_FACTOR
            exits_in_row = 1 if long_run else exits_in_row + 1
            delay = restart_delay(self.settings.restart_backoff, exits_in_row)
            log.warning(
                "event=supervised_exited code=%s ran_secs=%.1f restart_in_secs=%g",
                code,
                ran,
                delay,
            )
            self._stopping.wait(delay)

    def _stdin(self) -> dict[str, int]:
        """The child's stdin: the lifeline's pipe, else nothing to read."""
        if self.settings.lifeline is Lifeline.PIPE:
            return {}
        return {"stdin": subprocess.DEVNULL}
