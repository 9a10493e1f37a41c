"""``stratus elect``: run a command only while this process leads a group, self-fenced.

    stratus elect GROUP [--leaders N] [--id ID] -- COMMAND ...
    stratus elect --show GROUP

Like ``etcdctl elect`` and ``consul lock``, plus self-fencing: the command runs under a lease
watchdog process (see ``lease_watchdog``) that stops it when the leadership is lost or
suspended, or when this process stops renewing the lease (killed, frozen), always before
ZooKeeper can elect another leader. When the command exits by itself, leadership is handed
over at once and ``stratus elect`` exits with the command's exit code.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO

import click

from stratus.command_options import with_config
from stratus.config import StratusConfig
from stratus.coordination.coordinator import RENEW_FRACTION, Coordinator
from stratus.coordination.errors import LeadershipLostError
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import RevokeReason

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
    ) -> None:
        self._coordinator = coordinator
        self._group = group
        self._member_id = member_id
        self._command = command
        self._leaders = leaders
        self._grace = grace
        self._events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._leadership: Leadership | None = None
        self._until = 0.0  # the lease deadline last given to the watchdog

    def run(self) -> int:
        """Campaign, run the command while leading; returns the exit code for the process."""
        self._coordinator.nominate_async(
            self._group,
            self._member_id,
            lambda leadership: self._events.put(_Elected(leadership)),
            leaders=self._leaders,
            on_revoked=lambda _term, reason: self._events.put(_Revoked(reason)),
        )
        _say(f"queued in group {self._group!r} as {self._member_id}")
        renew_every = self._coordinator.granted_session_timeout * RENEW_FRACTION / 2
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
            lease_lapsed = time.monotonic() >= self._until
            if self._leadership is not None and not lease_lapsed:
                _say(f"command exited with code {code}; handing over leadership")
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
        if self._watchdog is None:
            self._start_command(leadership, until)
        else:
            self._send(f"renew {until!r}")

    def _start_command(self, leadership: Leadership, until: float) -> None:
        _say(
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
        self._watchdog = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stratus.coordination.lease_watchdog",
                "--until",
                repr(until),
                "--grace",
                str(self._grace),
                "--",
                *self._command,
            ],
            stdin=subprocess.PIPE,
            env=env,
        )

    def _stop_command(self, why: str) -> None:
        watchdog = self._watchdog
        if watchdog is None:
            return
        _say(f"stopping the command: {why}")
        self._send("stop")
        try:
            watchdog.wait(timeout=self._grace + 15)
        except subprocess.TimeoutExpired:
            watchdog.kill()
            watchdog.wait()
        self._watchdog = None

    def _send(self, line: str) -> None:
        watchdog = self._watchdog
        if watchdog is None or watchdog.stdin is None:
            return
        stdin: IO[bytes] = watchdog.stdin
        try:
            stdin.write(line.encode() + b"\n")
            stdin.flush()
        except BrokenPipeError:
            pass


def _say(message: str) -> None:
    click.echo(f"elect: {message}", err=True)


def _show(coordinator: Coordinator, group: str) -> None:
    leaders = coordinator.get_leaders(group)
    if not leaders:
        click.echo(f"group {group}: no leader")
    for leader in leaders:
        click.echo(
            f"group {group}: slot {leader.slot} leader {leader.member_id} epoch {leader.epoch}"
        )
    candidates = coordinator.get_candidates(group)
    click.echo(f"candidates: {', '.join(candidates) if candidates else '(none)'}")


@click.command(context_settings={"ignore_unknown_options": False})
@click.argument("group")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--leaders",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="How many members lead the group at once.",
)
@click.option("--id", "member_id", default=None, help="Member id [default: host-pid].")
@click.option("--show", is_flag=True, help="Print the group's leaders and epochs, then exit.")
@with_config
def elect(
    conf: StratusConfig,
    *,
    group: str,
    command: tuple[str, ...],
    leaders: int,
    member_id: str | None,
    show: bool,
) -> None:
    """Run COMMAND only while this process holds leadership of GROUP."""
    coordinator = Coordinator(
        conf.zookeeper_hosts(),
        root=conf.zookeeper_root,
        session_timeout=conf.zookeeper_session_timeout_secs,
        connection_timeout=conf.zookeeper_connection_timeout_secs,
    )
    if show:
        with coordinator:
            _show(coordinator, group)
        return
    if not command:
        raise click.UsageError("give the command to run after --, or use --show")
    member = member_id or f"{socket.gethostname()}-{os.getpid()}"
    with coordinator:
        runner = ElectedCommand(
            coordinator,
            group,
            member,
            list(command),
            leaders=leaders,
            grace=conf.elect_stop_grace(),
        )
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda s, _f: runner.signalled(s))
        code = runner.run()
    sys.exit(code)
