"""What the fencing methods read and run on this host: ``/proc``, ports, bounded commands."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path

from stratus.ha.fencing.protocol import FenceTarget
from stratus.process import ProcessGroup
from stratus.security.loopback import is_local_address

log = logging.getLogger(__name__)


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
