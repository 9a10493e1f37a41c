"""``process``: SIGKILL the process of this host that listens on the target's port."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path

from stratus.ha.fencing.host import listening_pids, port_open
from stratus.ha.fencing.protocol import Fence, FenceTarget, FencingContext, Usage
from stratus.security.loopback import is_local_address

log = logging.getLogger(__name__)

POLL_SECS = 0.02


class ProcessFence:
    """SIGKILL the local process that listens on the target's port (only the pid of
    ``pid_file``, if it is that process), then wait for the port to close."""

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


class ProcessMethod:
    name = "process"
    usages = (
        Usage(
            "process",
            "the old active runs on this host: SIGKILL the process that listens on its port "
            "(found in `/proc`, among this user's processes), then wait until the port "
            "refuses connections. Refuses a target that is not an address of this host",
        ),
        Usage(
            "process(pid file)",
            "the same, but kills only the pid in that file (`process(/run/nimbus.pid)`), and "
            "only if that process is the one listening on the port (a stale pid file never "
            "kills a stranger)",
        ),
    )
    not_for_supervisors = None

    def check_argument(self, argument: str | None, entry: str, key: str) -> None:
        """Any path: a pid file that cannot be read fails the fence, not the configuration."""

    def create(self, argument: str | None, context: FencingContext) -> Fence:
        return ProcessFence(context.timeout, Path(argument) if argument else None)


METHOD = ProcessMethod()
