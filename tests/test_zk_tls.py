"""TLS between stratus and a real ZooKeeper: the embedded server's secure port (Netty, PEM
stores) and a session that connects with kazoo's ``use_ssl``, certificates made by openssl."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from stratus.zk.server import ZooKeeperServer
from stratus.zk.session import ZkSession, ZkSettings
from stratus.zk.tls import ServerTls, ZkTls

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
