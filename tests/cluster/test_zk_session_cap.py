"""The session-timeout cap of the local ZooKeeper server (``max_session_timeout_ms``), and the
session timeout that ``ZkSession`` learns the server granted.

ZooKeeper grants a client the session timeout it asks for, clamped to the server's
``[minSessionTimeout, maxSessionTimeout]``. The cap is how a client whose timeout is hard-coded
(Spark's standalone master asks for 60 s) gets the same session timeout as stratus in
``bench/failover.py``. Each scenario runs a real ZooKeeper JVM of its own.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from kazoo.protocol.connection import ConnectionHandler

from stratus.zk.ensemble import ZooKeeperEnsemble
from stratus.zk.server import MAX_SESSION_TIMEOUT_MS, ZooKeeperServer
from stratus.zk.session import ZkSession, ZkSettings
from tests.harness.zkfixtures import kazoo_client

TICK_MS = 100
CAP_MS = 3_000
SPARK_REQUEST_SECS = 60.0  # what Spark's SparkCuratorUtil asks for
_SESSION_TIMEOUT = re.compile(r"\bto=(?P<ms>\d+)\b")


def granted_timeouts_ms(server: ZooKeeperServer) -> list[int]:
    """The negotiated session timeout of every open client connection, as the server says."""
    return [int(match["ms"]) for match in _SESSION_TIMEOUT.finditer(server.four_letter("cons"))]


@pytest.mark.slow  # runs a ZooKeeper server
def test_a_client_asking_for_more_than_the_cap_is_granted_the_cap(tmp_path: Path) -> None:
    with ZooKeeperServer(
        tmp_path / "zk", tick_time_ms=TICK_MS, max_session_timeout_ms=CAP_MS
    ) as server:
        assert f"maxSessionTimeout={CAP_MS}\n" in (server.data_dir / "zoo.cfg").read_text()
        with kazoo_client(server.connect_string, session_timeout=SPARK_REQUEST_SECS):
            assert granted_timeouts_ms(server) == [CAP_MS]


@pytest.mark.slow  # runs a ZooKeeper server
def test_a_client_asking_for_less_than_the_cap_is_granted_its_request(tmp_path: Path) -> None:
    with (
        ZooKeeperServer(
            tmp_path / "zk", tick_time_ms=TICK_MS, max_session_timeout_ms=CAP_MS
        ) as server,
        ZkSession(ZkSettings(server.connect_string, session_timeout=2.0)) as session,
    ):
        assert session.granted_session_timeout == pytest.approx(2.0)
        assert granted_timeouts_ms(server) == [2_000]


@pytest.mark.slow  # runs a ZooKeeper server
def test_the_session_learns_the_capped_timeout(tmp_path: Path) -> None:
    """Fails if a kazoo upgrade changes the internals that ``ZkSession`` reads the grant from."""
    with ZooKeeperServer(
        tmp_path / "zk", tick_time_ms=TICK_MS, max_session_timeout_ms=CAP_MS
    ) as server:
        settings = ZkSettings(server.connect_string, session_timeout=SPARK_REQUEST_SECS)
        with ZkSession(settings) as session:
            assert session.granted_session_timeout == pytest.approx(CAP_MS / 1000)


def test_kazoo_still_has_the_connect_step_the_session_wraps() -> None:
    """``ZkSession`` wraps kazoo's private ``ConnectionHandler._connect(host, hostip, port)``,
    which returns (read timeout, connect timeout) in ms; a kazoo that renamed it would leave
    the granted timeout unknown, and the lease would trust the requested one."""
    assert list(inspect.signature(ConnectionHandler._connect).parameters) == [
        "self",
        "host",
        "hostip",
        "port",
    ]
    source = inspect.getsource(ConnectionHandler._connect)
    assert "read_timeout = negotiated_session_timeout * 2.0 / 3.0" in source
    assert "return read_timeout, connect_timeout" in source


@pytest.mark.slow  # runs a ZooKeeper server
def test_without_a_cap_the_server_grants_up_to_the_default_maximum(tmp_path: Path) -> None:
    with ZooKeeperServer(tmp_path / "zk", tick_time_ms=TICK_MS) as server:
        assert server.max_session_timeout_ms == MAX_SESSION_TIMEOUT_MS
        with kazoo_client(server.connect_string, session_timeout=SPARK_REQUEST_SECS):
            assert granted_timeouts_ms(server) == [int(SPARK_REQUEST_SECS * 1000)]


def test_a_cap_below_two_ticks_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="two ticks"):
        ZooKeeperServer(tmp_path / "zk", tick_time_ms=TICK_MS, max_session_timeout_ms=150)
    assert not (tmp_path / "zk").exists()


def test_every_member_of_an_ensemble_gets_the_cap(tmp_path: Path) -> None:
    ensemble = ZooKeeperEnsemble(tmp_path / "zk3", size=3, max_session_timeout_ms=CAP_MS)
    assert [server.max_session_timeout_ms for server in ensemble.servers] == [CAP_MS] * 3
