"""Real ``stratus nimbus`` processes in ``nimbus.ha.mode: zkfc``, on the shared real ZooKeeper.

The test plays each nimbus's failover controller: a ``Coordinator`` of its own that wins the
nimbus group's election in its nimbus's name (member id and data: the nimbus's address), and
an ``HAServiceClient`` that hands the nimbus the epoch it won. Clients, leader records and
``not_leader`` answers work as with self-elected nimbuses.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.chaos.oracle import check_leader_writes
from stratus.chaos.trail_events import Clocks, load_events
from stratus.client import NimbusClient
from stratus.coordination import Coordinator
from stratus.coordination.leadership import Leadership
from stratus.ha.protocol import (
    HEALTH_PATH,
    STALE_EPOCH,
    STATUS_PATH,
    TO_ACTIVE_PATH,
    TO_STANDBY_PATH,
    TRANSITION_FAILED,
    HAServiceClient,
    HAState,
    TransitionFailedError,
)
from stratus.local.processes import NimbusProcess
from stratus.security.client_auth import ClientAuth
from stratus.zk.paths import NIMBUS_GROUP
from stratus.zk.server import ZooKeeperServer
from tests.harness.nimbus_cluster import SESSION_SECS, NimbusCluster, nimbus_cluster
from tests.harness.package_factory import valid_package
from tests.harness.secure_cluster import ADMIN, READ, SUBMIT, bearer, secure_cluster, token_file
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.slow

WAIT_SECS = 30.0
REPLICATED = (
    "-c", "pipeline.min.replication.count=2",
    "-c", "pipeline.max.replication.wait.time.sec=-1",
    "-c", "nimbus.code.sync.freq.secs=1",
)  # fmt: skip
HISTORY = "history.jsonl"


class Controllers:
    """The test's stand-in for each nimbus's zkfc: a session and a client of its service."""

    def __init__(self, cluster: NimbusCluster, zk_connect: str) -> None:
        self.cluster = cluster
        self.zk_connect = zk_connect
        self.sessions: dict[str, Coordinator] = {}
        self.services = {
            n.address: HAServiceClient(n.address, timeout=WAIT_SECS) for n in cluster.nimbuses
        }

    def service(self, nimbus: NimbusProcess) -> HAServiceClient:
        return self.services[nimbus.address]

    def win(self, nimbus: NimbusProcess) -> Leadership:
        """Campaign in ``nimbus``'s name and win (the group must be free)."""
        coordinator = Coordinator.standalone(
            self.zk_connect, root=self.cluster.root, session_timeout=SESSION_SECS
        ).start()
        self.sessions[nimbus.address] = coordinator
        return coordinator.nominate(
            NIMBUS_GROUP, nimbus.address, timeout=WAIT_SECS, data=nimbus.address.encode()
        )

    def crash(self, nimbus: NimbusProcess) -> None:
        """Its zkfc dies: the lock goes with the session, and nobody tells the nimbus."""
        self.sessions.pop(nimbus.address).close()

    def close(self) -> None:
        for coordinator in self.sessions.values():
            coordinator.close()
        for service in self.services.values():
            service.close()


@pytest.fixture
def zkfc_cluster(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[NimbusCluster, Controllers]]:
    with nimbus_cluster(
        zk_server.connect_string,
        tmp_path,
        request.node.name,
        size=2,
        extra=(*REPLICATED, "-c", f"history.file={tmp_path / HISTORY}"),
        ha_mode="zkfc",
    ) as cluster:
        controllers = Controllers(cluster, zk_server.connect_string)
        try:
            yield cluster, controllers
        finally:
            controllers.close()


def ready_standby(service: HAServiceClient) -> bool:
    status = service.status()
    return status.state is HAState.STANDBY and status.ready_to_become_active


def refused_as_not_leader(cluster: NimbusCluster, nimbus: NimbusProcess, verb: str) -> bool:
    """Whether ``nimbus`` itself answers a leader-only call with 421 ``not_leader``."""
    response = cluster.http.post(f"{nimbus.url}/api/v1/pipelines/etl/{verb}")
    return response.status_code == 421 and response.json()["error"] == "not_leader"


def records_in_zookeeper(zk_connect: str, root: str) -> dict[str, PipelineRecord]:
    with kazoo_client(zk_connect) as zk:
        return {
            name: PipelineRecord.model_validate_json(zk.get(f"{root}/pipelines/{name}")[0])
            for name in zk.get_children(f"{root}/pipelines")
        }


def test_zkfc_mode_nimbuses_lead_only_under_the_epoch_their_controller_won(
    zkfc_cluster: tuple[NimbusCluster, Controllers], zk_server: ZooKeeperServer, tmp_path: Path
) -> None:
    cluster, controllers = zkfc_cluster
    first, second = cluster.nimbuses
    for service in controllers.services.values():
        wait_until(functools.partial(ready_standby, service), WAIT_SECS, "a ready standby")
    # ready to lead, and yet neither campaigned: nobody queued, nobody leads
    with kazoo_client(zk_server.connect_string) as zk:
        candidates = f"{cluster.root}/groups/{NIMBUS_GROUP}/candidates"
        assert zk.exists(candidates) is None or zk.get_children(candidates) == []
    assert {cluster.leader_seen_by(n).address for n in cluster.nimbuses} == {None}  # type: ignore[union-attr]

    won = controllers.win(first)
    with pytest.raises(TransitionFailedError) as foreign:  # won for the first, not the second
        controllers.service(second).transition_to_active(won.epoch)
    assert foreign.value.code == TRANSITION_FAILED
    assert controllers.service(first).transition_to_active(won.epoch).state is HAState.ACTIVE
    assert cluster.wait_for_agreed_leader() == first.address
    with NimbusClient(cluster.seeds, retry_deadline=WAIT_SECS, request_timeout=5.0) as client:
        record = client.wait_replicated(client.submit("etl", valid_package("etl")).name)
    assert (record.status, record.replication, record.epoch) == (
        PipelineStatus.ACTIVE,
        2,
        won.epoch,
    )

    # the first controller dies; the second wins the next epoch before anyone tells the first
    controllers.crash(first)
    later = controllers.win(second)
    assert later.epoch == won.epoch + 1
    wait_until(
        lambda: controllers.service(first).status().state is HAState.STANDBY,
        WAIT_SECS,
        "the first nimbus to stop acting on seeing the later epoch",
    )
    assert refused_as_not_leader(cluster, first, "deactivate")  # and nothing was written
    assert records_in_zookeeper(zk_server.connect_string, cluster.root)["etl"].epoch == won.epoch

    with pytest.raises(TransitionFailedError) as stale:
        controllers.service(first).transition_to_active(won.epoch)
    assert stale.value.code == STALE_EPOCH
    assert controllers.service(second).transition_to_active(later.epoch).epoch == later.epoch
    with NimbusClient(cluster.seeds, retry_deadline=WAIT_SECS, request_timeout=5.0) as client:
        assert client.deactivate("etl").status is PipelineStatus.INACTIVE
    assert records_in_zookeeper(zk_server.connect_string, cluster.root)["etl"].epoch == later.epoch

    standby = controllers.service(second).transition_to_standby()
    assert (standby.state, standby.epoch) == (HAState.STANDBY, None)
    assert refused_as_not_leader(cluster, second, "activate")
    assert records_in_zookeeper(zk_server.connect_string, cluster.root)["etl"].status is (
        PipelineStatus.INACTIVE
    )
    # the history holds both granted terms, and no write the oracle could fault
    events = load_events([tmp_path / HISTORY])
    assert [(e.get("id"), e.get("epoch")) for e in events if e.name == "leader_won"] == [
        (first.address, won.epoch),
        (second.address, later.epoch),
    ]
    assert {e.get("epoch") for e in events if e.name == "leader_write"} == {won.epoch, later.epoch}
    assert check_leader_writes(events, Clocks()) == []


def test_the_ha_routes_answer_only_the_admin_role(
    zk_server: ZooKeeperServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    tokens = token_file(tmp_path)
    options = ["-c", f"nimbus.auth.tokens.file={tokens}", "-c", "nimbus.ha.mode=zkfc"]
    with secure_cluster(
        zk_server.connect_string,
        tmp_path,
        request.node.name,
        extra=options,
        auth=ClientAuth(token=ADMIN),
        size=1,
    ) as cluster:
        (nimbus,) = cluster.nimbuses
        base = cluster.url(nimbus)
        calls = [
            ("GET", STATUS_PATH, None),
            ("GET", HEALTH_PATH, None),
            ("POST", TO_ACTIVE_PATH, {"epoch": 1}),
            ("POST", TO_STANDBY_PATH, {}),
        ]
        for method, path, body in calls:
            anonymous = httpx.request(method, base + path, json=body)
            assert anonymous.status_code == 401, path
            assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
            for token in (READ, SUBMIT):
                refused = httpx.request(method, base + path, json=body, headers=bearer(token))
                assert (refused.status_code, refused.json()["error"]) == (403, "forbidden"), path
        with HAServiceClient(nimbus.address, ClientAuth(token=ADMIN), timeout=5.0) as service:
            wait_until(lambda: ready_standby(service), WAIT_SECS, "a ready standby")
            assert service.check_health().healthy
            assert service.transition_to_standby().state is HAState.STANDBY
