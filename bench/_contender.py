"""One election contender process for ``bench/election_failover.py`` (not a benchmark itself).

``python bench/_contender.py {stratus|kazoo} HOSTS ELECTION DATA_PATH MEMBER SESSION_TIMEOUT``
joins one election, and when elected immediately writes ``"<member> <time.monotonic()>"`` to
``DATA_PATH``: a fenced ``leadership.transaction().set_data(...).commit()`` for stratus, a
plain ``client.set(...)`` (set_data) for kazoo's ``Election`` recipe (which has no fencing). It
reports on stdout, one line per event, times being ``time.monotonic()`` (system-wide on Linux,
so the bench can compare them with its own clock)::

    ready <member>                    queued in the election (visible to ZooKeeper)
    elected <member> <t>              the election callback started
    wrote <member> <t>                the first write after being elected completed
    error <member> <message>          the write failed

SIGTERM is a clean hand-over: stratus calls ``coordinator.close()``, kazoo ``client.stop()``,
each of which deletes the contender's nodes at once; then the process exits. SIGKILL (a crash)
leaves the nodes to ZooKeeper's session expiry. The process dies with the bench (parent-death
signal), so that no contender outlives it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

READY_POLL_SECS = 0.01
_PR_SET_PDEATHSIG = 1

_print_lock = threading.Lock()


def say(*words: object) -> None:
    """Write one event line to stdout, whole, from any thread."""
    with _print_lock:
        sys.stdout.write(" ".join(str(word) for word in words) + "\n")
        sys.stdout.flush()


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the bench that started it dies."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def on_sigterm(close: Callable[[], None]) -> None:
    """Install the clean hand-over: ``close()`` then exit, on SIGTERM."""

    def handler(_signum: int, _frame: Any) -> None:
        close()
        sys.stdout.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, handler)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"contender: {what} did not happen within {timeout:g}s")
        time.sleep(READY_POLL_SECS)


def run_stratus(
    hosts: str, election: str, data_path: str, member: str, session_timeout: float
) -> None:
    from stratus.coordination import CoordinationError, Coordinator, Leadership  # noqa: PLC0415

    coordinator = Coordinator.standalone(hosts, session_timeout=session_timeout).start()
    on_sigterm(coordinator.close)

    def elected(leadership: Leadership) -> None:
        say("elected", member, repr(time.monotonic()))
        payload = f"{member} {time.monotonic()!r}".encode()
        try:
            leadership.transaction().set_data(data_path, payload).commit()
        except CoordinationError as exc:
            say("error", member, f"{type(exc).__name__}: {exc}")
            return
        say("wrote", member, repr(time.monotonic()))

    coordinator.nominate_async(election, member, elected)
    wait_until(lambda: member in coordinator.get_candidates(election), "queuing")
    say("ready", member)


def run_kazoo(
    hosts: str, election_path: str, data_path: str, member: str, session_timeout: float
) -> None:
    from kazoo.client import KazooClient  # noqa: PLC0415
    from kazoo.exceptions import KazooException  # noqa: PLC0415
    from kazoo.recipe.election import Election  # noqa: PLC0415

    client = KazooClient(hosts=hosts, timeout=session_timeout)
    client.start(timeout=15)
    on_sigterm(client.stop)
    election = Election(client, election_path, member)
    hold = threading.Event()

    def lead() -> None:
        say("elected", member, repr(time.monotonic()))
        payload = f"{member} {time.monotonic()!r}".encode()
        try:
            client.set(data_path, payload)
        except KazooException as exc:
            say("error", member, f"{type(exc).__name__}: {exc}")
        else:
            say("wrote", member, repr(time.monotonic()))
        hold.wait()  # leadership lasts as long as this function runs

    threading.Thread(target=election.run, args=(lead,), name="election", daemon=True).start()
    wait_until(lambda: member in election.contenders(), "queuing")
    say("ready", member)


def main(argv: list[str]) -> None:
    if len(argv) != 6 or argv[0] not in ("stratus", "kazoo"):
        raise SystemExit(__doc__)
    system, hosts, election, data_path, member, session_timeout = argv
    die_with_parent()
    run = run_stratus if system == "stratus" else run_kazoo
    run(hosts, election, data_path, member, float(session_timeout))
    while True:  # the work happens on the clients' threads; wait here for a signal
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1:])
