"""Metrics, probes and the leader-term history on real daemons (no Spark: no pipeline runs).

A real ZooKeeper, real ``stratus nimbus``, ``stratus supervisor``, ``stratus pacemaker`` and
``stratus zkfc`` processes (the zkfc beside the dummy HA service of the zkfc tests), scraped
over real sockets.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from stratus.api.records import LeaderTerms
from stratus.coordination import Coordinator
from stratus.local.processes import SupervisorProcess
from stratus.nimbus.leadership.leader_terms import LeaderTermLog
from stratus.security.client_auth import ClientAuth
from stratus.zk.paths import ClusterPaths
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.pacemaker_process import PacemakerProcess
from tests.harness.secure_cluster import READ, bearer, secure_cluster, token_file
from tests.harness.zkfc_cluster import ZkfcCluster
from tests.harness.zkfixtures import chroot_for, kazoo_client, wait_until

WAIT = 30.0
PROBE_CHECKS = {
    "nimbus": {"zookeeper", "registered", "code"},
    "supervisor": {"zookeeper", "registered", "state_store"},
    "zkfc": {"zookeeper", "service_healthy"},
    "pacemaker": {"warmed_up"},
}


# ---------------------------------------------------------------------- the daemons


class Daemons:
    """One of each daemon, and the base URL of each one's HTTP port."""

    def __init__(self, zk_hosts: str, tmp_path: Path) -> None:
        self.zk_hosts = zk_hosts
        self.tmp_path = tmp_path
        self.urls: dict[str, str] = {}
        self._stack = contextlib.ExitStack()

    def start(self) -> Daemons:
        # zk_hosts is chrooted per test: every daemon's tree is this test's own
        cluster = self._stack.enter_context(
            nimbus_cluster(self.zk_hosts, self.tmp_path, "metrics", size=1)
        )
        nimbus = cluster.nimbuses[0]
        self.urls["nimbus"] = nimbus.url
        self.urls["supervisor"] = self._supervisor(cluster)
        pacemaker = PacemakerProcess(self.tmp_path, ["pacemaker.pulse.ttl.secs=1"]).start()
        self._stack.callback(pacemaker.kill)
        self.urls["pacemaker"] = f"http://127.0.0.1:{pacemaker.port}"
        zkfcs = ZkfcCluster(self.zk_hosts, self.tmp_path, ["a"], fencing="graceful")
        self._stack.callback(zkfcs.stop)
        zkfcs.start()
        zkfcs.wait_active("a")
        self.urls["zkfc"] = f"http://{zkfcs.zkfc_endpoint('a')}"
        return self

    def _supervisor(self, cluster: NimbusCluster) -> str:
        supervisor = SupervisorProcess(
            ["-c", f"zookeeper.servers={self.zk_hosts}", "-c", f"zookeeper.root={cluster.root}"],
            id="s1",
            slots=1,
            log_dir=self.tmp_path,
        )
        self._stack.callback(supervisor.kill)
        supervisor.start()
        supervisor.wait_ready()
        endpoints: list[str] = []

        def registered() -> bool:
            found = cluster.summary(cluster.nimbuses[0]).supervisors
            endpoints[:] = [s.endpoint for s in found if s.endpoint]
            return bool(endpoints)

        wait_until(registered, WAIT, "the supervisor's registration with its endpoint")
        return f"http://{endpoints[0]}"

    def close(self) -> None:
        self._stack.close()


@pytest.fixture(scope="module")
def daemons(
    zk_server: ZooKeeperServer, _zk_admin: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Daemons]:
    """One of each daemon, shared by the tests of this module (they only read)."""
    chroot = chroot_for("metrics-daemons")
    _zk_admin.ensure_path(chroot)
    started = Daemons(zk_server.connect_string + chroot, tmp_path_factory.mktemp("daemons"))
    try:
        yield started.start()
    finally:
        started.close()


def scrape(url: str, headers: dict[str, str] | None = None) -> str:
    response = httpx.get(f"{url}/metrics", headers=headers, timeout=10.0)
    assert response.status_code == 200, response.text
    return response.text


def wait_ready(url: str) -> httpx.Response:
    answers: list[httpx.Response] = []

    def ready() -> bool:
        answers[:] = [httpx.get(f"{url}/readyz", timeout=10.0)]
        return answers[0].status_code == 200

    wait_until(ready, WAIT, f"{url}/readyz to answer 200")
    return answers[0]


# ---------------------------------------------------------------------- metrics and probes


def test_every_daemon_shows_build_info_process_metrics_and_open_probes(daemons: Daemons) -> None:
    for daemon, url in daemons.urls.items():
        text = scrape(url)
        families = {family.name: family for family in text_string_to_metric_families(text)}
        build = families["stratus_build_info"].samples
        assert [s.labels["daemon"] for s in build] == [daemon], daemon
        assert build[0].labels["version"] and build[0].labels["python"]
        assert "process_cpu_seconds" in families, daemon  # ProcessCollector
        assert "python_info" in families, daemon  # PlatformCollector
        for family in families.values():
            if family.type == "counter":  # every counter's series end in _total (or _created)
                names = {s.name for s in family.samples}
                assert all(n.endswith(("_total", "_created")) for n in names), (daemon, names)

        alive = httpx.get(f"{url}/healthz", timeout=10.0)
        assert alive.status_code == 200 and alive.json() == {"daemon": daemon, "alive": True}
        ready = wait_ready(url).json()
        assert ready["daemon"] == daemon and ready["ready"] is True
        assert set(ready["checks"]) == PROBE_CHECKS[daemon]
        assert all(ready["checks"].values())


def test_the_renamed_metrics_are_counters_named_total(daemons: Daemons) -> None:
    nimbus = scrape(daemons.urls["nimbus"])
    assert "# TYPE stratus_nimbus_code_sync_rounds_total counter" in nimbus
    assert "stratus_nimbus_code_sync_rounds_total " in nimbus
    pacemaker = scrape(daemons.urls["pacemaker"])
    assert "# TYPE stratus_pacemaker_evicted_total counter" in pacemaker
    zkfc = scrape(daemons.urls["zkfc"])
    assert 'stratus_zkfc_health_state{state="service_healthy"} 1.0' in zkfc
    assert "stratus_zkfc_service_active 1.0" in zkfc
    supervisor = scrape(daemons.urls["supervisor"])
    assert 'stratus_supervisor_lease_held{supervisor="s1"} 1.0' in supervisor
    assert "stratus_supervisor_fenced_total 0.0" in supervisor


def test_a_pacemaker_is_not_ready_during_its_warm_up(tmp_path: Path) -> None:
    pacemaker = PacemakerProcess(tmp_path, ["pacemaker.pulse.ttl.secs=30"]).start()
    try:
        url = f"http://127.0.0.1:{pacemaker.port}"
        warming = httpx.get(f"{url}/readyz", timeout=10.0)
        assert warming.status_code == 503
        assert warming.json() == {
            "daemon": "pacemaker",
            "ready": False,
            "checks": {"warmed_up": False},
        }
        assert httpx.get(f"{url}/healthz", timeout=10.0).status_code == 200
    finally:
        pacemaker.kill()


def test_probes_answer_without_a_token_where_metrics_need_one(
    zk_hosts: str, tmp_path: Path
) -> None:
    extra = ["-c", f"nimbus.auth.tokens.file={token_file(tmp_path)}"]
    with secure_cluster(
        zk_hosts, tmp_path, "probes", extra=extra, auth=ClientAuth(token=READ), size=1
    ) as cluster:
        url = cluster.url(cluster.leader())
        assert httpx.get(f"{url}/metrics", timeout=10.0).status_code == 401
        assert httpx.get(f"{url}/api/v1/leader/terms", timeout=10.0).status_code == 401
        assert httpx.get(f"{url}/healthz", timeout=10.0).status_code == 200
        assert wait_ready(url).json()["ready"] is True
        assert "stratus_build_info" in scrape(url, bearer(READ))


# ---------------------------------------------------------------------- leader terms


def terms_of(cluster: NimbusCluster, url: str) -> LeaderTerms:
    response = cluster.http.get(f"{url}/api/v1/leader/terms")
    assert response.status_code == 200, response.text
    return LeaderTerms.model_validate_json(response.content)


def terms_once_read(cluster: NimbusCluster, url: str) -> int:
    """How many terms ``url`` reads, 0 while it cannot read them (ZooKeeper coming back)."""
    response = cluster.http.get(f"{url}/api/v1/leader/terms")
    if response.status_code != 200:
        return 0
    return len(LeaderTerms.model_validate_json(response.content).terms)


def failovers_observed(url: str) -> float:
    for family in text_string_to_metric_families(scrape(url)):
        if family.name == "stratus_nimbus_failover_seconds":
            return next(s.value for s in family.samples if s.name.endswith("_count"))
    raise AssertionError("no stratus_nimbus_failover_seconds")


def test_failovers_are_recorded_in_the_term_history_with_their_durations(
    zk_hosts: str, tmp_path: Path
) -> None:
    with nimbus_cluster(zk_hosts, tmp_path, "terms", size=3) as cluster:
        first = cluster.by_address(cluster.wait_for_agreed_leader())
        standby = next(n for n in cluster.nimbuses if n is not first)
        wait_until(lambda: terms_of(cluster, standby.url).terms, WAIT, "the first term")
        [only] = terms_of(cluster, standby.url).terms
        assert only.nimbus == first.address and only.ended_at is None
        assert only.failover_secs is None  # nothing failed over to it

        first.signal(signal.SIGTERM)  # steps down: writes its own end
        second = cluster.by_address(cluster.wait_for_agreed_leader(not_=first.address))
        wait_until(lambda: len(terms_of(cluster, second.url).terms) == 2, WAIT, "a 2nd term")
        newer, older = terms_of(cluster, second.url).terms
        assert (newer.nimbus, newer.epoch, newer.ended_at) == (second.address, only.epoch + 1, None)
        assert newer.failover_secs is not None and newer.failover_secs >= 0
        assert older.epoch == only.epoch and older.ended_by == "leader"
        assert older.ended_at is not None and older.ended_at <= newer.started_at
        assert failovers_observed(second.url) == 1.0

        second.signal(signal.SIGKILL)  # dies: its successor writes the end
        third = next(n for n in cluster.nimbuses if n not in (first, second))
        wait_until(lambda: len(terms_of(cluster, third.url).terms) == 3, WAIT, "a 3rd term")
        latest, killed, _ = terms_of(cluster, third.url).terms
        assert latest.nimbus == third.address and latest.failover_secs is not None
        assert killed.nimbus == second.address and killed.ended_by == "successor"
        assert killed.ended_at is not None and killed.ended_at <= latest.started_at
        # the leaderless gap starts at the killed leader's last sign of life: ZooKeeper
        # heard from it one session timeout before it expired the session
        assert killed.session_timeout_secs is not None
        assert latest.failover_secs >= killed.session_timeout_secs
        assert latest.started_at - killed.ended_at == pytest.approx(latest.failover_secs)
        assert failovers_observed(third.url) == 1.0

        document = cluster.http.get(f"{third.url}/api/v1/openapi.json").json()
        assert "/api/v1/leader/terms" in document["paths"]


def test_with_zookeeper_gone_the_terms_read_is_unavailable_and_a_leader_stops_at_once(
    zk_restartable: ZooKeeperServer, tmp_path: Path
) -> None:
    zk_hosts = zk_restartable.connect_string + chroot_for("terms-outage")
    with kazoo_client(zk_restartable.connect_string) as admin:
        admin.ensure_path(chroot_for("terms-outage"))
    with nimbus_cluster(zk_hosts, tmp_path, "terms-outage", size=2) as cluster:
        leader = cluster.by_address(cluster.wait_for_agreed_leader())
        standby = next(n for n in cluster.nimbuses if n is not leader)
        wait_until(lambda: terms_of(cluster, standby.url).terms, WAIT, "the first term")
        zk_restartable.stop()

        answer = cluster.http.get(f"{standby.url}/api/v1/leader/terms", timeout=WAIT)
        assert answer.status_code == 503 and answer.json()["error"] == "unavailable"
        leader.signal(signal.SIGTERM)  # its term's end cannot be written: it must not wait
        assert leader.wait(timeout=WAIT) is not None, leader.log_tail()

        zk_restartable.start()  # and nothing is lost: its successor closes the term for it
        wait_until(lambda: terms_once_read(cluster, standby.url) == 2, WAIT, "a 2nd term")
        latest, unwritten = terms_of(cluster, standby.url).terms
        assert latest.nimbus == standby.address
        assert unwritten.nimbus == leader.address and unwritten.ended_by == "successor"


def test_the_term_history_keeps_the_newest_terms_and_closes_each_previous_one(
    zk_hosts: str,
) -> None:
    coordinator = Coordinator.standalone(zk_hosts, session_timeout=2.0).start()
    try:
        client = coordinator.session.client
        paths = ClusterPaths("/history")
        client.ensure_path(paths.leader_terms)
        log = LeaderTermLog(client, paths, keep=3)
        epochs = []
        for _ in range(5):
            term = coordinator.nominate("nimbus", "n1", timeout=WAIT)
            assert log.began(term, "n1") is not None
            epochs.append(term.epoch)
            coordinator.unnominate("nimbus")
        kept = log.read().terms
        assert [t.epoch for t in kept] == sorted(epochs, reverse=True)[:3]
        assert all(t.ended_at is not None and t.ended_by == "successor" for t in kept[1:])
        assert all(t.failover_secs is not None for t in kept)  # each found the slot free
        assert sorted(client.get_children(paths.leader_terms)) == [
            f"{e:010d}" for e in sorted(epochs)[-3:]
        ]
    finally:
        coordinator.close()


# ---------------------------------------------------------------------- deploy/: alerts, dashboard

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ALERTS = DEPLOY / "prometheus" / "stratus-alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "stratus-dashboard.json"
REQUIRED_ALERTS = {
    "StratusNoLeader",
    "StratusPipelineDown",
    "StratusReplicationBelowMinimum",
    "StratusSupervisorFenced",
}
# PromQL's own words: functions, aggregations, keywords. Any other name in an expression is a
# metric (a small lexer, not promtool: promtool is not installed here; see docs/metrics.md).
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "on", "ignoring", "group_left",
    "group_right", "and", "or", "unless", "rate", "increase", "irate", "absent",
    "histogram_quantile", "humanizeDuration", "bool", "offset",
}  # fmt: skip
PROMETHEUS_OWN = {"up"}  # the scrape's own series, which no daemon exposes
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAMES = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression uses: what is left once strings, label matchers, range
    selectors, grouping labels, numbers and PromQL's own words are taken out."""
    stripped = _GROUPING.sub(" ", _RANGES.sub(" ", _MATCHERS.sub(" ", _STRINGS.sub(" ", expr))))
    return {name for name in _NAMES.findall(stripped) if name not in PROMQL_WORDS}


def exposed_names(text: str) -> set[str]:
    """Every series name an exposition can hold, even for a family without samples yet."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.update({family.name + "_total", family.name + "_created"})
        if family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
    return names


def alert_rules() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(ALERTS.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


def test_the_alert_rules_are_complete_and_well_formed() -> None:
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert set(names) >= REQUIRED_ALERTS
    assert len(names) == len(set(names))
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert metric_names(rule["expr"]), rule["alert"]
    if shutil.which("promtool"):  # where it is installed, Prometheus's own check too
        check = subprocess.run(["promtool", "check", "rules", str(ALERTS)], check=False)
        assert check.returncode == 0


def test_the_names_check_sees_a_wrong_name() -> None:
    assert metric_names('max by (pipeline) (stratus_pipeline_upp{x="a b"}) == 0') == {
        "stratus_pipeline_upp"
    }
    assert metric_names("increase(process_cpu_seconds_total[5m]) > 0") == {
        "process_cpu_seconds_total"
    }


def test_every_metric_the_alerts_and_the_dashboard_use_is_exposed(daemons: Daemons) -> None:
    exposed = set(PROMETHEUS_OWN)
    for url in daemons.urls.values():
        exposed |= exposed_names(scrape(url))
    exprs = [rule["expr"] for rule in alert_rules()] + dashboard_exprs()
    used = set().union(*(metric_names(expr) for expr in exprs))
    assert used - exposed == set()
    assert len(dashboard_exprs()) >= 20  # the dashboard's panels were read


# ---------------------------------------------------------------------- zkfc: fences, readiness


def test_a_zkfc_counts_its_fence_of_the_old_active_and_is_not_ready_when_its_service_is_sick(
    zk_hosts: str, tmp_path: Path
) -> None:
    cluster = ZkfcCluster(zk_hosts, tmp_path, ["a", "b"], fencing="graceful")
    try:
        cluster.start_service("a")
        cluster.start_service("b")
        cluster.start_zkfc("a")
        cluster.wait_active("a")
        cluster.start_zkfc("b")
        b_url = f"http://{cluster.zkfc_endpoint('b')}"
        a_url = f"http://{cluster.zkfc_endpoint('a')}"
        wait_ready(b_url)
        fenced = 'stratus_zkfc_fences_total{method="graceful",result="fenced",target="other"}'
        assert f"{fenced} 0.0" in scrape(b_url)

        cluster.control("a", healthy=False)
        cluster.wait_active("b")
        wait_until(lambda: f"{fenced} 1.0" in scrape(b_url), WAIT, "b's fence of a counted")
        assert "stratus_zkfc_service_active 1.0" in scrape(b_url)

        def a_not_ready() -> bool:
            answer = httpx.get(f"{a_url}/readyz", timeout=10.0)
            return answer.status_code == 503 and not answer.json()["checks"]["service_healthy"]

        wait_until(a_not_ready, WAIT, "a's zkfc to say it is not ready")
        assert 'stratus_zkfc_health_state{state="service_unhealthy"} 1.0' in scrape(a_url)
    finally:
        cluster.stop()
