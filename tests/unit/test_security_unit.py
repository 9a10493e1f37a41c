"""The token file, the access policy, the exposure check and the client's credentials:
pure logic and local files, no network."""

from __future__ import annotations

import hashlib
import re
import socket
import ssl
from pathlib import Path

import pytest

from stratus.api.errors import ForbiddenError, UnauthenticatedError, UntrustedEndpointError
from stratus.api.records import ClusterSummary, LeaderInfo, NimbusSummary, SupervisorSummary
from stratus.client_settings import TOKEN_ENV_VAR, client_auth
from stratus.config import config_from_mapping
from stratus.errors import ConfigError
from stratus.nimbus.http.authorization import required_role
from stratus.nimbus.http.exposure import InsecureBindError, check_exposure
from stratus.nimbus.scheduling.supervisor_endpoints import endpoint_url, loopback_elsewhere
from stratus.nimbus.ui.status_page import render_status_page
from stratus.security.access import AccessPolicy, Caller
from stratus.security.client_auth import ClientAuth
from stratus.security.errors import TlsConfigError, TokenFileError
from stratus.security.loopback import is_loopback
from stratus.security.roles import Role
from stratus.security.tls import TlsSettings, peer_common_name
from stratus.security.tokens import load_credentials, parse_credentials
from stratus.supervisor.endpoint import SupervisorEndpoint
from stratus.supervisor.errors import SupervisorStartError
from stratus.supervisor.metrics import SupervisorMetrics
from stratus.supervisor.settings import SupervisorSettings
from tests.harness.tls_certs import TestCa

ADMIN = "admin-token-0123456789abcdef"
SUBMIT = "submit-token-0123456789abcdef"
READ = "read-token-0123456789abcdef"
FILE = f"""
# role kind value
admin  token {ADMIN}
submit token {SUBMIT}
read   token {READ}
submit cn    ci-runner
"""


# a line without principal= is named after its token's digest
OLD_ADMIN = "token-" + hashlib.sha256(ADMIN.encode()).hexdigest()[:8]
OLD_SUBMIT = "token-" + hashlib.sha256(SUBMIT.encode()).hexdigest()[:8]


def private_file(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_each_token_and_name_has_its_role() -> None:
    creds = parse_credentials(FILE, "tokens")
    assert creds.role_of_token(ADMIN) is Role.ADMIN
    assert creds.role_of_token(SUBMIT) is Role.SUBMIT
    assert creds.role_of_token(READ) is Role.READ
    assert creds.role_of_token(READ + "x") is None
    assert creds.role_of_name("ci-runner") is Role.SUBMIT
    assert creds.role_of_name("stranger") is None


def test_only_digests_of_the_tokens_are_kept() -> None:
    creds = parse_credentials(FILE, "tokens")
    assert ADMIN not in repr(creds)
    assert all(len(digest) == 32 for digest, _ in creds.token_digests)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"admin {ADMIN}", "found 2 fields"),
        (f"{ADMIN} token admin", "the first field is not a role"),
        (f"admin key {ADMIN}", "must be `token` or `cn`"),
        ("admin token short-secret", "shorter than 16 characters"),
        (f"read token {ADMIN}", "listed on an earlier line"),
    ],
)
def test_a_bad_line_is_named_by_its_number_and_the_token_is_never_echoed(
    line: str, expected: str
) -> None:
    text = f"# comment\nadmin token {ADMIN}\n\n{line}\n"
    with pytest.raises(TokenFileError) as caught:
        parse_credentials(text, "/etc/stratus/tokens")
    message = str(caught.value)
    assert "/etc/stratus/tokens line 4" in message
    assert expected in message
    assert ADMIN not in message and "short-secret" not in message


def test_an_empty_file_is_refused() -> None:
    with pytest.raises(TokenFileError, match="lists no token"):
        parse_credentials("# nothing\n", "tokens")


def test_a_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(FILE)
    path.chmod(0o644)
    with pytest.raises(TokenFileError, match=r"open to group or others \(mode 0644\).*chmod 600"):
        load_credentials(path)
    path.chmod(0o600)
    assert load_credentials(path).role_of_token(READ) is Role.READ


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="cannot read the token file"):
        load_credentials(tmp_path / "absent")


def policy() -> AccessPolicy:
    return AccessPolicy(parse_credentials(FILE, "tokens"))


def test_no_credential_or_an_unknown_token_is_unauthenticated() -> None:
    with pytest.raises(UnauthenticatedError, match="authentication required"):
        policy().authorize(None, None, Role.READ)
    with pytest.raises(UnauthenticatedError, match="not one this nimbus knows"):
        policy().authorize("Bearer not-a-known-token-at-all", None, Role.READ)
    with pytest.raises(UnauthenticatedError, match="must be `Bearer <token>`"):
        policy().authorize(f"Basic {READ}", None, Role.READ)
    # a bad token is not rescued by a certificate
    with pytest.raises(UnauthenticatedError):
        policy().authorize("Bearer not-a-known-token-at-all", "ci-runner", Role.READ)


def test_a_role_below_the_one_needed_is_forbidden() -> None:
    with pytest.raises(ForbiddenError, match=r"needs the role submit.*has the role read"):
        policy().authorize(f"Bearer {READ}", None, Role.SUBMIT)
    with pytest.raises(ForbiddenError, match="needs the role admin"):
        policy().authorize(f"bearer {SUBMIT}", None, Role.ADMIN)
    assert policy().authorize(f"Bearer {ADMIN}", None, Role.ADMIN) == Caller(OLD_ADMIN, Role.ADMIN)
    assert policy().authorize(f"Bearer {SUBMIT}", None, Role.READ) == Caller(
        OLD_SUBMIT, Role.SUBMIT
    )


def test_a_certificate_name_maps_to_its_role_and_an_unknown_one_is_forbidden() -> None:
    assert policy().authorize(None, "ci-runner", Role.SUBMIT) == Caller("ci-runner", Role.SUBMIT)
    with pytest.raises(ForbiddenError, match="CN=stranger is not listed"):
        policy().authorize(None, "stranger", Role.READ)


def test_without_credentials_every_call_is_allowed() -> None:
    assert AccessPolicy().authorize(None, None, Role.ADMIN) is None  # nobody in particular


def test_reads_need_read_and_every_other_method_submit() -> None:
    assert required_role("GET") is Role.READ
    assert required_role("HEAD") is Role.READ
    assert required_role("POST") is Role.SUBMIT
    assert required_role("DELETE") is Role.SUBMIT
    assert required_role("GET", "/api/v1/pipelines/etl/workers") is Role.READ
    # its data: read lets the call reach the owners' check (stratus.security.authorizer)
    assert required_role("GET", "/api/v1/pipelines/etl/logs") is Role.READ


def test_a_non_loopback_bind_without_authentication_is_refused_unless_insecure() -> None:
    with pytest.raises(InsecureBindError, match=r"nimbus\.auth\.tokens\.file"):
        check_exposure("0.0.0.0", authenticated=False, insecure=False)
    assert check_exposure("0.0.0.0", authenticated=True, insecure=False) is False
    assert check_exposure("0.0.0.0", authenticated=False, insecure=True) is True  # exposed
    assert check_exposure("127.0.0.1", authenticated=False, insecure=False) is False
    assert check_exposure("localhost", authenticated=False, insecure=False) is False


def supervisor_endpoint(conf: dict[str, object]) -> SupervisorEndpoint:
    return SupervisorEndpoint(
        SupervisorSettings.from_config(config_from_mapping(conf)).http,
        "s1",
        logs_of=lambda _pipeline, _run, _previous: pytest.fail("no log is read"),
        healthy=lambda: True,
        metrics=SupervisorMetrics("s1", workers=list, fences=lambda: 0, lease_held=lambda: True),
        ready=dict,
    )


def test_an_open_supervisor_endpoint_of_a_cluster_on_one_host_listens_on_loopback_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No token file and not insecure, every address of the configuration loopback: it
    listens on loopback instead of its network bind address and advertises loopback, never
    serving an open endpoint to the network."""
    conf = {
        "supervisor.id": "s1",
        "supervisor.http.bind.host": "0.0.0.0",
        "supervisor.http.port": 0,
    }
    endpoint = supervisor_endpoint(conf)
    try:
        assert endpoint.address.startswith("127.0.0.1:")
        assert "event=supervisor_endpoint_loopback bind=0.0.0.0" in caplog.text
    finally:
        endpoint.stop()


@pytest.mark.parametrize(
    ("settings", "fix"),
    [
        ({"supervisor.host": "10.0.0.11"}, r"set nimbus\.auth\.tokens\.file"),
        (
            {"supervisor.http.bind.host": "0.0.0.0", "zookeeper.servers": "10.0.0.12:2181"},
            r"set nimbus\.auth\.tokens\.file",
        ),
        (
            {"supervisor.host": "127.0.0.1", "nimbus.seeds": "10.0.0.12:6627"},
            r"set supervisor\.host to this host's address",
        ),
    ],
)
def test_a_supervisor_refuses_a_loopback_endpoint_when_other_hosts_take_part(
    settings: dict[str, object], fix: str
) -> None:
    """Its configuration names another host: a loopback endpoint would reach no nimbus
    there, and a leader there would reach its own host's loopback instead."""
    conf = {"supervisor.id": "s1", "supervisor.http.port": 0, **settings}
    with pytest.raises(SupervisorStartError, match=r"loopback address 127\.0\.0\.1") as refused:
        supervisor_endpoint(conf)
    assert re.search(fix, str(refused.value))
    assert "supervisor.http.port=-1" in str(refused.value)


def test_the_status_page_names_the_insecure_nimbuses_in_a_banner() -> None:
    def nimbus(port: int, *, insecure: bool) -> NimbusSummary:
        return NimbusSummary(
            host="10.0.0.5", port=port, uptime_secs=1, is_leader=False, version="1",
            insecure=insecure,
        )  # fmt: skip

    def page(*nimbuses: NimbusSummary) -> str:
        nobody = LeaderInfo(address=None, epoch=None)
        summary = ClusterSummary(
            nimbuses=list(nimbuses), supervisors=[], pipelines=[], leader=nobody
        )
        return render_status_page(summary, "10.0.0.5:6627")

    assert "INSECURE" not in page(nimbus(6627, insecure=False))
    shown = page(nimbus(6627, insecure=False), nimbus(6628, insecure=True))
    assert "INSECURE: 10.0.0.5:6628 serve" in shown
    assert "10.0.0.5:6627 serve" not in shown
    assert is_loopback("::1") and not is_loopback("10.1.2.3")


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
@pytest.mark.parametrize(
    ("key", "bind_key"),
    [("nimbus.host", "nimbus.bind.host"), ("supervisor.host", "supervisor.http.bind.host")],
)
def test_an_unspecified_address_is_never_advertised(host: str, key: str, bind_key: str) -> None:
    with pytest.raises(ConfigError, match=f"{key} is {host}.*set {key} to .*{bind_key} to"):
        config_from_mapping({key: host})
    config_from_mapping({key: "10.0.0.5", bind_key: host})  # to listen on every interface
    conf = config_from_mapping({"nimbus.host": "10.0.0.5", "nimbus.bind.host": host})
    assert conf.nimbus_bind() == host
    assert config_from_mapping({"nimbus.host": "10.0.0.5"}).nimbus_bind() == "10.0.0.5"


def test_the_client_token_comes_from_the_key_the_file_or_the_environment(tmp_path: Path) -> None:
    env = {TOKEN_ENV_VAR: "from-the-environment"}
    assert client_auth(config_from_mapping({}), {}).token is None
    assert client_auth(config_from_mapping({}), env).token == "from-the-environment"
    path = private_file(tmp_path / "token", "\nfrom-the-file\n")
    conf = config_from_mapping({"client.auth.token.file": str(path)})
    assert client_auth(conf, env).token == "from-the-file"
    conf = config_from_mapping({"client.auth.token": "from-the-key"})
    assert client_auth(conf, env).headers() == {"Authorization": "Bearer from-the-key"}
    assert "from-the-key" not in repr(client_auth(conf, env))
    path.chmod(0o640)
    with pytest.raises(TokenFileError, match="chmod 600"):
        client_auth(config_from_mapping({"client.auth.token.file": str(path)}), {})


def test_a_daemon_speaks_tls_to_its_peers_when_its_own_configuration_says_the_cluster_does() -> (
    None
):
    assert client_auth(config_from_mapping({}), {}).scheme == "http"
    for key in ("client.tls.ca", "client.tls.cert", "nimbus.tls.cert"):
        assert client_auth(config_from_mapping({key: "/etc/stratus/x.pem"}), {}).scheme == "https"


def test_a_registration_that_disagrees_with_the_nimbus_about_tls_is_refused_before_any_request(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plain = SupervisorSummary(id="s1", host="10.0.0.12", endpoint="10.0.0.12:6629")
    secure = plain.model_copy(update={"endpoint_tls": True})
    tls = ClientAuth(token=ADMIN, tls=TlsSettings(ca="/etc/stratus/ca.pem"))
    assert endpoint_url(secure, "/health", tls) == "https://10.0.0.12:6629/health"
    assert endpoint_url(plain, "/health", ClientAuth()) == "http://10.0.0.12:6629/health"
    with pytest.raises(UntrustedEndpointError, match=r"s1's registration says .* plain http"):
        endpoint_url(plain, "/health", tls)
    assert "event=supervisor_endpoint_refused supervisor=s1" in caplog.text
    with pytest.raises(UntrustedEndpointError, match=r"says .* https, .* has no TLS"):
        endpoint_url(secure, "/health", ClientAuth(token=ADMIN))
    assert UntrustedEndpointError.retryable is False
    elsewhere = plain.model_copy(update={"endpoint": "127.0.0.1:6629"})
    with pytest.raises(UntrustedEndpointError, match=r"registered from host 10\.0\.0\.12"):
        endpoint_url(elsewhere, "/health", ClientAuth())
    assert "reason=loopback_of_another_host" in caplog.text


def test_a_loopback_endpoint_is_used_only_for_a_supervisor_of_this_host() -> None:
    def registered(host: str, endpoint: str | None = "127.0.0.1:6629") -> SupervisorSummary:
        return SupervisorSummary(id="s1", host=host, endpoint=endpoint)

    assert loopback_elsewhere(registered("10.0.0.12"))  # no address of this machine
    assert loopback_elsewhere(registered(""))  # a host not said: not known to be here
    assert not loopback_elsewhere(registered("127.0.0.1"))
    assert not loopback_elsewhere(registered(socket.gethostname()))
    assert not loopback_elsewhere(registered("10.0.0.12", "10.0.0.12:6629"))
    assert not loopback_elsewhere(registered("10.0.0.12", None))


def test_tls_settings_build_contexts_and_name_a_file_that_cannot_be_used(tmp_path: Path) -> None:
    ca = TestCa(tmp_path)
    server = ca.issue("nimbus", ip="127.0.0.1")
    tls = TlsSettings(cert=str(server.cert), key=str(server.key), ca=str(ca.cert))
    assert tls.server_context().verify_mode is ssl.CERT_OPTIONAL
    required = TlsSettings(str(server.cert), str(server.key), str(ca.cert), True)
    assert required.server_context().verify_mode is ssl.CERT_REQUIRED
    client = TlsSettings(ca=str(ca.cert)).client_context()
    assert client.check_hostname and client.verify_mode is ssl.CERT_REQUIRED
    with pytest.raises(TlsConfigError, match=r"needs nimbus\.tls\.ca"):
        TlsSettings(str(server.cert), str(server.key), None, True).server_context()
    with pytest.raises(
        TlsConfigError, match=f"cannot load the CA bundle {re.escape(str(tmp_path))}/absent"
    ):
        TlsSettings(ca=str(tmp_path / "absent")).client_context()
    with pytest.raises(TlsConfigError, match="cannot load the certificate"):
        TlsSettings(cert=str(ca.cert), key=str(server.key)).server_context()


def test_the_common_name_is_read_from_a_peer_certificate() -> None:
    cert = {"subject": ((("countryName", "NL"),), (("commonName", "ci-runner"),))}
    assert peer_common_name(cert) == "ci-runner"
    assert peer_common_name(None) is None
    assert peer_common_name({}) is None
