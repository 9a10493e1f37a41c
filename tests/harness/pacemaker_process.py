"""A real ``stratus pacemaker`` process for the tests: started, waited for, stopped or killed."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT_SECS = 60.0
READY = "pacemaker: serving at "


class PacemakerProcess:
    """``python -m stratus pacemaker`` with ``-c`` overrides; ``port`` is known once started."""

    def __init__(self, log_dir: Path, overrides: Sequence[str] = (), port: int = 0) -> None:
        self.log_dir = log_dir
        self.overrides = list(overrides)
        self.port = port
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> PacemakerProcess:
        args = [sys.executable, "-m", "stratus", "pacemaker", "--port", str(self.port)]
        for override in self.overrides:
            args += ["-c", override]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
        log = (self.log_dir / f"pacemaker-{time.monotonic_ns()}.log").open("w")
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=log, text=True, env=env, start_new_session=True
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], START_TIMEOUT_SECS)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith(READY):
            self.kill()
            raise RuntimeError(f"pacemaker did not start: {line!r}; see {log.name}")
        self.port = int(line.strip().rsplit(":", 1)[1])
        return self

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def resume(self) -> None:
        """SIGCONT: continue a server a test stopped with SIGSTOP."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.resume()  # a stopped server would not see its SIGTERM
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


@contextmanager
def digest_pacemakers(
    log_dir: Path, secrets: Mapping[str, str], roles: Mapping[str, str], count: int = 3
) -> Iterator[list[PacemakerProcess]]:
    """``count`` pacemakers with digest authentication of ``secrets`` (principal: secret) in
    ``roles`` (principal: role), pulses kept for 10 minutes; stopped (continued first) at the
    end."""
    secrets_file = log_dir / "pacemaker.secrets"
    secrets_file.write_text("".join(f"{p} {roles[p]} {s}\n" for p, s in secrets.items()))
    secrets_file.chmod(0o600)
    overrides = [
        "pacemaker.auth.method=digest",
        f"pacemaker.auth.file={secrets_file}",
        "pacemaker.pulse.ttl.secs=600",
    ]
    servers: list[PacemakerProcess] = []
    try:
        for _ in range(count):
            servers.append(PacemakerProcess(log_dir, overrides).start())
        yield servers
    finally:
        for server in servers:
            server.stop()
