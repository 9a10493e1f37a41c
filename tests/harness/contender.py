"""A contender process for the election tests, and the harness that drives it.

As a script (``python tests/harness/contender.py HOSTS GROUP MEMBER [LEADERS] [SESSION_TIMEOUT]``)
it runs one ``Coordinator``, nominates itself, and reports on stdout, one line per event: ``elected
<slot> <epoch>``, ``revoked <reason>``, ``session <id> <password-hex>``, ``write-ok <path>``,
``write-refused <ErrorClass>``. It reads commands on stdin: ``write <path> <value>`` (a fenced
create), ``session``, ``quit``.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from stratus.coordination import CoordinationError, Coordinator, Leadership, RevokeReason


def _serve(hosts: str, group: str, member: str, leaders: int, session_timeout: float) -> None:
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    current: list[Leadership] = []

    def elected(leadership: Leadership) -> None:
        current[:] = [leadership]
        say(f"elected {leadership.slot} {leadership.epoch}")

    def revoked(_leadership: Leadership, reason: RevokeReason) -> None:
        say(f"revoked {reason.value}")

    coordinator = Coordinator.standalone(hosts, session_timeout=session_timeout).start()

    def terminate(*_: object) -> None:
        coordinator.close()
        os._exit(0)

    signal.signal(signal.SIGTERM, terminate)
    coordinator.nominate_async(group, member, elected, leaders=leaders, on_revoked=revoked)
    say("queued")
    for line in sys.stdin:
        verb, *args = line.split()
        if verb == "write":
            try:
                if not current:
                    raise CoordinationError("never elected")
                current[0].transaction().create(args[0], args[1].encode()).commit()
                say(f"write-ok {args[0]}")
            except CoordinationError as exc:
                say(f"write-refused {type(exc).__name__}")
        elif verb == "session":
            session_id, password = coordinator.session.client.client_id
            say(f"session {session_id} {password.hex()}")
        elif verb == "quit":
            break
    coordinator.close()


@dataclass
class Contender:
    """A running contender process, with its stdout lines in a queue."""

    member: str
    process: subprocess.Popen[str]
    lines: queue.SimpleQueue[str] = field(default_factory=queue.SimpleQueue)
    seen: list[str] = field(default_factory=list)

    @classmethod
    def spawn(
        cls, hosts: str, group: str, member: str, leaders: int = 1, session_timeout: float = 2.0
    ) -> Contender:
        process = subprocess.Popen(
            [sys.executable, __file__, hosts, group, member, str(leaders), str(session_timeout)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        contender = cls(member, process)
        threading.Thread(target=contender._read, daemon=True).start()
        contender.expect("queued", timeout=30)
        return contender

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def expect(self, prefix: str, timeout: float) -> str:
        """Wait for the next line starting with ``prefix`` (earlier lines are kept in seen)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{self.member}: no {prefix!r} within {timeout}s: {self.seen}")
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def poll_line(self, prefix: str) -> str | None:
        """A line starting with ``prefix`` that has already arrived, without waiting."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            self.seen.append(line)
        return next((line for line in self.seen if line.startswith(prefix)), None)

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        self.process.wait(timeout=10)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
