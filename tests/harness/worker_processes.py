"""Worker processes started as a supervisor starts them, for the tests that run them on Spark.

Each worker gets a marker in its environment, which its JVMs (and an sdp run's) inherit, so
a test finds every Java process a worker started and asserts that none outlives it. Waits
are on conditions (heartbeat contents, process exit), never fixed sleeps::

    processes = WorkerProcesses()
    worker = processes.start(spec)                            # python -m stratus.worker.main
    standby = processes.start(spec, module=STANDBY_MODULE)    # python -m stratus.worker.standby
    worker.wait_heartbeat(lambda beat: beat.state is WorkerState.RUNNING, "running")
    worker.wait_exit()                                        # its exit code
    processes.close()                                         # kills what is left, JVMs too
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from stratus.api.records import WorkerHeartbeat
from stratus.worker.spec import WorkerSpec, read_heartbeat
from tests.harness.zkfixtures import process_gone, wait_until

MARKER = "STRATUS_TEST_WORKER"
WORKER_MODULE = "stratus.worker.main"
STANDBY_MODULE = "stratus.worker.standby"
START_SECS = 90.0  # a JVM start on a loaded 2-core machine, plus the first batches
STOP_SECS = 30.0


@dataclass
class Worker:
    """A worker process started as a supervisor starts one; see ``WorkerProcesses.start``."""

    process: subprocess.Popen[bytes]
    spec: WorkerSpec
    log: Path
    marker: str
    seen_jvms: set[int] = field(default_factory=set)

    def heartbeat(self) -> WorkerHeartbeat | None:
        return read_heartbeat(self.spec.heartbeat_path)

    def jvms(self) -> set[int]:
        """Live Java processes started by this worker, however deep (found by the marker)."""
        found = set()
        needle = f"{MARKER}={self.marker}".encode()
        for proc in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError):
                java = (proc / "comm").read_text().strip() == "java"
                if java and needle in (proc / "environ").read_bytes().split(b"\0"):
                    found.add(int(proc.name))
        found = {pid for pid in found if not process_gone(pid)}
        self.seen_jvms |= found
        return found

    def wait_heartbeat(
        self, predicate: Callable[[WorkerHeartbeat], bool], what: str, timeout: float = START_SECS
    ) -> WorkerHeartbeat:
        """The first heartbeat that satisfies ``predicate``; fails early if the worker exits."""
        found: list[WorkerHeartbeat] = []

        def check() -> bool:
            self.jvms()
            beat = self.heartbeat()
            if beat is not None and predicate(beat):
                found.append(beat)
                return True
            if self.process.poll() is not None:
                raise AssertionError(f"the worker exited waiting for {what}:\n{self.output()}")
            return False

        wait_until(check, timeout, what)
        return found[0]

    def wait_exit(self, timeout: float = STOP_SECS) -> int:
        """The exit code, once the worker exited; the JVMs seen meanwhile are noted."""

        def exited() -> bool:
            self.jvms()
            return self.process.poll() is not None

        wait_until(exited, timeout, "the worker's exit")
        return self.process.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class WorkerProcesses:
    """Starts workers like a supervisor does (stdin a pipe the test holds, a process group
    of their own); ``close`` kills what is left of them."""

    def __init__(self) -> None:
        self._started: list[Worker] = []

    def start(self, spec: WorkerSpec, module: str = WORKER_MODULE) -> Worker:
        """``python -m MODULE <spec file>`` for ``spec``, its output in a log beside it."""
        directory = spec.heartbeat_path.parent
        number = len(self._started)
        spec_path = directory / f"spec-{number}.json"
        spec.write(spec_path)
        marker = uuid.uuid4().hex
        log = directory / f"worker-{number}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", module, str(spec_path)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, MARKER: marker, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,
            )
        worker = Worker(process, spec, log, marker)
        self._started.append(worker)
        return worker

    def close(self) -> None:
        for worker in self._started:
            if worker.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(worker.process.pid, signal.SIGKILL)
                worker.process.wait()
            for pid in worker.jvms():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if worker.process.stdin is not None:
                worker.process.stdin.close()
