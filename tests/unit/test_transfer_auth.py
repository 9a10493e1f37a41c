"""Code transfer with authentication: a real package server with a token file and TLS, and
the real fetch client presenting (or not) a token and a certificate; and the supervisor's
and nimbus's fetch settings carrying the client's credentials and the connect timeout."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from stratus.codedist.distributor import CodeMeta
from stratus.codedist.errors import CodeUnavailableError
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.fetch import FetchSettings, fetch_package, http_client
from stratus.codedist.transfer.server import PackageServer
from stratus.config import config_from_mapping
from stratus.security.access import AccessPolicy
from stratus.security.client_auth import ClientAuth
from stratus.security.tls import TlsSettings
from stratus.security.tokens import parse_credentials
from stratus.settings import distributor_settings
from stratus.supervisor.settings import SupervisorSettings
from tests.harness.code_server import stored
from tests.harness.tls_certs import Issued, TestCa

MIB = 1 << 20
DATA = os.urandom(MIB + 17)
DIGEST = hashlib.sha256(DATA).hexdigest()
META = CodeMeta(DIGEST, len(DATA))
TOKEN = "node-token-5e6f7a8b9c0d1e2f"
POLICY = AccessPolicy(parse_credentials(f"read token {TOKEN}\nread cn fetcher\n", "tokens"))


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCa:
    return TestCa(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def fetcher(ca: TestCa) -> Issued:
    return ca.issue("fetcher")


@pytest.fixture
def tls_server(tmp_path: Path, ca: TestCa) -> Iterator[PackageServer]:
    store = PackageStore(tmp_path / "store", max_bytes=8 * MIB)
    assert stored(store, DATA) == DIGEST
    issued = ca.issue("server", ip="127.0.0.1")
    tls = TlsSettings(str(issued.cert), str(issued.key), str(ca.cert), require_client_cert=True)
    server = PackageServer(store, "127.0.0.1", 0, policy=POLICY, tls=tls.server_context())
    server.start()
    try:
        yield server
    finally:
        server.close()


def fetch(server: PackageServer, dest: Path, auth: ClientAuth) -> Path:
    dest.mkdir(exist_ok=True)
    settings = FetchSettings(parts=1, timeout=10.0, keep_partial=False, auth=auth)
    return fetch_package("etl", META, [server.address], dest, settings)


def test_a_fetch_with_a_token_over_tls_gets_the_package(
    tls_server: PackageServer, tmp_path: Path, ca: TestCa, fetcher: Issued
) -> None:
    tls = TlsSettings(ca=str(ca.cert), cert=str(fetcher.cert), key=str(fetcher.key))
    path = fetch(tls_server, tmp_path / "dest", ClientAuth(token=TOKEN, tls=tls))
    assert path.read_bytes() == DATA


def test_a_listed_certificate_alone_is_enough(
    tls_server: PackageServer, tmp_path: Path, ca: TestCa, fetcher: Issued
) -> None:
    tls = TlsSettings(ca=str(ca.cert), cert=str(fetcher.cert), key=str(fetcher.key))
    assert fetch(tls_server, tmp_path / "dest", ClientAuth(tls=tls)).read_bytes() == DATA


def test_a_wrong_token_is_refused_and_named_in_the_error(
    tls_server: PackageServer, tmp_path: Path, ca: TestCa, fetcher: Issued
) -> None:
    tls = TlsSettings(ca=str(ca.cert), cert=str(fetcher.cert), key=str(fetcher.key))
    with pytest.raises(CodeUnavailableError, match="answered HTTP 401"):
        fetch(tls_server, tmp_path / "dest", ClientAuth(token="x" * 20, tls=tls))


def test_without_a_client_certificate_or_over_plain_http_nothing_is_fetched(
    tls_server: PackageServer, tmp_path: Path, ca: TestCa
) -> None:
    with pytest.raises(CodeUnavailableError):
        fetch(tls_server, tmp_path / "a", ClientAuth(token=TOKEN, tls=TlsSettings(ca=str(ca.cert))))
    with pytest.raises(CodeUnavailableError):
        fetch(tls_server, tmp_path / "b", ClientAuth(token=TOKEN))
    assert not list((tmp_path / "a").iterdir()) and not list((tmp_path / "b").iterdir())


def test_a_server_whose_certificate_another_ca_signed_is_not_trusted(
    tls_server: PackageServer, tmp_path: Path, fetcher: Issued
) -> None:
    other = TestCa(tmp_path, name="other-ca")
    tls = TlsSettings(ca=str(other.cert), cert=str(fetcher.cert), key=str(fetcher.key))
    with pytest.raises(CodeUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
        fetch(tls_server, tmp_path / "dest", ClientAuth(token=TOKEN, tls=tls))


def test_nimbuses_and_supervisors_fetch_with_the_clients_credentials(tmp_path: Path) -> None:
    conf = config_from_mapping(
        {"client.auth.token": TOKEN, "client.tls.ca": "/etc/ca.pem", "supervisor.id": "s1"}
    )
    expected = ClientAuth(token=TOKEN, tls=TlsSettings(ca="/etc/ca.pem"))
    assert distributor_settings(conf).fetch.auth == expected
    assert SupervisorSettings.from_config(conf).code.distributor.fetch.auth == expected


def test_nimbuses_and_supervisors_connect_to_holders_within_the_connect_timeout() -> None:
    conf = config_from_mapping(
        {"nimbus.code.download.connect.timeout.secs": 0.5, "supervisor.id": "s1"}
    )
    for fetch in (
        distributor_settings(conf).fetch,
        SupervisorSettings.from_config(conf).code.distributor.fetch,
    ):
        assert (fetch.connect_timeout, fetch.timeout) == (0.5, 10.0)
        assert http_client(fetch).connect_timeout == 0.5
    longer = config_from_mapping(
        {"nimbus.code.download.connect.timeout.secs": 5, "client.request.timeout.secs": 1}
    )
    assert http_client(distributor_settings(longer).fetch).connect_timeout == 1.0  # never past it
