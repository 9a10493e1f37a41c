"""The preflight of an update: the new version's entry point imported, in the new code's
environment, in a short-lived process, before the supervisor stops the old worker.

An update's code is fetched and its requirements' environment built while the old worker
runs (``managed_worker``); then this imports the app's entry point there
(``python -m stratus.worker.preflight_import``), bounded by
``supervisor.update.preflight.timeout.secs``. If it imports, the old worker is stopped and
the new one started; if not (an exception at import, a module missing from the package or
its requirements, a time-out), the old worker runs on and the supervisor reports the
refusal in its heartbeat (``WorkerHeartbeat.refused``), which the leader turns into a
rollback of the record with the error as its reason. The process is never waited for: the
control loop polls it::

    check = start_preflight(command, code, env, timeout_secs=120)
    check.poll()    # None while it runs; PreflightPassed or PreflightFailed(error)
    check.cancel()  # the update was withdrawn meanwhile

No preflight runs for an SDP pipeline (no entry point), with a timeout of 0, or with worker
users (``supervisor.worker.run.as``): the package's code never runs as the supervisor's own
user; those updates switch as before, and a version that fails is rolled back by the leader.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from stratus.api.clock import Clock
from stratus.process import Lifeline, ProcessGroup
from stratus.supervisor.code_cache import PipelineCode
from stratus.worker.preflight_import import ERROR_MARKER

log = logging.getLogger(__name__)

PREFLIGHT_MODULE = "stratus.worker.preflight_import"
MAX_ERROR_BYTES = 4096  # of the import's stderr, reported
KILL_WAIT_SECS = 5.0


@dataclass(frozen=True)
class PreflightPassed:
    """The entry point imported (or there was nothing to import)."""


@dataclass(frozen=True)
class PreflightFailed:
    """The entry point did not import: why, the user's exception line first."""

    error: str


PreflightResult = PreflightPassed | PreflightFailed


class Preflight:
    """One import in a process of its own, polled by the control loop's thread."""

    def __init__(self, group: ProcessGroup, output: IO[bytes], deadline: float, clock: Clock):
        self._group = group
        self._output = output
        self._deadline = deadline
        self._clock = clock
        self._result: PreflightResult | None = None

    def poll(self) -> PreflightResult | None:
        """None while the import runs, then its result (the same at every later call)."""
        if self._result is not None:
            return self._result
        code = self._group.poll()
        if code is None and self._clock() < self._deadline:
            return None
        if code is None:
            self._group.kill(KILL_WAIT_SECS)
            self._result = PreflightFailed(
                "importing the entry point did not end in time "
                "(supervisor.update.preflight.timeout.secs)"
            )
        else:
            self._result = PreflightPassed() if code == 0 else PreflightFailed(self._error(code))
        self._output.close()
        return self._result

    def cancel(self) -> None:
        """Stop the import, if it runs: its result no longer matters."""
        if self._result is None:
            self._group.kill(KILL_WAIT_SECS)
            self._output.close()
            self._result = PreflightFailed("cancelled")

    def _error(self, code: int) -> str:
        """The import's own report (after ``ERROR_MARKER``), else the end of its stderr."""
        self._output.seek(0)
        text = self._output.read().decode("utf-8", errors="replace")
        _, marked, report = text.rpartition(ERROR_MARKER)
        shown = (report if marked else text).strip()[-MAX_ERROR_BYTES:]
        return shown or f"importing the entry point failed (exit code {code}) without a message"


def start_preflight(
    command: Sequence[str],
    code: PipelineCode,
    env: Mapping[str, str],
    *,
    timeout_secs: float,
    clock: Clock = time.monotonic,
) -> Preflight | PreflightPassed:
    """Start importing ``code``'s entry point with ``command`` (an interpreter and its
    arguments: ``[python]``, or ``[python, "-m", ...]`` where a test stands in), or
    PreflightPassed at once when there is nothing to check."""
    entrypoint = code.manifest.entrypoint
    if entrypoint is None or timeout_secs <= 0:
        return PreflightPassed()
    python = str(code.python) if code.python is not None else command[0]
    argv = [python, "-m", PREFLIGHT_MODULE, str(code.directory), entrypoint]
    output = tempfile.TemporaryFile(prefix="stratus-preflight-")  # noqa: SIM115 (closed by poll)
    group = ProcessGroup.start(
        argv,
        lifeline=Lifeline.DEATH_SIGNAL,
        env=dict(env),
        cwd=str(code.directory),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=output,
    )
    log.info(
        "event=preflight_started digest=%s entrypoint=%s pid=%d", code.digest, entrypoint, group.pid
    )
    return Preflight(group, output, clock() + timeout_secs, clock)
