"""TLS between stratus and a real ZooKeeper: the embedded server's secure port (Netty, PEM
stores) and a session that connects with kazoo's ``use_ssl``, certificates made by openssl;
the history check asked over TLS; ``stratus zookeeper --ensemble`` with a secure port per
member and TLS between the members."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from stratus.zk.errors import ZooKeeperHistoryBehindError, ZooKeeperServerError
from stratus.zk.server import ZooKeeperServer
from stratus.zk.session import ZkSession, ZkSettings
from stratus.zk.tls import ServerTls, ZkTls
from stratus.zk.zxid_check import history_behind_error

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def issue(name: str, cwd: Path) -> None:
    """``<name>.key`` and ``<name>.crt`` for 127.0.0.1, signed by the CA of ``cwd``."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=cwd)  # fmt: skip
    (cwd / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
            "-extfile", "san.ext", cwd=cwd)  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.pem", "-days", "2", "-subj", "/CN=stratus test CA", cwd=cwd)  # fmt: skip
    issue("server", cwd)
    issue("client", cwd)
    keystore = (cwd / "server.key").read_text() + (cwd / "server.crt").read_text()
    (cwd / "server.pem").write_text(keystore)
    return cwd


@pytest.fixture(scope="module")
def tls_server(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    tls = ServerTls(port=0, keystore=pki / "server.pem", truststore=pki / "ca.pem")
    server = ZooKeeperServer(
        tmp_path_factory.mktemp("zk-tls"), tick_time_ms=100, force_sync=False, tls=tls
    )
    with server:
        yield server


def client_tls(pki: Path, *, with_cert: bool = True) -> ZkTls:
    return ZkTls(
        enabled=True,
        ca_file=str(pki / "ca.pem"),
        cert_file=str(pki / "client.crt") if with_cert else None,
        key_file=str(pki / "client.key") if with_cert else None,
    )


def test_a_session_with_tls_and_a_client_certificate_works_on_the_secure_port(
    tls_server: ZooKeeperServer, pki: Path
) -> None:
    hosts = tls_server.secure_connect_string
    assert hosts is not None and hosts != tls_server.connect_string
    settings = ZkSettings(hosts, session_timeout=2.0, tls=client_tls(pki))
    with ZkSession(settings) as session:
        session.client.create("/stratus/over-tls", b"secret")
        assert session.client.get("/stratus/over-tls")[0] == b"secret"
    config = (tls_server.data_dir / "zoo.cfg").read_text().splitlines()
    assert "clientPortAddress=127.0.0.1" in config  # the plain port: this machine only
    assert "ssl.clientAuth=need" in config


def test_a_client_without_certificate_or_without_tls_cannot_connect(
    tls_server: ZooKeeperServer, pki: Path
) -> None:
    hosts = str(tls_server.secure_connect_string)
    for options in (client_tls(pki, with_cert=False).client_options(), {}):
        client = KazooClient(hosts=hosts, timeout=2.0, **options)
        try:
            with pytest.raises(KazooTimeoutError):
                client.start(timeout=3.0)
        finally:
            client.stop()
            client.close()


def test_the_history_check_asks_a_tls_port_over_tls(tls_server: ZooKeeperServer, pki: Path):
    hosts = str(tls_server.secure_connect_string)
    tls = client_tls(pki)
    with ZkSession(ZkSettings(hosts, session_timeout=2.0, tls=tls)) as session:
        session.client.create("/stratus/history-", b"x", sequence=True)  # whatever ran before
        seen = session.client.last_zxid
    error = history_behind_error(hosts, 2**62, tls)
    assert isinstance(error, ZooKeeperHistoryBehindError)
    assert hosts in str(error)
    assert history_behind_error(hosts, seen, tls) is None  # the server has all we saw
    # Asked in plain text, a TLS port says nothing: the check cannot tell, and never blocks.
    assert history_behind_error(hosts, 2**62) is None
    unreadable = ZkTls(enabled=True, ca_file=str(pki / "no-such-ca.pem"))
    assert history_behind_error(hosts, 2**62, unreadable) is None


def test_a_tls_session_on_a_wiped_server_fails_with_the_history_behind_error(
    pki: Path, tmp_path: Path
) -> None:
    tls = ServerTls(port=0, keystore=pki / "server.pem", truststore=pki / "ca.pem")
    with ZooKeeperServer(tmp_path / "zk", tick_time_ms=100, force_sync=False, tls=tls) as server:
        hosts = str(server.secure_connect_string)  # the session knows the TLS port alone
        settings = ZkSettings(hosts, session_timeout=1.0, tls=client_tls(pki))
        with ZkSession(settings) as session:
            session.client.create("/stratus/seen", b"x")
            seen = session.client.last_zxid
            server.stop()
            shutil.rmtree(server.data_dir / "version-2")
            server.start()
            failure = session.wait_failed(30.0)
            assert isinstance(failure, ZooKeeperHistoryBehindError)
            assert f"zxid 0x{seen:x}" in str(failure)


def tls_handshake(port: int, pki: Path) -> str:
    """The TLS version a handshake with ``127.0.0.1:port`` agrees on, with the client's
    certificate (``ssl.SSLError`` if the port does not speak TLS)."""
    context = client_tls(pki).ssl_context()
    assert context is not None
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
    ):
        return str(sock.version())


def test_stratus_zookeeper_ensemble_serves_tls_on_every_member_and_between_members(
    pki: Path, tmp_path: Path
) -> None:
    conf = {
        "zookeeper.server.secure.port": 0,
        "zookeeper.server.ssl.keystore.file": pki / "server.pem",
        "zookeeper.server.ssl.truststore.file": pki / "ca.pem",
        "zookeeper.server.ssl.quorum": "true",
        "zookeeper.server.force.sync": "false",
    }
    options = [arg for key, value in conf.items() for arg in ("-c", f"{key}={value}")]
    data_dir = tmp_path / "ensemble"
    env = {key: value for key, value in os.environ.items() if key != "STRATUS_CONF"}
    process = subprocess.Popen(
        [sys.executable, "-m", "stratus", "zookeeper", "--ensemble", "3", "--port", "0",
         "--data-dir", str(data_dir), *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert process.stdout is not None and process.stderr is not None
        serving = process.stdout.readline()
        assert serving.startswith("zookeeper: serving at "), process.stderr.read()
        tls_line = next(line for line in process.stderr if line.startswith("zookeeper: TLS at"))
        secure_hosts = tls_line.split(" at ", 1)[1].strip()
        assert len(secure_hosts.split(",")) == 3
        settings = ZkSettings(secure_hosts, session_timeout=4.0, tls=client_tls(pki))
        with ZkSession(settings) as session:
            session.client.create("/stratus/over-tls-to-a-quorum", b"x")
        # The members' own ports speak TLS: every election port, and the leader's quorum port.
        peers = [
            line.split("=", 1)[1].split(":")
            for line in (data_dir / "server-1" / "zoo.cfg").read_text().splitlines()
            if line.startswith("server.")
        ]
        assert len(peers) == 3
        for _host, _quorum, election in peers:
            assert tls_handshake(int(election), pki).startswith("TLS")
        leading = [quorum for _host, quorum, _election in peers if _listens(int(quorum))]
        assert len(leading) == 1
        assert tls_handshake(int(leading[0]), pki).startswith("TLS")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def test_quorum_tls_without_a_truststore_is_refused_naming_the_setting(pki: Path) -> None:
    with pytest.raises(ZooKeeperServerError, match=r"zookeeper\.server\.ssl\.truststore\.file"):
        ServerTls(port=0, keystore=pki / "server.pem", quorum=True)
