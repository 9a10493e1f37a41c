"""A client that finds ZooKeeper's history behind what it has seen fails clearly, in bounded time.

A server wiped (or restored from an old backup) has a last zxid older than the client's:
ZooKeeper refuses the session and kazoo alone would retry forever ("Connection dropped").
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stratus.local.processes import NimbusProcess
from stratus.zk.errors import ZooKeeperHistoryBehindError
from stratus.zk.ports import pick_free_port
from stratus.zk.server import ZooKeeperServer
from stratus.zk.session import SessionState, ZkSession, ZkSettings
from stratus.zk.zxid_check import history_behind_error
from tests.harness.zkfixtures import kazoo_client, wait_until

SESSION_SECS = 1.0
FAILS_WITHIN_SECS = 30.0  # a generous bound; the session gives up after about one timeout


def wipe_and_restart(server: ZooKeeperServer) -> None:
    """What an operator does who deletes the data directory: the same server, no history."""
    server.stop()
    shutil.rmtree(server.data_dir / "version-2")
    server.start()


def test_history_behind_only_when_every_server_that_answers_is_behind(
    zk_server: ZooKeeperServer, zk_hosts: str
) -> None:
    with kazoo_client(zk_hosts) as client:
        client.create("/written", b"x")
        seen = client.last_zxid
    assert seen > 0
    hosts = zk_server.connect_string + "/some/chroot"
    assert history_behind_error(hosts, seen) is None  # the server has all we saw
    assert history_behind_error(hosts, 0) is None  # a client that has seen nothing
    error = history_behind_error(hosts, 2**62)
    assert isinstance(error, ZooKeeperHistoryBehindError)
    assert zk_server.connect_string in str(error)
    down = f"127.0.0.1:{pick_free_port()}"
    assert history_behind_error(down, 2**62) is None  # down is not behind
    assert history_behind_error(f"{down},{zk_server.connect_string}", 2**62) is not None


def test_a_session_on_a_wiped_server_fails_with_the_history_behind_error(
    zk_restartable: ZooKeeperServer,
) -> None:
    settings = ZkSettings(zk_restartable.connect_string, session_timeout=SESSION_SECS)
    with ZkSession(settings) as session:
        for n in range(5):
            session.client.create(f"/stratus/n{n}", b"x")
        seen = session.client.last_zxid
        wipe_and_restart(zk_restartable)
        failure = session.wait_failed(FAILS_WITHIN_SECS)
        assert isinstance(failure, ZooKeeperHistoryBehindError)
        assert f"zxid 0x{seen:x}" in str(failure)
        assert "wiped or restored from an older backup" in str(failure)
        assert "Restart every stratus daemon" in str(failure)
        assert session.state is SessionState.CLOSED
        with pytest.raises(ZooKeeperHistoryBehindError):
            session.call("read the root", session.client.get, "/stratus")


def test_a_session_survives_a_restart_on_the_same_data(zk_restartable: ZooKeeperServer) -> None:
    """The check does not mistake an ordinary restart for a lost history."""
    settings = ZkSettings(zk_restartable.connect_string, session_timeout=SESSION_SECS)
    with ZkSession(settings) as session:
        session.client.create("/stratus/kept", b"x")
        zk_restartable.stop()
        zk_restartable.start()
        value = session.call("read after the restart", session.client.get, "/stratus/kept")[0]
        assert value == b"x"
        assert session.failure is None


@pytest.mark.slow
def test_a_nimbus_whose_zookeeper_was_wiped_exits_non_zero_saying_why(
    zk_restartable: ZooKeeperServer, tmp_path: Path
) -> None:
    options = [
        "-c", f"zookeeper.servers={zk_restartable.connect_string}",
        "-c", f"zookeeper.session.timeout.secs={SESSION_SECS}",
    ]  # fmt: skip
    nimbus = NimbusProcess(options, port=pick_free_port(), log_dir=tmp_path)
    nimbus.start()
    try:
        nimbus.wait_ready()
        wait_until(lambda: "serving http://" in nimbus.log_tail(), 30, "the nimbus to serve")
        wipe_and_restart(zk_restartable)
        code = nimbus.wait(FAILS_WITHIN_SECS + 15)
        assert code == 1, nimbus.log_tail()
        last_line = nimbus.log_tail(lines=1)
        assert last_line.startswith("Error: ZooKeeper's history is behind"), nimbus.log_tail()
    finally:
        nimbus.kill()
