"""The embedded ZooKeeper keeps its data: fsync before every acknowledgement, a persistent
directory by default, and the same znodes after a restart on the same directory."""

from __future__ import annotations

import signal
from pathlib import Path

from stratus.zk.server import ZooKeeperServer
from tests.cluster.test_zookeeper_server import serving_hosts, start_stratus_zookeeper
from tests.harness.zkfixtures import kazoo_client


def test_data_written_survives_a_stop_and_a_start_on_the_same_directory(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk", tick_time_ms=100, host="0.0.0.0")
    with server:
        config = (server.data_dir / "zoo.cfg").read_text()
        assert "forceSync=yes" in config.splitlines()
        assert "clientPortAddress=0.0.0.0" in config.splitlines()
        assert "4lw.commands.whitelist=srvr" in config.splitlines()  # reachable by others
        with kazoo_client(server.connect_string) as client:
            client.create("/stratus/pipelines/kept", b"record", makepath=True)
    restarted = ZooKeeperServer(tmp_path / "zk", server.port, tick_time_ms=100)
    with restarted, kazoo_client(restarted.connect_string) as client:
        assert client.get("/stratus/pipelines/kept")[0] == b"record"


def test_stratus_zookeeper_keeps_its_data_in_the_home_directory_by_default(
    tmp_path: Path,
) -> None:
    for run in ("write", "read"):
        process, lines = start_stratus_zookeeper("--port", "0", home=tmp_path)
        try:
            hosts = serving_hosts(process, lines)
            with kazoo_client(hosts) as client:
                if run == "write":
                    client.create("/stratus/pipelines/kept", b"record", makepath=True)
                else:
                    assert client.get("/stratus/pipelines/kept")[0] == b"record"
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    config = (tmp_path / ".stratus" / "zookeeper" / "zoo.cfg").read_text()
    assert "forceSync=yes" in config.splitlines()
