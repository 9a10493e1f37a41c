"""Authentication, roles and TLS on real nimbus processes: tokens give each role what it may
do and no more, mutual TLS maps a client certificate to a role, a standby fetches code from
the leader with its own token (over TLS too), the client follows not_leader across TLS
nimbuses, and a nimbus refuses to serve an open API on a non-loopback address.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.cli.main import main
from stratus.client import NimbusClient
from stratus.codedist.code_locations import parse_served_from
from stratus.local.processes import NimbusProcess, ReadinessRefusedError
from stratus.security.client_auth import ClientAuth
from stratus.security.tls import TlsSettings
from stratus.zk.ports import pick_free_port
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.secure_cluster import (
    ADMIN,
    PEER,
    READ,
    SUBMIT,
    WAIT_SECS,
    SecureCluster,
    bearer,
    secure_cluster,
    token_file,
)
from tests.harness.tls_certs import Issued, TestCa
from tests.harness.zkfixtures import chroot_for, kazoo_client, wait_until

pytestmark = pytest.mark.slow

REPLICATED = {"pipeline.min.replication.count": 2, "pipeline.max.replication.wait.time.sec": -1}


def served_from(zk_connect: str, root: str, pipeline: str) -> list[str]:
    """The package servers that the holders of ``pipeline``'s code registered."""
    with kazoo_client(zk_connect) as zk:
        path = f"{root}/code/{pipeline}"
        found = [parse_served_from(zk.get(f"{path}/{h}")[0]) for h in zk.get_children(path)]
    return [s for s in found if s]


def replicated(client: NimbusClient, name: str) -> PipelineRecord:
    """The record once both nimbuses hold the code: the standby fetched it from the leader."""
    wait_until(lambda: client.status(name).replication == 2, WAIT_SECS, "a second copy")
    record = client.status(name)
    wait_until(lambda: client.status(name).status is PipelineStatus.ACTIVE, WAIT_SECS, "ACTIVE")
    return record


# ---------------------------------------------------------------------- bearer tokens


@pytest.fixture(scope="module")
def tokens_cluster(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureCluster]:
    directory = tmp_path_factory.mktemp("nimbus-tokens")
    extra = [
        "-c", f"nimbus.auth.tokens.file={token_file(directory)}",
        "-c", f"client.auth.token={PEER}",
    ]  # fmt: skip
    with secure_cluster(
        zk_server.connect_string, directory, "nimbus-tokens", extra=extra, auth=ClientAuth(ADMIN)
    ) as c:
        yield c


@pytest.mark.parametrize(
    ("token", "cluster_read", "leader_call"),
    [
        (None, 401, 401),
        ("not-a-token-this-nimbus-knows", 401, 401),
        (READ, 200, 403),
        (SUBMIT, 200, 404),  # past the check: the pipeline does not exist
        (ADMIN, 200, 404),
    ],
)
def test_each_role_gets_what_it_may_and_nothing_more(
    tokens_cluster: SecureCluster, token: str | None, cluster_read: int, leader_call: int
) -> None:
    leader = tokens_cluster.url(tokens_cluster.leader())
    read = httpx.get(f"{leader}/api/v1/cluster", headers=bearer(token))
    call = httpx.post(f"{leader}/api/v1/pipelines/absent/activate", headers=bearer(token))
    assert (read.status_code, call.status_code) == (cluster_read, leader_call)
    codes = {401: "unauthenticated", 403: "forbidden", 404: "unknown_pipeline"}
    if leader_call in codes:
        assert call.json()["error"] == codes[leader_call]
    if cluster_read == 401:
        assert read.json()["error"] == "unauthenticated"
        assert read.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    "path", ["/metrics", "/api/v1/openapi.json", "/api/v1/docs", "/api/v1/leader"]
)
def test_pages_and_the_document_need_the_read_role(
    tokens_cluster: SecureCluster, path: str
) -> None:
    url = tokens_cluster.url(tokens_cluster.nimbuses[0]) + path
    assert httpx.get(url).status_code == 401
    assert httpx.get(url, headers=bearer(READ)).status_code == 200


def test_the_web_page_without_credentials_is_a_frame_that_shows_nothing_of_the_cluster(
    tokens_cluster: SecureCluster,
) -> None:
    """A browser cannot send a token when it opens the page: ``/`` and its assets answer
    without one, but the cluster is only in the page (and the API) for a reader."""
    url = tokens_cluster.url(tokens_cluster.nimbuses[0])
    other = tokens_cluster.nimbuses[1].address
    frame = httpx.get(f"{url}/")
    assert frame.status_code == 200 and "requires a token" in frame.text
    assert "Leader:" not in frame.text and other not in frame.text
    assert httpx.get(f"{url}/ui/static/app.js").status_code == 200
    page = httpx.get(f"{url}/", headers=bearer(READ)).text
    assert "Leader:" in page and other in page
    assert httpx.get(f"{url}/api/v1/whoami").status_code == 401
    assert httpx.get(f"{url}/api/v1/whoami", headers=bearer(SUBMIT)).json() == {
        "role": "submit",
        "principal": "ci",
        "auth_required": True,
    }


def test_an_unauthenticated_leader_only_call_on_a_standby_gets_401_before_not_leader(
    tokens_cluster: SecureCluster,
) -> None:
    standby = tokens_cluster.url(tokens_cluster.standby())
    form = {"data": {"name": "p"}, "files": {"package": b"x"}}
    assert httpx.post(f"{standby}/api/v1/pipelines", **form).status_code == 401  # type: ignore[arg-type]
    answered = httpx.post(f"{standby}/api/v1/pipelines", headers=bearer(SUBMIT), **form)  # type: ignore[arg-type]
    assert answered.json()["error"] == "not_leader"


def test_the_openapi_document_declares_the_bearer_scheme(tokens_cluster: SecureCluster) -> None:
    url = tokens_cluster.url(tokens_cluster.nimbuses[0])
    document = httpx.get(f"{url}/api/v1/openapi.json", headers=bearer(READ)).json()
    schemes = document["components"]["securitySchemes"]
    assert {"type": "http", "scheme": "bearer"}.items() <= next(iter(schemes.values())).items()
    activate = document["paths"]["/api/v1/pipelines/{name}/activate"]["post"]
    assert activate["security"] and {"401", "403"} <= set(activate["responses"])


def test_a_standby_fetches_code_with_its_token_and_callers_without_one_are_refused(
    tokens_cluster: SecureCluster, zk_server: ZooKeeperServer
) -> None:
    seeds = tokens_cluster.seeds
    with NimbusClient(seeds, retry_deadline=WAIT_SECS, auth=ClientAuth(token=SUBMIT)) as client:
        record = client.submit("tokens-replicated", valid_package("tokens"), REPLICATED)
        record = replicated(client, record.name)
    for nimbus in tokens_cluster.nimbuses:
        code = f"{tokens_cluster.url(nimbus)}/api/v1/code/{record.digest}"
        assert httpx.get(code).status_code == 401
        assert httpx.get(code, headers=bearer(READ)).status_code == 200
    servers = served_from(zk_server.connect_string, tokens_cluster.root, record.name)
    assert len(servers) == 2
    for server in servers:
        code = f"http://{server}/api/v1/code/{record.digest}"
        refused = httpx.get(code)
        assert (refused.status_code, refused.json()["error"]) == (401, "unauthenticated")
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert httpx.get(code, headers=bearer(PEER)).content[:2] == b"PK"


def test_two_authorization_headers_are_refused_by_the_api_and_the_package_server(
    tokens_cluster: SecureCluster, zk_server: ZooKeeperServer
) -> None:
    """A check that read one header and a relay that forwarded the other would judge one
    caller and act for another: two are refused, whatever they hold."""
    with NimbusClient(
        tokens_cluster.seeds, retry_deadline=WAIT_SECS, auth=ClientAuth(token=SUBMIT)
    ) as client:
        record = client.submit("two-headers", valid_package("two-headers"))
    twice = [("Authorization", f"Bearer {READ}"), ("Authorization", f"Bearer {ADMIN}")]
    nimbus = tokens_cluster.nimbuses[0]
    server = served_from(zk_server.connect_string, tokens_cluster.root, record.name)[0]
    for url in (
        f"{tokens_cluster.url(nimbus)}/api/v1/pipelines",
        f"{tokens_cluster.url(nimbus)}/api/v1/code/{record.digest}",
        f"http://{server}/api/v1/code/{record.digest}",
    ):
        refused = httpx.get(url, headers=twice)
        assert (refused.status_code, refused.json()["error"]) == (401, "unauthenticated"), url
        assert "2 Authorization headers" in refused.json()["message"]
        assert httpx.get(url, headers=bearer(READ)).status_code == 200, url


def test_cli_verbs_send_the_token_of_the_environment(tokens_cluster: SecureCluster) -> None:
    seeds = ",".join(tokens_cluster.seeds)
    args = ["list", "-c", f"nimbus.seeds={seeds}", "-c", "client.retry.deadline.secs=5"]
    refused = CliRunner().invoke(main, args, env={"STRATUS_TOKEN": ""})
    assert refused.exit_code == 4 and "authentication required" in refused.output  # refused
    listed = CliRunner().invoke(main, args, env={"STRATUS_TOKEN": READ})
    assert listed.exit_code == 0, listed.output


# ---------------------------------------------------------------------- TLS and mutual TLS


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCa:
    return TestCa(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def ci_cert(ca: TestCa) -> Issued:
    return ca.issue("ci-runner")


@pytest.fixture(scope="module")
def tls_cluster(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory, ca: TestCa
) -> Iterator[SecureCluster]:
    directory = tmp_path_factory.mktemp("nimbus-tls")
    server = ca.issue("nimbus", ip="127.0.0.1")
    extra = [
        "-c", f"nimbus.auth.tokens.file={token_file(directory)}",
        "-c", f"nimbus.tls.cert={server.cert}",
        "-c", f"nimbus.tls.key={server.key}",
        "-c", f"nimbus.tls.ca={ca.cert}",
        "-c", "nimbus.tls.client.cert.required=true",
        # the nimbuses' client side: their certificate, the CA, their token
        "-c", f"client.tls.ca={ca.cert}",
        "-c", f"client.tls.cert={server.cert}",
        "-c", f"client.tls.key={server.key}",
        "-c", f"client.auth.token={PEER}",
    ]  # fmt: skip
    admin = TlsSettings(ca=str(ca.cert), cert=str(server.cert), key=str(server.key))
    with secure_cluster(
        zk_server.connect_string,
        directory,
        "nimbus-tls",
        extra=extra,
        auth=ClientAuth(ADMIN, admin),
    ) as cluster:
        yield cluster


def tls_client(ca: TestCa, cert: Issued | None) -> httpx.Client:
    settings = TlsSettings(
        ca=str(ca.cert), cert=str(cert.cert) if cert else None, key=str(cert.key) if cert else None
    )
    return httpx.Client(timeout=10.0, verify=settings.client_context())


def test_without_a_client_certificate_the_connection_is_refused(
    tls_cluster: SecureCluster, ca: TestCa
) -> None:
    url = tls_cluster.url(tls_cluster.nimbuses[0])
    with tls_client(ca, None) as client, pytest.raises(httpx.TransportError):
        client.get(f"{url}/api/v1/leader", headers=bearer(ADMIN))


def test_plain_http_is_not_answered(tls_cluster: SecureCluster) -> None:
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://{tls_cluster.nimbuses[0].address}/api/v1/leader", headers=bearer(ADMIN))


def test_a_certificate_of_an_unknown_name_is_forbidden(
    tls_cluster: SecureCluster, ca: TestCa
) -> None:
    url = tls_cluster.url(tls_cluster.nimbuses[0])
    with tls_client(ca, ca.issue("stranger")) as client:
        response = client.get(f"{url}/api/v1/cluster")
    assert (response.status_code, response.json()["error"]) == (403, "forbidden")
    assert "CN=stranger" in response.json()["message"]


def test_a_listed_certificate_has_its_role_without_a_token(
    tls_cluster: SecureCluster, ca: TestCa, ci_cert: Issued
) -> None:
    leader = tls_cluster.url(tls_cluster.leader())
    with tls_client(ca, ci_cert) as client:
        assert client.get(f"{leader}/api/v1/cluster").status_code == 200
        call = client.post(f"{leader}/api/v1/pipelines/absent/activate")
    assert call.json()["error"] == "unknown_pipeline"  # the submit role got past the check


def test_the_client_follows_not_leader_over_tls_and_the_standby_fetches_over_tls(
    tls_cluster: SecureCluster, ca: TestCa, ci_cert: Issued, zk_server: ZooKeeperServer
) -> None:
    leader, standby = tls_cluster.leader(), tls_cluster.standby()
    tls = TlsSettings(ca=str(ca.cert), cert=str(ci_cert.cert), key=str(ci_cert.key))
    auth = ClientAuth(token=SUBMIT, tls=tls)
    with NimbusClient([standby.address], retry_deadline=WAIT_SECS, auth=auth) as client:
        client._router._leader = standby.address  # believed to lead: it answers not_leader
        record = client.submit("tls-replicated", valid_package("tls"), REPLICATED)
        assert client.known_leader == leader.address
        record = replicated(client, record.name)
    servers = served_from(zk_server.connect_string, tls_cluster.root, record.name)
    assert len(servers) == 2
    for server in servers:
        code = f"https://{server}/api/v1/code/{record.digest}"
        with tls_client(ca, ci_cert) as client:
            assert client.get(code).status_code == 200  # the CN's role, over TLS
        with tls_client(ca, None) as client, pytest.raises(httpx.TransportError):
            client.get(code, headers=bearer(ADMIN))


def test_a_nimbus_process_is_ready_when_it_answers_over_https_to_the_client_settings(
    zk_server: ZooKeeperServer, tmp_path: Path, ca: TestCa, request: pytest.FixtureRequest
) -> None:
    server = ca.issue("nimbus-ready", ip="127.0.0.1")
    extra = [
        "-c", f"nimbus.auth.tokens.file={token_file(tmp_path)}",
        "-c", f"nimbus.tls.cert={server.cert}",
        "-c", f"nimbus.tls.key={server.key}",
    ]  # fmt: skip
    tls = TlsSettings(ca=str(ca.cert))
    auth = ClientAuth(token=READ, tls=tls)
    with nimbus_cluster(
        zk_server.connect_string, tmp_path, request.node.name, size=1, extra=extra, auth=auth
    ) as cluster:
        (nimbus,) = cluster.nimbuses
        assert nimbus.url == f"https://{nimbus.address}"
        assert cluster.leader_seen_by(nimbus) is not None  # the cluster's client: https, token
        wait_until(lambda: cluster.summary(nimbus).nimbuses, 20, "its own registration seen")
        assert cluster.summary(nimbus).nimbuses[0].insecure is False
        tokenless = NimbusProcess(
            cluster.options, port=pick_free_port(), log_dir=tmp_path, auth=ClientAuth(tls=tls)
        )
        tokenless.start()
        try:
            with pytest.raises(ReadinessRefusedError, match=r"answered 401.*client\.auth"):
                tokenless.wait_ready()
        finally:
            tokenless.kill()


# ---------------------------------------------------------------------- exposure


def run_nimbus(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stratus", "nimbus", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_nimbus_bound_to_every_interface_without_authentication_refuses_to_start() -> None:
    done = run_nimbus("-c", "nimbus.bind.host=0.0.0.0", "-c", "zookeeper.servers=127.0.0.1:1")
    assert done.returncode == 2  # a configuration error
    last = done.stderr.strip().splitlines()[-1]
    assert "nimbus.auth.tokens.file" in last and "--insecure" in last


def test_a_nimbus_refuses_to_advertise_the_unspecified_address() -> None:
    done = run_nimbus("-c", "nimbus.host=0.0.0.0")
    assert done.returncode == 2  # a configuration error
    assert "nimbus.bind.host" in done.stderr


def test_with_the_insecure_flag_it_starts_on_every_interface_warns_and_advertises_nimbus_host(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    root = f"{chroot_for(request.node.name)}/stratus"
    options = [
        "--insecure",
        "-c", f"zookeeper.servers={zk_server.connect_string}",
        "-c", f"zookeeper.root={root}",
        "-c", "nimbus.bind.host=0.0.0.0",
        "-c", "nimbus.auth.insecure.warn.secs=0.2",
    ]  # fmt: skip
    nimbus = NimbusProcess(options, port=pick_free_port(), log_dir=tmp_path)
    nimbus.start()
    try:
        nimbus.wait_ready()

        def registered() -> list[dict[str, object]]:
            nimbuses: list[dict[str, object]] = httpx.get(f"{nimbus.url}/api/v1/cluster").json()[
                "nimbuses"
            ]
            return nimbuses

        wait_until(registered, WAIT_SECS, "its own registration seen")
        summary = {"nimbuses": registered()}
        assert [f"{n['host']}:{n['port']}" for n in summary["nimbuses"]] == [nimbus.address]
        assert [n["insecure"] for n in summary["nimbuses"]] == [True]
        assert "INSECURE: 127.0.0.1" in httpx.get(f"{nimbus.url}/").text  # the page's banner
        wait_until(  # not once at start: again and again while it runs
            lambda: nimbus.log_tail(200).count("event=insecure_nimbus") >= 3,
            WAIT_SECS,
            "the INSECURE warning to be repeated",
        )
        with NimbusClient([nimbus.address], retry_deadline=WAIT_SECS) as client:
            client.submit("open", valid_package("open"))
        servers = served_from(zk_server.connect_string, root, "open")
        assert [server.split(":")[0] for server in servers] == ["127.0.0.1"]  # not 0.0.0.0
    finally:
        nimbus.kill()
