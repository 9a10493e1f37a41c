"""The nimbus API on a running cluster of three real nimbus processes: what any nimbus
answers, what only the leader does, and how bad input is refused without changing anything.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import re
import stat
import warnings
import zipfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from stratus.api.records import ClusterSummary, PipelineRecord, PipelineSummary
from stratus.cli.main import main
from stratus.local.processes import NimbusProcess
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import kazoo_client, wait_until

MAX_UPLOAD = 4096
LEADER_ONLY = [
    ("post", "/api/v1/pipelines/any/kill", {"json": {"wait_secs": 0}}),
    ("post", "/api/v1/pipelines/any/activate", {}),
    ("post", "/api/v1/pipelines/any/deactivate", {}),
    ("post", "/api/v1/pipelines/any/rebalance", {"json": {"conf": {"spark.x": "1"}}}),
    ("post", "/api/v1/pipelines", {"data": {"name": "p"}, "files": {"package": b"x"}}),
    ("post", "/api/v1/pipelines/any/update", {"files": {"package": b"x"}}),
]


@pytest.fixture(scope="module")
def cluster(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NimbusCluster]:
    extra = ["-c", f"nimbus.max.upload.bytes={MAX_UPLOAD}", "-c", "pipeline.kill.wait.secs=0"]
    logs = tmp_path_factory.mktemp("nimbus-api")
    with nimbus_cluster(zk_server.connect_string, logs, "nimbus-api", extra=extra) as running:
        running.wait_for_agreed_leader()
        yield running


def leader_url(cluster: NimbusCluster) -> str:
    return cluster.by_address(cluster.wait_for_agreed_leader()).url


def standby_urls(cluster: NimbusCluster) -> list[str]:
    leader = cluster.wait_for_agreed_leader()
    return [n.url for n in cluster.nimbuses if n.address != leader]


def package(note: str) -> bytes:
    """A valid package whose bytes differ with ``note``."""
    return valid_package(extra={"note.txt": note})


def submit(url: str, name: str, package: bytes, **form: str) -> httpx.Response:
    return httpx.post(
        f"{url}/api/v1/pipelines", data={"name": name, **form}, files={"package": package}
    )


def pipelines_on(url: str) -> dict[str, Any]:
    return {p["name"]: p for p in httpx.get(f"{url}/api/v1/pipelines").json()["pipelines"]}


def shows_status(url: str, name: str, status: str) -> bool:
    record = pipelines_on(url).get(name)
    return record is not None and record["status"] == status


def error_of(response: httpx.Response) -> str:
    return str(response.json()["error"])


def summary_listing_every_nimbus(cluster: NimbusCluster, nimbus: NimbusProcess) -> ClusterSummary:
    """``nimbus``'s cluster summary once it lists every nimbus: its view follows the others'
    registrations a moment after the election."""
    summaries: list[ClusterSummary] = []

    def lists_every_nimbus() -> bool:
        summaries[:] = [cluster.summary(nimbus)]
        listed = sorted(f"{n.host}:{n.port}" for n in summaries[0].nimbuses)
        return listed == sorted(cluster.seeds)

    wait_until(lists_every_nimbus, 20.0, f"{nimbus.url}'s summary to list every nimbus")
    return summaries[0]


def test_every_nimbus_answers_the_cluster_summary_with_the_leader_marked(cluster):
    leader = cluster.wait_for_agreed_leader()
    for nimbus in cluster.nimbuses:
        summary = summary_listing_every_nimbus(cluster, nimbus)
        assert [f"{n.host}:{n.port}" for n in summary.nimbuses if n.is_leader] == [leader]
        assert summary.leader.address == leader
        response = httpx.get(f"{nimbus.url}/api/v1/pipelines")
        assert response.headers["x-stratus-epoch"] == str(summary.leader.epoch)
        assert all(n.version and n.uptime_secs >= 0 for n in summary.nimbuses)


def listed_on(url: str, name: str) -> dict[str, Any] | None:
    """``name``'s entry in the cluster summary of the nimbus at ``url``, if it lists it."""
    pipelines = httpx.get(f"{url}/api/v1/cluster").json()["pipelines"]
    return next((p for p in pipelines if p["name"] == name), None)


def lists_status(url: str, name: str, status: str) -> bool:
    listed = listed_on(url, name)
    return listed is not None and listed["status"] == status


def test_the_summary_lists_a_pipeline_and_its_own_read_holds_the_rest(cluster):
    url = leader_url(cluster)
    conf = {"spark.a": "1", "pipeline.owners": "bob,carol"}
    created = submit(url, "summarized", package("summarized-1"), conf=json.dumps(conf))
    assert created.status_code == 201, created.text
    for nimbus in cluster.nimbuses:
        wait_until(
            functools.partial(listed_on, nimbus.url, "summarized"),
            10,
            f"{nimbus.address} to list it",
        )
        listed = listed_on(nimbus.url, "summarized")
        record = httpx.get(f"{nimbus.url}/api/v1/pipelines/summarized").json()
        assert listed is not None and list(listed) == list(PipelineSummary.model_fields)
        assert PipelineRecord.model_validate(listed).digest == record["digest"]  # older clients
        owners = listed.pop("owners")
        assert listed == {key: record[key] for key in listed}  # the record's values
        assert owners == ["bob", "carol"]  # no token file: no submitter
        assert record["conf"] == conf and [v["version"] for v in record["versions"]] == [1]
    httpx.post(f"{url}/api/v1/pipelines/summarized/deactivate")
    for nimbus in cluster.nimbuses:  # the cached answer follows the view
        wait_until(
            functools.partial(lists_status, nimbus.url, "summarized", "INACTIVE"),
            10,
            f"{nimbus.address} to list it INACTIVE",
        )
    httpx.post(f"{url}/api/v1/pipelines/summarized/kill", json={"wait_secs": 0})
    wait_until(lambda: listed_on(url, "summarized") is None, 10, "the killed record removed")


@pytest.mark.parametrize(("method", "path", "kwargs"), LEADER_ONLY)
def test_a_leader_only_call_on_a_standby_is_not_leader_naming_the_leader(
    cluster, method, path, kwargs
):
    leader = cluster.wait_for_agreed_leader()
    for url in standby_urls(cluster):
        response = httpx.request(method.upper(), f"{url}{path}", **kwargs)
        assert response.status_code == 421
        assert response.json()["error"] == "not_leader"
        assert response.json()["leader"] == leader
        assert leader in response.json()["message"]


def test_submit_then_the_lifecycle_active_inactive_killed_and_removed(cluster):
    url = leader_url(cluster)
    created = submit(url, "lifecycle", package("code-1"), conf=json.dumps({"spark.a": "1"}))
    assert created.status_code == 201, created.text
    record = PipelineRecord.model_validate(created.json())
    assert record.status == "ACTIVE"
    assert record.digest == hashlib.sha256(package("code-1")).hexdigest()
    steps = [("deactivate", "INACTIVE"), ("activate", "ACTIVE"), ("deactivate", "INACTIVE")]
    for action, status in steps:
        response = httpx.post(f"{url}/api/v1/pipelines/lifecycle/{action}")
        assert response.json()["status"] == status
    rebalanced = httpx.post(
        f"{url}/api/v1/pipelines/lifecycle/rebalance", json={"conf": {"spark.b": 2}}
    ).json()
    assert rebalanced["conf"] == {"spark.a": "1", "spark.b": 2}
    assert rebalanced["rebalances"] == 1
    killed = httpx.post(f"{url}/api/v1/pipelines/lifecycle/kill", json={"wait_secs": 60})
    assert killed.json()["status"] == "KILLED"
    again = httpx.post(f"{url}/api/v1/pipelines/lifecycle/activate")
    assert (again.status_code, error_of(again)) == (409, "invalid_transition")
    for nimbus in cluster.nimbuses:  # every view follows, from watches
        wait_until(
            functools.partial(shows_status, nimbus.url, "lifecycle", "KILLED"),
            10,
            f"{nimbus.address} to see the pipeline KILLED",
        )
    httpx.post(f"{url}/api/v1/pipelines/lifecycle/kill", json={"wait_secs": 0})
    wait_until(lambda: "lifecycle" not in pipelines_on(url), 10, "the killed record removed")


def test_kill_without_a_wait_uses_the_configured_wait_and_removes_the_package(cluster):
    url = leader_url(cluster)
    code = package("short-lived-code")
    record = submit(url, "short-lived", code).json()
    leader = cluster.by_address(cluster.wait_for_agreed_leader())
    stored = leader.local_dir / "packages" / f"{record['digest']}.pkg"
    assert stored.read_bytes() == code
    httpx.post(f"{url}/api/v1/pipelines/short-lived/kill")
    wait_until(lambda: "short-lived" not in pipelines_on(url), 10, "the record removed")
    wait_until(lambda: not stored.exists(), 10, "the package removed")


def test_bad_input_gets_its_own_status_and_changes_nothing(cluster):
    url = leader_url(cluster)
    assert submit(url, "keeper", package("keeper-code")).status_code == 201
    before = pipelines_on(url)
    leader = cluster.by_address(cluster.wait_for_agreed_leader())
    packages_before = sorted(p.name for p in (leader.local_dir / "packages").iterdir())
    cases = [
        (submit(url, "keeper", package("other-code")), 409, "pipeline_exists"),
        (submit(url, "bad/name", package("x1")), 422, "invalid_name"),
        (submit(url, "-dash", package("x2")), 422, "invalid_name"),
        (submit(url, "c1", package("x3"), conf='{"spark.x": 1, "sparkx": 2}'), 422, "invalid_conf"),
        (submit(url, "c2", package("x4"), conf='{"pipeline.min.replication.count": 0}'), 422,
         "invalid_conf"),
        (submit(url, "c5", valid_package(kind="sdp", extra={"note.txt": "x7"}),
                conf='{"pipeline.standby": "hot"}'), 422, "invalid_conf"),
        (submit(url, "c3", package("x5"), conf="{not json"), 422, "invalid_request"),
        (submit(url, "c4", package("x6"), conf="[1, 2]"), 422, "invalid_request"),
        (submit(url, "big", b"x" * (MAX_UPLOAD + 1)), 413, "package_too_large"),
        (submit(url, "huge", b"x" * (MAX_UPLOAD + 200_000)), 413, "package_too_large"),
        (submit(url, "empty", b""), 422, "invalid_request"),
        (submit(url, "garbage", b"not a zip"), 422, "invalid_package"),
        (httpx.post(f"{url}/api/v1/pipelines", data={"name": "nofile"}), 422, "invalid_request"),
        (httpx.post(f"{url}/api/v1/pipelines/nope/activate"), 404, "unknown_pipeline"),
        (httpx.get(f"{url}/api/v1/pipelines/nope"), 404, "unknown_pipeline"),
        (httpx.post(f"{url}/api/v1/pipelines/keeper/kill", content=b"{bad",
                    headers={"content-type": "application/json"}), 422, "invalid_request"),
        (httpx.post(f"{url}/api/v1/pipelines/keeper/kill", json={"wait_secs": -1}), 422,
         "invalid_request"),
        (httpx.post(f"{url}/api/v1/pipelines/keeper/rebalance", json={"conf": {"nope": 1}}),
         422, "invalid_conf"),
        (httpx.post(f"{url}/api/v1/pipelines/keeper/rebalance", json={"conf": {}}), 422,
         "invalid_request"),
    ]  # fmt: skip
    for response, status, code in cases:
        assert (response.status_code, error_of(response)) == (status, code), response.text
        assert response.json()["message"]
    assert pipelines_on(url) == before
    assert sorted(p.name for p in (leader.local_dir / "packages").iterdir()) == packages_before


def test_a_retried_submit_with_the_same_request_id_creates_one_pipeline(cluster):
    url = leader_url(cluster)
    code = package("once-code")
    first = submit(url, "once", code, request_id="req-42")
    second = submit(url, "once", code, request_id="req-42")
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json() == second.json()
    other = submit(url, "once", code, request_id="req-43")
    assert (other.status_code, error_of(other)) == (409, "pipeline_exists")


def test_metrics_and_the_status_page(cluster):
    leader = cluster.wait_for_agreed_leader()
    for nimbus in cluster.nimbuses:
        text = httpx.get(f"{nimbus.url}/metrics").text
        expected = "1.0" if nimbus.address == leader else "0.0"
        assert f"stratus_nimbus_is_leader {expected}" in text
        assert "stratus_nimbus_zookeeper_connected 1.0" in text
        assert re.search(r"stratus_nimbus_epoch [1-9]", text)
        assert 'stratus_nimbus_requests_total{method="GET",route="/api/v1/leader"' in text
        page = httpx.get(f"{nimbus.url}/").text
        assert f"Leader: <b>{leader}</b>" in page
    assert (
        "stratus_nimbus_leadership_gained_total 1.0"
        in httpx.get(f"{cluster.by_address(leader).url}/metrics").text
    )


def test_the_openapi_document_describes_every_route(cluster):
    doc = httpx.get(f"{cluster.nimbuses[0].url}/api/v1/openapi.json").json()
    assert set(doc["paths"]) >= {
        "/api/v1/cluster",
        "/api/v1/leader",
        "/api/v1/pipelines",
        "/api/v1/pipelines/{name}",
        "/api/v1/pipelines/{name}/kill",
        "/api/v1/pipelines/{name}/activate",
        "/api/v1/pipelines/{name}/deactivate",
        "/api/v1/pipelines/{name}/rebalance",
        "/api/v1/code/{digest}",
        "/api/v1/supervisors/{supervisor}/cordon",
        "/api/v1/supervisors/{supervisor}/uncordon",
        "/api/v1/supervisors/{supervisor}/drain",
    }
    drain = doc["paths"]["/api/v1/supervisors/{supervisor}/drain"]
    assert set(drain) == {"get", "post"}
    assert {tag for operation in drain.values() for tag in operation["tags"]} == {"leader only"}
    assert drain["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/CordonStatus"
    }


def test_the_openapi_document_gives_the_summary_its_own_pipeline_entries(cluster):
    doc = httpx.get(f"{cluster.nimbuses[0].url}/api/v1/openapi.json").json()
    answer = doc["paths"]["/api/v1/cluster"]["get"]["responses"]["200"]["content"]
    schemas = doc["components"]["schemas"]

    assert answer["application/json"]["schema"] == {"$ref": "#/components/schemas/ClusterSummary"}
    listed = schemas["ClusterSummary"]["properties"]["pipelines"]["items"]
    assert listed == {"$ref": "#/components/schemas/PipelineSummary"}
    assert list(schemas["PipelineSummary"]["properties"]) == list(PipelineSummary.model_fields)
    assert "conf" in schemas["PipelineRecord"]["properties"]  # the pipeline's own read


def zookeeper_packets_from(zk: ZooKeeperServer, session_id: int) -> int:
    """Packets ZooKeeper received on the connection of one session (its `cons` statistics)."""
    for line in zk.four_letter("cons").splitlines():
        if f"sid=0x{session_id:x}" in line:
            return int(re.search(r"recved=(\d+)", line).group(1))  # type: ignore[union-attr]
    raise AssertionError(f"no connection of session 0x{session_id:x} in `cons`")


def test_cluster_summary_requests_cause_no_zookeeper_reads(cluster, zk_server):
    standby = cluster.by_address(
        next(a for a in cluster.seeds if a != cluster.wait_for_agreed_leader())
    )
    with kazoo_client(zk_server.connect_string) as zk:
        _, stat = zk.get(f"{cluster.root}/nimbuses/{standby.address}")
    session = stat.ephemeralOwner
    requests = 500
    with httpx.Client(base_url=standby.url) as http:
        before = zookeeper_packets_from(zk_server, session)
        for _ in range(requests):
            assert http.get("/api/v1/cluster").status_code == 200
        after = zookeeper_packets_from(zk_server, session)
    # Only the session's own pings and lease renewals, a few per second, reach ZooKeeper.
    assert after - before < requests / 20, f"{after - before} packets for {requests} requests"


def zip_of(*entries: tuple[str | zipfile.ZipInfo, bytes], manifest: bool = True) -> bytes:
    """A zip holding a valid manifest and module (unless ``manifest`` is false) plus entries."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        if manifest:
            archive.writestr("stratus.yaml", "name: evil\nkind: app\nentrypoint: main:run\n")
            archive.writestr("main.py", "def run(spark, context):\n    pass\n")
        with warnings.catch_warnings():  # zipfile warns of the duplicate it is asked to write
            warnings.simplefilter("ignore", UserWarning)
            for name, data in entries:
                archive.writestr(name, data)
    return buffer.getvalue()


def special(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = mode << 16
    return info


MALICIOUS = {
    "absolute path": (zip_of(("/etc/cron.d/evil", b"x")), "/etc/cron.d/evil"),
    "parent component": (zip_of(("lib/../../evil.py", b"x")), "lib/../../evil.py"),
    "symlink": (zip_of((special("link", stat.S_IFLNK | 0o777), b"/etc/passwd")), "link"),
    "device file": (zip_of((special("dev", stat.S_IFCHR | 0o600), b"")), "dev"),
    "duplicate": (zip_of(("twice.py", b"a"), ("twice.py", b"b")), "twice.py"),
    "zip bomb": (zip_of(("bomb.bin", bytes(3 << 20))), "bomb.bin"),
    "no manifest": (zip_of(("main.py", b"x"), manifest=False), "stratus.yaml"),
}


@pytest.mark.parametrize("case", sorted(MALICIOUS))
def test_every_malicious_package_is_rejected_naming_its_entry_and_nothing_is_kept(cluster, case):
    data, entry = MALICIOUS[case]
    assert len(data) <= MAX_UPLOAD, "the case must be refused for what it is, not its size"
    url = leader_url(cluster)
    leader = cluster.by_address(cluster.wait_for_agreed_leader())
    before = pipelines_on(url)
    packages_before = sorted(p.name for p in (leader.local_dir / "packages").iterdir())
    response = submit(url, f"evil-{case.replace(' ', '-')}", data)
    assert (response.status_code, error_of(response)) == (422, "invalid_package"), response.text
    assert entry in response.json()["message"]
    assert pipelines_on(url) == before
    assert sorted(p.name for p in (leader.local_dir / "packages").iterdir()) == packages_before


def test_the_cli_on_real_nimbuses_reports_by_class_and_prints_plain_when_piped(cluster):
    seeds = ["-c", f"nimbus.seeds={','.join(n.address for n in cluster.nimbuses)}"]

    missing = CliRunner().invoke(main, [*seeds, "--timeout", "10", "status", "nosuch", "--json"])
    listed = CliRunner().invoke(main, [*seeds, "list"])

    assert missing.exit_code == 3, missing.output  # not found
    assert json.loads(missing.stdout)["error"] == "unknown_pipeline"
    assert listed.exit_code == 0, listed.output
    assert "┏" not in listed.stdout  # not a terminal: no table drawing
