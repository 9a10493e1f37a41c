"""``stratus elect``: the command runs on exactly one host; kill -9 and SIGSTOP of the leader."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.zkfixtures import wait_until

pytestmark = pytest.mark.slow

SESSION = 2.0
GRACE = 0.3

# The command each host runs: it logs start and stop (on SIGTERM) to a shared file.
SERVE = """
import os, signal, sys, time
log, me = sys.argv[1], os.environ["STRATUS_ELECT_ID"]
def note(what):
    with open(log, "a") as f:
        f.write(f"{what} {me} {time.monotonic()!r}\\n")
def stop(*_):
    note("stop")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
note("start")
while True:
    time.sleep(0.05)
"""


def stratus_bin() -> str:
    return str(Path(sys.executable).parent / "stratus")


def events(log: Path) -> list[tuple[str, str]]:
    if not log.exists():
        return []
    return [tuple(line.split()[:2]) for line in log.read_text().splitlines()]  # type: ignore[misc]


def running(log: Path) -> set[str]:
    alive: set[str] = set()
    for what, who in events(log):
        (alive.add if what == "start" else alive.discard)(who)
    return alive


@pytest.fixture
def hosts(
    zk_hosts: str, tmp_path: Path
) -> Iterator[tuple[dict[str, subprocess.Popen[bytes]], Path]]:
    log = tmp_path / "serving.log"
    procs = {
        name: subprocess.Popen(
            [
                stratus_bin(),
                "elect",
                "svc",
                "--id",
                name,
                "-c",
                f"zookeeper.servers={zk_hosts}",
                "-c",
                f"zookeeper.session.timeout.secs={SESSION}",
                "-c",
                f"elect.stop.grace.secs={GRACE}",
                "--",
                sys.executable,
                "-c",
                SERVE,
                str(log),
            ],
            stderr=subprocess.DEVNULL,
        )
        for name in ("h1", "h2", "h3")
    }
    yield procs, log
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
    for proc in procs.values():
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_command_runs_on_exactly_one_host(hosts) -> None:
    _, log = hosts
    wait_until(lambda: running(log), 30, "one host serving")
    deadline = time.monotonic() + SESSION * 2
    while time.monotonic() < deadline:
        assert len(running(log)) == 1, events(log)
        time.sleep(0.05)


def test_kill_9_of_the_leader_starts_the_command_elsewhere(hosts) -> None:
    procs, log = hosts
    wait_until(lambda: running(log), 30, "one host serving")
    (leader,) = running(log)
    procs[leader].kill()

    wait_until(lambda: running(log) - {leader}, SESSION * 5, "another host serving")
    assert ("stop", leader) in events(log), "the dead leader's command was left running"
    assert len(running(log) - {leader}) == 1


def test_sigstop_of_the_leader_stops_its_command_before_another_starts(hosts) -> None:
    procs, log = hosts
    wait_until(lambda: running(log), 30, "one host serving")
    (leader,) = running(log)
    procs[leader].send_signal(signal.SIGSTOP)

    wait_until(lambda: running(log) - {leader}, SESSION * 5, "another host serving")
    order = events(log)
    stopped = order.index(("stop", leader))
    successor = next(i for i, (what, who) in enumerate(order) if what == "start" and who != leader)
    assert stopped < successor, f"two commands ran at once: {order}"
    procs[leader].send_signal(signal.SIGCONT)


def test_show_prints_leader_and_epoch(hosts, zk_hosts: str) -> None:
    _, log = hosts
    wait_until(lambda: running(log), 30, "one host serving")
    (leader,) = running(log)
    shown = subprocess.run(
        [stratus_bin(), "elect", "--show", "svc", "-c", f"zookeeper.servers={zk_hosts}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert f"slot 0 leader {leader} epoch 1" in shown
    assert "candidates: h" in shown


def test_command_exit_hands_over_and_propagates_the_code(zk_hosts: str) -> None:
    done = subprocess.run(
        [
            stratus_bin(),
            "elect",
            "once",
            "-c",
            f"zookeeper.servers={zk_hosts}",
            "--",
            sys.executable,
            "-c",
            "import sys; sys.exit(7)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 7, done.stderr


def test_lease_watchdog_stops_command_when_lease_lapses(tmp_path: Path) -> None:
    marker = tmp_path / "stopped"
    # sh sets its trap within a millisecond of starting, long before the lease lapses.
    script = f"trap 'touch {marker}; exit 0' TERM; while :; do sleep 0.05; done"
    started = time.monotonic()
    watchdog = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stratus.coordination.lease_watchdog",
            "--until",
            repr(started + 1.0),
            "--grace",
            "2",
            "--",
            "sh",
            "-c",
            script,
        ],
        stdin=subprocess.PIPE,
    )
    assert watchdog.wait(timeout=20) == 0
    assert marker.exists(), "the command was not sent SIGTERM"
    assert time.monotonic() - started >= 1.0


def test_lease_watchdog_stops_command_when_its_parent_dies(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(ready)!r}, 'w').close(); time.sleep(60)"
    )
    watchdog = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stratus.coordination.lease_watchdog",
            "--until",
            repr(time.monotonic() + 60),
            "--grace",
            "0.2",
            "--",
            sys.executable,
            "-c",
            script,
        ],
        stdin=subprocess.PIPE,
    )
    wait_until(ready.exists, 20, "command running and ignoring SIGTERM")
    assert watchdog.stdin is not None
    watchdog.stdin.close()  # what the kernel does when the elect process dies
    assert watchdog.wait(timeout=20) == 128 + signal.SIGKILL  # TERM ignored: KILL after grace
