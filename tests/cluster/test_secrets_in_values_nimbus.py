"""Secrets in the values of innocent conf keys, on a running nimbus with a token file (a real
process on a real ZooKeeper): a JDBC URL's query, a MongoDB URI's password, a Kafka JAAS
config's password and an Azure SAS's signature are shown to a ``read`` caller with only
their secret parts replaced, in the API, the web UI's reads and the CLI, and in a FAILED
worker's error; ZooKeeper keeps them; a conf sent back as it was shown keeps them; and a
worker's log relayed from a supervisor that did not redact them is redacted by the nimbus."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stratus.api.records import PipelineRecord, SupervisorSummary
from stratus.security.client_auth import ClientAuth
from stratus.zk.paths import ClusterPaths
from stratus.zk.server import ZooKeeperServer
from tests.cluster.test_secrets_and_paths_nimbus import cli, put_failed_worker, stored_conf
from tests.harness.package_factory import valid_package
from tests.harness.secure_cluster import (
    READ,
    SUBMIT,
    SecureCluster,
    bearer,
    secure_cluster,
    token_file,
)
from tests.harness.zkfixtures import kazoo_client, wait_until

JDBC = "jdbc-pw-5e1f0a"
MONGO = "mongo-pw-77c2d9"
JAAS = "jaas-pw-3b9e41"
SAS = "c2FzLXNpZy0xZjNh%2B%3D"
SECRETS = (JDBC, MONGO, JAAS, SAS)
CONF: dict[str, Any] = {
    "spark.myapp.source": f"jdbc:postgresql://db/x?user=app&password={JDBC}",
    "pipeline.env.MONGO": f"mongodb://app:{MONGO}@mongo.example/db",
    "spark.kafka.sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="app" password="{JAAS}";'
    ),
    "pipeline.env.BLOB": f"https://acct.blob.core.windows.net/c?sv=2022-11-02&sp=r&sig={SAS}",
    "spark.sql.shuffle.partitions": 3,
}
SHOWN = {
    "spark.myapp.source": "jdbc:postgresql://db/x?user=app&password=***",
    "pipeline.env.MONGO": "mongodb://app:***@mongo.example/db",
    "spark.kafka.sasl.jaas.config": (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="app" password="***";'
    ),
    "pipeline.env.BLOB": "https://acct.blob.core.windows.net/c?sv=2022-11-02&sp=r&sig=***",
    "spark.sql.shuffle.partitions": 3,
}
# What a crashing pipeline prints: its secrets in their forms, and alone.
LOG_TAIL = (
    f"connecting to jdbc:postgresql://db/x?user=app&password={JDBC}\n"
    f"FATAL: password authentication failed for user app ({JDBC})\n"
    f'sasl.jaas.config = PlainLoginModule required username="app" password="{JAAS}";\n'
    f"mongo at mongodb://app:{MONGO}@mongo.example/db refused; reading ...&sig={SAS}\n"
    "spark.sql.shuffle.partitions=3 and the rest of the log\n"
)


@pytest.fixture(scope="module")
def cluster(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecureCluster]:
    directory = tmp_path_factory.mktemp("secrets-in-values")
    extra = ["-c", f"nimbus.auth.tokens.file={token_file(directory)}"]
    auth = ClientAuth(token=SUBMIT)
    with secure_cluster(
        zk_server.connect_string, directory, "secrets-in-values", extra=extra, auth=auth, size=1
    ) as running:
        yield running


def submit(cluster: SecureCluster, name: str) -> PipelineRecord:
    url = cluster.url(cluster.leader())
    answer = cluster.http.post(
        f"{url}/api/v1/pipelines",
        data={"name": name, "conf": json.dumps(CONF)},
        files={"package": valid_package(name)},
    )
    assert answer.status_code == 201, answer.text
    return PipelineRecord.model_validate_json(answer.content)


def test_a_read_caller_sees_no_secret_of_an_innocent_keys_value(
    cluster: SecureCluster, zk_server: ZooKeeperServer
) -> None:
    submitted = submit(cluster, "valued")
    assert submitted.conf == SHOWN  # the submit's own answer
    put_failed_worker(zk_server.connect_string, cluster.root, "valued", LOG_TAIL)
    url = cluster.url(cluster.leader())
    reader = bearer(READ)

    def read(path: str) -> str:
        answer = cluster.http.get(f"{url}{path}", headers=reader)
        assert answer.status_code == 200, (path, answer.text)
        return answer.text

    shown = {
        "status": read("/api/v1/pipelines/valued"),
        "list": read("/api/v1/pipelines"),
        "cluster": read("/api/v1/cluster"),
        "workers": read("/api/v1/pipelines/valued/workers"),
        "web UI's workers": read("/api/v1/workers"),
        "status page": read("/"),
        "cli status --json": cli(cluster, "status", "valued", "--json", token=READ),
        "cli status": cli(cluster, "status", "valued", token=READ),
        "cli list --json": cli(cluster, "list", "--json", token=READ),
    }
    for where, text in shown.items():
        for secret in SECRETS:
            assert secret not in text, (where, secret)
    assert PipelineRecord.model_validate_json(shown["status"]).conf == SHOWN
    assert json.loads(shown["cli status --json"])["conf"] == SHOWN
    (worker,) = json.loads(shown["workers"])["workers"]
    assert "jdbc:postgresql://db/x?user=app&password=***\n" in worker["error"]
    assert "failed for user app (***)" in worker["error"]  # the bare secret, from the conf
    assert "the rest of the log" in worker["error"]

    assert stored_conf(zk_server.connect_string, cluster.root, "valued") == CONF
    log = cluster.nimbuses[0].log_path.read_text()
    assert not any(secret in log for secret in SECRETS)


def test_a_conf_sent_back_as_shown_keeps_the_secrets_in_its_values(
    cluster: SecureCluster, zk_server: ZooKeeperServer
) -> None:
    submit(cluster, "roundtrip")
    url = cluster.url(cluster.leader())
    shown = cluster.http.get(f"{url}/api/v1/pipelines/roundtrip", headers=bearer(READ)).json()
    # what a client does: read the conf, change one value, send the whole conf back
    answer = cluster.http.post(
        f"{url}/api/v1/pipelines/roundtrip/rebalance",
        json={"conf": {**shown["conf"], "spark.sql.shuffle.partitions": 5}},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["conf"]["spark.myapp.source"] == SHOWN["spark.myapp.source"]
    stored = stored_conf(zk_server.connect_string, cluster.root, "roundtrip")
    assert stored == {**CONF, "spark.sql.shuffle.partitions": 5}

    # the marker in a value that is not the one shown (another host): nothing to keep
    moved = "jdbc:postgresql://db2/x?user=app&password=***"
    refused = cluster.http.post(
        f"{url}/api/v1/pipelines/roundtrip/rebalance",
        json={"conf": {"spark.myapp.source": moved}},
    )
    assert (refused.status_code, refused.json()["error"]) == (422, "invalid_conf")
    assert "spark.myapp.source" in refused.json()["message"]
    assert stored_conf(zk_server.connect_string, cluster.root, "roundtrip") == stored


class OlderSupervisorEndpoint(BaseHTTPRequestHandler):
    """A supervisor's endpoint that serves a worker's log without redacting it, as a
    supervisor of an older version, which knows fewer forms of secrets, does."""

    def do_GET(self) -> None:
        body = LOG_TAIL.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def older_supervisor() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), OlderSupervisorEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_relayed_log_is_redacted_by_the_nimbus_too(
    cluster: SecureCluster, zk_server: ZooKeeperServer, older_supervisor: str
) -> None:
    submit(cluster, "relayed")
    url = cluster.url(cluster.leader())
    # registered with no slots, so that nothing is placed on it; a worker's heartbeat
    # names it as the last place the pipeline ran
    registration = SupervisorSummary(
        id="s-old", host="127.0.0.1", slots=0, endpoint=older_supervisor
    )
    with kazoo_client(zk_server.connect_string) as zk:
        zk.create(ClusterPaths(cluster.root).supervisor("s-old"), registration.encode(),
                  ephemeral=True, makepath=True)  # fmt: skip
        put_failed_worker(zk_server.connect_string, cluster.root, "relayed", LOG_TAIL, "s-old")
        wait_until(
            lambda: "s-old" in cluster.http.get(f"{url}/api/v1/supervisors").text,
            20,
            "the nimbus to see supervisor s-old",
        )
        answer = cluster.http.get(f"{url}/api/v1/pipelines/relayed/logs")
    assert answer.status_code == 200, answer.text
    for secret in SECRETS:
        assert secret not in answer.text, secret
    assert "connecting to jdbc:postgresql://db/x?user=app&password=***\n" in answer.text
    assert "spark.sql.shuffle.partitions=3 and the rest of the log\n" in answer.text
