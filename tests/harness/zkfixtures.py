"""Helpers behind the ZooKeeper fixtures of ``conftest.py``, importable by any test module.

Tests synchronize by polling a condition against a deadline (:func:`wait_until`), never by
sleeping a fixed time, and use short-lived kazoo clients (:func:`kazoo_client`) that are always
closed, so that no client thread outlives its test.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss
from kazoo.handlers.threading import KazooTimeoutError

from stratus.process import same_process, start_time

# Reconnect quickly after a server restart: the default backoff grows to minutes.
FAST_RETRY: dict[str, Any] = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.5}
POLL_SECS = 0.02


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``condition`` until it is truthy; fail the test naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL_SECS)


def holds_within(condition: Callable[[], object], timeout: float) -> bool:
    """Whether ``condition`` held within ``timeout`` (a check that reports, not a wait that
    fails: an oracle then says what was lost)."""
    try:
        wait_until(condition, timeout, "the condition")
    except AssertionError:
        return False
    return True


def expire_session(
    current: Callable[[], int | None],
    client_id: tuple[int, bytes],
    hosts: str,
    session_timeout: float,
    timeout: float = 30.0,
) -> None:
    """Expire a session the way ZooKeeper's own tests do: a second client takes it over and
    closes it; done once ``current()`` (the owner's session id) names another.

    The owner reconnects at once and may take the session back before the intruder closes
    it (the intruder then loses its connection, or its close ends nothing), so take it over
    again until it is gone. A session is the server's, not a chroot's: the intruder connects
    without one.
    """
    session_id, password = client_id
    servers = hosts.split("/", 1)[0]
    deadline = time.monotonic() + timeout
    while current() == session_id:
        assert time.monotonic() < deadline, f"session {session_id:x} did not expire"
        intruder = KazooClient(
            hosts=servers, client_id=(session_id, password), timeout=session_timeout
        )
        try:
            intruder.start(timeout=10)
        except (KazooTimeoutError, ConnectionLoss):
            pass  # expired already (refused), or the owner took it back: look, then again
        finally:
            intruder.stop()
            intruder.close()
        ended = time.monotonic() + session_timeout
        while current() == session_id and time.monotonic() < ended:
            time.sleep(POLL_SECS)


@contextlib.contextmanager
def kazoo_client(
    hosts: str, *, session_timeout: float = 10.0, connect_timeout: float = 15.0, **kwargs: Any
) -> Iterator[Any]:
    """A started kazoo client that reconnects fast; stopped and closed when the block ends."""
    kwargs.setdefault("connection_retry", dict(FAST_RETRY))
    client = KazooClient(hosts=hosts, timeout=session_timeout, **kwargs)
    client.start(timeout=connect_timeout)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def chroot_for(test_name: str) -> str:
    """A chroot path unique to one test: ``/t/<sanitized test name>-<8 hex digits>``."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", test_name)[:80]
    return f"/t/{name}-{uuid.uuid4().hex[:8]}"


def process_parents() -> dict[int, int]:
    """Every live process's parent, read from /proc: {pid: ppid}."""
    parents = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            parents[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def descendants(pid: int) -> dict[int, int]:
    """Every live process below ``pid``, with its start time: the pid alone may name another
    process (or a thread) minutes later, when a busy machine wraps its pids around."""
    children: dict[int, list[int]] = {}
    for child, parent in process_parents().items():
        children.setdefault(parent, []).append(child)
    found: dict[int, int] = {}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            started = start_time(child)
            if started is not None:
                found[child] = started
            todo.append(child)
    return found


def left_behind(started: dict[int, int]) -> list[str]:
    """The processes of ``started`` still alive: their pids and command lines."""
    return [f"{pid}: {command_line(pid)}" for pid, at in started.items() if same_process(pid, at)]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:300]
    except OSError:
        return "(gone)"


def zookeeper_jvm_pids(parent: int | None = None, using: Path | None = None) -> list[int]:
    """Pids of ZooKeeper JVMs whose parent is ``parent`` (default: this process).

    With ``using``, only those whose command line names that path (their data directory).
    """
    parent = os.getpid() if parent is None else parent
    needle = str(using).encode() if using is not None else b"org.apache.zookeeper"
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and b"org.apache.zookeeper" in cmdline and needle in cmdline:
            pids.append(int(proc.name))
    return pids


def jvm_command_line(pid: int) -> list[str]:
    """The command line of a running process ([] once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode() for part in raw.split(b"\0") if part]


def process_gone(pid: int) -> bool:
    """Whether ``pid`` no longer exists (or is a zombie nobody has reaped yet)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in status


def process_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (SIGSTOP): ``kill`` returns once the
    signal is sent, and each thread of a JVM stops on its own way back from the kernel."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        states = [(task / "status").read_text() for task in tasks]
    except OSError:
        return False
    return bool(states) and all("\nState:\tT" in status for status in states)


def kill_stray_zookeepers() -> list[int]:
    """SIGKILL ZooKeeper JVMs that this process started and left running; their pids."""
    strays = zookeeper_jvm_pids()
    for pid in strays:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return strays


MONITOR_MODULE = b"stratus.supervisor.worker_monitor"


def kill_left_workers(test: str) -> list[int]:
    """SIGKILL the worker monitors started during ``test`` (a node id) by this pytest
    process's daemons whose supervisor is gone (or is this process's own), with their
    workers' process groups; the monitors' pids.

    A worker outlives its supervisor until its lease ends, by design; the tests' stand-in
    workers do not watch the lease and would run on, and a real one would hold its ports
    (Spark Connect's) into the next test. A monitor's environment is its supervisor's, which
    the test's was when the supervisor started: ``PYTEST_CURRENT_TEST`` names the test, and
    ``PYTEST_XDIST_WORKER`` this process among the parallel ones."""
    mine = os.environ.get("PYTEST_XDIST_WORKER", "").encode()
    killed = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if MONITOR_MODULE not in (entry / "cmdline").read_bytes():
                continue
            environ = dict(
                item.split(b"=", 1)
                for item in (entry / "environ").read_bytes().split(b"\0")
                if b"=" in item
            )
            children = (entry / "task" / entry.name / "children").read_text().split()
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        current = environ.get(b"PYTEST_CURRENT_TEST", b"").decode(errors="replace")
        if environ.get(b"PYTEST_XDIST_WORKER", b"") != mine or not current.startswith(test):
            continue
        if parent not in (1, os.getpid()):  # its supervisor, a process of a fixture, lives on
            continue
        for child in children:  # each worker leads a process group: its JVM is in it
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(child), signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(entry.name), signal.SIGKILL)
        killed.append(int(entry.name))
    return killed
