"""``stratus elect``: the command runs on exactly one host; kill -9 and SIGSTOP of the leader."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from stratus.coordination.coordinator import Coordinator
from stratus.coordination.elected_command import ElectedCommand, exit_description
from stratus.coordination.lease_watchdog import deadline_of
from stratus.process import NOT_REAPED_EXIT
from tests.harness.zkfixtures import wait_until

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
            "--lease",
            "1.0",
            "--sent",
            repr(started),
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
            "--lease",
            "60",
            "--sent",
            repr(time.monotonic()),
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


def test_a_lease_renewed_late_extends_nothing_beyond_when_it_was_measured() -> None:
    sent = time.monotonic() - 5.0  # the elect process froze for 5 s before writing the line
    assert deadline_of(2.0, sent) == sent + 2.0
    assert deadline_of(2.0, time.monotonic() + 100) <= time.monotonic() + 2.0


@pytest.mark.parametrize("session_now", [0.0, 1e9])
def test_the_watchdog_keeps_the_lease_whatever_clock_the_session_was_given(
    session_now: float,
) -> None:
    """The lease is measured on the session's clock, far from ``time.monotonic()`` here."""
    clock = [session_now]
    session = SimpleNamespace(clock=lambda: clock[0])
    leadership = SimpleNamespace(slot=0, epoch=1, valid_until=lambda: clock[0] + 1.5)
    runner = ElectedCommand(
        cast(Coordinator, SimpleNamespace(session=session)),
        "g",
        "m",
        [sys.executable, "-c", "import time; time.sleep(60)"],
        leaders=1,
        grace=0.2,
        say=lambda line: None,
    )
    runner._leadership = leadership  # type: ignore[assignment]
    started = time.monotonic()
    runner._renew()
    watchdog = runner._watchdog
    assert watchdog is not None
    try:
        assert watchdog.wait(timeout=20) == 128 + signal.SIGTERM, "the lease never lapsed"
        assert time.monotonic() - started >= 1.5, "the lease lapsed before it was due"
    finally:
        runner._stop_command("test over")


def test_a_command_that_could_not_be_reaped_is_not_reported_as_a_clean_exit() -> None:
    assert NOT_REAPED_EXIT != 0
    assert "exited" not in exit_description(NOT_REAPED_EXIT)
    assert exit_description(7) == "command exited with code 7"
