"""The web UI in a real browser (Debian's Chromium, driven by playwright) on a live cluster:
three real nimbus processes that require tokens, a real supervisor, pipelines that need no
Spark (``tests/harness/ui_cluster.py``). The user pastes a token, the pages show the cluster's data,
an action made on a standby's page reaches the leader, and a failover shows without a reload.

The tests share one cluster and one browser, in this order: the last one kills the leader.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from stratus.api.records import PipelineStatus
from stratus.local.processes import NimbusProcess
from stratus.zk.server import ZooKeeperServer
from tests.harness.browser import VIEWPORT, chromium, require_chromium
from tests.harness.package_factory import valid_package
from tests.harness.secure_cluster import READ, SUBMIT
from tests.harness.ui_cluster import GONE, SECRET, SPARK_UI, UiCluster, ui_cluster
from tests.harness.zkfixtures import wait_until

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]

SHOWN_MS = 20_000  # what a page waits for data to show: a few polling rounds, with room


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium(require_chromium()) as running:
        yield running


@pytest.fixture(scope="module")
def cluster(
    browser: Any, zk_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiCluster]:
    logs = tmp_path_factory.mktemp("ui-browser")
    with ui_cluster(zk_server.connect_string, logs, "ui-browser", tokens=True) as running:
        yield running


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(SHOWN_MS)
    opened = context.new_page()
    opened.on("dialog", lambda dialog: dialog.accept())  # the kill's confirmation
    try:
        yield opened
    finally:
        context.close()


def leader(cluster: UiCluster) -> NimbusProcess:
    return cluster.nimbuses.by_address(cluster.nimbuses.wait_for_agreed_leader())


def standbys(cluster: UiCluster) -> list[NimbusProcess]:
    first = leader(cluster)
    return [n for n in cluster.nimbuses.nimbuses if n is not first]


def sign_in(page: Any, url: str, token: str) -> None:
    """Open the page and paste the token, as a user does."""
    page.goto(url)
    page.fill("#token-form input[name=token]", token)
    page.click("#token-form button")


def after_rounds(page: Any, rounds: int) -> None:
    """Wait until the page has refreshed ``rounds`` more times."""
    done = int(page.get_attribute("#ui", "data-round"))
    page.wait_for_selector(f"#ui[data-round='{done + rounds}']")


def test_the_pages_show_the_live_clusters_data_with_assets_from_the_nimbus_only(cluster, page):
    url = leader(cluster).url
    origins: set[str] = set()
    page.on("request", lambda request: origins.add(urlsplit(request.url).netloc))
    page.goto(f"{url}/")
    page.wait_for_selector("#refresh-error")  # no token yet: the page says what to do
    assert "authentication" in page.inner_text("#refresh-error")
    sign_in(page, f"{url}/", READ)
    page.wait_for_selector("#supervisors td:text-is('s1')")
    assert page.inner_text("#role").strip() == "role: read"
    assert page.inner_text("#leader") == leader(cluster).address
    roles = page.locator("#nimbuses td.role").all_inner_texts()
    assert sorted(roles) == ["leader", "standby", "standby"]
    etl = page.locator("#pipelines tr[data-pipeline=etl]")
    cells = etl.locator("td").all_inner_texts()
    assert cells[1:7] == ["INACTIVE", "", "RESTARTING", "3", "17", "12.5"]
    assert "DB_PASSWORD=***" in cells[7]
    assert etl.locator("a", has_text="Spark UI").get_attribute("href") == SPARK_UI
    assert page.locator("#pipelines tr[data-pipeline=spare]").count() == 1
    assert page.locator("#submit-form").count() == 0  # read: no actions shown
    first_term = page.locator("#terms tbody tr").nth(0).locator("td").all_inner_texts()
    assert first_term[1:2] + first_term[3:4] == [leader(cluster).address, "leading"]

    page.goto(f"{url}/#/pipelines/etl")  # the token stays for the tab (sessionStorage)
    page.wait_for_selector("#crashes td:text-is('exit code 3')")
    assert page.inner_text("#record [data-fact=status]") == "INACTIVE"
    conf = page.locator("#conf td").all_inner_texts()
    assert conf == ["pipeline.env.DB_PASSWORD", "***", "pipeline.owners", "ci"]
    assert SECRET not in page.content()
    page.goto(f"{url}/#/pipelines/absent")  # a name that does not exist: said, not an error
    page.wait_for_selector("#gone")
    assert page.locator("#refresh-error").count() == 0

    page.set_extra_http_headers({"Authorization": f"Bearer {READ}"})  # the docs need read
    page.goto(f"{url}/api/v1/docs")
    page.wait_for_selector(".swagger-ui .opblock-summary-path")  # rendered, with no CDN
    assert origins == {urlsplit(url).netloc}, origins


def test_the_leader_terms_show_as_the_terms_route_answers(cluster, page):
    """How a term's row reads (its times, ``leading``, the failover in seconds), from a fixed
    answer of ``GET /api/v1/leader/terms`` given to the page by the browser itself; the real
    route's answer after a real failover is the last test's."""
    terms = {
        "terms": [
            {"epoch": 2, "nimbus": "10.0.0.2:6627", "started_at": 1764038041.0,
             "ended_at": None, "failover_secs": 0.25},
            {"epoch": 1, "nimbus": "10.0.0.1:6627", "started_at": 1764037000.0,
             "ended_at": 1764038040.5, "failover_secs": None},
        ]
    }  # fmt: skip
    page.route("**/api/v1/leader/terms", lambda route: route.fulfill(json=terms))
    sign_in(page, f"{leader(cluster).url}/", READ)
    page.wait_for_selector("#terms td:text-is('10.0.0.2:6627')")
    rows = page.locator("#terms tbody tr")
    assert rows.nth(0).locator("td").all_inner_texts() == [
        "2", "10.0.0.2:6627", "2025-11-25T02:34:01Z", "leading", "0.250 s",
    ]  # fmt: skip
    assert rows.nth(1).locator("td").all_inner_texts() == [
        "1", "10.0.0.1:6627", "2025-11-25T02:16:40Z", "2025-11-25T02:34:00Z", "",
    ]  # fmt: skip


def test_the_pipeline_page_shows_its_assignment_history_newest_first(cluster, page):
    """``etl`` was placed on the registration ``s-gone``, then deactivated
    (``tests/harness/ui_cluster.py``): two changes, as the history route answers them."""
    sign_in(page, f"{standbys(cluster)[0].url}/#/pipelines/etl", READ)
    page.wait_for_selector("#history td.reason:text-is('deactivated')")
    rows = page.locator("#history tbody tr")
    assert rows.count() == 2
    newest, oldest = (rows.nth(i).locator("td").all_inner_texts() for i in (0, 1))
    assert (newest[2], newest[3], newest[4]) == ("deactivated", "none", GONE)
    assert (oldest[2], oldest[3], oldest[4]) == ("placed", GONE, "none")
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row[0]) for row in (newest, oldest))
    assert newest[0] >= oldest[0]


def test_an_action_from_a_standbys_page_reaches_the_leader(cluster, page):
    standby = standbys(cluster)[0]
    sign_in(page, f"{standby.url}/#/pipelines/etl", SUBMIT)
    page.wait_for_selector("#leader-link")  # a standby says who leads and links to it
    assert page.get_attribute("#leader-link", "href") == f"{leader(cluster).url}/"
    page.click("#log-load")  # through the logs route, with the token: its answer shown
    page.wait_for_selector(f"#log .error:has-text('{GONE}')")
    new_code = valid_package("etl", extra={"note.txt": "v2"})
    page.set_input_files(
        "#update-form input[type=file]",
        {"name": "etl.zip", "mimeType": "application/zip", "buffer": new_code},
    )
    after_rounds(page, 2)  # the chosen file survives the page's refreshes
    page.click("#update-form button")  # a package upload, sent to the leader
    page.wait_for_selector("#notice:has-text('update etl')")
    assert "update etl:" in page.inner_text("#notice")
    wait_until(lambda: cluster.client.status("etl").version == 2, 30, "etl's version 2")
    page.wait_for_selector("#record [data-fact=version]:text-is('2')")
    page.click("#action-rollback")  # back to the version kept, from the standby's page
    page.wait_for_selector("#notice:has-text('rollback etl: done')")
    wait_until(lambda: cluster.client.status("etl").version == 1, 30, "etl back at version 1")

    page.goto(f"{standby.url}/#/pipelines/spare")
    page.click("#action-kill")
    page.wait_for_selector("#notice:has-text('now KILLED')")
    assert cluster.client.status("spare").status is PipelineStatus.KILLED
    page.wait_for_selector("#record [data-fact=status]:text-is('KILLED')")


def test_a_cordoned_supervisor_shows_as_cordoned_then_draining_in_the_cluster_view(cluster, page):
    cluster.client.cordon("s1")
    try:
        sign_in(page, f"{leader(cluster).url}/", READ)
        row = page.locator("#supervisors tr", has_text="s1")
        page.wait_for_selector("#supervisors td.scheduling:text-is('cordoned')")
        cluster.client.drain("s1")
        page.wait_for_selector("#supervisors td.scheduling:text-is('draining')")
        assert row.locator("td.scheduling").inner_text() == "draining"
    finally:
        cluster.client.uncordon("s1")
    page.wait_for_selector("#supervisors td.scheduling:text-is('')")


@pytest.mark.slow
def test_a_failover_shows_on_the_page_without_a_reload(cluster, page):
    old = leader(cluster)
    watcher = standbys(cluster)[0]
    sign_in(page, f"{watcher.url}/", READ)
    page.wait_for_selector(f"#leader:text-is('{old.address}')")
    old.signal(signal.SIGKILL)
    new = cluster.nimbuses.wait_for_agreed_leader(not_=old.address, skip=[old])
    page.wait_for_selector(f"#leader:text-is('{new}')")
    newest_term = page.locator("#terms tbody tr").nth(0)  # the real route: the new term on top
    newest_term.locator(f"td:text-is('{new}')").wait_for()
    cells = newest_term.locator("td").all_inner_texts()
    assert cells[3] == "leading" and re.fullmatch(r"\d+\.\d{3} s", cells[4]), cells
    ended = page.locator("#terms tbody tr").nth(1).locator("td").all_inner_texts()
    assert ended[1] == old.address and ended[3] != "leading", ended  # closed by its successor
    wait_until(
        lambda: page.locator(f"#nimbuses tr[data-nimbus='{old.address}']").count() == 0,
        SHOWN_MS / 1000,
        "the dead nimbus to leave the page's table",
    )
