"""Operator-owned paths and secrets on a running nimbus (a real process on a real ZooKeeper):
a pipeline's conf cannot move its checkpoints or reach another host, a kill deletes only
inside the checkpoint root, and a secret conf value is never shown, while ZooKeeper (and so
the worker) keeps the real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stratus.api.records import PipelineRecord
from stratus.zk.server import ZooKeeperServer
from tests.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.package_factory import valid_package
from tests.zkfixtures import kazoo_client, wait_until

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


def test_a_kill_deletes_the_pipelines_checkpoints_and_nothing_a_link_inside_points_to(
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

    httpx.post(f"{url}/api/v1/pipelines/killed/kill", json={"wait_secs": 0})

    wait_until(lambda: gone(url, "killed"), 20, "the killed pipeline's record to go")
    wait_until(lambda: not (root / "killed").exists(), 20, "its checkpoints to go")
    assert (outside / "precious").read_text() == "keep me"
    assert (root / "neighbour").is_dir()


def test_a_kill_leaves_a_pipeline_directory_that_links_out_of_the_root(cluster, root, tmp_path):
    url = url_of(cluster)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    assert submit(url, "linked", {}).status_code == 201
    (root / "linked").symlink_to(outside)

    httpx.post(f"{url}/api/v1/pipelines/linked/kill", json={"wait_secs": 0})

    wait_until(lambda: gone(url, "linked"), 20, "the killed pipeline's record to go")
    nimbus = cluster.nimbuses[0]
    wait_until(
        lambda: _refused_line("linked", nimbus.log_path.read_text()),
        20,
        "the nimbus to report the refused deletion",
    )
    assert (outside / "precious").read_text() == "keep me"
    (root / "linked").unlink()


def _refused_line(name: str, log: str) -> bool:
    return any(
        f"event=cleanup_incomplete pipeline={name}" in line
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
        "cli status --json": _cli(cluster, "status", "secretive", "--json"),
        "cli status": _cli(cluster, "status", "secretive"),
        "cli list --json": _cli(cluster, "list", "--json"),
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


def _cli(cluster: NimbusCluster, *args: str) -> str:
    env = {**os.environ, "COLUMNS": "400"}
    env.pop("STRATUS_CONF", None)
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
