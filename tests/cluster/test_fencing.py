"""Fencing methods: the list's syntax, and each method against real processes and sockets."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stratus.errors import ConfigError
from stratus.ha.fencing import (
    Fencer,
    FenceTarget,
    FencingContext,
    MethodSpec,
    ProcessFence,
    ShellFence,
    SshFence,
    listening_pids,
    parse_methods,
    port_open,
    process_state,
    remote_kill_script,
    stopped_locally,
)
from stratus.ha.protocol import (
    HAServiceClient,
    HAState,
    RequestSource,
    ServiceNotRespondingError,
    ServiceStatus,
    ServiceTimedOutError,
)
from stratus.security.loopback import is_local_address
from tests.harness.zkfixtures import wait_until

# --------------------------------------------------------------------- the list


def test_the_methods_list_reads_like_hadoops() -> None:
    specs = parse_methods("graceful, shell(/bin/fence --to a,b arg), process,\n sshfence(op:2222)")
    assert specs == [
        MethodSpec("graceful"),
        MethodSpec("shell", "/bin/fence --to a,b arg"),
        MethodSpec("process"),
        MethodSpec("sshfence", "op:2222"),
    ]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("graceful, stonith", "'stonith'"),
        ("shell", "'shell'"),
        ("shell()", "'shell()'"),
        ("graceful(now)", "'graceful(now)'"),
        ("sshfence(op:ssh)", "'sshfence(op:ssh)'"),
        ("graceful, 12", "'12'"),
        (" , ", "empty"),
    ],
)
def test_a_bad_entry_is_a_config_error_that_names_it(text: str, named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        parse_methods(text)


def test_a_target_is_the_breadcrumbs_host_and_port() -> None:
    assert FenceTarget.parse(b"n1.example:6627") == FenceTarget("n1.example", 6627)
    assert FenceTarget.parse("[::1]:80").address == "[::1]:80"
    with pytest.raises(ValueError, match="not a host:port"):
        FenceTarget.parse(b"n1.example")


# --------------------------------------------------------------------- graceful


@dataclass
class Asker:
    """A service that refuses ``failures`` times (or times out), then goes standby."""

    failures: int
    calls: list[RequestSource] = field(default_factory=list)
    error: type[ServiceNotRespondingError] = ServiceNotRespondingError

    def transition_to_standby(self, source: RequestSource = RequestSource.ZKFC) -> ServiceStatus:
        self.calls.append(source)
        if len(self.calls) <= self.failures:
            raise self.error("refused", "a:1")
        return ServiceStatus(state=HAState.STANDBY)

    def close(self) -> None:
        pass


def context(asker: Asker, timeout: float = 2.0) -> FencingContext:
    return FencingContext(timeout=timeout, graceful_timeout=0.5, connect=lambda _a, _t: asker)


def test_graceful_retries_once() -> None:
    asker = Asker(failures=1)
    assert Fencer(parse_methods("graceful"), context(asker)).fence(FenceTarget("a", 1))
    assert asker.calls == [RequestSource.ZKFC, RequestSource.ZKFC]


def test_when_graceful_fails_twice_the_next_method_is_tried(tmp_path: Path) -> None:
    asker = Asker(failures=5)
    marker = tmp_path / "ran"
    fencer = Fencer(parse_methods(f"graceful, shell(touch {marker})"), context(asker))
    assert fencer.fence(FenceTarget("a", 1))
    assert len(asker.calls) == 2 and marker.exists()


def test_a_graceful_attempt_that_timed_out_is_not_retried(tmp_path: Path) -> None:
    """A frozen service would let the retry time out too: the next method acts at once."""
    asker = Asker(failures=1, error=ServiceTimedOutError)
    marker = tmp_path / "ran"
    fencer = Fencer(parse_methods(f"graceful, shell(touch {marker})"), context(asker))
    assert fencer.fence(FenceTarget("a", 1))
    assert len(asker.calls) == 1 and marker.exists()


def test_all_methods_failing_is_fencing_failed() -> None:
    fencer = Fencer(parse_methods("graceful, shell(false), shell(exit 3)"), context(Asker(9)))
    assert not fencer.fence(FenceTarget("a", 1))


# --------------------------------------------------------------------- shell


def test_a_shell_fence_gets_the_target_in_its_environment(tmp_path: Path) -> None:
    out = tmp_path / "env"
    command = (
        f'echo "$STRATUS_FENCE_TARGET_HOST $STRATUS_FENCE_TARGET_PORT '
        f'$STRATUS_FENCE_TARGET_ADDRESS" > {out}'
    )
    assert ShellFence(command, timeout=5).fence(FenceTarget("n1.example", 6627))
    assert out.read_text().split() == ["n1.example", "6627", "n1.example:6627"]


def test_a_shell_fence_that_hangs_is_killed_at_its_timeout_and_fails(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    fence = ShellFence(f"echo $$ > {pid_file}; sleep 300", timeout=0.5)
    assert not fence.fence(FenceTarget("a", 1))
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists()  # killed with its whole group, and reaped


# --------------------------------------------------------------------- process and ssh

LISTEN = """
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True)
time.sleep(300)
"""


@pytest.fixture
def listener() -> Iterator[tuple[subprocess.Popen[str], FenceTarget]]:
    proc = subprocess.Popen([sys.executable, "-c", LISTEN], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    yield proc, FenceTarget("127.0.0.1", port)
    proc.kill()
    proc.wait()


def test_the_process_fence_kills_the_local_listener_and_waits_for_the_port(listener) -> None:
    proc, target = listener
    assert listening_pids(target.port) == {proc.pid}
    assert ProcessFence(timeout=5).fence(target)
    assert proc.wait(5) == -9
    assert not port_open(target, 1)


def test_the_process_fence_with_a_pid_file_kills_only_the_listener_it_names(
    listener, tmp_path: Path
) -> None:
    proc, target = listener
    pid_file = tmp_path / "service.pid"
    pid_file.write_text("1\n")  # a stale pid file: pid 1 does not listen there
    assert not ProcessFence(timeout=1, pid_file=pid_file).fence(target)
    assert proc.poll() is None
    pid_file.write_text(f"{proc.pid}\n")
    assert ProcessFence(timeout=5, pid_file=pid_file).fence(target)
    assert proc.wait(5) == -9


def test_the_process_fence_refuses_a_target_on_another_host() -> None:
    assert not is_local_address("192.0.2.1")  # TEST-NET: never this machine
    assert not ProcessFence(timeout=1).fence(FenceTarget("192.0.2.1", 6627))


def test_the_process_fence_of_a_port_nobody_listens_on_succeeds() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert ProcessFence(timeout=1).fence(FenceTarget("127.0.0.1", port))


def test_the_remote_kill_script_kills_what_listens_on_the_port(listener) -> None:
    """What sshfence runs on the remote host, run here by sh."""
    proc, target = listener
    done = subprocess.run(["sh", "-c", remote_kill_script(target.port, 5)], check=False, timeout=30)
    assert done.returncode == 0
    assert proc.wait(5) == -9


def test_sshfence_to_a_host_without_ssh_fails_within_its_timeout() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    fence = SshFence("nobody", closed, timeout=3)
    assert fence.argv(FenceTarget("127.0.0.1", 1))[:4] == ["ssh", "-o", "BatchMode=yes", "-o"]
    assert not fence.fence(FenceTarget("127.0.0.1", 6627))


# --------------------------------------------------------------------- a stopped old active


def test_a_stopped_local_service_is_not_asked_and_the_process_fence_kills_it(listener) -> None:
    """SIGSTOP: its socket still accepts (the kernel's backlog), it never answers."""
    proc, target = listener
    asker = Asker(failures=0)
    assert not stopped_locally(target)
    assert Fencer(parse_methods("graceful"), context(asker)).fence(target)
    assert len(asker.calls) == 1  # running: asked

    proc.send_signal(signal.SIGSTOP)
    wait_until(lambda: process_state(proc.pid) == "T", 10, "the listener stopped")
    assert stopped_locally(target)
    with (
        HAServiceClient(target.address, timeout=0.2) as frozen,
        pytest.raises(ServiceTimedOutError),
    ):
        frozen.transition_to_standby()
    asker = Asker(failures=0)
    fencer = Fencer(parse_methods("graceful, process"), context(asker))
    assert fencer.fence(target)
    assert asker.calls == []  # not asked: it could not have answered
    assert proc.wait(5) == -9


def test_a_stopped_service_on_another_host_is_asked_as_usual() -> None:
    assert not stopped_locally(FenceTarget("192.0.2.1", 6627))
    assert process_state(2**22 + 1) is None  # above the kernel's pid_max: no such process
