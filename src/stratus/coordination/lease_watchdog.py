"""The process that keeps a command alive only while its leadership lease is renewed.

``stratus elect`` starts this watchdog, which starts the command in a process group of its
own. The elect process writes ``renew <seconds> <sent>`` lines to the watchdog's stdin while it
leads: the lease has ``seconds`` left (measured on whatever clock the elect process's session
was given) as of ``sent``, a ``time.monotonic()`` value (shared by all processes of the
machine) taken when ``seconds`` was measured. So the deadline, ``sent + seconds``, does not
depend on the session's clock, and a line written late (the elect process was frozen between
measuring and writing) extends nothing beyond the real lease. The command is stopped
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


def deadline_of(seconds: float, sent: float) -> float:
    """The ``time.monotonic()`` at which a lease with ``seconds`` left at ``sent`` ends."""
    return min(sent, time.monotonic()) + seconds


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
            verb, *values = line.decode().split()
            if verb == "renew":
                seconds, sent = (float(value) for value in values)
                deadline = max(deadline, deadline_of(seconds, sent))
            elif verb == "stop":
                return stop_group(group, grace)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stratus-lease-watchdog")
    parser.add_argument("--lease", type=float, required=True, help="secs left of the lease")
    parser.add_argument(
        "--sent", type=float, required=True, help="time.monotonic() when --lease was measured"
    )
    parser.add_argument("--grace", type=float, required=True, help="SIGTERM to SIGKILL, secs")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")  # exits with status 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the elect process decides when to stop
    return watch(command, deadline_of(args.lease, args.sent), args.grace)


if __name__ == "__main__":
    sys.exit(main())
