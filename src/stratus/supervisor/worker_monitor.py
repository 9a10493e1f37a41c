"""``python -m stratus.supervisor.worker_monitor DIR``: the process that holds one worker.

Guarantees: a worker is the child of its monitor, never of its supervisor, so that the
supervisor may stop, crash or be upgraded while its workers run on (a supervisor started
again adopts them: ``adoption``). The supervisor starts one monitor per worker, in a session
of its own, after writing what it needs to ``DIR/monitor.json`` (0600: the worker's
environment may hold secrets; the monitor deletes it once read). The monitor:

1. starts the worker in a process group of its own (through the user switch's command for a
   worker of another user, the descriptors it is given passed on), its stdin a pipe that only
   the monitor holds: a monitor that dies, even by SIGKILL, means a worker that stops;
2. writes ``DIR/process.json`` once the worker runs: both pids with their start times, the
   boot, and who the worker is (supervisor, cluster, pipeline, epoch, generation, token,
   digest), what a supervisor proves before it adopts or signals anything;
3. pumps the worker's stdout and stderr into its rotating log (``worker_log``);
4. with ``lifeline`` (``supervisor.worker.adopt: false``), stops the worker at EOF on its own
   stdin, a pipe its supervisor holds: the worker then dies with its supervisor, as before;
   with ``warm`` (a warm worker: ``warm_pool``), waits on its stdin for the hand-over, one
   JSON line (``Handover``): it switches the log to the pipeline's run log, *then* gives the
   warm worker the spec's path, and from then on records the worker in the pipeline's
   directory; EOF before a hand-over (the supervisor is gone: nothing to adopt) SIGKILLs the
   warm worker's group; after it, its stdin matters only as a lifeline;
5. on SIGTERM, SIGINT or SIGHUP, sends SIGTERM to the worker (a stop, not its own death);
6. once the worker exited: SIGKILL of what is left of its process group (through the switch
   for another user), the log's last lines written, ``DIR/exit.json`` written atomically
   (the exit code, negative for a signal, and the wall time), and it exits.

Its imports are few (no pydantic, no kazoo): it runs once per worker for the worker's
whole life::

    write_order(paths.directory, MonitorOrder(argv=[...], popen={...}, ...))
    subprocess.Popen([sys.executable, "-m", MONITOR_MODULE, str(paths.directory)],
                     start_new_session=True, stdin=subprocess.DEVNULL, ...)
    read_exit(paths.directory)        # None while the worker runs, then its ExitRecord
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from stratus.files import write_atomically
from stratus.process import Lifeline, ProcessGroup, boot_id, start_time, watch_for_eof
from stratus.supervisor.worker_log import LogPump, RunLog, WorkerLogSettings

MONITOR_MODULE = "stratus.supervisor.worker_monitor"
ORDER_FILE = "monitor.json"
PROCESS_FILE = "process.json"
EXIT_FILE = "exit.json"
MONITOR_LOG = "monitor.log"  # the monitor's own lines (a worker that cannot be started)
LOG_DRAIN_SECS = 2.0  # after an exit, how long its last lines may take to reach the log
START_FAILED_EXIT = 127  # the exit recorded for a worker that could not be started
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True)
class MonitorOrder:
    """What the supervisor tells a monitor (``monitor.json``)."""

    argv: list[str]
    popen: dict[str, Any]  # cwd, env; user, group, extra_groups, umask for a direct switch
    log_path: str
    log_max_bytes: int
    log_backups: int
    identity: dict[str, Any]  # who the worker is: copied into process.json
    lifeline: bool = False  # EOF on the monitor's stdin stops the worker
    warm: bool = False  # a warm worker: the hand-over comes on the monitor's stdin
    group_kill: list[str] | None = None  # argv + [pid, "SIGKILL", "--all"]: via the switch
    pass_fds: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class ExitRecord:
    """How a worker ended (``exit.json``)."""

    code: int  # negative: the signal that ended it
    ended: float  # wall time
    error: str | None = None  # the worker could not be started


@dataclass(frozen=True)
class Handover:
    """The line a warm worker's monitor reads on its stdin: the pipeline it is handed."""

    spec: str  # the worker's copy of the spec: its path goes to the warm worker's stdin
    directory: str  # the pipeline's worker directory: process.json and exit.json go there
    log_path: str  # the pipeline's run log, started by the supervisor
    identity: dict[str, Any]

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode() + b"\n"


def write_order(directory: Path, order: MonitorOrder) -> None:
    write_atomically(directory / ORDER_FILE, json.dumps(asdict(order)).encode())


def read_exit(directory: Path) -> ExitRecord | None:
    """How the worker of ``directory`` ended; None while it runs (or the file is unreadable)."""
    try:
        data = json.loads((directory / EXIT_FILE).read_bytes())
        return ExitRecord(int(data["code"]), float(data["ended"]), data.get("error"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clear(directory: Path) -> None:
    """Before a new start: no record of the last run's processes or exit may stay."""
    for name in (PROCESS_FILE, EXIT_FILE, ORDER_FILE):
        (directory / name).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {MONITOR_MODULE} WORKER_DIR", file=sys.stderr)
        return 2
    directory = Path(args[0])
    try:
        raw = json.loads((directory / ORDER_FILE).read_bytes())
        order = MonitorOrder(**raw)
    except (OSError, ValueError, TypeError) as exc:
        print(f"error: cannot read {directory / ORDER_FILE}: {exc}", file=sys.stderr)
        return 2
    (directory / ORDER_FILE).unlink(missing_ok=True)  # it holds the worker's environment
    return run(directory, order)


def run(directory: Path, order: MonitorOrder) -> int:
    """Start the worker, watch it to its end, record the end; see the module docstring."""
    log = RunLog(Path(order.log_path), WorkerLogSettings(order.log_max_bytes, order.log_backups))
    read_end, write_end = os.pipe()
    try:
        group = ProcessGroup.start(
            order.argv,
            lifeline=Lifeline.PIPE,
            stdout=write_end,
            stderr=subprocess.STDOUT,
            pass_fds=tuple(order.pass_fds),
            **order.popen,
        )
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        os.close(read_end)
        error = f"the worker could not be started: {exc}"
        print(f"error: {error}", file=sys.stderr)
        with contextlib.suppress(OSError):
            log.write(f"{error}\n".encode())
        _write_exit(directory, START_FAILED_EXIT, error)
        return 1
    finally:
        os.close(write_end)  # the worker's group holds the only write ends now
        for fd in order.pass_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
    pump = LogPump(read_end, log)
    for signum in FORWARDED:
        signal.signal(signum, lambda _signum, _frame: group.signal(signal.SIGTERM))
    place = _Place(directory)
    if order.warm:
        threading.Thread(
            target=_await_handover,
            args=(group, pump, order, place),
            name="handover",
            daemon=True,
        ).start()
    elif order.lifeline:
        watch_for_eof(0, group.close_lifeline, name="supervisor-lifeline")
    _write_process(directory, order.identity, group.pid)
    code = group.wait()
    _kill_rest(group, order.group_kill)
    group.close_lifeline()
    pump.join(LOG_DRAIN_SECS)
    with place.lock:  # a hand-over is whole or did not happen
        _write_exit(place.directory, code)
    return 0


class _Place:
    """Where the worker is recorded: its own directory, the pipeline's after a hand-over."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.lock = threading.Lock()


def _await_handover(group: ProcessGroup, pump: LogPump, order: MonitorOrder, place: _Place) -> None:
    """A warm worker's monitor: read the hand-over on stdin and pass it on (see the module
    docstring); EOF first kills the warm worker."""
    line = _read_line(0)
    stdin = group.process.stdin
    if line is None or stdin is None:
        group.signal_group(signal.SIGKILL)  # nothing handed over, nothing to keep
        return
    try:
        handover = Handover(**json.loads(line))
    except (ValueError, TypeError) as exc:
        print(f"error: an unreadable hand-over ({exc}): the warm worker stops", file=sys.stderr)
        group.signal_group(signal.SIGKILL)
        return
    settings = WorkerLogSettings(order.log_max_bytes, order.log_backups)
    with place.lock:
        pump.switch_to(RunLog(Path(handover.log_path), settings))  # before the spec
        try:
            stdin.write(f"{handover.spec}\n".encode())
            stdin.flush()
        except OSError:
            return  # it died meanwhile: its exit is recorded in the pipeline's directory
        finally:
            place.directory = Path(handover.directory)
        _write_process(place.directory, handover.identity, group.pid)
    if order.lifeline:
        _read_line(0, until_eof=True)
        group.close_lifeline()


def _read_line(fd: int, *, until_eof: bool = False) -> bytes | None:
    """The first line read from ``fd`` (None: EOF first); with ``until_eof``, read on to EOF."""
    buffer = b""
    with contextlib.suppress(OSError):
        while data := os.read(fd, 4096):
            buffer += data
            if b"\n" in buffer and not until_eof:
                return buffer.split(b"\n", 1)[0]
    return None


def _write_process(directory: Path, identity: dict[str, Any], worker: int) -> None:
    record = {
        **identity,
        "monitor": {"pid": os.getpid(), "start": start_time(os.getpid())},
        "worker": {"pid": worker, "start": start_time(worker, zombie=True)},
        "boot_id": boot_id(),
    }
    write_atomically(directory / PROCESS_FILE, json.dumps(record).encode())


def _write_exit(directory: Path, code: int, error: str | None = None) -> None:
    record = ExitRecord(code, time.time(), error)
    write_atomically(directory / EXIT_FILE, json.dumps(asdict(record)).encode())


def _kill_rest(group: ProcessGroup, group_kill: list[str] | None) -> None:
    """SIGKILL what is left of the worker's process group (the child was reaped)."""
    if group_kill is None:
        group.signal_group(signal.SIGKILL)
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [*group_kill, str(group.pid), "SIGKILL", "--all"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10.0,
            check=False,
        )


if __name__ == "__main__":
    sys.exit(main())
