"""Daemons of this machine as real child processes: start, stop, kill, freeze, restart.

``stratus local``, the tests and the benchmarks run nimbuses and supervisors this way, each a
``python -m stratus nimbus`` (or ``supervisor``) process of its own, so that a kill is a real
``kill -9``::

    nimbus = NimbusProcess(["-c", "zookeeper.servers=127.0.0.1:2181"], port=6627, log_dir=tmp)
    nimbus.start()
    nimbus.wait_ready()
    nimbus.kill()         # SIGKILL
    nimbus.start()        # the same nimbus again, same port and directory

    secured = NimbusProcess(options, port=6627, log_dir=tmp, auth=client_auth(conf))
    secured.wait_ready()  # https and a token when the nimbuses require them

    supervisor = SupervisorProcess(options, id="s1", slots=2, log_dir=tmp)
    supervisor.start()
    supervisor.wait_ready()   # its "supervisor s1 running" line is in its log
    supervisor.stop()         # SIGUSR1 then SIGTERM: its workers stop, it unregisters
    supervisor.stop(workers=False)  # SIGTERM: its workers run on, for the next start

    pacemaker = PacemakerProcess(options, port=6699, log_dir=tmp)
    pacemaker.start()
    pacemaker.wait_ready()    # its "pacemaker: serving at" line is in its log
    pacemaker.kill()
    pacemaker.start()         # the same port, empty: it warms up
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from stratus.errors import StratusError
from stratus.process import ProcessGroup
from stratus.security.client_auth import NO_AUTH, ClientAuth
from stratus.supervisor.adoption import ProcessRecord
from stratus.supervisor.daemon import STOP_WITH_WORKERS

log = logging.getLogger(__name__)

READY_TIMEOUT_SECS = 30.0
STOP_TIMEOUT_SECS = 15.0
POLL_SECS = 0.02


class ProcessStartError(StratusError):
    """A daemon process exited or never became ready."""


class ReadinessRefusedError(ProcessStartError):
    """A nimbus answered the readiness probe with 401 or 403: the probe's credentials."""


class DaemonProcess:
    """One ``python -m stratus <command>`` child process, in a session of its own, with its
    output appended to ``log_path``; what nimbuses and supervisors share.

    ``command_prefix`` is put before the command: a launcher that becomes the daemon's own
    process (``exec``), such as ``ip netns exec HOST`` to run it on a test host of its own.
    """

    def __init__(
        self,
        log_path: Path,
        local_dir: Path,
        options: Sequence[str],
        command_prefix: Sequence[str] = (),
    ) -> None:
        self.log_path = log_path
        self.local_dir = local_dir
        self._options = list(options)
        self._prefix = list(command_prefix)
        self._group: ProcessGroup | None = None
        self._log_start = 0  # where this start's output begins in the log

    @property
    def pid(self) -> int | None:
        return self._group.pid if self._group else None

    @property
    def returncode(self) -> int | None:
        return self._group.poll() if self._group else None

    def is_running(self) -> bool:
        return self._group is not None and self._group.is_running()

    def _launch(self, command: str, *arguments: str) -> None:
        argv = [
            *self._prefix,
            sys.executable,
            "-m",
            "stratus",
            command,
            *self._options,
            *arguments,
        ]
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self._group = ProcessGroup.start(argv, stdout=log, stderr=subprocess.STDOUT)

    def signal(self, signum: int) -> None:
        if self._group is not None:
            self._group.signal(signum)

    def kill(self) -> None:
        """SIGKILL, and reap."""
        if self._group is not None:
            self._group.kill()

    def terminate(self) -> None:
        """SIGTERM, the graceful stop, without waiting for it (see ``stop``)."""
        if self._group is not None:
            self._group.terminate(whole_group=False)  # SIGCONT first: a frozen one cannot stop

    def stop(self, timeout: float = STOP_TIMEOUT_SECS) -> int | None:
        """SIGTERM, then SIGKILL if it is still there after ``timeout``; the exit code."""
        if self._group is None:
            return None
        return self._group.stop(timeout, whole_group=False)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the process to exit; its exit code (None if it was never started)."""
        if self._group is None:
            return None
        return self._group.wait(timeout)

    def log_tail(self, lines: int = 20) -> str:
        text = self._output().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:]) or "(no log)"

    def _output(self) -> bytes:
        """What this start of the process wrote to its log so far."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                return log.read()
        except OSError:
            return b""

    def _wait_for_line(self, needle: str, name: str, timeout: float) -> None:
        """Wait until this start's log holds ``needle`` (the line the daemon prints once it
        is ready); ProcessStartError naming ``name``, with the log's tail if it exited."""
        deadline = time.monotonic() + timeout
        wanted = needle.encode()
        while time.monotonic() < deadline:
            if wanted in self._output():
                return
            if not self.is_running():
                raise ProcessStartError(f"{name} exited: {self.log_tail()}")
            time.sleep(POLL_SECS)
        raise ProcessStartError(f"{name} not ready in {timeout:g}s")


def stop_all(processes: Sequence[DaemonProcess], timeout: float = STOP_TIMEOUT_SECS) -> None:
    """Stop them at once: SIGTERM to each, then SIGKILL to whoever is left after ``timeout``."""
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + timeout
    for process in processes:
        process.stop(max(0.0, deadline - time.monotonic()))


class NimbusProcess(DaemonProcess):
    """One ``stratus nimbus`` child process at a fixed address (kept across restarts).

    ``auth`` is how whoever waits for it reaches its API: the client settings
    (``stratus.client_settings.client_auth``), so that a nimbus serving https and requiring a token
    is probed over https, trusting ``client.tls.ca``, with the token.

    ``code_port`` is its package server's port, given before ``options`` (which may set
    ``nimbus.code.port`` themselves): 0 by default, a free port at each start, because
    several nimbuses share this machine and the configured default (6628) fits one nimbus
    per host; None leaves it to the configuration (a nimbus alone on its host).
    """

    def __init__(
        self,
        options: Sequence[str],
        *,
        port: int,
        log_dir: Path,
        host: str = "127.0.0.1",
        command_prefix: Sequence[str] = (),
        auth: ClientAuth = NO_AUTH,
        code_port: int | None = 0,
    ) -> None:
        name = f"nimbus-{port}" if host == "127.0.0.1" else f"nimbus-{host}-{port}"
        if code_port is not None:
            options = ["-c", f"nimbus.code.port={code_port}", *options]
        super().__init__(log_dir / f"{name}.log", log_dir / name, options, command_prefix)
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"
        self.auth = auth
        self.url = f"{auth.scheme}://{self.address}"

    def start(self) -> None:
        self._launch(
            "nimbus",
            "-c", f"nimbus.host={self.host}",
            "-c", f"nimbus.port={self.port}",
            "-c", f"nimbus.local.dir={self.local_dir}",
        )  # fmt: skip

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECS) -> None:
        """Wait until the API answers 200 to ``auth``; ProcessStartError with the log's tail
        if it died, ReadinessRefusedError if it refuses ``auth``'s credentials."""
        deadline = time.monotonic() + timeout
        with httpx.Client(
            verify=self.auth.verify(), headers=self.auth.headers(), timeout=1.0
        ) as http:
            while time.monotonic() < deadline:
                if not self.is_running():
                    raise ProcessStartError(f"nimbus {self.address} exited: {self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    status = http.get(f"{self.url}/api/v1/leader").status_code
                    if status == 200:
                        return
                    if status in (401, 403):
                        raise ReadinessRefusedError(
                            f"nimbus {self.address} answered {status} to the readiness probe: "
                            "give the probe a token the nimbus accepts (client.auth.token.file)"
                        )
                time.sleep(POLL_SECS)
        raise ProcessStartError(f"nimbus {self.address} not ready in {timeout:g}s")


class SupervisorProcess(DaemonProcess):
    """One ``stratus supervisor`` child process with a fixed id and local directory.

    Ready once the log of this start holds its ``supervisor <id> running`` line, which it
    writes once registered and running: no ZooKeeper access is needed to tell. Its stop
    stops its workers too (SIGUSR1), unless told ``workers=False`` (SIGTERM alone: they run
    on for its next start to adopt); a SIGKILL leaves them running on their lease.
    """

    def __init__(
        self,
        options: Sequence[str],
        *,
        id: str,
        slots: int,
        log_dir: Path,
        command_prefix: Sequence[str] = (),
    ) -> None:
        super().__init__(
            log_dir / f"supervisor-{id}.log",
            log_dir / f"supervisor-{id}",
            # several on one host: each endpoint on a free port, unless the options say
            ["-c", "supervisor.http.port=0", *options],
            command_prefix,
        )
        self.id = id
        self.slots = slots

    def start(self) -> None:
        self._launch(
            "supervisor",
            "--id", self.id,
            "--slots", str(self.slots),
            "-c", f"supervisor.local.dir={self.local_dir}",
        )  # fmt: skip

    def terminate(self, *, workers: bool = True) -> None:
        """Ask it to leave without waiting (see ``stop``)."""
        if workers and self.is_running():
            self.signal(signal.SIGCONT)
            self.signal(STOP_WITH_WORKERS)
        super().terminate()

    def stop(self, timeout: float = STOP_TIMEOUT_SECS, *, workers: bool = True) -> int | None:
        """Its graceful stop, its workers with it unless ``workers`` is False; SIGKILL if it
        is still there after ``timeout``; the exit code."""
        if workers and self.is_running():
            self.signal(signal.SIGCONT)
            self.signal(STOP_WITH_WORKERS)
        code = super().stop(timeout)
        if workers:
            kill_left_workers(self.local_dir, self.id)
        return code

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECS) -> None:
        """Wait for its ``supervisor <id> running`` line."""
        self._wait_for_line(f"supervisor {self.id} running", f"supervisor {self.id}", timeout)


def kill_left_workers(local_dir: Path, supervisor: str) -> list[int]:
    """SIGKILL the workers (their process groups) and their monitors that a supervisor
    stopped with its workers left running on ``local_dir``: it had to be killed before it
    stopped them. Each is proven by its ``process.json`` (pid and start time), so no other
    process is signalled; the monitors' pids, each logged."""
    killed = []
    for record_file in sorted(local_dir.glob("workers/*/process.json")):
        record = ProcessRecord.read(record_file.parent)
        if record is None or not record.worker_alive():
            continue  # a monitor whose worker ended writes its exit.json and goes by itself
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(record.worker.pid, signal.SIGKILL)
        if record.monitor_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.monitor.pid, signal.SIGKILL)
        log.warning(
            "event=worker_left_killed supervisor=%s pipeline=%s monitor_pid=%d worker_pid=%d",
            supervisor,
            record.pipeline,
            record.monitor.pid,
            record.worker.pid,
        )
        killed.append(record.monitor.pid)
    return killed


class PacemakerProcess(DaemonProcess):
    """One ``stratus pacemaker`` child process on a fixed port (kept across restarts).

    Ready once the log of this start holds its ``pacemaker: serving at`` line, which it prints
    once it listens. It holds everything in memory: a restart starts it empty.
    """

    def __init__(
        self,
        options: Sequence[str],
        *,
        port: int,
        log_dir: Path,
        host: str = "127.0.0.1",
        command_prefix: Sequence[str] = (),
    ) -> None:
        name = f"pacemaker-{port}" if host == "127.0.0.1" else f"pacemaker-{host}-{port}"
        super().__init__(log_dir / f"{name}.log", log_dir / name, options, command_prefix)
        self.host = host
        self.port = port
        self.address = f"{host}:{port}"

    def start(self) -> None:
        self._launch("pacemaker", "--host", self.host, "--port", str(self.port))

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECS) -> None:
        """Wait for its ``pacemaker: serving at`` line."""
        self._wait_for_line("pacemaker: serving at ", f"pacemaker {self.address}", timeout)


class ZkfcProcess(DaemonProcess):
    """One ``stratus zkfc`` child process beside the nimbus (or other service) at ``target``.

    Ready once the log of this start holds its ``zkfc: managing <target>`` line, which it
    writes once its session is up and its health monitor runs. Killing the nimbus alone leaves
    this process to notice and give up the lock; killing both is a lost host.
    """

    def __init__(
        self,
        options: Sequence[str],
        *,
        target: str,
        log_dir: Path,
        command_prefix: Sequence[str] = (),
    ) -> None:
        name = "zkfc-" + target.replace(":", "-")
        super().__init__(log_dir / f"{name}.log", log_dir / name, options, command_prefix)
        self.target = target

    def start(self) -> None:
        self._launch("zkfc", "--target", self.target)

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECS) -> None:
        """Wait for its ``zkfc: managing <target>`` line."""
        self._wait_for_line(f"zkfc: managing {self.target}", f"zkfc of {self.target}", timeout)
