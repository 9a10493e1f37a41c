"""Operator-owned paths and secrets on a running nimbus (a real process on a real ZooKeeper):
a pipeline's conf cannot move its checkpoints or reach another host, a purging kill deletes
only inside the checkpoint root, and a secret conf value is never shown, while ZooKeeper (and
so the worker) keeps the real one: not in a conf, not in a FAILED worker's log tail, and a conf
sent back with the redaction marker keeps the stored secret."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stratus.api.records import PipelineRecord, PipelineWorkers, WorkerHeartbeat, WorkerState
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

SECRET = "s3cr3t-value-9f2c"
ENV_SECRET = "hunter2-db-password"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("checkpoint-root")


@pytest.fixture(scope="module")
def cluster(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory, root: Path
) -> Iterator[NimbusCluster]:
    extra = [
        "-c", "pipeline.kill.wait.secs=0",
        "-c", f"pipeline.checkpoint.root={root}",
        "-c", "pipeline.spark.masters=yarn",
    ]  # fmt: skip
    logs = tmp_path_factory.mktemp("paths-secrets")
    with nimbus_cluster(zk_server.connect_string, logs, "paths-secrets", 1, extra) as running:
        running.wait_for_agreed_leader()
        yield running


def url_of(cluster: NimbusCluster) -> str:
    return cluster.by_address(cluster.wait_for_agreed_leader()).url


def submit(
    url: str, name: str, conf: dict[str, Any], package: bytes | None = None
) -> httpx.Response:
    return httpx.post(
        f"{url}/api/v1/pipelines",
        data={"name": name, "conf": json.dumps(conf)},
        files={"package": package or valid_package(name)},
    )


def names_on(url: str) -> set[str]:
    return {p["name"] for p in httpx.get(f"{url}/api/v1/pipelines").json()["pipelines"]}


def gone(url: str, name: str) -> bool:
    return name not in names_on(url)


REFUSED = {
    "a root elsewhere": ({"pipeline.checkpoint.root": "ELSEWHERE"}, "pipeline.checkpoint.root"),
    "a root on another host": (
        {"pipeline.checkpoint.root": "hdfs://attacker:8020/x"},
        "pipeline.checkpoint.root",
    ),
    "an absolute subpath": ({"pipeline.checkpoint.subpath": "ELSEWHERE"}, "relative"),
    "a subpath up and out": ({"pipeline.checkpoint.subpath": "../.."}, "'..'"),
    "a Spark master on another host": ({"spark.master": "spark://attacker:7077"}, "spark.master"),
    "a warehouse elsewhere": ({"spark.sql.warehouse.dir": "ELSEWHERE"}, "spark.sql.warehouse.dir"),
}


@pytest.mark.parametrize(("conf", "named"), REFUSED.values(), ids=REFUSED.keys())
def test_a_submit_whose_conf_points_out_of_the_operators_places_is_refused_and_creates_nothing(
    cluster, root, tmp_path, conf, named
):
    elsewhere = tmp_path / "elsewhere"
    conf = {key: str(value).replace("ELSEWHERE", str(elsewhere)) for key, value in conf.items()}
    url = url_of(cluster)

    response = submit(url, "refused", conf)

    assert response.status_code == 422, response.text
    assert response.json()["error"] == "invalid_conf"
    assert named in response.json()["message"]
    assert "refused" not in names_on(url)
    assert not elsewhere.exists()
    assert not (root / "refused").exists()


# The keys a security test found reaching the JVMs and interpreters though extraJavaOptions
# was refused: each belongs to a family of settings that only the operator may choose.
JVM_AND_INTERPRETER_KEYS = {
    "spark.driver.defaultJavaOptions": "-javaagent:/tmp/agent.jar",
    "spark.executor.defaultJavaOptions": "-javaagent:/tmp/agent.jar",
    "spark.yarn.am.extraJavaOptions": "-javaagent:/tmp/agent.jar",
    "spark.driver.extraJavaOptions": "-javaagent:/tmp/agent.jar",
    "spark.executorEnv.PYTHONPATH": "/tmp/evil",
    "spark.executorEnv.LD_PRELOAD": "/tmp/evil.so",
    "spark.pyspark.python": "/tmp/evil-python",
    "spark.pyspark.driver.python": "/tmp/evil-python",
    "spark.plugins": "org.evil.Plugin",
    "spark.driver.userClassPathFirst": True,
    "spark.sql.extensions": "org.evil.Extensions",
    "spark.redaction.regex": "nothing",
}


@pytest.mark.parametrize(("key", "value"), JVM_AND_INTERPRETER_KEYS.items())
def test_a_conf_key_for_the_jvms_or_interpreters_is_refused_naming_the_key(cluster, key, value):
    url = url_of(cluster)

    response = submit(url, "jvm-options", {key: value})

    assert response.status_code == 422, response.text
    assert response.json()["error"] == "invalid_conf"
    assert key in response.json()["message"]
    assert "spark-defaults.conf" in response.json()["message"]
    assert "jvm-options" not in names_on(url)


def test_a_manifest_whose_conf_leaves_the_root_is_refused(cluster, root):
    url = url_of(cluster)
    package = valid_package("manifest-out", conf={"pipeline.checkpoint.subpath": "../../x"})

    response = submit(url, "manifest-out", {}, package)

    assert response.status_code == 422, response.text
    assert "pipeline.checkpoint.subpath" in response.json()["message"]
    assert "manifest-out" not in names_on(url)


def test_a_rebalance_that_points_out_of_the_root_is_refused_and_changes_nothing(cluster):
    url = url_of(cluster)
    assert submit(url, "rebalanced", {"pipeline.checkpoint.subpath": "v1"}).status_code == 201
    for conf in (
        {"pipeline.checkpoint.subpath": "/abs"},
        {"pipeline.checkpoint.root": "/tmp"},
        {"pipeline.spark.master": "spark://attacker:7077"},
    ):
        response = httpx.post(f"{url}/api/v1/pipelines/rebalanced/rebalance", json={"conf": conf})
        assert response.status_code == 422, response.text
        assert next(iter(conf)) in response.json()["message"]
    record = httpx.get(f"{url}/api/v1/pipelines/rebalanced").json()
    assert record["conf"] == {"pipeline.checkpoint.subpath": "v1"}
    allowed = {"pipeline.spark.master": "yarn", "pipeline.checkpoint.subpath": "v2"}
    response = httpx.post(f"{url}/api/v1/pipelines/rebalanced/rebalance", json={"conf": allowed})
    assert response.status_code == 200 and response.json()["conf"] == allowed


def test_a_rebalance_drops_a_checkpoint_root_that_an_older_record_holds(cluster, zk_server):
    url = url_of(cluster)
    assert submit(url, "older", {"spark.a": 1}).status_code == 201
    path = f"{cluster.root}/pipelines/older"
    with kazoo_client(zk_server.connect_string) as zk:
        raw, _ = zk.get(path)
        old = PipelineRecord.model_validate_json(raw)
        conf = {**old.conf, "pipeline.checkpoint.root": "/elsewhere"}
        zk.set(path, old.model_copy(update={"conf": conf}).encode())
    wait_until(
        lambda: (
            "pipeline.checkpoint.root" in httpx.get(f"{url}/api/v1/pipelines/older").json()["conf"]
        ),
        10,
        "the nimbus to see the older record",
    )

    response = httpx.post(f"{url}/api/v1/pipelines/older/rebalance", json={"conf": {"spark.b": 2}})

    assert response.status_code == 200, response.text
    assert response.json()["conf"] == {"spark.a": 1, "spark.b": 2}


def test_a_purging_kill_deletes_the_pipelines_checkpoints_and_nothing_a_link_inside_points_to(
    cluster, root, tmp_path
):
    url = url_of(cluster)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    assert submit(url, "killed", {"pipeline.checkpoint.subpath": "v1"}).status_code == 201
    location = root / "killed" / "v1"
    (location / "offsets").mkdir(parents=True)
    (location / "offsets" / "0").write_text("{}")
    (location / "escape").symlink_to(outside)
    (root / "neighbour").mkdir()

    httpx.post(f"{url}/api/v1/pipelines/killed/kill", json={"wait_secs": 0, "purge": True})

    wait_until(lambda: gone(url, "killed"), 20, "the killed pipeline's record to go")
    wait_until(lambda: not (root / "killed").exists(), 20, "its checkpoints to go")
    assert (outside / "precious").read_text() == "keep me"
    assert (root / "neighbour").is_dir()


def test_a_purging_kill_leaves_a_pipeline_directory_that_links_out_of_the_root(
    cluster, root, tmp_path
):
    url = url_of(cluster)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    assert submit(url, "linked", {}).status_code == 201
    (root / "linked").symlink_to(outside)

    httpx.post(f"{url}/api/v1/pipelines/linked/kill", json={"wait_secs": 0, "purge": True})

    wait_until(lambda: gone(url, "linked"), 20, "the killed pipeline's record to go")
    nimbus = cluster.nimbuses[0]
    wait_until(
        lambda: _refused_line("linked", nimbus.log_path.read_text()),
        20,
        "the nimbus to report the refused deletion",
    )
    assert (outside / "precious").read_text() == "keep me"
    status = httpx.get(f"{url}/api/v1/pipelines/linked/purge").json()
    assert status["purge"]["state"] == "pending"  # recorded, not claimed done
    (root / "linked").unlink()


def _refused_line(name: str, log: str) -> bool:
    return any(
        f"event=purge_attempt_failed pipeline={name}" in line
        and "not inside the checkpoint root" in line
        for line in log.splitlines()
    )


def test_a_secret_conf_value_is_never_shown_but_zookeeper_keeps_it(cluster, zk_server):
    url = url_of(cluster)
    conf = {
        "spark.hadoop.fs.s3a.secret.key": SECRET,
        "pipeline.env.DB_PASSWORD": ENV_SECRET,
        "spark.sql.shuffle.partitions": 3,
    }
    created = submit(url, "secretive", conf)
    assert created.status_code == 201, created.text
    rebalanced = httpx.post(
        f"{url}/api/v1/pipelines/secretive/rebalance", json={"conf": {"spark.x": 1}}
    )
    shown = {
        "submit": created.text,
        "rebalance": rebalanced.text,
        "status": httpx.get(f"{url}/api/v1/pipelines/secretive").text,
        "list": httpx.get(f"{url}/api/v1/pipelines").text,
        "cluster": httpx.get(f"{url}/api/v1/cluster").text,
        "workers": httpx.get(f"{url}/api/v1/pipelines/secretive/workers").text,
        "status page": httpx.get(f"{url}/").text,
        "cli status --json": cli(cluster, "status", "secretive", "--json"),
        "cli status": cli(cluster, "status", "secretive"),
        "cli list --json": cli(cluster, "list", "--json"),
    }
    for where, text in shown.items():
        assert SECRET not in text and ENV_SECRET not in text, where
    record = PipelineRecord.model_validate_json(shown["status"])
    assert record.conf["spark.hadoop.fs.s3a.secret.key"] == "***"
    assert record.conf["spark.sql.shuffle.partitions"] == 3
    assert json.loads(shown["cli status --json"])["conf"]["pipeline.env.DB_PASSWORD"] == "***"

    with kazoo_client(zk_server.connect_string) as zk:
        stored, _ = zk.get(f"{cluster.root}/pipelines/secretive")
    assert PipelineRecord.model_validate_json(stored).conf["pipeline.env.DB_PASSWORD"] == (
        ENV_SECRET
    )
    log = cluster.nimbuses[0].log_path.read_text()
    assert SECRET not in log and ENV_SECRET not in log


def cli(cluster: NimbusCluster, *args: str, token: str | None = None) -> str:
    """The real CLI's output, as a user (with ``token``) runs it against ``cluster``."""
    env = {**os.environ, "COLUMNS": "400"}
    env.pop("STRATUS_CONF", None)
    if token is not None:
        env["STRATUS_TOKEN"] = token
    result = subprocess.run(
        [sys.executable, "-m", "stratus", *args, "-c", f"nimbus.seeds={','.join(cluster.seeds)}"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


# ---------------------------------------------------------------------- free text, markers

TOKEN = "tok-7c1e9a5d3b"


def put_failed_worker(
    zk_connect: str, root: str, pipeline: str, error: str, supervisor: str = "supervisor-x"
) -> None:
    """A FAILED worker's heartbeat, as its supervisor publishes it to the ZooKeeper store."""
    beat = WorkerHeartbeat(
        pipeline=pipeline,
        supervisor=supervisor,
        epoch=1,
        generation=0,
        state=WorkerState.FAILED,
        time=time.time(),
        error=error,
    )
    with kazoo_client(zk_connect) as zk:
        path = f"{root}/heartbeats/workers/{pipeline}/{supervisor}"
        zk.create(path, beat.model_dump_json().encode(), makepath=True)


def test_a_failed_workers_log_tail_is_redacted_in_the_api_and_thecli(cluster, zk_server):
    """The class: free text that a crashing pipeline wrote (its log tail) holds its own conf
    values, key=value pairs of secret keys, bearer tokens and URL passwords."""
    url = url_of(cluster)
    conf = {"spark.hadoop.fs.s3a.secret.key": SECRET, "pipeline.env.DB_PASSWORD": ENV_SECRET}
    assert submit(url, "crashing", conf).status_code == 201
    error = (
        f"Traceback: ValueError: cannot log in with {SECRET}\n"
        f"env: DB_PASSWORD={ENV_SECRET} API_TOKEN={TOKEN}\n"
        f"Authorization: Bearer {TOKEN} at https://app:{ENV_SECRET}x@db.example:5432/x\n"
        "spark.sql.shuffle.partitions=3 and the rest of the log"
    )
    put_failed_worker(zk_server.connect_string, cluster.root, "crashing", error)
    shown = {
        "workers": httpx.get(f"{url}/api/v1/pipelines/crashing/workers").text,
        "cli status": cli(cluster, "status", "crashing"),
    }
    for where, text in shown.items():
        for secret in (SECRET, ENV_SECRET, TOKEN):
            assert secret not in text, (where, secret)
    workers = PipelineWorkers.model_validate_json(shown["workers"])
    redacted = workers.workers[0].error or ""
    assert "DB_PASSWORD=***" in redacted and "Bearer ***" in redacted
    assert "https://app:***@db.example" in redacted
    assert "spark.sql.shuffle.partitions=3 and the rest of the log" in redacted  # the rest stays
    assert "***" in shown["cli status"]


def stored_conf(zk_connect: str, root: str, name: str) -> dict[str, Any]:
    with kazoo_client(zk_connect) as zk:
        raw, _ = zk.get(f"{root}/pipelines/{name}")
    return PipelineRecord.model_validate_json(raw).conf


def test_a_rebalance_that_sends_back_the_redaction_marker_keeps_the_stored_secret(
    cluster, zk_server
):
    url = url_of(cluster)
    assert submit(url, "roundtrip", {"spark.hadoop.fs.s3a.secret.key": SECRET}).status_code == 201
    shown = httpx.get(f"{url}/api/v1/pipelines/roundtrip").json()["conf"]
    assert shown["spark.hadoop.fs.s3a.secret.key"] == "***"
    # what a client does: read the conf, change one value, send the whole conf back
    answer = httpx.post(
        f"{url}/api/v1/pipelines/roundtrip/rebalance",
        json={"conf": {**shown, "spark.sql.shuffle.partitions": 5}},
    )
    assert answer.status_code == 200, answer.text
    stored = stored_conf(zk_server.connect_string, cluster.root, "roundtrip")
    assert stored["spark.hadoop.fs.s3a.secret.key"] == SECRET
    assert stored["spark.sql.shuffle.partitions"] == 5


def test_the_marker_for_a_secret_the_pipeline_lacks_is_refused_naming_the_key(cluster, zk_server):
    url = url_of(cluster)
    assert submit(url, "nomarker", {}).status_code == 201
    before = stored_conf(zk_server.connect_string, cluster.root, "nomarker")
    answers = {
        "rebalance": httpx.post(
            f"{url}/api/v1/pipelines/nomarker/rebalance",
            json={"conf": {"spark.myApiToken": "***"}},
        ),
        "submit": submit(url, "marked", {"spark.myApiToken": "***"}),
    }
    for route, answer in answers.items():
        assert (answer.status_code, answer.json()["error"]) == (422, "invalid_conf"), route
        assert "spark.myApiToken" in answer.json()["message"], route
    assert stored_conf(zk_server.connect_string, cluster.root, "nomarker") == before
    assert "marked" not in names_on(url)
    # a key that does not look secret takes "***" as the value it is
    plain = httpx.post(
        f"{url}/api/v1/pipelines/nomarker/rebalance", json={"conf": {"spark.app.label": "***"}}
    )
    assert plain.status_code == 200, plain.text
