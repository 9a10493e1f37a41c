"""The web UI's pictures in a real browser (Debian's Chromium, driven by playwright) on a
live cluster running a real streaming pipeline on Spark: two nimbuses, one supervisor, the
streaming example fed events as it runs. The charts of the pipeline's last hour draw the
points its heartbeats gave, on the leader's page and on the standby's (which reads the
heartbeats itself); the leader's ``/metrics`` carries the same figures; the cluster page
shows the slots in use and, once the leader is killed, the leaderless gap on the terms'
timeline, at least the dead leader's ZooKeeper session timeout long.

With ``STRATUS_UI_SCREENSHOTS=1`` the pictures are saved as the PNGs of docs/ui.md.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stratus.api.series import PipelineSeries
from stratus.zk.server import ZooKeeperServer
from tests.harness.browser import VIEWPORT, chromium, require_chromium
from tests.harness.pipeline_cluster import PipelineCluster, pipeline_cluster
from tests.harness.spark_packages import example_package
from tests.harness.zkfixtures import wait_until

# Spark tests: in the Spark group (tests/conftest.py), not the browser tests' own, which would
# run beside it
pytestmark = [pytest.mark.spark, pytest.mark.browser]

NAME = "counts"
SHOWN_MS = 30_000  # what a page waits for a picture: a few polling rounds, with room
POINTS_SECS = 90.0  # for the series to gather its first points after Spark started
DOCS_UI = Path(__file__).resolve().parents[2] / "docs" / "ui"
CSP = "default-src 'self'; script-src 'self'; img-src 'self' data:"
OPTIONS = [
    "-c", "nimbus.ui.refresh.secs=1",
    "-c", "nimbus.ui.series.step.secs=1",
]  # fmt: skip


class Events:
    """JSON-lines files of events stamped now, one file per call: the example's input."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True)
        self.written = 0

    def feed(self) -> bool:
        """One more file of ten events; False, so that it can sit in a wait's condition."""
        now = time.time()
        lines = [
            json.dumps({"id": self.written + i, "key": f"k{i % 3}", "ts": _iso(now)})
            for i in range(10)
        ]
        (self.directory / f"events-{self.written:06d}.json").write_text("\n".join(lines) + "\n")
        self.written += 10
        return False


def _iso(secs: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(secs))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(require_chromium()) as running:
        yield running


@pytest.fixture(scope="module")
def cluster(
    browser: Any, zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[PipelineCluster, Events]]:
    tmp = tmp_path_factory.mktemp("ui-charts")
    with pipeline_cluster(
        zk_server.connect_string, tmp, "ui-charts", nimbuses=2, supervisors=("s1",), extra=OPTIONS
    ) as running:
        events = Events(tmp / "input")
        events.feed()
        conf = {
            "spark.stratus.example.input": str(events.directory),
            "spark.stratus.example.output": str(tmp / "output"),
        }
        running.client.submit(NAME, example_package("streaming"), conf)
        running.wait_running(NAME)
        yield running, events


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(SHOWN_MS)
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()


def series_of(url: str) -> PipelineSeries:
    answer = httpx.get(f"{url}/api/v1/pipelines/{NAME}/series", timeout=10.0)
    assert answer.status_code == 200, answer.text
    return PipelineSeries.model_validate_json(answer.content)


def charted(series: PipelineSeries) -> bool:
    """Points enough for every chart: rows read, batches timed, a watermark."""
    points = series.points
    return (
        len(points) >= 3
        and any(p.input_rows_per_second > 0 for p in points)
        and any(p.watermark_lag_secs is not None for p in points)
        and all(p.batch_duration_secs is not None for p in points)
    )


def wait_charted(url: str, events: Events) -> None:
    """Feed events until the series ``url`` answers is charted; fail showing the last."""
    last: list[PipelineSeries] = []

    def done() -> bool:
        events.feed()
        last[:] = [series_of(url)]
        return charted(last[0])

    try:
        wait_until(done, POINTS_SECS, f"the series of {NAME} on {url} to hold rows and batches")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the last answer: {last}") from None


def under_csp(page: Any, url: str) -> list[str]:
    """Serve ``url`` (the page) to ``page`` with a strict Content-Security-Policy, as a proxy
    in front of the nimbus may add; the violations the browser reports about scripts."""

    def add(route: Any) -> None:
        response = route.fetch()
        route.fulfill(
            response=response, headers={**response.headers, "content-security-policy": CSP}
        )

    page.route(url, add)
    violations: list[str] = []
    page.on(
        "console",
        lambda message: (
            violations.append(message.text)
            if "Content Security Policy" in message.text and "script" in message.text
            else None
        ),
    )
    return violations


def shoot(locator: Any, name: str) -> None:
    if os.environ.get("STRATUS_UI_SCREENSHOTS"):
        locator.screenshot(path=str(DOCS_UI / name))


def test_a_running_streams_charts_draw_its_heartbeats_on_the_leader_and_a_standby(
    cluster: tuple[PipelineCluster, Events], page: Any
) -> None:
    pipelines, events = cluster
    nimbuses = pipelines.nimbuses
    leader = nimbuses.by_address(nimbuses.wait_for_agreed_leader())
    standby = next(n for n in nimbuses.nimbuses if n is not leader)
    for nimbus in (leader, standby):
        wait_charted(nimbus.url, events)
    answer = series_of(standby.url)
    assert all(p.trigger_interval_secs == 2.0 for p in answer.points)  # the manifest's

    violations = under_csp(page, f"{standby.url}/")
    for nimbus in (standby, leader):
        page.goto(f"{nimbus.url}/#/pipelines/{NAME}")
        page.wait_for_selector("#chart-rates canvas")
        page.wait_for_function("document.querySelector('#chart-watermark').dataset.points >= 3")
        batch = page.evaluate("StratusCharts.data('chart-batch')")
        times, durations, triggers = batch
        assert len(times) >= 3 and times == sorted(times)
        assert all(d is not None and d > 0 for d in durations)
        assert set(triggers) == {2.0}
        rates = page.evaluate("StratusCharts.data('chart-rates')")
        assert any(r is not None and r > 0 for r in rates[1])  # input rows per second
        assert len(rates) == 3 and len(rates[2]) == len(times)  # processed, point by point
        lags = page.evaluate("StratusCharts.data('chart-watermark')")[1]
        assert any(lag is not None and lag > 0 for lag in lags)
    assert violations == []  # every script a file of the nimbus: none inline
    shoot(page.locator("#series"), "pipeline-charts.png")


def test_the_leaders_metrics_carry_the_streams_figures(
    cluster: tuple[PipelineCluster, Events],
) -> None:
    pipelines, events = cluster
    nimbuses = pipelines.nimbuses
    url = nimbuses.by_address(nimbuses.wait_for_agreed_leader()).url
    found: dict[str, float] = {}

    def scraped() -> bool:
        events.feed()
        text = httpx.get(f"{url}/metrics", timeout=10.0).text
        found.clear()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("pipeline") == NAME and "le" not in sample.labels:
                    found[sample.name] = sample.value
        return found.get("stratus_pipeline_batch_duration_seconds_count", 0) >= 2 and (
            "stratus_pipeline_watermark_lag_seconds" in found
        )

    wait_until(scraped, POINTS_SECS, f"the batch series of {NAME} on the leader's /metrics")
    count = found["stratus_pipeline_batch_duration_seconds_count"]
    assert found["stratus_pipeline_batch_duration_seconds_sum"] > 0
    assert found["stratus_pipeline_batch_duration_seconds_sum"] / count < 120  # seconds, not ms
    assert found["stratus_pipeline_trigger_interval_seconds"] == 2.0
    assert found["stratus_pipeline_watermark_lag_seconds"] > 0
    assert found["stratus_pipeline_input_rows_per_second"] >= 0


def test_a_pipelines_runs_show_as_a_timeline_and_nothing_without_the_route(
    cluster: tuple[PipelineCluster, Events], page: Any
) -> None:
    """The runs route's answer is given by the browser itself: while it answers 404 (a
    nimbus older than the route) the page shows no runs at all, then a timeline of two."""
    pipelines, _ = cluster
    nimbuses = pipelines.nimbuses
    url = nimbuses.by_address(nimbuses.wait_for_agreed_leader()).url
    gone = {"error": "not_found", "message": "Not Found"}
    answer: dict[str, Any] = {"status": 404, "json": gone}
    page.route(f"**/api/v1/pipelines/{NAME}/runs*", lambda route: route.fulfill(**answer))
    page.goto(f"{url}/#/pipelines/{NAME}")
    page.wait_for_selector("#record td")
    page.wait_for_selector("#series")
    assert page.locator("#runs-timeline").count() == 0
    now = time.time()
    runs = {
        "pipeline": NAME,
        "runs": [
            {"run": 2, "supervisor": "s1", "started": now - 60, "ended": None, "outcome": None},
            {"run": 1, "supervisor": "s1", "started": now - 300, "ended": now - 61,
             "outcome": "MOVED"},
        ],
    }  # fmt: skip
    answer.clear()
    answer["json"] = runs
    page.wait_for_selector("#runs-timeline[data-runs='2']")
    assert page.locator("#runs-timeline .run").count() == 2
    assert "MOVED" in (page.get_attribute("#runs-timeline .run[data-run='1']", "title") or "")


def test_the_cluster_page_shows_slots_in_use_and_a_killed_leaders_gap(
    cluster: tuple[PipelineCluster, Events], page: Any
) -> None:
    pipelines, _ = cluster
    nimbuses = pipelines.nimbuses
    first = nimbuses.by_address(nimbuses.wait_for_agreed_leader())
    page.goto(f"{first.url}/")
    row = page.wait_for_selector("#slots .slot-row[data-supervisor=s1]")
    assert row.get_attribute("data-used") == "1"
    assert page.locator("#slots .slot-row[data-supervisor=s1] .slot.used").count() == 1
    assert page.locator("#terms-timeline .term").count() >= 1

    first.signal(signal.SIGKILL)  # no end written: its successor measures the gap
    first.wait()
    second = nimbuses.by_address(nimbuses.wait_for_agreed_leader(not_=first.address, skip=[first]))
    page.goto(f"{second.url}/")
    gap = page.wait_for_selector("#terms-timeline .gap")
    terms = httpx.get(f"{second.url}/api/v1/leader/terms", timeout=10.0).json()["terms"]
    newest, killed = terms[0], terms[1]
    assert killed["nimbus"] == first.address and killed["ended_by"] == "successor"
    assert float(gap.get_attribute("data-gap-secs")) == newest["failover_secs"]
    assert newest["failover_secs"] >= killed["session_timeout_secs"]  # the dead session's
    assert "gap before epoch" in page.inner_text("#terms-timeline .legend")
    shoot(page.locator("#terms-timeline"), "terms-timeline.png")
    shoot(page.locator("#slots"), "slots.png")
