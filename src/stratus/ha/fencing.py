"""Fencing: make sure the old active of an election is not active any more, before we are.

Methods are tried in the order of ``ha.fencing.methods`` until one succeeds; when all fail,
fencing failed and nobody may become active (the elector drops the lock and tries again)::

    fencer = Fencer(parse_methods("graceful, shell(/usr/local/bin/fence-nimbus)"), context)
    fencer.fence(FenceTarget.parse("n1.example:6627"))     # True: n1 is fenced

The methods (``name`` or ``name(argument)``, separated by commas or new lines; a comma inside
the parentheses belongs to the argument):

``graceful``          ask the old active to go standby (the HA protocol), one retry; not
                      retried after a timeout, and not tried at all when the old active
                      is served by a stopped process of this host (SIGSTOP): it cannot answer
``epoch``             succeed at once: the service's every write is fenced by its election's
                      epoch in ZooKeeper (a stratus nimbus), so a stale active cannot write
``shell(command)``    run ``command`` with ``sh -c``; exit 0 means fenced. The target is in
                      its environment: ``STRATUS_FENCE_TARGET_HOST``, ``_PORT``, ``_ADDRESS``
                      (and ``_ID``, a supervisor's id, when the leader fences one)
``process``           the old active runs on this host: SIGKILL the process that listens on
                      its port (found in ``/proc``, owned by this user), wait for the port to
                      close. ``process(/run/x.pid)`` kills only the pid in that file, and only
                      if that process is the one listening
``sshfence``          ``ssh`` (BatchMode, ConnectTimeout) to the old active's host and kill
                      what listens on its port there; ``sshfence(user:22)`` picks user and port

Every method but ``epoch`` is bounded by ``ha.fencing.timeout.secs``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from stratus.ha.errors import FencingConfigError
from stratus.ha.protocol import (
    HAServiceError,
    HAState,
    RequestSource,
    ServiceStatus,
    ServiceTimedOutError,
)
from stratus.process import ProcessGroup
from stratus.security.loopback import is_local_address

log = logging.getLogger(__name__)

POLL_SECS = 0.02
_ENTRY = re.compile(r"^([a-z][a-z_-]*)(?:\((.*)\))?$", re.DOTALL)
METHOD_NAMES = ("graceful", "epoch", "shell", "process", "sshfence")


@dataclass(frozen=True)
class FenceTarget:
    """The service to fence: its advertised ``host:port`` (the breadcrumb's data)."""

    host: str
    port: int
    name: str | None = None  # what the service is called, when it has a name (a supervisor)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, data: bytes | str) -> FenceTarget:
        """``host:port`` (or ``[v6]:port``); ``ValueError`` saying what is wrong."""
        text = data.decode() if isinstance(data, bytes) else data
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{text!r} is not a host:port address")
        return cls(host.strip("[]"), int(port))

    def environment(self) -> dict[str, str]:
        """What a shell fence is told about its target."""
        named = {"STRATUS_FENCE_TARGET_ID": self.name} if self.name is not None else {}
        return {
            "STRATUS_FENCE_TARGET_HOST": self.host,
            "STRATUS_FENCE_TARGET_PORT": str(self.port),
            "STRATUS_FENCE_TARGET_ADDRESS": self.address,
            **named,
        }


@dataclass(frozen=True)
class MethodSpec:
    """One entry of ``ha.fencing.methods``: a method's name and its argument, if any."""

    name: str
    argument: str | None = None

    def __str__(self) -> str:
        return self.name if self.argument is None else f"{self.name}({self.argument})"


class FenceMethod(Protocol):
    """One way to fence; ``fence`` returns True when the target is surely not active."""

    def fence(self, target: FenceTarget) -> bool: ...


class StandbyAsker(Protocol):
    """The one protocol call ``graceful`` makes (``HAServiceClient`` has it)."""

    def transition_to_standby(self, source: RequestSource = ...) -> ServiceStatus: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class FencingContext:
    """What the methods need: a timeout, and a client of a service for ``graceful``."""

    timeout: float
    graceful_timeout: float
    connect: Callable[[str, float], StandbyAsker]  # (address, timeout) -> client


# ---------------------------------------------------------------------- the list


def split_entries(text: str) -> list[str]:
    """Split at commas and new lines outside parentheses; empty entries dropped."""
    entries: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char in ",\n" and depth == 0:
            entries.append("".join(current).strip())
            current = []
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current.append(char)
    entries.append("".join(current).strip())
    return [entry for entry in entries if entry]


def parse_methods(
    text: str, key: str = "ha.fencing.methods", names: tuple[str, ...] = METHOD_NAMES
) -> list[MethodSpec]:
    """``ha.fencing.methods`` (or the list ``key`` names, of the methods ``names``) as method
    specs; ``FencingConfigError`` naming a bad entry."""
    specs = []
    for entry in split_entries(text):
        match = _ENTRY.match(entry)
        if match is None:
            raise FencingConfigError(
                f"{key}: {entry!r} is not a method: write name or name(argument), "
                f"name one of {', '.join(names)}"
            )
        name, argument = match.group(1), match.group(2)
        if name not in names:
            raise FencingConfigError(
                f"{key}: unknown fencing method {name!r} in {entry!r}: use {', '.join(names)}"
            )
        argument = argument.strip() if argument is not None else None
        _check_argument(name, argument, entry, key)
        specs.append(MethodSpec(name, argument or None))
    if not specs:
        raise FencingConfigError(
            f"{key} is empty: give at least one method, e.g. 'graceful, epoch'"
        )
    return specs


def _check_argument(name: str, argument: str | None, entry: str, key: str) -> None:
    if name in ("graceful", "epoch") and argument:
        raise FencingConfigError(f"{key}: {name} takes no argument, got {entry!r}")
    if name == "shell" and not argument:
        raise FencingConfigError(
            f"{key}: {entry!r} needs its command: shell(/path/to/fence arg ...)"
        )
    if name == "sshfence" and argument:
        _ssh_user_port(argument, entry, key)


def _ssh_user_port(
    argument: str | None, entry: str, key: str = "ha.fencing.methods"
) -> tuple[str | None, int]:
    if not argument:
        return None, 22
    user, _, port = argument.partition(":")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise FencingConfigError(f"{key}: {entry!r}: the ssh port {port!r} is not a port number")
    return user or None, int(port) if port else 22


def create_method(spec: MethodSpec, context: FencingContext) -> FenceMethod:
    """The method a spec names, ready to fence."""
    if spec.name == "graceful":
        return GracefulFence(context)
    if spec.name == "epoch":
        return EpochFence()
    if spec.name == "shell":
        assert spec.argument is not None  # parse_methods checked it
        return ShellFence(spec.argument, context.timeout)
    if spec.name == "process":
        return ProcessFence(context.timeout, Path(spec.argument) if spec.argument else None)
    user, port = _ssh_user_port(spec.argument, str(spec))
    return SshFence(user, port, context.timeout)


FenceAttempt = Callable[[str, str], None]  # (method name, "fenced" | "failed" | "error")


class Fencer:
    """The configured methods, tried in order until one fences the target; ``on_attempt``
    hears each method's outcome (the zkfc's metrics count them)."""

    def __init__(
        self,
        specs: list[MethodSpec],
        context: FencingContext,
        on_attempt: FenceAttempt = lambda _method, _result: None,
    ) -> None:
        self.specs = specs
        self._methods = [create_method(spec, context) for spec in specs]
        self._on_attempt = on_attempt

    def fence(self, target: FenceTarget) -> bool:
        for spec, method in zip(self.specs, self._methods, strict=True):
            try:
                fenced = method.fence(target)
            except Exception as exc:
                log.warning("event=fence_error method=%s target=%s error=%s", spec, target, exc)
                self._on_attempt(spec.name, "error")
                continue
            if fenced:
                log.info("event=fenced method=%s target=%s", spec, target.address)
                self._on_attempt(spec.name, "fenced")
                return True
            self._on_attempt(spec.name, "failed")
            log.warning("event=fence_failed method=%s target=%s", spec, target.address)
        log.error("event=fencing_failed target=%s methods=%d", target.address, len(self.specs))
        return False


# ---------------------------------------------------------------------- the methods


class EpochFence:
    """Succeeds: the service's writes are refused once a newer epoch exists (a nimbus's are)."""

    def fence(self, target: FenceTarget) -> bool:
        return True


class GracefulFence:
    """Ask the old active to go standby, with a timeout and one retry.

    A graceful fence that cannot succeed should not hold the failover for its timeout when
    the next method can act: a timeout is not retried (a service that let a whole timeout
    pass without answering is frozen or overloaded, and a second wait only delays the next
    method), and a service whose listening socket is held by a stopped process of this host
    (SIGSTOP, a debugger) is not asked at all.
    """

    ATTEMPTS = 2

    def __init__(self, context: FencingContext) -> None:
        self._context = context

    def fence(self, target: FenceTarget) -> bool:
        if stopped_locally(target):
            log.warning("event=graceful_fence_skipped target=%s reason=stopped", target.address)
            return False
        for attempt in range(1, self.ATTEMPTS + 1):
            client = self._context.connect(target.address, self._context.graceful_timeout)
            try:
                status = client.transition_to_standby(RequestSource.ZKFC)
            except HAServiceError as exc:
                log.warning(
                    "event=graceful_fence_failed target=%s attempt=%d error=%s",
                    target.address,
                    attempt,
                    exc,
                )
                if isinstance(exc, ServiceTimedOutError):
                    return False
                continue
            finally:
                client.close()
            if status.state is not HAState.ACTIVE:
                return True
        return False


def stopped_locally(target: FenceTarget) -> bool:
    """True if the target is served on this host by a process that is stopped.

    A process whose ``/proc`` state is ``T`` (stopped by a signal) or ``t`` (by a tracer)
    and that holds the socket listening on the target's port. Made cheap enough to run
    before every graceful fence: a port that refuses connections (a dead service, which
    refuses the graceful call at once anyway) is one connection attempt; otherwise one
    ``stat`` read per process, and the socket table and descriptors are read only when
    some process is stopped. False for a target on another host.
    """
    if not is_local_address(target.host) or not port_open(target, 1.0):
        return False
    stopped = [
        int(name)
        for name in os.listdir("/proc")
        if name.isdigit() and process_state(int(name)) in ("T", "t")
    ]
    if not stopped:
        return False
    inodes = listening_inodes(target.port)
    return any(holds_any(Path("/proc", str(pid)), inodes) for pid in stopped)


def process_state(pid: int) -> str | None:
    """The one-letter state of a process (``/proc/<pid>/stat``), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses.
    fields = stat[stat.rfind(b")") + 1 :].split()
    return fields[0].decode() if fields else None


def run_bounded(argv: list[str], timeout: float, env: Mapping[str, str] | None = None) -> int:
    """Run ``argv`` in a process group of its own; its exit code, or -1 (all killed) on timeout."""
    group = ProcessGroup.start(
        argv,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
    )
    try:
        return group.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("event=fence_timeout argv=%r timeout_secs=%g", argv[:3], timeout)
        group.kill()
        return -1


class ShellFence:
    """``sh -c command`` with the target in its environment; exit 0 means fenced."""

    def __init__(self, command: str, timeout: float) -> None:
        self.command = command
        self.timeout = timeout

    def fence(self, target: FenceTarget) -> bool:
        env = {**os.environ, **target.environment()}
        code = run_bounded(["sh", "-c", self.command], self.timeout, env)
        log.info("event=shell_fence command=%r exit=%d", self.command, code)
        return code == 0


def remote_kill_script(port: int, wait_secs: float) -> str:
    """A shell script that SIGKILLs what listens on TCP ``port`` and waits for it to go.

    Exit 0 when nothing listens on the port any more (also when nothing did).
    """
    tries = max(1, int(wait_secs / 0.1))
    return (
        "PATH=$PATH:/sbin:/usr/sbin; "
        f"fuser -k -KILL -n tcp {port} >/dev/null 2>&1; "
        f"i=0; while fuser -s -n tcp {port} 2>/dev/null; do "
        f'i=$((i+1)); [ "$i" -ge {tries} ] && exit 1; sleep 0.1; done; exit 0'
    )


class SshFence:
    """Through the system's ssh, kill what listens on the target's port on its host."""

    def __init__(self, user: str | None, ssh_port: int, timeout: float) -> None:
        self.user = user
        self.ssh_port = ssh_port
        self.timeout = timeout

    def argv(self, target: FenceTarget) -> list[str]:
        destination = f"{self.user}@{target.host}" if self.user else target.host
        return [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={max(1, int(self.timeout))}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-p",
            str(self.ssh_port),
            destination,
            remote_kill_script(target.port, self.timeout / 2),
        ]

    def fence(self, target: FenceTarget) -> bool:
        code = run_bounded(self.argv(target), self.timeout)
        log.info("event=ssh_fence target=%s exit=%d", target.address, code)
        return code == 0


class ProcessFence:
    """SIGKILL the local process that listens on the target's port; see the module docstring."""

    def __init__(self, timeout: float, pid_file: Path | None = None) -> None:
        self.timeout = timeout
        self.pid_file = pid_file

    def fence(self, target: FenceTarget) -> bool:
        if not is_local_address(target.host):
            log.warning("event=process_fence_not_local target=%s", target.address)
            return False
        listeners = listening_pids(target.port)
        if self.pid_file is not None:
            pid = _read_pid(self.pid_file)
            listeners = {pid} & listeners if pid is not None else set()
        if not listeners:
            # Nobody of ours listens there: fenced if nobody at all does.
            return not port_open(target, self.timeout)
        for pid in listeners - {os.getpid()}:
            log.warning("event=process_fence_kill target=%s pid=%d", target.address, pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + self.timeout
        while port_open(target, max(0.05, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_SECS)
        return True


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        log.warning("event=process_fence_no_pid pid_file=%s", path)
        return None


def port_open(target: FenceTarget, timeout: float) -> bool:
    """True if something accepts TCP connections at the target."""
    try:
        with socket.create_connection((target.host, target.port), timeout=min(timeout, 1.0)):
            return True
    except OSError:
        return False


def listening_pids(port: int) -> set[int]:
    """The pids (of processes this user may see) with a socket listening on TCP ``port``."""
    inodes = listening_inodes(port)
    if not inodes:
        return set()
    return {
        int(proc.name)
        for proc in Path("/proc").iterdir()
        if proc.name.isdigit() and holds_any(proc, inodes)
    }


def listening_inodes(port: int) -> set[str]:
    """The sockets listening on TCP ``port``, as ``/proc/<pid>/fd`` links name them."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{inode}]")
    return inodes


def holds_any(proc: Path, inodes: set[str]) -> bool:
    """Whether the process ``/proc/<pid>`` has one of ``inodes`` open (False if not ours)."""
    with contextlib.suppress(OSError):
        for fd in (proc / "fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) in inodes:
                    return True
    return False
