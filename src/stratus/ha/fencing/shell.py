"""``shell(command)``: run an operator's command, told the target; exit 0 means fenced."""

from __future__ import annotations

import logging
import os

from stratus.ha.errors import FencingConfigError
from stratus.ha.fencing.host import run_bounded
from stratus.ha.fencing.protocol import Fence, FenceTarget, FencingContext, Usage

log = logging.getLogger(__name__)


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


class ShellMethod:
    name = "shell"
    usages = (
        Usage(
            "shell(command)",
            "runs `sh -c command`; exit code 0 means fenced. Killed (its whole process group) "
            "after `ha.fencing.timeout.secs`, which counts as failed",
        ),
    )
    not_for_supervisors = None

    def check_argument(self, argument: str | None, entry: str, key: str) -> None:
        if not argument:
            raise FencingConfigError(
                f"{key}: {entry!r} needs its command: shell(/path/to/fence arg ...)"
            )

    def create(self, argument: str | None, context: FencingContext) -> Fence:
        assert argument is not None  # check_argument refused an entry without one
        return ShellFence(argument, context.timeout)


METHOD = ShellMethod()
