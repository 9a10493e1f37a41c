"""``sshfence``: through the system's ssh, kill what listens on the target's port on its host."""

from __future__ import annotations

import logging

from stratus.ha.errors import FencingConfigError
from stratus.ha.fencing.host import run_bounded
from stratus.ha.fencing.protocol import Fence, FenceTarget, FencingContext, Usage

log = logging.getLogger(__name__)

SSH_PORT = 22


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


def ssh_user_port(argument: str | None, entry: str, key: str) -> tuple[str | None, int]:
    """``user:port`` (either may be left out) as the ssh user and port."""
    if not argument:
        return None, SSH_PORT
    user, _, port = argument.partition(":")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise FencingConfigError(f"{key}: {entry!r}: the ssh port {port!r} is not a port number")
    return user or None, int(port) if port else SSH_PORT


class SshMethod:
    name = "sshfence"
    usages = (
        Usage(
            "sshfence",
            "the system's `ssh` with `BatchMode=yes`, `ConnectTimeout` and strict host key "
            "checking, to the old active's host, where `fuser` kills what listens on the "
            "port and the script waits until nothing does. Bounded by "
            "`ha.fencing.timeout.secs`",
        ),
        Usage(
            "sshfence(user:port)",
            "the same, as that user and to that ssh port; either may be left out "
            "(`sshfence(op)`, `sshfence(:2222)`)",
        ),
    )
    not_for_supervisors = None

    def check_argument(self, argument: str | None, entry: str, key: str) -> None:
        ssh_user_port(argument, entry, key)

    def create(self, argument: str | None, context: FencingContext) -> Fence:
        user, port = ssh_user_port(argument, f"sshfence({argument})", "ha.fencing.methods")
        return SshFence(user, port, context.timeout)


METHOD = SshMethod()
