"""The process that keeps a command alive only while its leadership lease is renewed.

``stratus elect`` starts this watchdog, which starts the command in a process group of its
own. The elect process writes ``renew <deadline>`` lines (``time.monotonic()`` values, shared by
all processes of the machine) to the watchdog's stdin while it leads. The command is stopped
(SIGTERM to its group, SIGKILL after the grace period) when the deadline passes, on ``stop``,
or at once when stdin closes (the elect process died). Being a separate process, the watchdog
keeps counting while the elect process is frozen (SIGSTOP, a long pause): a paused leader's
command is stopped before ZooKeeper can expire its session and elect someone else.

Exit code: the command's own when it ends by itself, else 128 + the signal that stopped it.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import time

from stratus.process import ProcessGroup, shell_exit_code


def stop_group(group: ProcessGroup, grace: float) -> int:
    """SIGTERM the command's process group, SIGKILL it after ``grace`` seconds; the exit code."""
    return shell_exit_code(group.stop(grace))


def watch(command: list[str], deadline: float, grace: float) -> int:
    """Run ``command`` until it exits or its lease lapses; see the module docstring."""
    terminated: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: terminated.append(signum))
    group = ProcessGroup.start(command)
    stdin = sys.stdin.buffer
    pending = b""
    while True:
        if terminated:
            return stop_group(group, grace)
        if group.poll() is not None:
            return shell_exit_code(group.kill())  # what the command left in its group goes too
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            print("lease-watchdog: lease expired, stopping the command", file=sys.stderr)
            return stop_group(group, grace)
        ready, _, _ = select.select([stdin], [], [], min(remaining, 0.05))
        if not ready:
            continue
        chunk = os.read(stdin.fileno(), 4096)
        if not chunk:
            return stop_group(group, grace)  # the elect process is gone
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            verb, _, value = line.decode().partition(" ")
            if verb == "renew":
                deadline = max(deadline, float(value))
            elif verb == "stop":
                return stop_group(group, grace)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stratus-lease-watchdog")
    parser.add_argument("--until", type=float, required=True, help="initial lease deadline")
    parser.add_argument("--grace", type=float, required=True, help="SIGTERM to SIGKILL, secs")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")  # exits with status 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the elect process decides when to stop
    return watch(command, args.until, args.grace)


if __name__ == "__main__":
    sys.exit(main())
