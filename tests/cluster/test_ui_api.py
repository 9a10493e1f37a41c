"""The web UI's reads and assets on a cluster of three real nimbus processes and a real
supervisor (no Spark): every nimbus answers the same, secrets stay redacted, and every file
a page loads comes from the nimbus itself."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from stratus.api.overview import NimbusSelf, SupervisorList, WorkersOverview
from stratus.api.records import AssignmentHistory, LeaderTerms, PipelineStatus
from stratus.api.series import PipelineSeries
from stratus.cli.exit_codes import ExitCode
from stratus.cli.main import main
from stratus.zk.server import ZooKeeperServer
from tests.harness.ui_cluster import GONE, REFRESH_SECS, SECRET, SPARK_UI, UiCluster, ui_cluster
from tests.harness.zkfixtures import wait_until

# src= or href= naming a scheme or a host (//host): a file from elsewhere
EXTERNAL_REF = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:|//)""", re.I)
LOCAL_REF = re.compile(r"""(?:src|href)\s*=\s*["']?(/[^"' >]+)""", re.I)


@pytest.fixture(scope="module")
def cluster(
    zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiCluster]:
    logs = tmp_path_factory.mktemp("ui-api")
    with ui_cluster(zk_server.connect_string, logs, "ui-api") as running:
        yield running


def test_every_page_loads_its_assets_from_this_nimbus_only(cluster):
    url = cluster.nimbuses.nimbuses[0].url
    for page in ("/", "/api/v1/docs"):
        html = httpx.get(f"{url}{page}").text
        assert not EXTERNAL_REF.search(html), (page, EXTERNAL_REF.search(html))
        refs = LOCAL_REF.findall(html)
        assert any(ref.endswith(".js") for ref in refs), (page, refs)
        for ref in refs:
            if ref.startswith("/api/") or ref == "/metrics":
                continue  # links to the API, not assets
            served = httpx.get(f"{url}{ref}")
            assert served.status_code == 200 and served.content, (page, ref)
    page = httpx.get(f"{url}/").text
    assert f"name='stratus-refresh-secs' content='{REFRESH_SECS}'" in page  # the page polls so
    for own in ("/ui/static/app.js", "/ui/static/charts.js", "/ui/static/ui.css"):
        text = httpx.get(f"{url}{own}").text
        assert "http://" not in text and "https://" not in text, own


def test_every_nimbus_answers_a_pipelines_series_and_an_unknown_name_is_404(cluster):
    for nimbus in cluster.nimbuses.nimbuses:
        answer = httpx.get(f"{nimbus.url}/api/v1/pipelines/etl/series")
        assert answer.status_code == 200, answer.text
        series = PipelineSeries.model_validate_json(answer.content)
        assert series.pipeline == "etl" and series.step_secs > 0
        assert series.points == []  # its only worker heartbeat is not a running one
        missing = httpx.get(f"{nimbus.url}/api/v1/pipelines/absent/series")
        assert missing.status_code == 404 and missing.json()["error"] == "unknown_pipeline"
    document = httpx.get(f"{cluster.nimbuses.nimbuses[0].url}/api/v1/openapi.json").json()
    assert "/api/v1/pipelines/{name}/series" in document["paths"]


def test_every_nimbus_lists_the_supervisor_with_its_slots_and_heartbeat_age(cluster):
    for nimbus in cluster.nimbuses.nimbuses:

        def heard(url: str = nimbus.url) -> bool:
            answer = SupervisorList.model_validate_json(
                httpx.get(f"{url}/api/v1/supervisors").content
            )
            found = {s.id: s for s in answer.supervisors}
            return "s1" in found and found["s1"].heartbeat_age_secs is not None

        wait_until(heard, 30, f"{nimbus.address} to list s1 with a heartbeat")
        answer = SupervisorList.model_validate_json(
            httpx.get(f"{nimbus.url}/api/v1/supervisors").content
        )
        (s1,) = answer.supervisors
        assert (s1.id, s1.slots, s1.used, s1.running) == ("s1", 2, 0, [])
        assert s1.heartbeat_age_secs is not None and s1.heartbeat_age_secs >= 0


def test_every_nimbus_shows_where_pipelines_run_with_their_errors_redacted(cluster):
    for nimbus in cluster.nimbuses.nimbuses:
        response = httpx.get(f"{nimbus.url}/api/v1/workers")
        assert SECRET not in response.text
        overview = WorkersOverview.model_validate_json(response.content)
        (etl,) = [p for p in overview.pipelines if p.pipeline == "etl"]
        (beat,) = etl.workers
        assert (beat.supervisor, beat.restarts, beat.last_batch_id) == (GONE, 3, 17)
        assert beat.spark_ui == SPARK_UI
        assert beat.error == "boom: DB_PASSWORD=***"
        assert beat.last_crash is not None and "***" in beat.last_crash.error


def test_each_nimbus_says_whether_it_leads_and_its_zookeeper_state(cluster):
    leader = cluster.nimbuses.wait_for_agreed_leader()
    for nimbus in cluster.nimbuses.nimbuses:
        me = NimbusSelf.model_validate_json(httpx.get(f"{nimbus.url}/api/v1/nimbus").content)
        assert me.address == nimbus.address
        assert me.is_leader == (nimbus.address == leader)
        assert me.leader == leader and me.epoch is not None
        assert me.zookeeper == "connected"


def test_a_cluster_without_auth_gives_every_caller_the_admin_role(cluster):
    caller = httpx.get(f"{cluster.nimbuses.nimbuses[0].url}/api/v1/whoami").json()
    assert caller == {"role": "admin", "principal": None, "auth_required": False}


def test_another_nimbus_origin_may_call_across_origins_and_no_other(cluster):
    first, second = cluster.nimbuses.nimbuses[:2]
    preflight = {"Access-Control-Request-Method": "POST"}
    allowed = httpx.options(
        f"{second.url}/api/v1/pipelines/etl/kill", headers={"Origin": first.url, **preflight}
    )
    assert allowed.status_code == 204
    assert allowed.headers["access-control-allow-origin"] == first.url
    assert "authorization" in allowed.headers["access-control-allow-headers"]
    read = httpx.get(f"{second.url}/api/v1/leader", headers={"Origin": first.url})
    assert read.headers["access-control-allow-origin"] == first.url
    stranger = "http://127.0.0.1:1"
    refused = httpx.get(f"{second.url}/api/v1/leader", headers={"Origin": stranger})
    assert "access-control-allow-origin" not in refused.headers


def test_a_change_sent_by_another_sites_page_is_refused(cluster):
    """A browser attaches a client certificate to any site's form post: only the pages of
    the cluster's own nimbuses (or clients that send no Origin) may change anything."""
    url = cluster.nimbuses.by_address(cluster.nimbuses.wait_for_agreed_leader()).url
    activate = f"{url}/api/v1/pipelines/etl/activate"
    forged = httpx.post(activate, headers={"Origin": "http://127.0.0.1:1"})
    assert (forged.status_code, forged.json()["error"]) == (403, "forbidden")
    assert cluster.client.status("etl").status is PipelineStatus.INACTIVE
    absent = f"{url}/api/v1/pipelines/absent/activate"
    own = httpx.post(absent, headers={"Origin": url})  # the page of this nimbus
    assert own.json()["error"] == "unknown_pipeline"
    assert httpx.post(absent).json()["error"] == "unknown_pipeline"  # no Origin: a script


def test_every_nimbus_answers_a_pipelines_assignment_history_newest_first(cluster):
    for nimbus in cluster.nimbuses.nimbuses:
        answer = AssignmentHistory.model_validate_json(
            httpx.get(f"{nimbus.url}/api/v1/pipelines/etl/history").content
        )
        assert answer.pipeline == "etl"
        steps = [(c.reason.value, c.supervisor, c.previous) for c in answer.changes]
        assert steps == [("deactivated", None, GONE), ("placed", GONE, None)]
        assert answer.changes[0].at >= answer.changes[1].at
        assert answer.changes[0].epoch >= 1


def test_the_cli_shows_the_assignment_history_and_the_leader_terms(cluster):
    seeds = ["-c", f"nimbus.seeds={','.join(cluster.nimbuses.seeds)}"]
    shown = CliRunner().invoke(main, ["history", "etl", *seeds])
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()  # piped: tab-separated, newest first
    assert lines[:2] == [
        "# assignment history of etl",
        "at\tepoch\treason\tfrom\tto\tgeneration\tdigest",
    ]
    assert [line.split("\t")[2:5] for line in lines[2:]] == [
        ["deactivated", GONE, "-"],
        ["placed", "-", GONE],
    ]
    as_json = CliRunner().invoke(main, ["history", "etl", "--json", *seeds])
    assert AssignmentHistory.model_validate_json(as_json.stdout).changes[1].supervisor == GONE
    missing = CliRunner().invoke(main, ["history", "nope", *seeds])
    assert missing.exit_code == ExitCode.NOT_FOUND and "nope" in missing.stderr

    leader = cluster.client.leader()
    terms = CliRunner().invoke(main, ["terms", "--json", *seeds])
    assert terms.exit_code == 0, terms.output
    newest = LeaderTerms.model_validate_json(terms.stdout).terms[0]
    assert (newest.epoch, newest.nimbus, newest.ended_at) == (leader.epoch, leader.address, None)
    table = CliRunner().invoke(main, ["terms", *seeds]).stdout.splitlines()
    assert table[2].split("\t")[:2] == [str(leader.epoch), leader.address]


def test_the_history_of_an_unknown_pipeline_is_not_found_and_documented(cluster):
    url = cluster.nimbuses.nimbuses[0].url
    missing = httpx.get(f"{url}/api/v1/pipelines/nope/history")
    assert missing.status_code == 404
    assert missing.json()["error"] == "unknown_pipeline"
    document = httpx.get(f"{url}/api/v1/openapi.json").json()
    assert "get" in document["paths"]["/api/v1/pipelines/{name}/history"]


def test_the_runs_of_an_unknown_pipeline_are_not_found_and_documented(cluster):
    url = cluster.nimbuses.nimbuses[0].url
    missing = httpx.get(f"{url}/api/v1/pipelines/nope/runs")
    assert missing.status_code == 404
    assert missing.json()["error"] == "unknown_pipeline"
    assert httpx.get(f"{url}/api/v1/pipelines/nope/runs/3").json()["error"] == "unknown_pipeline"
    assert httpx.get(f"{url}/api/v1/pipelines/nope/runs?limit=0").status_code == 422
    paths = httpx.get(f"{url}/api/v1/openapi.json").json()["paths"]
    assert "get" in paths["/api/v1/pipelines/{name}/runs"]
    assert "get" in paths["/api/v1/pipelines/{name}/runs/{run}"]


def requests_by_route(url: str) -> dict[tuple[str, str], float]:
    """``stratus_nimbus_requests_total`` of a nimbus's ``/metrics``: (route, status) -> count."""
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            if sample.name == "stratus_nimbus_requests_total" and sample.labels["method"] == "GET":
                key = (sample.labels["route"], sample.labels["status"])
                counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def test_the_page_and_its_files_are_counted_under_their_own_routes(cluster):
    url = cluster.nimbuses.nimbuses[1].url
    before = requests_by_route(url)
    answers = {
        path: httpx.get(f"{url}{path}").status_code
        for path in ("/", "/ui/static/app.js", "/ui/static/ui.css", "/ui/swagger/none.js")
    }
    httpx.get(f"{url}/no/such/route")

    assert answers["/ui/swagger/none.js"] == 404  # a file that does not exist: not a 500

    after = requests_by_route(url)
    ours = {"/", "/ui/{asset}", "unmatched"}  # not /metrics: the scrape counts itself
    grown = {
        key: after[key] - before.get(key, 0.0)
        for key in after
        if key[0] in ours and after[key] != before.get(key)
    }
    assert grown == {
        ("/", "200"): 1.0,
        ("/ui/{asset}", "200"): 2.0,
        ("/ui/{asset}", "404"): 1.0,
        ("unmatched", "404"): 1.0,
    }
