"""Kerberos (SASL GSSAPI) to ZooKeeper against a real MIT KDC and a real ZooKeeper.

The embedded server accepts GSSAPI with its keytab (``zookeeper/127.0.0.1@STRATUS.TEST``, the
principal a client that connects to 127.0.0.1 asks a ticket for); stratus takes its initial
ticket from a client keytab (``KRB5_CLIENT_KTNAME``), its znodes carry the ACL
``sasl:stratus@STRATUS.TEST``, and nobody else (anonymous, or another principal) reads or
writes them.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import NoAuthError, SessionClosedRequireSaslError

from stratus.client import NimbusClient
from stratus.config import load_config
from stratus.local.processes import NimbusProcess
from stratus.settings import zk_server_auth
from stratus.zk.auth import AuthScheme, ServerAuth, ZkAuth
from stratus.zk.errors import ZooKeeperAuthError
from stratus.zk.ports import LOOPBACK, pick_free_port
from stratus.zk.server import ZooKeeperServer
from stratus.zk.session import ZkSession, ZkSettings
from tests.cluster.test_zookeeper_server import serving_hosts, start_stratus_zookeeper
from tests.harness.kdc import Kdc
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.tcp_proxy import TcpProxy
from tests.harness.zkfixtures import kazoo_client, wait_until

SERVICE = "zookeeper/127.0.0.1"
SESSION_SECS = 2.0
GSSAPI: dict[str, Any] = {"sasl_options": {"mechanism": "GSSAPI", "service": "zookeeper"}}

JAAS_KERBEROS = """Server {{
    com.sun.security.auth.module.Krb5LoginModule required
    useKeyTab=true
    keyTab="{keytab}"
    storeKey=true
    useTicketCache=false
    isInitiator=false
    principal="{principal}";
}};
"""


@dataclass(frozen=True)
class Realm:
    """The KDC, a ZooKeeper that accepts Kerberos, and the client keytabs of two users."""

    kdc: Kdc
    server: ZooKeeperServer
    stratus: str  # stratus's principal
    stratus_keytab: Path
    intruder_keytab: Path
    jaas: Path  # the server's JAAS file: its Kerberos login from its keytab


@pytest.fixture(scope="module")
def realm(kdc: Kdc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Realm]:
    directory = tmp_path_factory.mktemp("kerberized-zk")
    server_principal = kdc.add_principal(SERVICE)
    server_keytab = kdc.keytab(directory / "zookeeper.keytab", server_principal)
    stratus = kdc.add_principal("stratus")
    intruder = kdc.add_principal("intruder")
    jaas = directory / "jaas.conf"
    jaas.write_text(JAAS_KERBEROS.format(keytab=server_keytab, principal=server_principal))
    conf = load_config(
        overrides=[
            f"zookeeper.server.sasl.jaas.file={jaas}",
            f"zookeeper.server.sasl.krb5.conf={kdc.krb5_conf}",
        ],
        environ={},
    )
    auth = zk_server_auth(conf, environ={})
    assert auth == ServerAuth(jaas_file=jaas, krb5_conf=kdc.krb5_conf)
    server = ZooKeeperServer(directory / "zk", tick_time_ms=100, force_sync=False, auth=auth)
    server.start()
    try:
        yield Realm(
            kdc,
            server,
            stratus,
            kdc.keytab(directory / "stratus.keytab", stratus),
            kdc.keytab(directory / "intruder.keytab", intruder),
            jaas,
        )
    finally:
        server.stop()


def as_user(
    monkeypatch: pytest.MonkeyPatch, realm: Realm, ccache: Path, keytab: Path | None
) -> None:
    """Make this process a Kerberos client of the realm: its own (empty) ticket cache and,
    if given, the client keytab GSSAPI takes the initial ticket from."""
    monkeypatch.delenv("KRB5_CLIENT_KTNAME", raising=False)
    for name, value in realm.kdc.client_env(ccache, keytab).items():
        monkeypatch.setenv(name, value)


def kerberos_session(realm: Realm, root: str) -> ZkSession:
    auth = ZkAuth(AuthScheme.SASL, sasl_principal=realm.stratus)
    settings = ZkSettings(
        realm.server.connect_string, root=root, session_timeout=SESSION_SECS, auth=auth
    )
    return ZkSession(settings)


def acl_of(client: Any, path: str) -> set[tuple[int, str, str]]:
    acls = client.get_acls(path)[0]
    return {(acl.perms, acl.id.scheme, acl.id.id) for acl in acls}


def test_a_session_with_a_client_keytab_authenticates_and_owns_its_znodes(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(monkeypatch, realm, tmp_path / "stratus.cc", realm.stratus_keytab)
    hosts = realm.server.connect_string
    ours = {(31, "sasl", "stratus@STRATUS.TEST")}
    with kerberos_session(realm, "/owned") as owner:
        owner.client.create("/owned/pipelines/p", b"record", makepath=True)
        for path in ("/owned", "/owned/pipelines", "/owned/pipelines/p"):
            assert acl_of(owner.client, path) == ours, path
        assert owner.client.get("/owned/pipelines/p")[0] == b"record"

    with kazoo_client(hosts) as anonymous:
        with pytest.raises(NoAuthError):
            anonymous.set("/owned/pipelines/p", b"rewritten")
        with pytest.raises(NoAuthError):
            anonymous.get("/owned/pipelines/p")
        with pytest.raises(NoAuthError):
            anonymous.create("/owned/pipelines/q", b"")

    as_user(monkeypatch, realm, tmp_path / "intruder.cc", realm.intruder_keytab)
    with kazoo_client(hosts, **GSSAPI) as intruder:
        with pytest.raises(NoAuthError):
            intruder.set("/owned/pipelines/p", b"rewritten")
        with pytest.raises(NoAuthError):
            intruder.get("/owned/pipelines/p")


def test_the_configured_principal_is_the_one_that_authenticates_from_a_shared_keytab(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keytab whose first entry is another principal: GSSAPI's default would authenticate
    as that one, and the znodes (ACL: stratus's principal) would be out of reach."""
    shared = realm.kdc.keytab(
        tmp_path / "shared.keytab", realm.kdc.principal("intruder"), realm.stratus
    )
    as_user(monkeypatch, realm, tmp_path / "shared.cc", shared)
    with kerberos_session(realm, "/shared-keytab") as owner:
        owner.client.create("/shared-keytab/p", b"mine", makepath=True)
        assert owner.client.get("/shared-keytab/p")[0] == b"mine"  # the ACL's identity reads
        assert acl_of(owner.client, "/shared-keytab/p") == {(31, "sasl", realm.stratus)}
    as_user(monkeypatch, realm, tmp_path / "default.cc", shared)
    with (
        kazoo_client(realm.server.connect_string, **GSSAPI) as by_default,
        pytest.raises(NoAuthError),  # GSSAPI's default principal: the intruder
    ):
        by_default.get("/shared-keytab/p")


def test_the_configured_service_name_is_the_one_asked_for(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that logs in as stratuszk/127.0.0.1: a client that asks for that service."""
    kdc = realm.kdc
    service = kdc.add_principal("stratuszk/127.0.0.1")
    jaas = tmp_path / "jaas.conf"
    keytab = kdc.keytab(tmp_path / "stratuszk.keytab", service)
    jaas.write_text(JAAS_KERBEROS.format(keytab=keytab, principal=service))
    auth = ServerAuth(jaas_file=jaas, krb5_conf=kdc.krb5_conf)
    server = ZooKeeperServer(tmp_path / "zk", tick_time_ms=100, force_sync=False, auth=auth)
    as_user(monkeypatch, realm, tmp_path / "stratus.cc", realm.stratus_keytab)
    client = ZkAuth(AuthScheme.SASL, sasl_service="stratuszk", sasl_principal=realm.stratus)
    settings = ZkSettings(
        server.connect_string, root="/svc", session_timeout=SESSION_SECS, auth=client
    )
    with server, ZkSession(settings) as owner:
        assert acl_of(owner.client, "/svc") == {(31, "sasl", realm.stratus)}


@pytest.mark.timeout(60)  # bounded: the refusal ends the start, no endless retry
def test_a_client_without_a_ticket_gets_an_error_naming_the_problem(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(monkeypatch, realm, tmp_path / "empty.cc", keytab=None)
    with pytest.raises(ZooKeeperAuthError) as refused:
        kerberos_session(realm, "/no-ticket").start()
    message = str(refused.value)
    assert "Kerberos could not authenticate stratus@STRATUS.TEST" in message
    # the library's own words: no credentials of the configured principal
    assert "Can't find client principal stratus@STRATUS.TEST" in message
    assert "KRB5_CLIENT_KTNAME" in message


@pytest.mark.slow
def test_a_nimbus_reaches_zookeeper_with_kerberos_and_a_submit_works(
    realm: Realm, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real nimbus process whose only credential is its client keytab (KRB5_CLIENT_KTNAME)."""
    as_user(monkeypatch, realm, tmp_path / "nimbus.cc", realm.stratus_keytab)
    options = [
        "-c",
        "zookeeper.auth.scheme=sasl",
        "-c",
        f"zookeeper.auth.sasl.principal={realm.stratus}",
    ]
    hosts = realm.server.connect_string
    with nimbus_cluster(hosts, tmp_path, request.node.name, size=1, extra=options) as cluster:
        cluster.wait_for_agreed_leader()
        with NimbusClient(cluster.seeds, retry_deadline=30, request_timeout=5.0) as client:
            client.submit("kerberized", valid_package("kerberized"))
            assert [p.name for p in client.list_pipelines()] == ["kerberized"]
        record = f"{cluster.root}/pipelines/kerberized"
        with kazoo_client(hosts, **GSSAPI) as owner:
            assert owner.get(record)[0]
            assert acl_of(owner, record) == {(31, "sasl", realm.stratus)}
        with kazoo_client(hosts) as anonymous, pytest.raises(NoAuthError):
            anonymous.get(record)


def test_the_server_jvm_reads_the_configured_krb5_conf_else_krb5_config(tmp_path: Path) -> None:
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS_KERBEROS.format(keytab="k", principal="p"))
    krb5 = tmp_path / "krb5.conf"
    krb5.write_text("[libdefaults]\n")
    conf = load_config(overrides=[f"zookeeper.server.sasl.jaas.file={jaas}"], environ={})
    from_env = zk_server_auth(conf, environ={"KRB5_CONFIG": str(krb5)})
    assert f"-Djava.security.krb5.conf={krb5}" in from_env.jvm_flags()
    assert not any("krb5.conf" in flag for flag in zk_server_auth(conf, environ={}).jvm_flags())
    missing = ServerAuth(jaas_file=jaas, krb5_conf=tmp_path / "absent.conf")
    with pytest.raises(ZooKeeperAuthError, match=r"zookeeper\.server\.sasl\.krb5\.conf"):
        missing.jvm_flags()


def test_gssapi_without_the_kerberos_package_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "kerberos" else real_find_spec(name, *args),
    )
    with pytest.raises(ZooKeeperAuthError, match=r"stratus-ha\[kerberos\]"):
        ZkAuth(AuthScheme.SASL, sasl_principal="stratus@STRATUS.TEST")


@pytest.mark.slow
def test_a_nimbus_without_a_ticket_exits_non_zero_saying_why(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_user(monkeypatch, realm, tmp_path / "empty.cc", keytab=None)
    options = [
        "-c", f"zookeeper.servers={realm.server.connect_string}",
        "-c", "zookeeper.root=/no-ticket-nimbus",
        "-c", "zookeeper.auth.scheme=sasl",
        "-c", f"zookeeper.auth.sasl.principal={realm.stratus}",
    ]  # fmt: skip
    nimbus = NimbusProcess(options, port=pick_free_port(), log_dir=tmp_path)
    nimbus.start()
    try:
        assert nimbus.wait(60) == 1, nimbus.log_tail()
        last_line = nimbus.log_tail(lines=1)
        assert last_line.startswith("Error: Kerberos could not authenticate"), nimbus.log_tail()
        assert "KRB5_CLIENT_KTNAME" in last_line
    finally:
        nimbus.kill()


@pytest.mark.slow
def test_stratus_zookeeper_requires_kerberos_with_krb5_config_from_the_environment(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command, its JVM told the KRB5_CONFIG of its environment: Kerberos clients in,
    anonymous ones out."""
    as_user(monkeypatch, realm, tmp_path / "stratus.cc", realm.stratus_keytab)
    process, lines = start_stratus_zookeeper(
        "--port", "0", "--temporary", "--require-auth",
        "-c", f"zookeeper.server.sasl.jaas.file={realm.jaas}",
    )  # fmt: skip
    try:
        hosts = serving_hosts(process, lines)
        auth = ZkAuth(AuthScheme.SASL, sasl_principal=realm.stratus)
        settings = ZkSettings(hosts, root="/cli", session_timeout=SESSION_SECS, auth=auth)
        with ZkSession(settings) as owner:
            assert acl_of(owner.client, "/cli") == {(31, "sasl", realm.stratus)}
        with kazoo_client(hosts) as anonymous, pytest.raises(SessionClosedRequireSaslError):
            anonymous.get_children("/")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_server_with_another_principal_refuses_and_the_error_points_at_it(
    realm: Realm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server logs in as zookeeper/localhost, the client asks for zookeeper/127.0.0.1."""
    kdc = realm.kdc
    other = kdc.add_principal("zookeeper/localhost")
    jaas = tmp_path / "jaas.conf"
    keytab = kdc.keytab(tmp_path / "localhost.keytab", other)
    jaas.write_text(JAAS_KERBEROS.format(keytab=keytab, principal=other))
    auth = ServerAuth(jaas_file=jaas, krb5_conf=kdc.krb5_conf)
    server = ZooKeeperServer(tmp_path / "zk", tick_time_ms=100, force_sync=False, auth=auth)
    as_user(monkeypatch, realm, tmp_path / "stratus.cc", realm.stratus_keytab)
    client = ZkAuth(AuthScheme.SASL, sasl_principal=realm.stratus)
    settings = ZkSettings(server.connect_string, session_timeout=SESSION_SECS, auth=client)
    with server, pytest.raises(ZooKeeperAuthError) as refused:
        ZkSession(settings).start()
    message = str(refused.value)
    assert "refused the Kerberos authentication of stratus@STRATUS.TEST" in message
    assert "zookeeper/<host as in zookeeper.servers>@REALM" in message


SHORT_LIFE = "3 seconds"  # the KDC's longest ticket for the short-lived principal
EXPIRY_SESSION_SECS = 20.0  # outlives the expiry and the reconnection


def klist_valid(ccache: Path, env: dict[str, str]) -> bool:
    """Whether the ticket cache holds a ticket-granting ticket that has not expired."""
    return subprocess.run(["klist", "-s", "-c", str(ccache)], env=env, check=False).returncode == 0


def reconnect(proxy: TcpProxy) -> None:
    """Drop the session's connection; it reconnects (and authenticates again) at once."""
    proxy.cut()
    proxy.heal()


@pytest.fixture
def short_lived(realm: Realm, tmp_path: Path) -> tuple[str, Path]:
    principal = realm.kdc.add_principal("shortlived")
    realm.kdc.modify_principal(principal, f'-maxlife "{SHORT_LIFE}"')
    return principal, realm.kdc.keytab(tmp_path / "shortlived.keytab", principal)


@pytest.mark.timeout(90)
def test_an_expired_ticket_is_renewed_from_the_client_keytab_when_the_session_reconnects(
    realm: Realm,
    short_lived: tuple[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A connection authenticates once; its ticket may expire under it (it keeps working).
    The next connection
    (a reconnect of the same session) asks for a new ticket, which GSSAPI takes from the
    client keytab: the session keeps its znodes."""
    principal, keytab = short_lived
    ccache = tmp_path / "short.cc"
    as_user(monkeypatch, realm, ccache, keytab)
    env = {**os.environ, **realm.kdc.client_env(ccache, keytab)}
    auth = ZkAuth(AuthScheme.SASL, sasl_principal=principal)
    with TcpProxy(LOOPBACK, realm.server.port) as proxy:
        settings = ZkSettings(
            f"{LOOPBACK}:{proxy.port}",
            root="/expiry-keytab",
            session_timeout=EXPIRY_SESSION_SECS,
            auth=auth,
        )
        with ZkSession(settings) as owner:
            owner.client.create("/expiry-keytab/p", b"before", makepath=True)
            session_id = owner.client.client_id[0]
            wait_until(lambda: not klist_valid(ccache, env), 30, "the ticket to expire")
            owner.client.set("/expiry-keytab/p", b"expired")  # the open connection stays
            reconnect(proxy)
            owner.client.retry(owner.client.set, "/expiry-keytab/p", b"after")
            assert owner.client.get("/expiry-keytab/p")[0] == b"after"
            assert owner.client.client_id[0] == session_id  # the same session, reconnected
            assert owner.failure is None
            assert klist_valid(ccache, env)  # a new ticket, from the keytab
            assert acl_of(owner.client, "/expiry-keytab/p") == {(31, "sasl", principal)}


@pytest.mark.timeout(90)
def test_an_expired_ticket_without_a_client_keytab_stops_the_session_saying_so(
    realm: Realm,
    short_lived: tuple[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ticket from a kinit run once, no client keytab: the first reconnection after the
    ticket expired cannot authenticate, and the session fails for good naming why."""
    principal, keytab = short_lived
    ccache = tmp_path / "kinit.cc"
    as_user(monkeypatch, realm, ccache, keytab=None)
    env = {**os.environ, **realm.kdc.client_env(ccache)}
    subprocess.run(["kinit", "-kt", str(keytab), principal], env=env, check=True)
    auth = ZkAuth(AuthScheme.SASL, sasl_principal=principal)
    with TcpProxy(LOOPBACK, realm.server.port) as proxy:
        settings = ZkSettings(
            f"{LOOPBACK}:{proxy.port}",
            root="/expiry-kinit",
            session_timeout=EXPIRY_SESSION_SECS,
            auth=auth,
        )
        owner = ZkSession(settings)
        owner.start()
        try:
            owner.client.create("/expiry-kinit/p", b"before", makepath=True)
            wait_until(lambda: not klist_valid(ccache, env), 30, "the ticket to expire")
            reconnect(proxy)
            failure = owner.wait_failed(60)
        finally:
            owner.close()
    assert isinstance(failure, ZooKeeperAuthError), failure
    message = str(failure)
    assert f"Kerberos could not authenticate {principal}" in message
    assert "expired" in message  # the Kerberos library's words
    assert "KRB5_CLIENT_KTNAME" in message
