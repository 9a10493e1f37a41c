"""Graceful manual failover (``stratus haadmin -failover FROM TO``) with real processes.

Dummy HA services (``dummy_ha_service``, the shared lock oracle on: two actives at once fail
the test) beside real ``stratus zkfc`` processes on a real ZooKeeper; ``haadmin`` asks the
target's zkfc, found in ZooKeeper, which has the others cede. A graceful failover never
fences: every zkfc log is checked for ``event=fence_old_active``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result

from stratus.cli.main import main
from tests.harness.secure_cluster import ADMIN, SUBMIT, token_file
from tests.harness.zkfc_cluster import WAIT, ZkfcCluster
from tests.harness.zkfixtures import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def make_cluster(zk_hosts: str, tmp_path: Path) -> Iterator[type[ZkfcCluster]]:
    started: list[ZkfcCluster] = []

    def make(names: list[str], **kwargs: object) -> ZkfcCluster:
        cluster = ZkfcCluster(zk_hosts, tmp_path, names, **kwargs)  # type: ignore[arg-type]
        started.append(cluster)
        return cluster

    yield make  # type: ignore[misc]
    for cluster in started:
        cluster.stop()
        assert cluster.conflicts() == [], "two services were active at once"


def haadmin(cluster: ZkfcCluster, *args: str) -> Result:
    conf = ["-c", f"zookeeper.servers={cluster.zk_hosts}", "-c", "ha.zkfc.group=svc"]
    return CliRunner().invoke(main, ["haadmin", *args, *conf])


def joins(cluster: ZkfcCluster, name: str) -> int:
    return cluster.zkfc_log(name).count("event=join_election")


def fences(cluster: ZkfcCluster) -> int:
    return sum(cluster.zkfc_log(name).count("event=fence_old_active") for name in cluster.names)


def start_in_order(cluster: ZkfcCluster) -> None:
    """The first node's zkfc starts first and wins; each other one joins as standby."""
    for name in cluster.names:
        cluster.start_service(name)
    first, *rest = cluster.names
    cluster.start_zkfc(first)
    cluster.wait_active(first)
    for name in rest:
        cluster.start_zkfc(name)
        wait_until(lambda: "service_standby" in cluster.zkfc_log(name), WAIT, f"{name} standby")  # noqa: B023
        cluster.zkfc_endpoint(name)  # registered for haadmin: it joins the election first


def fail_over(cluster: ZkfcCluster, source: str, target: str) -> None:
    """``-failover source target`` succeeds, leaves target alone active, and every node that
    ceded is back in the election (so the next failover may pick any of them)."""
    before = {name: joins(cluster, name) for name in cluster.names if name != target}
    result = haadmin(
        cluster, "-failover", cluster.nodes[source].address, cluster.nodes[target].address
    )
    assert result.exit_code == 0, result.output
    assert f"Failover to {cluster.nodes[target].address} successful" in result.output
    # Active when the command returns, not later: the services' own record says so (an
    # HTTP read of their states could time out on a loaded machine).
    activations = [name for what, name, _ in cluster.events() if what == "active"]
    assert activations[-1] == target
    for name, count in before.items():
        wait_until(lambda: joins(cluster, name) > count, WAIT, f"{name} rejoined")  # noqa: B023
    cluster.wait_active(target)  # and stays so while the others rejoin as standbys


def test_graceful_failover_there_and_back_with_zero_fences(make_cluster) -> None:
    cluster = make_cluster(["a", "b"])
    start_in_order(cluster)

    fail_over(cluster, "a", "b")
    assert cluster.state("a") == "standby"
    assert "event=cede_active" in cluster.zkfc_log("a")

    fail_over(cluster, "b", "a")
    assert cluster.state("b") == "standby"
    assert fences(cluster) == 0
    epochs = cluster.active_epochs()
    assert epochs == sorted(epochs) and len(set(epochs)) == 3  # a term per activation


def test_failover_to_an_unhealthy_node_is_refused_and_nothing_changes(make_cluster) -> None:
    cluster = make_cluster(["a", "b"])
    start_in_order(cluster)
    cluster.control("b", healthy=False)
    wait_until(lambda: "quit_election" in cluster.zkfc_log("b"), WAIT, "b quit")
    events = cluster.events()

    result = haadmin(cluster, "-failover", cluster.nodes["a"].address, cluster.nodes["b"].address)
    assert result.exit_code == 255
    assert "Failover failed" in result.output and "not currently healthy" in result.output
    assert cluster.actives() == ["a"]
    assert cluster.events() == events  # no transition at all
    assert "event=cede_active" not in cluster.zkfc_log("a")  # a was never asked to cede


def test_a_three_node_rotation_with_zero_fences(make_cluster) -> None:
    cluster = make_cluster(["a", "b", "c"])
    start_in_order(cluster)

    fail_over(cluster, "a", "b")
    fail_over(cluster, "b", "c")
    fail_over(cluster, "c", "a")
    assert fences(cluster) == 0
    assert [name for what, name, _ in cluster.events() if what == "active"] == [
        "a",
        "b",
        "c",
        "a",
    ]


def test_the_zkfc_endpoint_refuses_a_caller_without_the_admin_token(
    make_cluster, tmp_path: Path
) -> None:
    tokens = token_file(tmp_path)
    cluster = make_cluster(
        ["a", "b"],
        service_args=["--token", ADMIN],
        extra={"client.auth.token": ADMIN, "nimbus.auth.tokens.file": str(tokens)},
    )
    start_in_order(cluster)
    url = f"http://{cluster.zkfc_endpoint('a')}/zkfc/v1/cede-active"

    with httpx.Client(timeout=10.0) as http:
        anonymous = http.post(url, json={"millis": 60000})
        submitter = http.post(
            url, json={"millis": 60000}, headers={"Authorization": f"Bearer {SUBMIT}"}
        )
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "unauthenticated"
    assert submitter.status_code == 403 and submitter.json()["error"] == "forbidden"
    assert cluster.actives() == ["a"]
    assert "event=cede_active" not in cluster.zkfc_log("a")

    refused = haadmin(cluster, "-failover", cluster.nodes["a"].address, cluster.nodes["b"].address)
    assert refused.exit_code == 255 and "Failover failed" in refused.output
    allowed = haadmin(
        cluster,
        "-failover",
        cluster.nodes["a"].address,
        cluster.nodes["b"].address,
        "-c",
        f"client.auth.token={ADMIN}",
    )
    assert allowed.exit_code == 0, allowed.output
    assert cluster.actives() == ["b"]


def test_failover_is_refused_with_forcefence_or_without_a_zkfc_for_the_target(
    zk_hosts: str, tmp_path: Path
) -> None:
    cluster = ZkfcCluster(zk_hosts, tmp_path, [])  # no zkfc at all
    try:
        forced = haadmin(cluster, "-failover", "--forcefence", "127.0.0.1:1", "127.0.0.1:2")
        assert forced.exit_code == 255 and "forcefence" in forced.output
        missing = haadmin(cluster, "-failover", "127.0.0.1:1", "127.0.0.1:2")
        assert missing.exit_code == 255 and "no zkfc manages 127.0.0.1:2" in missing.output
        manual = haadmin(
            cluster,
            "-failover",
            "127.0.0.1:1",
            "127.0.0.1:2",
            "-c",
            "ha.automatic.failover.enabled=false",
        )
        assert manual.exit_code == 255 and "ha.automatic.failover.enabled" in manual.output
    finally:
        cluster.stop()
