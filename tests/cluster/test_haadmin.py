"""``stratus haadmin`` against real dummy HA services (processes): Hadoop's verbs and exit codes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from stratus.cli.main import main
from stratus.coordination import Coordinator
from stratus.ha.admin import current_epoch
from tests.harness.zkfc_cluster import ZkfcCluster


@pytest.fixture
def services(zk_hosts: str, tmp_path: Path) -> Iterator[ZkfcCluster]:
    cluster = ZkfcCluster(zk_hosts, tmp_path, ["a", "b"])
    for name in cluster.names:
        cluster.start_service(name)
    yield cluster
    cluster.stop()


def haadmin(cluster: ZkfcCluster, *args: str) -> Result:
    seeds = ",".join(node.address for node in cluster.nodes.values())
    conf = ["-c", f"zookeeper.servers={cluster.zk_hosts}", "-c", f"nimbus.seeds={seeds}"]
    return CliRunner().invoke(main, ["haadmin", *args, *conf])


def test_get_service_state_and_all_service_state(services: ZkfcCluster) -> None:
    a, b = services.nodes["a"].address, services.nodes["b"].address
    result = haadmin(services, "-getServiceState", a)
    assert (result.exit_code, result.output.strip()) == (0, "standby")

    result = haadmin(services, "-getAllServiceState")
    assert result.exit_code == 0
    assert [line.split() for line in result.output.splitlines()] == [
        [a, "standby"],
        [b, "standby"],
    ]

    services.nodes["b"].service.kill()
    services.nodes["b"].service.wait()
    result = haadmin(services, "-getAllServiceState")
    assert result.exit_code == 255
    assert f"{b}" in result.output and "Failed to connect" in result.output


def test_check_health_exits_non_zero_for_an_unhealthy_service(services: ZkfcCluster) -> None:
    a = services.nodes["a"].address
    assert haadmin(services, "-checkHealth", a).exit_code == 0
    services.control("a", healthy=False)
    result = haadmin(services, "-checkHealth", a)
    assert result.exit_code == 255
    assert "told to be" in result.output  # the service's own reason


def test_manual_transitions_need_forcemanual_while_automatic_failover_is_on(
    services: ZkfcCluster,
) -> None:
    a = services.nodes["a"].address
    result = haadmin(services, "-transitionToActive", a)
    assert result.exit_code == 255
    assert "--forcemanual" in result.output
    assert services.state("a") == "standby"

    result = haadmin(services, "-transitionToActive", a, "--forcemanual")
    assert result.exit_code == 0, result.output
    assert "WARNING" in result.output and services.state("a") == "active"
    assert services.events()[-1] == ("active", "a", "0")  # the group's epoch: no term yet

    result = haadmin(services, "-transitionToStandby", a, "--forcemanual")
    assert result.exit_code == 0 and services.state("a") == "standby"


def test_without_automatic_failover_transitions_need_no_force(services: ZkfcCluster) -> None:
    b = services.nodes["b"].address
    off = ("-c", "ha.automatic.failover.enabled=false")
    result = haadmin(services, "-transitionToActive", b, "--epoch", "7", *off)
    assert (result.exit_code, result.output.strip()) == (0, "active")
    assert services.events()[-1] == ("active", "b", "7")
    assert "WARNING" not in result.output


def test_exactly_one_verb(services: ZkfcCluster) -> None:
    result = haadmin(services, "-getAllServiceState", "-checkHealth", "x:1")
    assert result.exit_code == 2 and "exactly one" in result.output


def test_the_forced_epoch_is_the_groups_last_term(zk_hosts: str) -> None:
    with Coordinator.standalone(zk_hosts, session_timeout=5) as coordinator:
        assert current_epoch(coordinator.session, "svc") == 0
        for expected in (1, 2):
            term = coordinator.nominate("svc", "x", timeout=10)
            assert term.epoch == expected
            assert current_epoch(coordinator.session, "svc") == expected
            coordinator.unnominate("svc")


def test_haadmin_presents_the_client_token(zk_hosts: str, tmp_path: Path) -> None:
    cluster = ZkfcCluster(zk_hosts, tmp_path, ["a"], service_args=["--token", "s3cret"])
    try:
        address = cluster.start_service("a").address
        refused = haadmin(cluster, "-getServiceState", address)
        assert refused.exit_code == 255 and "no or a wrong token" in refused.output
        allowed = haadmin(cluster, "-getServiceState", address, "-c", "client.auth.token=s3cret")
        assert (allowed.exit_code, allowed.output.strip()) == (0, "standby")
    finally:
        cluster.stop()
