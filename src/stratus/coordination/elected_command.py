"""A command that runs only while this process leads a group, self-fenced by a lease watchdog.

    with Coordinator.standalone(hosts) as coordinator:
        runner = ElectedCommand(coordinator, "etl", "host-1", ["./job.sh"],
                                leaders=1, grace=1.0, say=print)
        exit_code = runner.run()

Like ``etcdctl elect`` and ``consul lock``, plus self-fencing: the command runs under a lease
watchdog process (see ``lease_watchdog``) that stops it when the leadership is lost or
suspended, or when this process stops renewing the lease (killed, frozen), always before
ZooKeeper can elect another leader. When the command exits by itself, leadership is handed
over at once and ``run`` returns the command's exit code.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from stratus.coordination.coordinator import Coordinator
from stratus.coordination.errors import LeadershipLostError
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import RevokeReason
from stratus.process import NOT_REAPED_EXIT, Lifeline, ProcessGroup
from stratus.zk.lease import RENEW_FRACTION

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Elected:
    leadership: Leadership


@dataclass(frozen=True)
class _Revoked:
    reason: RevokeReason


@dataclass(frozen=True)
class _Signalled:
    signum: int


_Event = _Elected | _Revoked | _Signalled


class ElectedCommand:
    """Runs one command under a lease watchdog while this member leads ``group``."""

    def __init__(
        self,
        coordinator: Coordinator,
        group: str,
        member_id: str,
        command: list[str],
        *,
        leaders: int,
        grace: float,
        say: Callable[[str], None],
    ) -> None:
        self._coordinator = coordinator
        self._group = group
        self._member_id = member_id
        self._command = command
        self._leaders = leaders
        self._grace = grace
        self._say = say
        self._events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._watchdog: ProcessGroup | None = None  # its stdin is our pipe lifeline to it
        self._leadership: Leadership | None = None
        self._until = 0.0  # the lease deadline last given to the watchdog (session's clock)

    def run(self) -> int:
        """Campaign, run the command while leading; returns the exit code for the process."""
        self._coordinator.nominate_async(
            self._group,
            self._member_id,
            lambda leadership: self._events.put(_Elected(leadership)),
            leaders=self._leaders,
            on_revoked=lambda _term, reason: self._events.put(_Revoked(reason)),
        )
        self._say(f"queued in group {self._group!r} as {self._member_id}")
        renew_every = self._coordinator.session.granted_session_timeout * RENEW_FRACTION / 2
        while True:
            try:
                event = self._events.get(timeout=renew_every)
            except queue.Empty:
                event = None
            code = self._handle(event)
            if code is not None:
                return code

    def signalled(self, signum: int) -> None:
        self._events.put(_Signalled(signum))

    def _handle(self, event: _Event | None) -> int | None:
        if isinstance(event, _Signalled):
            self._stop_command(f"signal {signal.Signals(event.signum).name}")
            return 0
        if isinstance(event, _Elected):
            self._leadership = event.leadership
        elif isinstance(event, _Revoked):
            self._leadership = None
            self._stop_command(f"leadership {event.reason.value}")
        if self._watchdog is not None and self._watchdog.poll() is not None:
            code = self._watchdog.returncode
            self._watchdog = None
            lease_lapsed = self._coordinator.session.clock() >= self._until
            if self._leadership is not None and not lease_lapsed and code is not None:
                self._say(f"{exit_description(code)}; handing over leadership")
                return code
            # The watchdog stopped it as the lease lapsed: _renew restarts it if the term holds.
        self._renew()
        return None

    def _renew(self) -> None:
        """Start the command, or extend its lease, while this member leads."""
        leadership = self._leadership
        if leadership is None:
            return
        try:
            until = leadership.valid_until()
        except LeadershipLostError:
            self._stop_command("leadership lapsed")
            return
        self._until = until
        seconds, sent = until - self._coordinator.session.clock(), time.monotonic()
        if self._watchdog is None:
            self._start_command(leadership, seconds, sent)
        else:
            self._send(f"renew {seconds!r} {sent!r}")

    def _start_command(self, leadership: Leadership, seconds: float, sent: float) -> None:
        """Start the watchdog and its command; the lease has ``seconds`` left as of ``sent``."""
        self._say(
            f"leading group {self._group!r} as {self._member_id} "
            f"(slot {leadership.slot}, epoch {leadership.epoch}); starting: "
            + " ".join(self._command)
        )
        env = dict(os.environ)
        env.update(
            STRATUS_ELECT_GROUP=self._group,
            STRATUS_ELECT_EPOCH=str(leadership.epoch),
            STRATUS_ELECT_SLOT=str(leadership.slot),
            STRATUS_ELECT_ID=self._member_id,
        )
        self._watchdog = ProcessGroup.start(
            [
                sys.executable,
                "-m",
                "stratus.coordination.lease_watchdog",
                "--lease",
                repr(seconds),
                "--sent",
                repr(sent),
                "--grace",
                str(self._grace),
                "--",
                *self._command,
            ],
            lifeline=Lifeline.PIPE,
            env=env,
        )

    def _stop_command(self, why: str) -> None:
        watchdog = self._watchdog
        if watchdog is None:
            return
        self._say(f"stopping the command: {why}")
        self._send("stop")
        try:
            watchdog.wait(timeout=self._grace + 15)
        except subprocess.TimeoutExpired:
            watchdog.kill()
        self._watchdog = None

    def _send(self, line: str) -> None:
        watchdog = self._watchdog
        if watchdog is None or watchdog.process.stdin is None:
            return
        stdin: IO[bytes] = watchdog.process.stdin
        try:
            stdin.write(line.encode() + b"\n")
            stdin.flush()
        except BrokenPipeError:
            pass


def exit_description(code: int) -> str:
    """How the command ended, for the user; a command that could not be reaped is no exit."""
    if code == NOT_REAPED_EXIT:
        return f"command could not be reaped (exit code {code}); it may still be running"
    return f"command exited with code {code}"
