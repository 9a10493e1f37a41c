"""The local ZooKeeper server and quorum that ``stratus zookeeper`` and the test suite run.

Every scenario runs real ZooKeeper JVMs; each test is named after the scenario it proves.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from kazoo.client import KazooState
from kazoo.exceptions import ConnectionLoss, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError

import stratus.zk.java as java_module
import stratus.zk.ports as ports_module
from stratus.cli.main import main
from stratus.zk.ensemble import ZooKeeperEnsemble
from stratus.zk.errors import (
    JavaNotFoundError,
    ZooKeeperDataDirError,
    ZooKeeperJarsNotFoundError,
    ZooKeeperPortInUseError,
    ZooKeeperStartError,
)
from stratus.zk.java import find_java, zookeeper_classpath
from stratus.zk.ports import pick_free_port
from stratus.zk.server import ZooKeeperServer, summarize_log
from tests.harness.zkfixtures import (
    jvm_command_line,
    kazoo_client,
    process_gone,
    wait_until,
    zookeeper_jvm_pids,
)

VERSION_MAIN = "org.apache.zookeeper.version.VersionInfoMain"

pytestmark = pytest.mark.slow

SERVING_LINE = re.compile(r"^zookeeper: serving at (?P<hosts>\S+)$")


def write_fake_java(path: Path, version: str, main_output: str = "", code: int = 1) -> str:
    """A script that answers ``-version`` like a JVM of ``version`` and otherwise fails."""
    script = f"""#!/bin/sh
if [ "$1" = "-version" ]; then
  echo 'openjdk version "{version}" 2019-01-15' >&2
  exit 0
fi
printf '%s\\n' '{main_output}' >&2
exit {code}
"""
    path.write_text(script)
    path.chmod(0o755)
    return str(path)


def assert_one_clear_line(message: str) -> None:
    assert "\n" not in message
    assert "\tat " not in message


# -- one server ----------------------------------------------------------------------------


def test_server_serves_a_create_get_round_trip(zk_server: ZooKeeperServer, zk_hosts: str) -> None:
    with kazoo_client(zk_hosts) as client:
        client.create("/round-trip", b"hello")
        data, _ = client.get("/round-trip")
    assert data == b"hello"
    assert zk_server.mode() == "standalone"
    assert "Mode: standalone" in zk_server.four_letter("srvr")
    assert zk_server.four_letter("ruok") == "imok"
    assert zk_server.connect_string == f"127.0.0.1:{zk_server.port}"


def test_data_survives_a_clean_stop_and_a_crash(zk_restartable: ZooKeeperServer) -> None:
    port = zk_restartable.port
    with kazoo_client(zk_restartable.connect_string) as client:
        client.create("/kept", b"v1")
    zk_restartable.stop()
    assert zk_restartable.pid is None
    zk_restartable.start()
    with kazoo_client(zk_restartable.connect_string) as client:
        assert client.get("/kept")[0] == b"v1"
        client.set("/kept", b"v2")
    zk_restartable.kill()
    assert not zk_restartable.is_running()
    zk_restartable.start()
    with kazoo_client(zk_restartable.connect_string) as client:
        assert client.get("/kept")[0] == b"v2"
    assert zk_restartable.port == port


SURVIVING_SECS = 30.0  # the session of the restart test
ATTEMPTS = 3  # connect attempts that fit in it, each waiting up to a third of it


def test_session_survives_a_restart_within_its_timeout(zk_restartable: ZooKeeperServer) -> None:
    states: list[str] = []
    # a long session: kazoo waits for the answer to a connect request the session timeout
    # divided by the number of hosts, and a server just restarted on a loaded machine answered
    # a first request late (CI), once never, which spent the whole session on one attempt: the
    # address listed ATTEMPTS times leaves room for as many
    hosts = ",".join([zk_restartable.connect_string] * ATTEMPTS)
    with kazoo_client(hosts, session_timeout=SURVIVING_SECS) as client:
        client.add_listener(states.append)
        session_id = client.client_id[0]
        client.create("/owned", b"", ephemeral=True)
        zk_restartable.stop()
        wait_until(lambda: client.state != KazooState.CONNECTED, 10, "the client to notice")
        zk_restartable.start()
        wait_until(
            lambda: client.state == KazooState.CONNECTED, SURVIVING_SECS, "the client to reconnect"
        )
        assert client.client_id[0] == session_id
        stat = client.exists("/owned")
        assert KazooState.LOST not in states  # before stop() below ends the session
    assert stat is not None
    assert stat.ephemeralOwner == session_id


def test_stop_and_kill_are_idempotent(zk_restartable: ZooKeeperServer) -> None:
    zk_restartable.stop()
    zk_restartable.stop()
    zk_restartable.kill()
    assert zk_restartable.pid is None
    assert not zk_restartable.is_running()
    assert zookeeper_jvm_pids(using=zk_restartable.data_dir) == []


def test_a_busy_port_is_one_clear_error_and_leaves_no_jvm(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        server = ZooKeeperServer(tmp_path / "zk", port)
        with pytest.raises(
            ZooKeeperPortInUseError, match=f"127.0.0.1:{port} is already in use"
        ) as caught:
            server.start()
    assert_one_clear_line(str(caught.value))
    assert server.pid is None
    assert zookeeper_jvm_pids(using=tmp_path) == []


def test_a_port_taken_after_the_check_is_reported_from_the_jvm_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports_module, "port_is_free", lambda port, reuse: True)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        server = ZooKeeperServer(tmp_path / "zk", squatter.getsockname()[1])
        with pytest.raises(ZooKeeperPortInUseError, match="address already in use") as caught:
            server.start()
    assert_one_clear_line(str(caught.value))
    assert server.pid is None
    assert zookeeper_jvm_pids(using=tmp_path) == []


def test_an_uncreatable_data_dir_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    server = ZooKeeperServer(tmp_path / "a-file" / "zk")
    with pytest.raises(
        ZooKeeperDataDirError, match="cannot use ZooKeeper data directory"
    ) as caught:
        server.start()
    assert_one_clear_line(str(caught.value))
    assert server.pid is None


def test_an_unwritable_data_dir_is_one_clear_error() -> None:
    # /proc/1 exists and nobody, root included, can create files in it.
    with pytest.raises(ZooKeeperDataDirError, match="cannot use ZooKeeper data directory /proc/1"):
        ZooKeeperServer(Path("/proc/1")).start()


def test_a_too_old_java_is_one_clear_error(tmp_path: Path) -> None:
    java = write_fake_java(tmp_path / "java", "11.0.2")
    with pytest.raises(JavaNotFoundError, match=r"version 11\.0\.2.*Java 17 or newer") as caught:
        ZooKeeperServer(tmp_path / "zk", java=java).start()
    assert_one_clear_line(str(caught.value))


def test_java_home_is_preferred_to_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bin").mkdir()
    write_fake_java(tmp_path / "bin" / "java", "1.8.0_292")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match=r"version 1\.8\.0_292"):
        find_java()


def test_a_missing_java_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(JavaNotFoundError, match="not found") as caught:
        ZooKeeperServer(tmp_path / "zk", java=str(tmp_path / "no-such-java")).start()
    assert_one_clear_line(str(caught.value))


def test_a_jvm_that_exits_before_serving_reports_its_last_log_lines(tmp_path: Path) -> None:
    crash = (
        "Exception in thread main java.lang.IllegalStateException: boom\n\tat Zk.main(Zk.java:1)"
    )
    java = write_fake_java(tmp_path / "java", "17.0.9", main_output=crash, code=3)
    server = ZooKeeperServer(tmp_path / "zk", java=java)
    with pytest.raises(ZooKeeperStartError, match="exited with code 3 before serving") as caught:
        server.start()
    assert "IllegalStateException: boom" in str(caught.value)
    assert_one_clear_line(str(caught.value))
    assert server.pid is None


def test_a_jvm_that_never_serves_is_killed_after_the_timeout(tmp_path: Path) -> None:
    script = tmp_path / "java"
    script.write_text(
        '#!/bin/sh\n[ "$1" = "-version" ] && echo \'openjdk version "17.0.9"\' >&2 && exit 0\n'
        "exec sleep 60\n"
    )
    script.chmod(0o755)
    server = ZooKeeperServer(tmp_path / "zk", java=str(script))
    with pytest.raises(ZooKeeperStartError, match=r"did not serve requests within 0\.5 s"):
        server.start(timeout=0.5)
    assert server.pid is None


def test_missing_pyspark_jars_are_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    java_module._classpath.cache_clear()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    try:
        with pytest.raises(ZooKeeperJarsNotFoundError, match="install pyspark"):
            zookeeper_classpath()
        (tmp_path / "zookeeper-3.9.5.jar").write_bytes(b"")
        monkeypatch.setattr(java_module, "_pyspark_jars_dir", lambda: tmp_path)
        with pytest.raises(ZooKeeperJarsNotFoundError, match="lacks the ZooKeeper jars") as caught:
            ZooKeeperServer(tmp_path / "zk").start()
        assert "zookeeper-jute" in str(caught.value)
        assert_one_clear_line(str(caught.value))
    finally:
        java_module._classpath.cache_clear()


def test_log_summary_keeps_records_and_headlines_but_no_stack_frames() -> None:
    log = (
        "2026-01-01T00:00:00,000 WARN  Foo: first\n"
        "2026-01-01T00:00:01,000 ERROR ZooKeeperServerMain: Unable to start\n"
        "java.net.BindException: Address already in use\n"
        "\tat sun.nio.ch.Net.bind(Net.java:555)\n"
        "\t... 4 more\n"
    )
    assert summarize_log(log, lines=2) == (
        "ERROR ZooKeeperServerMain: Unable to start | "
        "java.net.BindException: Address already in use"
    )
    assert summarize_log("") == "the log is empty"


def test_free_ports_are_never_handed_out_twice_in_one_process(tmp_path: Path) -> None:
    ports = [pick_free_port() for _ in range(20)]
    servers = [ZooKeeperServer(tmp_path / str(n)) for n in range(10)]
    ensemble = ZooKeeperEnsemble(tmp_path / "ensemble", size=3)
    peers = ensemble.servers[0].quorum.peers if ensemble.servers[0].quorum else ()
    ensemble_ports = [
        p for peer in peers for p in (peer.client_port, peer.peer_port, peer.election_port)
    ]
    every_port = ports + [server.port for server in servers] + ensemble_ports
    assert len(every_port) == len(set(every_port)) == 39


def test_the_classpath_is_the_pyspark_zookeeper_jars() -> None:
    names = [jar.name for jar in zookeeper_classpath()]
    assert any(re.fullmatch(r"zookeeper-3\.9\.\d+\.jar", name) for name in names)
    assert all(jar.is_file() for jar in zookeeper_classpath())
    assert not any(name.startswith("spark-") for name in names)


def test_zookeeper_java_runs_a_zookeeper_class_with_the_jars_as_its_classpath() -> None:
    """The verb the ZooKeeper unit runs: java's arguments, the jars put in, the JVM in its
    place (its output, its exit code)."""
    done = subprocess.run(
        [sys.executable, "-m", "stratus", "zookeeper-java", "-Dx=1", VERSION_MAIN],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Apache ZooKeeper, version 3.9.")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["-Xmx1g"], "no main class among -Xmx1g"),
        (["-cp", "/elsewhere/*", VERSION_MAIN], "-cp among the JVM options"),
        (["--class-path=/elsewhere", VERSION_MAIN], "--class-path=/elsewhere among the JVM"),
    ],
)
def test_zookeeper_java_refuses_no_main_class_and_a_classpath_of_its_own(
    args: list[str], named: str
) -> None:
    result = CliRunner().invoke(main, ["zookeeper-java", *args])
    assert result.exit_code != 0
    assert named in result.output


# -- a quorum -------------------------------------------------------------------------------


def test_every_member_of_the_ensemble_serves(zk_ensemble: ZooKeeperEnsemble) -> None:
    assert sorted(str(server.mode()) for server in zk_ensemble.servers) == [
        "follower",
        "follower",
        "leader",
    ]
    with kazoo_client(zk_ensemble.connect_string) as client:
        client.ensure_path("/every-member")
        client.set("/every-member", b"seen")
    for server in zk_ensemble.servers:
        with kazoo_client(server.connect_string) as client:
            client.sync("/every-member")
            assert client.get("/every-member")[0] == b"seen"


def test_the_ensemble_serves_writes_with_its_leader_down(zk_ensemble: ZooKeeperEnsemble) -> None:
    with kazoo_client(zk_ensemble.connect_string) as client:
        leader = zk_ensemble.leader()
        assert leader is not None
        leader.stop()
        client.retry(client.create, "/leader-down", b"written")
        assert client.get("/leader-down")[0] == b"written"
    assert sorted(str(server.mode()) for server in zk_ensemble.servers if server.is_running()) == [
        "follower",
        "leader",
    ]


def test_the_ensemble_refuses_writes_without_quorum_and_serves_again_once_a_member_returns(
    zk_ensemble: ZooKeeperEnsemble,
) -> None:
    leader = zk_ensemble.leader()
    assert leader is not None
    followers = [server for server in zk_ensemble.servers if server is not leader]
    with kazoo_client(zk_ensemble.connect_string, session_timeout=20.0) as client:
        leader.stop()
        followers[0].kill()
        wait_until(lambda: followers[1].mode() is None, 15, "the last member to stop serving")
        with pytest.raises((ConnectionLoss, SessionExpiredError, KazooTimeoutError)):
            client.create_async("/no-quorum", b"").get(timeout=1.0)
        followers[0].start()
        client.retry(client.create, "/quorum-back", b"ok")
        assert client.get("/quorum-back")[0] == b"ok"


# -- the `stratus zookeeper` command -----------------------------------------------------------


def stratus_executable() -> str:
    """The ``stratus`` console script of this virtual environment."""
    beside_python = Path(sys.executable).parent / "stratus"
    found = str(beside_python) if beside_python.exists() else shutil.which("stratus")
    assert found, "the stratus console script is not installed (pip install -e .)"
    return found


def start_stratus_zookeeper(
    *args: str, home: Path | None = None
) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    """Run ``stratus zookeeper ARGS`` (with ``HOME=home`` if given); its stdout lines arrive
    on the returned queue."""
    env = {key: value for key, value in os.environ.items() if key != "STRATUS_CONF"}
    if home is not None:
        env["HOME"] = str(home)
    process = subprocess.Popen(
        [stratus_executable(), "zookeeper", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout

    def pump() -> None:
        for line in stdout:
            lines.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return process, lines


def serving_hosts(process: subprocess.Popen[str], lines: queue.Queue[str]) -> str:
    """The connect string of the command's one serving line (fails if it dies first)."""
    try:
        line = lines.get(timeout=60)
    except queue.Empty:
        process.kill()
        raise AssertionError(f"no serving line; stderr: {process.communicate()[1]}") from None
    match = SERVING_LINE.match(line)
    assert match, f"unexpected first line {line!r}"
    return match["hosts"]


@pytest.mark.parametrize(
    ("args", "members", "stop_signal"),
    [
        (("--port", "0", "--tick-time", "100", "--temporary"), 1, signal.SIGTERM),
        (("--port", "0", "--ensemble", "3", "--temporary"), 3, signal.SIGTERM),
        (("-c", "zookeeper.server.port=0", "--temporary"), 1, signal.SIGINT),
    ],
    ids=["standalone", "ensemble-3", "standalone-sigint"],
)
def test_stratus_zookeeper_serves_until_signalled_then_exits_0_leaving_no_jvm(
    args: tuple[str, ...], members: int, stop_signal: signal.Signals
) -> None:
    process, lines = start_stratus_zookeeper(*args)
    try:
        hosts = serving_hosts(process, lines)
        assert len(hosts.split(",")) == members
        with kazoo_client(hosts) as client:
            client.create("/from-the-cli-test", b"x")
            assert client.exists("/from-the-cli-test")
        jvms = zookeeper_jvm_pids(process.pid)
        assert len(jvms) == members
        data_dirs = [_data_dir_of(pid) for pid in jvms]
        process.send_signal(stop_signal)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert lines.empty(), "the command printed more than its one line"
    wait_until(lambda: all(process_gone(pid) for pid in jvms), 10, "the JVMs to be gone")
    assert not any(path.exists() for path in data_dirs), "the temporary data dir was kept"


def test_stratus_zookeeper_on_a_busy_port_fails_with_one_line() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        process, lines = start_stratus_zookeeper("--port", str(port), "--temporary")
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert lines.empty()
    assert stderr.strip().count("\n") == 0
    assert f"127.0.0.1:{port} is already in use" in stderr


def _data_dir_of(jvm_pid: int) -> Path:
    """The data directory of a running ZooKeeper JVM (where its zoo.cfg is)."""
    return Path(jvm_command_line(jvm_pid)[-1]).parent


def test_stratus_zookeeper_ensemble_on_another_address_is_refused_pointing_to_one_member_per_host(
    tmp_path: Path,
) -> None:
    args = ["zookeeper", "--ensemble", "3", "--host", "0.0.0.0", "--data-dir", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "--ensemble runs on loopback only" in result.output
    assert "one member per host" in result.output
    assert not (tmp_path / "server-1").exists()  # nothing started
