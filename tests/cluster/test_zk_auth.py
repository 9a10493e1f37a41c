"""ZooKeeper authentication and ACLs on a real ZooKeeper: stratus's znodes are its own.

With ``zookeeper.auth.scheme: digest`` every znode a session creates (the root, its parents,
every recipe's) gives stratus's identity every permission and nobody else anything; an open
root left by a time without authentication is tightened; a server started with
``auth.required`` admits only the SASL users it checks (never a digest, which ZooKeeper takes
from anyone), locks ``/`` and stratus's root, and holds the root to a quota.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.exceptions import NoAuthError, QuotaExceededError, SessionClosedRequireSaslError
from kazoo.security import OPEN_ACL_UNSAFE, Permissions

from stratus.client import NimbusClient
from stratus.config import load_config
from stratus.local.processes import SupervisorProcess
from stratus.settings import zk_server_auth, zk_settings
from stratus.zk.auth import (
    AuthScheme,
    ServerAuth,
    ZkAuth,
    ZkCredentials,
    ZnodeQuota,
    read_credentials,
)
from stratus.zk.errors import ZooKeeperAuthError
from stratus.zk.kazoo_hooks import SASL_DROPS_REFUSE
from stratus.zk.ports import LOOPBACK
from stratus.zk.server import ZooKeeperServer
from stratus.zk.session import ZkSession, ZkSettings
from tests.cluster.test_zookeeper_server import serving_hosts, start_stratus_zookeeper
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.tcp_proxy import TcpProxy
from tests.harness.zk_acl import (
    acl_of,
    digest_client,
    digest_identity,
    every_znode,
    sasl_client,
    sasl_identity,
    secret_file,
)
from tests.harness.zkfixtures import kazoo_client, wait_until

STRATUS = ZkCredentials("stratus", "s3cret-stratus")
DIGEST = ZkAuth(AuthScheme.DIGEST, STRATUS)
OURS = digest_identity(STRATUS)
SESSION_SECS = 2.0


def session(hosts: str, auth: ZkAuth = DIGEST, root: str = "/stratus") -> ZkSession:
    return ZkSession(ZkSettings(hosts, root=root, session_timeout=SESSION_SECS, auth=auth))


# -- the credentials file -------------------------------------------------------------------


def test_credentials_come_from_a_file_only_its_owner_may_read(tmp_path: Path) -> None:
    good = secret_file(tmp_path / "good", "stratus:pa:ss")
    assert read_credentials(good) == ZkCredentials("stratus", "pa:ss")
    assert "pa:ss" not in repr(read_credentials(good))
    readable = secret_file(tmp_path / "readable", "stratus:secret", mode=0o640)
    with pytest.raises(ZooKeeperAuthError, match=r"group or others \(mode 0640\).*chmod 600"):
        read_credentials(readable)
    for bad in ("no-colon", ":nobody", "user:"):
        with pytest.raises(ZooKeeperAuthError, match="user:password"):
            read_credentials(secret_file(tmp_path / "bad", bad))
    with pytest.raises(ZooKeeperAuthError, match="cannot read"):
        read_credentials(tmp_path / "missing")


def test_the_configuration_names_the_file_and_digest_needs_it(tmp_path: Path) -> None:
    path = secret_file(tmp_path / "zk.secret", "stratus:s3cret-stratus")
    conf = load_config(
        overrides=["zookeeper.auth.scheme=digest", f"zookeeper.auth.file={path}"], environ={}
    )
    assert zk_settings(conf).auth == DIGEST
    with pytest.raises(ZooKeeperAuthError, match=r"zookeeper\.auth\.file"):
        zk_settings(load_config(overrides=["zookeeper.auth.scheme=digest"], environ={}))
    assert zk_settings(load_config(environ={})).auth.acl() is None  # anonymous by default


# -- the ACL of stratus's znodes ------------------------------------------------------------


def test_an_anonymous_client_cannot_create_set_delete_or_read_under_the_root(
    zk_hosts: str,
) -> None:
    with session(zk_hosts, root="/apps/stratus") as owner:
        owner.client.create("/apps/stratus/pipelines/p", b"record", makepath=True)
        owner.client.create("/apps/stratus/nimbuses/n", b"me", ephemeral=True, makepath=True)
        with kazoo_client(zk_hosts) as anonymous:
            with pytest.raises(NoAuthError):
                anonymous.create("/apps/stratus/pipelines/intruder", b"x")
            with pytest.raises(NoAuthError):
                anonymous.set("/apps/stratus/pipelines/p", b"rewritten")
            with pytest.raises(NoAuthError):
                anonymous.delete("/apps/stratus/pipelines/p")
            with pytest.raises(NoAuthError):
                anonymous.get("/apps/stratus/pipelines/p")
            with pytest.raises(NoAuthError):
                anonymous.create("/apps/stratus/intruder", b"x")
            for path in every_znode(owner.client, "/apps"):  # the parents it created too
                assert acl_of(owner.client, path) == OURS, path
        assert owner.client.get("/apps/stratus/pipelines/p")[0] == b"record"


def test_stratus_own_identity_can_and_a_wrong_password_cannot(zk_hosts: str) -> None:
    with session(zk_hosts) as owner:
        owner.client.create("/stratus/pipelines/p", b"record", makepath=True)
    with session(zk_hosts) as again:  # another process with the same credentials
        again.client.set("/stratus/pipelines/p", b"updated")
        again.client.create("/stratus/pipelines/q", b"new")
        again.client.delete("/stratus/pipelines/q")
    with digest_client(zk_hosts, ZkCredentials("stratus", "wrong")) as wrong:
        with pytest.raises(NoAuthError):
            wrong.get("/stratus/pipelines/p")
        with pytest.raises(NoAuthError):
            wrong.set("/stratus/pipelines/p", b"x")
        with pytest.raises(NoAuthError):
            wrong.create("/stratus/pipelines/x", b"x")
        with pytest.raises(NoAuthError):
            wrong.delete("/stratus/pipelines/p")
    wrong_session = session(zk_hosts, ZkAuth(AuthScheme.DIGEST, ZkCredentials("stratus", "no")))
    with pytest.raises(ZooKeeperAuthError, match=r"denies stratus's identity \(digest:stratus\)"):
        wrong_session.start()


def test_an_open_root_from_before_authentication_is_tightened_whole(zk_hosts: str) -> None:
    with kazoo_client(zk_hosts) as anonymous:
        anonymous.create("/stratus/pipelines/old", b"open", makepath=True)
        anonymous.create("/stratus/groups/nimbus/epochs/0", b"", makepath=True)
        assert acl_of(anonymous, "/stratus/pipelines/old") == {
            (acl.perms, acl.id.scheme, acl.id.id) for acl in OPEN_ACL_UNSAFE
        }
        with session(zk_hosts) as owner:
            paths = list(every_znode(owner.client, "/stratus"))
            assert len(paths) == 7  # the root, 2 pipelines nodes, 4 of the group
            assert all(acl_of(owner.client, path) == OURS for path in paths)
        with pytest.raises(NoAuthError):
            anonymous.set("/stratus/pipelines/old", b"rewritten")


def test_every_recipe_creates_its_znodes_with_the_acl_through_the_session() -> None:
    """No caller passes an ACL of its own: kazoo's ``default_acl`` gives every znode ours.
    (The embedded server's lockdown, as its superuser, is the one other place.)"""
    src = Path(__file__).parents[2] / "src" / "stratus"
    callers = [
        f"{path.relative_to(src)}:{number}"
        for path in sorted(src.rglob("*.py"))
        if "kazoo" in path.read_text()  # ZooKeeper's ACLs, not a file's POSIX ACL
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bacl=|set_acls\(", line) and path.name not in ("auth.py", "lockdown.py")
    ]
    assert callers == []


# -- real daemons with digest authentication -------------------------------------------------


@pytest.mark.slow
def test_nimbuses_and_a_supervisor_work_with_digest_auth_and_own_every_znode(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    secret = secret_file(tmp_path / "zk.secret", f"{STRATUS.user}:{STRATUS.password}")
    options = ["-c", "zookeeper.auth.scheme=digest", "-c", f"zookeeper.auth.file={secret}"]
    hosts = zk_server.connect_string
    with nimbus_cluster(hosts, tmp_path, request.node.name, size=2, extra=options) as cluster:
        supervisor = SupervisorProcess(cluster.options, id="s1", slots=1, log_dir=tmp_path)
        try:
            supervisor.start()
            supervisor.wait_ready()
            cluster.wait_for_agreed_leader()
            with NimbusClient(cluster.seeds, retry_deadline=30, request_timeout=5.0) as client:
                client.submit("guarded", valid_package("guarded"))
                wait_until(
                    lambda: [s.id for s in client.cluster().supervisors] == ["s1"],
                    30,
                    "the supervisor to be seen by the leader",
                )
            root = cluster.root
            with digest_client(hosts, STRATUS) as owner:
                history = f"{root}/assignment-history/guarded"
                wait_until(
                    lambda: owner.exists(history) and owner.get_children(history),
                    30,
                    "guarded's first assignment change",
                )
                paths = list(every_znode(owner, root))
                assert f"{root}/pipelines/guarded" in paths
                assert any(path.startswith(f"{history}/c-") for path in paths)
                assert f"{root}/supervisors/s1" in paths
                assert any(path.startswith(f"{root}/nimbuses/") for path in paths)
                assert any(path.startswith(f"{root}/groups/nimbus/") for path in paths)
                assert {path: acl_of(owner, path) for path in paths} == dict.fromkeys(paths, OURS)
            with kazoo_client(hosts) as anonymous:
                with pytest.raises(NoAuthError):
                    anonymous.set(f"{root}/pipelines/guarded", b"{}")
                with pytest.raises(NoAuthError):
                    anonymous.get(f"{root}/pipelines/guarded")
        finally:
            supervisor.signal(signal.SIGKILL)
            supervisor.kill()


# -- a server that requires authentication ---------------------------------------------------

SASL = ZkAuth(AuthScheme.SASL, STRATUS, sasl_mechanism="DIGEST-MD5")
SUPER = ZkCredentials("super", "root-password")
QUOTA = ZnodeQuota(znodes=1000, data_bytes=8 * 1024 * 1024)  # small, so that the fill ends soon


@pytest.fixture
def strict_server(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A server that requires authentication, as ``stratus zookeeper --require-auth`` builds
    it from the configuration: stratus's SASL user, a superuser, a small quota."""
    conf = load_config(
        overrides=[
            "zookeeper.server.auth.required=true",
            f"zookeeper.auth.file={secret_file(tmp_path / 'zk.secret', 'stratus:s3cret-stratus')}",
            f"zookeeper.server.super.file={secret_file(tmp_path / 'super', 'super:root-password')}",
            f"zookeeper.server.quota.count={QUOTA.znodes}",
            f"zookeeper.server.quota.bytes={QUOTA.data_bytes}",
        ],
        environ={},
    )
    auth = zk_server_auth(conf)
    assert auth == ServerAuth(required=True, users=(STRATUS,), superuser=SUPER, quota=QUOTA)
    assert auth.schemes == ("sasl",)  # digest admits every user:password pair
    server = ZooKeeperServer(tmp_path / "zk", tick_time_ms=100, force_sync=False, auth=auth)
    server.start()
    try:
        yield server
    finally:
        server.stop()


# A refused SASL handshake kills kazoo's connection thread (kazoo 2.11); the session notices.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_server_that_requires_auth_admits_only_the_sasl_users_it_checks(
    strict_server: ZooKeeperServer,
) -> None:
    hosts = strict_server.connect_string
    with session(hosts, SASL) as owner:
        owner.client.create("/stratus/pipelines/p", b"record", makepath=True)
        for path in every_znode(owner.client, "/stratus"):
            assert acl_of(owner.client, path) == sasl_identity(STRATUS), path
    # ZooKeeper closes the session of a client that has not authenticated with SASL: an
    # anonymous one, one with made-up digest credentials, and stratus's own as a digest.
    for credentials in (None, ZkCredentials("intruder", "made-up"), STRATUS):
        client = kazoo_client(hosts) if credentials is None else digest_client(hosts, credentials)
        with client as refused, pytest.raises(SessionClosedRequireSaslError):
            refused.get_children("/")
    wrong = ZkAuth(AuthScheme.SASL, ZkCredentials("stratus", "wrong"), sasl_mechanism="DIGEST-MD5")
    with pytest.raises(ZooKeeperAuthError, match="refused stratus's credentials"):
        session(hosts, wrong).start()
    made_up = ZkAuth(AuthScheme.SASL, ZkCredentials("intruder", "x"), sasl_mechanism="DIGEST-MD5")
    with pytest.raises(ZooKeeperAuthError, match="refused stratus's credentials"):
        session(hosts, made_up).start()
    with sasl_client(hosts, SUPER) as operator:  # the superuser reads whatever the ACL says
        assert operator.get("/stratus/pipelines/p")[0] == b"record"
    assert (strict_server.data_dir / "zoo.cfg").stat().st_mode & 0o077 == 0
    assert (strict_server.data_dir / "jaas.conf").stat().st_mode & 0o077 == 0


def test_a_connection_dropped_during_sasl_is_retried_not_taken_for_a_refusal(
    strict_server: ZooKeeperServer,
) -> None:
    """A member that loses its quorum drops every connection, some in the middle of their
    SASL exchange: ZooKeeper's way of refusing credentials too, so only drops in a row
    (``SASL_DROPS_REFUSE``) mean a refusal."""
    with TcpProxy(LOOPBACK, strict_server.port) as proxy:
        proxy.drop_after_first_answer(SASL_DROPS_REFUSE - 1)
        with session(f"{LOOPBACK}:{proxy.port}", SASL) as owner:
            owner.client.create("/stratus/pipelines/through-drops", b"ok", makepath=True)
        assert proxy.dropped == SASL_DROPS_REFUSE - 1


def test_stratus_own_identity_cannot_leave_its_root_nor_fill_the_server(
    strict_server: ZooKeeperServer,
) -> None:
    """Whoever steals stratus's identity may write under its root, and no further: not
    beside it, not on ``/``'s ACL or its own quota, and not past the quota."""
    hosts = strict_server.connect_string
    with sasl_client(hosts, STRATUS) as thief:
        assert acl_of(thief, "/") == {(Permissions.READ, "sasl", "stratus")}
        for path in ("/junk", "/zookeeper/junk", "/zookeeper/quota/junk"):
            with pytest.raises(NoAuthError):
                thief.create(path, b"x")
        with pytest.raises(NoAuthError):
            thief.set_acls("/", OPEN_ACL_UNSAFE)
        with pytest.raises(NoAuthError):
            thief.set("/zookeeper/quota/stratus/zookeeper_limits", b"count=-1,bytes=-1")
        megabyte = b"x" * 1_000_000
        written = 0
        with pytest.raises(QuotaExceededError):
            for index in range(QUOTA.data_bytes // len(megabyte) + 2):
                thief.create(f"/stratus/junk-{index}", megabyte)
                written += 1
        assert written == QUOTA.data_bytes // len(megabyte)
    assert strict_server.mode() == "standalone"  # still serving
    with session(hosts, SASL) as owner:  # stratus goes on within its quota
        owner.client.create("/stratus/pipelines/after", b"small", makepath=True)
    with sasl_client(hosts, SUPER) as operator:  # the superuser clears the junk
        for index in range(written):
            operator.delete(f"/stratus/junk-{index}")
    strict_server.stop()
    strict_server.start()  # a restart locks again, changing nothing
    with sasl_client(hosts, STRATUS) as owner:
        assert owner.get("/stratus/pipelines/after")[0] == b"small"
        assert acl_of(owner, "/") == {(Permissions.READ, "sasl", "stratus")}


def test_require_auth_without_users_the_server_can_check_is_refused() -> None:
    with pytest.raises(ZooKeeperAuthError, match=r"zookeeper\.auth\.file"):
        ServerAuth(required=True)
    with pytest.raises(ZooKeeperAuthError, match="double quote"):
        ServerAuth(required=True, users=(ZkCredentials("stratus", 'a"b'),))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("members", [(), ("--ensemble", "3")], ids=["standalone", "ensemble"])
def test_stratus_zookeeper_require_auth_flag_admits_stratus_sasl_user_alone(
    tmp_path: Path, members: tuple[str, ...]
) -> None:
    secret = secret_file(tmp_path / "zk.secret", f"{STRATUS.user}:{STRATUS.password}")
    process, lines = start_stratus_zookeeper(
        "--port", "0", "--data-dir", str(tmp_path / "zk"), "--require-auth",
        "-c", f"zookeeper.auth.file={secret}", *members,
    )  # fmt: skip
    try:
        hosts = serving_hosts(process, lines)
        with kazoo_client(hosts) as anonymous, pytest.raises(SessionClosedRequireSaslError):
            anonymous.get_children("/")
        with (
            digest_client(hosts, ZkCredentials("intruder", "made-up")) as intruder,
            pytest.raises(SessionClosedRequireSaslError),
        ):
            intruder.get_children("/")
        with session(hosts, SASL) as owner:
            assert owner.client.exists("/stratus")
            assert acl_of(owner.client, "/") == {(Permissions.READ, "sasl", "stratus")}
        superuser = read_credentials(tmp_path / "zk" / "super.secret")  # made, kept with the data
        with sasl_client(hosts, superuser) as operator:
            operator.create("/operator-only", b"")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_stratus_zookeeper_refuses_an_open_non_loopback_address_unless_insecure() -> None:
    process, _ = start_stratus_zookeeper("--port", "0", "--temporary", "--host", "0.0.0.0")
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    assert "refuses to listen on 0.0.0.0 without authentication" in stderr
    assert "--insecure" in stderr
    process, lines = start_stratus_zookeeper(
        "--port", "0", "--temporary", "--host", "0.0.0.0", "--insecure"
    )
    try:
        hosts = serving_hosts(process, lines)
        with kazoo_client(hosts) as anyone:
            assert "zookeeper" in anyone.get_children("/")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert process.stderr is not None
        assert "INSECURE" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


JAAS_SERVER = """Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_stratus="s3cret-stratus";
};
"""


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_operators_own_jaas_file_admits_its_sasl_users_alone(tmp_path: Path) -> None:
    """SASL end to end without a KDC: the server checks DIGEST-MD5 users from the JAAS file
    that the operator wrote (as one of Kerberos would be)."""
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS_SERVER)
    auth = ServerAuth(required=True, jaas_file=jaas)
    assert auth.schemes == ("sasl",)
    assert SASL.identity == "sasl:stratus"
    server = ZooKeeperServer(tmp_path / "zk", tick_time_ms=100, force_sync=False, auth=auth)
    with server, session(server.connect_string, SASL) as owner:
        owner.client.create("/stratus/pipelines/p", b"record", makepath=True)
        for path in every_znode(owner.client, "/stratus"):
            assert acl_of(owner.client, path) == sasl_identity(STRATUS), path
        intruder = ZkCredentials("intruder", "x")
        with (
            digest_client(server.connect_string, intruder) as other,
            pytest.raises(SessionClosedRequireSaslError),
        ):
            other.get_children("/")
        wrong = ZkAuth(
            AuthScheme.SASL, ZkCredentials("stratus", "wrong"), sasl_mechanism="DIGEST-MD5"
        )
        with pytest.raises(ZooKeeperAuthError, match="refused stratus's credentials"):
            session(server.connect_string, wrong).start()


def test_an_unsupported_sasl_setup_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ZooKeeperAuthError, match=r"zookeeper\.auth\.sasl\.principal"):
        ZkAuth(AuthScheme.SASL)
    kerberos = ZkAuth(AuthScheme.SASL, sasl_principal="stratus@EXAMPLE.COM")
    assert kerberos.client_options() == {
        "sasl_options": {
            "mechanism": "GSSAPI",
            "service": "zookeeper",
            "principal": "stratus@EXAMPLE.COM",
        }
    }
    assert kerberos.identity == "sasl:stratus@EXAMPLE.COM"
