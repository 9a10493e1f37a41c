"""The default ``stratus nimbus``: a failover controller running its nimbus as its child.

Three real ``stratus nimbus`` processes with the default ``nimbus.ha.mode`` (supervised) on the
shared real ZooKeeper, with no zkfc, token or port of their own configured. kill -9 of the
leader's nimbus child (not of the command the operator ran) is seen by its controller as soon
as it reaps the child, and a leader-only call is then served by another nimbus, long before
any ZooKeeper session could expire (the controllers' sessions all live on); SIGSTOP of the
next leader's child is caught by the health check's timeout, and its controller kills it;
SIGTERM of a ``stratus nimbus`` stops its child, and kill -9 of one leaves no child behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stratus.client import NimbusClient
from stratus.ha.protocol import HAServiceClient, HAState
from stratus.local.processes import NimbusProcess
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import process_gone, wait_until

pytestmark = pytest.mark.slow

WAIT_SECS = 30.0
FAST_HEALTH = (
    "-c", "ha.health.check.interval.secs=0.1",
    "-c", "ha.health.rpc.timeout.secs=1",
    "-c", "ha.health.max.backoff.secs=0.5",
    "-c", "nimbus.code.sync.freq.secs=1",
)  # fmt: skip


def child_pid(nimbus: NimbusProcess) -> int | None:
    """The pid of the process that serves ``nimbus``'s HA protocol, None if none answers."""
    with HAServiceClient(nimbus.address, timeout=1.0) as service, contextlib.suppress(Exception):
        return service.status().pid
    return None


def state(nimbus: NimbusProcess) -> HAState | None:
    with HAServiceClient(nimbus.address, timeout=1.0) as service, contextlib.suppress(Exception):
        return service.status().state
    return None


def served_by(client: NimbusClient) -> str:
    """Send a leader-only call (activate, a no-op on an active pipeline); who answered it."""
    client.activate("etl")
    assert client.known_leader is not None
    return client.known_leader


@pytest.fixture
def cluster(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[NimbusCluster]:
    with nimbus_cluster(
        zk_server.connect_string,
        tmp_path,
        request.node.name,
        size=3,
        extra=FAST_HEALTH,
        ha_mode="supervised",
    ) as nimbuses:
        yield nimbuses


def test_supervised_nimbuses_fail_a_killed_then_a_frozen_child_over_to_another_nimbus(
    cluster: NimbusCluster,
) -> None:
    first = cluster.wait_for_agreed_leader(WAIT_SECS)
    leader = cluster.by_address(first)
    killed_pid = child_pid(leader)
    assert killed_pid is not None and killed_pid != leader.pid  # a child serves the nimbus
    wait_until(lambda: state(leader) is HAState.ACTIVE, WAIT_SECS, "the leader to be active")
    with NimbusClient(cluster.seeds, retry_deadline=WAIT_SECS, request_timeout=2.0) as client:
        client.submit("etl", valid_package("etl"))
        assert served_by(client) == first

        # kill -9 of the leader's nimbus child: another nimbus serves, its controller lives on
        os.kill(killed_pid, signal.SIGKILL)
        second = served_by(client)
        assert second != first
        assert leader.is_running()  # the controller: its session did not have to expire
        log = leader.log_path.read_text(errors="replace")
        assert "event=service_exited" in log  # reaped by its controller
        assert "need_fence=True" in log  # which quit the election
        wait_until(lambda: child_pid(leader) not in (None, killed_pid), WAIT_SECS, "a restart")
        wait_until(lambda: state(leader) is HAState.STANDBY, WAIT_SECS, "it to rejoin as standby")

        # SIGSTOP of the new leader's child: its health check times out, its controller kills
        frozen = cluster.by_address(second)
        frozen_pid = child_pid(frozen)
        assert frozen_pid is not None
        os.kill(frozen_pid, signal.SIGSTOP)
        try:
            third = served_by(client)
            assert third != second
            wait_until(lambda: process_gone(frozen_pid), WAIT_SECS, "the frozen child killed")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen_pid, signal.SIGCONT)
        log = frozen.log_path.read_text(errors="replace")
        assert "event=kill_unresponsive" in log  # by its controller, before it quit
        assert f"event=supervised_fence pid={frozen_pid}" in log


def test_stopping_a_supervised_nimbus_stops_its_child_and_killing_it_leaves_none(
    cluster: NimbusCluster,
) -> None:
    leader = cluster.by_address(cluster.wait_for_agreed_leader(WAIT_SECS))
    pids = {n.address: child_pid(n) for n in cluster.nimbuses}
    assert None not in pids.values()
    leader.terminate()
    assert leader.stop() == 0
    pid = pids[leader.address]
    assert pid is not None
    wait_until(lambda: process_gone(pid), WAIT_SECS, "the stopped nimbus's child to be gone")
    log = leader.log_path.read_text(errors="replace")
    # the controller left the election before it stopped its child, which stopped cleanly
    assert "event=quit_election" in log
    assert log.rindex("event=quit_election") < log.rindex("event=nimbus_stopping")
    others = [n for n in cluster.nimbuses if n is not leader]
    assert cluster.wait_for_agreed_leader(WAIT_SECS, skip=[leader]) != leader.address
    with httpx.Client(timeout=2.0) as http:
        for nimbus in others:
            assert http.get(f"{nimbus.url}/api/v1/leader").status_code == 200

    # kill -9 of a controller: its child sees its stdin close and goes at once, left to nobody
    killed = others[0]
    orphan = pids[killed.address]
    assert orphan is not None
    killed.kill()
    wait_until(lambda: process_gone(orphan), WAIT_SECS, "the killed controller's child to go")
    # without a graceful stop, which could wait on a ZooKeeper gone with the rest
    assert "event=controller_gone" in killed.log_path.read_text(errors="replace")
