"""The nimbus as a service under a failover controller, on real ZooKeeper and a real HTTP API:
the test plays the controller (a ``Coordinator`` of its own that wins the nimbus group's
election in the nimbus's name) and speaks the HA service protocol with ``HAServiceClient``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from stratus.api.errors import NotLeaderError
from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.config import config_from_mapping
from stratus.coordination import Coordinator
from stratus.coordination.errors import LeadershipLostError
from stratus.coordination.leadership import Leadership
from stratus.ha.protocol import (
    STALE_EPOCH,
    TRANSITION_FAILED,
    HAServiceClient,
    HAState,
    RequestSource,
    ServiceUnhealthyError,
    TransitionFailedError,
)
from stratus.nimbus.daemon import Nimbus
from stratus.nimbus.leadership.health import FAILED_ROUNDS_UNHEALTHY, HealthFacts, verdict
from stratus.nimbus.settings import NimbusSettings
from stratus.security.client_auth import NO_AUTH, ClientAuth
from stratus.zk.paths import NIMBUS_GROUP, ClusterPaths
from tests.cluster.test_election import expire_session
from tests.harness.nimbus_cluster import SESSION_SECS
from tests.harness.secure_cluster import ADMIN, READ, SUBMIT, token_file
from tests.harness.tcp_proxy import TcpProxy
from tests.harness.zkfixtures import kazoo_client, wait_until

WAIT_SECS = 15.0


def nimbus_conf(zk_hosts: str, local_dir: Path, **extra: object) -> dict[str, object]:
    return {
        "zookeeper.servers": [zk_hosts],
        "zookeeper.session.timeout.secs": SESSION_SECS,
        "nimbus.port": 0,
        "nimbus.code.port": 0,
        "nimbus.local.dir": str(local_dir),
        "nimbus.lead.check.secs": 0.05,
        "nimbus.monitor.freq.secs": 0.1,
        **extra,
    }


class Harness:
    """Nimbuses started in this process, and the test's own controller sessions."""

    def __init__(self, zk_hosts: str, tmp_path: Path) -> None:
        self.zk_hosts = zk_hosts
        self.tmp_path = tmp_path
        self.nimbuses: list[Nimbus] = []
        self.coordinators: list[Coordinator] = []
        self.clients: list[HAServiceClient] = []

    def nimbus(self, mode: str = "zkfc", extra: dict[str, object] | None = None) -> Nimbus:
        local_dir = self.tmp_path / f"nimbus-{len(self.nimbuses)}"
        conf = nimbus_conf(self.zk_hosts, local_dir, **{"nimbus.ha.mode": mode, **(extra or {})})
        nimbus = Nimbus(NimbusSettings.from_config(config_from_mapping(conf)))
        nimbus.start()
        self.nimbuses.append(nimbus)
        return nimbus

    def client(self, nimbus: Nimbus, auth: ClientAuth = NO_AUTH) -> HAServiceClient:
        client = HAServiceClient(nimbus.address, auth, timeout=WAIT_SECS)
        self.clients.append(client)
        return client

    def controller(self) -> Coordinator:
        """A zkfc's session: it campaigns in the nimbus group in its nimbus's name."""
        coordinator = Coordinator.standalone(self.zk_hosts, session_timeout=SESSION_SECS).start()
        self.coordinators.append(coordinator)
        return coordinator

    def win(self, nimbus: Nimbus) -> tuple[Coordinator, Leadership]:
        controller = self.controller()
        term = controller.nominate(
            NIMBUS_GROUP, nimbus.address, timeout=WAIT_SECS, data=nimbus.address.encode()
        )
        return controller, term

    def close(self) -> None:
        for client in self.clients:
            client.close()
        for nimbus in self.nimbuses:
            nimbus.stop()
        for coordinator in self.coordinators:
            coordinator.close()


@pytest.fixture
def ha(zk_hosts: str, tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(zk_hosts, tmp_path)
    yield harness
    harness.close()


def standby_and_ready(client: HAServiceClient) -> bool:
    status = client.status()
    return status.state is HAState.STANDBY and status.ready_to_become_active


def pipeline_written_at(zk_hosts: str, name: str) -> PipelineRecord | None:
    with kazoo_client(zk_hosts) as zk:
        path = ClusterPaths("/stratus").pipeline(name)
        if zk.exists(path) is None:
            return None
        return PipelineRecord.model_validate_json(zk.get(path)[0])


# ---------------------------------------------------------------------- the two modes


def test_a_zkfc_mode_nimbus_never_campaigns_and_waits_as_a_ready_standby(ha: Harness) -> None:
    nimbus = ha.nimbus()
    client = ha.client(nimbus)
    wait_until(lambda: standby_and_ready(client), WAIT_SECS, "a ready standby")
    status = client.status()
    assert status.address == nimbus.address and status.epoch is None and status.pid
    assert not nimbus.coordinator.is_candidate(NIMBUS_GROUP)
    assert nimbus.coordinator.get_leader(NIMBUS_GROUP) is None
    with pytest.raises(NotLeaderError):
        nimbus.service.leader_term()


def test_a_self_elected_nimbus_reports_active_and_refuses_both_transitions(ha: Harness) -> None:
    nimbus = ha.nimbus(mode="self")
    client = ha.client(nimbus)
    wait_until(lambda: client.status().state is HAState.ACTIVE, WAIT_SECS, "it to elect itself")
    assert client.status().epoch == nimbus.controller.accepted_term().epoch  # type: ignore[union-attr]
    with pytest.raises(TransitionFailedError, match="elects itself") as to_active:
        client.transition_to_active(epoch=99)
    with pytest.raises(TransitionFailedError, match="elects itself") as to_standby:
        client.transition_to_standby()
    assert to_active.value.code == to_standby.value.code == TRANSITION_FAILED
    status = client.status()
    assert not status.ready_to_become_active
    assert (status.not_ready_reason or "").startswith("self_elected")
    assert client.status().state is HAState.ACTIVE


# ---------------------------------------------------------------------- acting under a won epoch


def test_transition_to_active_with_the_won_epoch_leads_under_that_epoch(ha: Harness) -> None:
    nimbus = ha.nimbus()
    client = ha.client(nimbus)
    wait_until(lambda: standby_and_ready(client), WAIT_SECS, "a ready standby")
    _, won = ha.win(nimbus)
    status = client.transition_to_active(epoch=won.epoch)
    assert (status.state, status.epoch) == (HAState.ACTIVE, won.epoch)
    assert nimbus.service.leader_term().epoch == won.epoch
    again = client.transition_to_active(epoch=won.epoch)  # idempotent
    assert (again.state, again.epoch) == (HAState.ACTIVE, won.epoch)
    exposition = nimbus.metrics.exposition().decode()
    assert 'stratus_nimbus_ha_state{state="active"} 1.0' in exposition
    assert f"stratus_nimbus_ha_epoch {float(won.epoch)}" in exposition
    assert 'stratus_nimbus_ha_transitions_total{to="active"} 1.0' in exposition


def test_an_epoch_the_group_is_not_at_or_won_for_another_nimbus_is_refused(ha: Harness) -> None:
    nimbus, other = ha.nimbus(), ha.nimbus()
    client = ha.client(nimbus)
    wait_until(lambda: standby_and_ready(client), WAIT_SECS, "a ready standby")
    _, foreign = ha.win(other)  # the other nimbus's controller won this epoch
    with pytest.raises(TransitionFailedError, match="names") as refused:
        client.transition_to_active(epoch=foreign.epoch)
    assert refused.value.code == TRANSITION_FAILED
    with pytest.raises(TransitionFailedError) as stale:
        client.transition_to_active(epoch=foreign.epoch - 1)
    assert stale.value.code == STALE_EPOCH
    assert client.status().state is HAState.STANDBY
    with pytest.raises(NotLeaderError):
        nimbus.service.leader_term()


def test_an_epoch_older_than_one_already_given_is_stale(ha: Harness) -> None:
    nimbus = ha.nimbus()
    client = ha.client(nimbus)
    wait_until(lambda: standby_and_ready(client), WAIT_SECS, "a ready standby")
    controller, first = ha.win(nimbus)
    client.transition_to_active(epoch=first.epoch)
    controller.unnominate(NIMBUS_GROUP)
    _, second = ha.win(nimbus)  # its controller won again (say, after restarting)
    assert client.transition_to_active(epoch=second.epoch).epoch == second.epoch
    with pytest.raises(TransitionFailedError, match="older") as refused:
        client.transition_to_active(epoch=first.epoch)
    assert refused.value.code == STALE_EPOCH
    assert client.status().epoch == second.epoch


def test_once_another_nimbus_wins_a_later_epoch_the_old_one_is_fenced_and_stops(
    ha: Harness, zk_hosts: str
) -> None:
    old, new = ha.nimbus(), ha.nimbus()
    old_client, new_client = ha.client(old), ha.client(new)
    wait_until(lambda: standby_and_ready(old_client), WAIT_SECS, "a ready standby")
    old_controller, won = ha.win(old)
    old_client.transition_to_active(epoch=won.epoch)
    old_term = old.service.leader_term()
    old_controller.close()  # its zkfc dies without telling it anything
    _, later = ha.win(new)
    assert later.epoch == won.epoch + 1
    late_write = old_term.transaction()  # a write of the old term, however late
    with pytest.raises(LeadershipLostError, match="epoch has moved"), late_write as tx:
        tx.create(ClusterPaths("/stratus").pipeline("late"), b"{}")
    assert pipeline_written_at(zk_hosts, "late") is None
    wait_until(
        lambda: old_client.status().state is HAState.STANDBY,
        WAIT_SECS,
        "the old nimbus to stop on seeing the later epoch",
    )
    with pytest.raises(NotLeaderError):
        old.service.leader_term()
    wait_until(lambda: standby_and_ready(new_client), WAIT_SECS, "the new one ready")
    assert new_client.transition_to_active(epoch=later.epoch).state is HAState.ACTIVE


def test_a_nimbus_whose_session_expires_stops_acting_and_takes_its_controllers_next_epoch(
    ha: Harness, zk_hosts: str
) -> None:
    nimbus = ha.nimbus()
    client = ha.client(nimbus)
    wait_until(lambda: standby_and_ready(client), WAIT_SECS, "a ready standby")
    controller, won = ha.win(nimbus)
    client.transition_to_active(epoch=won.epoch)
    expire_session(nimbus.coordinator, zk_hosts)
    wait_until(
        lambda: client.status().state is HAState.STANDBY,
        WAIT_SECS,
        "the term of the expired session to stop holding",
    )
    controller.unnominate(NIMBUS_GROUP)  # its zkfc sees the nimbus standby: it rejoins
    _, again = ha.win(nimbus)
    wait_until(lambda: standby_and_ready(client), WAIT_SECS, "ready again on its new session")
    status = client.transition_to_active(epoch=again.epoch)
    assert (status.state, status.epoch) == (HAState.ACTIVE, again.epoch)


def test_transition_to_standby_stops_acting_at_once_and_is_idempotent(ha: Harness) -> None:
    nimbus = ha.nimbus()
    client = ha.client(nimbus)
    wait_until(lambda: standby_and_ready(client), WAIT_SECS, "a ready standby")
    _, won = ha.win(nimbus)
    client.transition_to_active(epoch=won.epoch)
    term = nimbus.service.leader_term()
    status = client.transition_to_standby()
    assert (status.state, status.epoch) == (HAState.STANDBY, None)
    assert not term.is_leader
    with pytest.raises(NotLeaderError):
        nimbus.service.leader_term()
    assert client.transition_to_standby().state is HAState.STANDBY
    assert 'stratus_nimbus_ha_transitions_total{to="standby"} 1.0' in (
        nimbus.metrics.exposition().decode()
    )
    # the same epoch, still the group's current term, makes it active again
    assert client.transition_to_active(epoch=won.epoch).state is HAState.ACTIVE


def test_an_operators_transition_is_refused_unless_forced(ha: Harness) -> None:
    nimbus = ha.nimbus()
    client = ha.client(nimbus)
    wait_until(lambda: standby_and_ready(client), WAIT_SECS, "a ready standby")
    _, won = ha.win(nimbus)
    with pytest.raises(TransitionFailedError, match="forcemanual") as refused:
        client.transition_to_active(epoch=won.epoch, source=RequestSource.USER)
    assert refused.value.code == TRANSITION_FAILED
    assert client.status().state is HAState.STANDBY
    forced = client.transition_to_active(epoch=won.epoch, source=RequestSource.USER_FORCED)
    assert forced.state is HAState.ACTIVE
    with pytest.raises(TransitionFailedError, match="forcemanual"):
        client.transition_to_standby(source=RequestSource.USER)
    assert client.transition_to_standby(RequestSource.USER_FORCED).state is HAState.STANDBY


def test_a_nimbus_missing_a_pipelines_code_refuses_to_become_active(
    ha: Harness, zk_hosts: str
) -> None:
    nimbus = ha.nimbus()
    client = ha.client(nimbus)
    wait_until(lambda: standby_and_ready(client), WAIT_SECS, "a ready standby")
    orphan = PipelineRecord(
        name="etl",
        status=PipelineStatus.ACTIVE,
        digest="0" * 64,
        size_bytes=10,
        submitted=0.0,
        updated=0.0,
        epoch=1,
    )
    with kazoo_client(zk_hosts) as zk:
        zk.create(ClusterPaths("/stratus").pipeline("etl"), orphan.encode())
    wait_until(lambda: not client.status().ready_to_become_active, WAIT_SECS, "it to notice")
    assert client.status().not_ready_reason == "missing_code(etl)"
    _, won = ha.win(nimbus)
    with pytest.raises(TransitionFailedError, match=r"missing_code\(etl\)") as refused:
        client.transition_to_active(epoch=won.epoch)
    assert refused.value.code == TRANSITION_FAILED
    assert client.status().state is HAState.STANDBY


# ---------------------------------------------------------------------- health and auth


def test_health_turns_unhealthy_when_the_zookeeper_connection_is_cut(
    ha: Harness, zk_server, zk_hosts: str
) -> None:
    host, _, chroot = zk_hosts.partition("/")
    zk_host, zk_port = host.rsplit(":", 1)
    with TcpProxy(zk_host, int(zk_port)) as proxy:
        nimbus = ha.nimbus(extra={"zookeeper.servers": [f"127.0.0.1:{proxy.port}/{chroot}"]})
        client = ha.client(nimbus)
        assert client.check_health().healthy
        proxy.cut()
        wait_until(lambda: not nimbus.session.connected, WAIT_SECS, "the session to drop")
        # healthy while the session may come back, unhealthy once it cannot have lived on
        wait_until(lambda: not nimbus.session.may_resume(), WAIT_SECS, "a session timeout")
        with pytest.raises(ServiceUnhealthyError, match="zookeeper_disconnected"):
            client.check_health()
        proxy.heal()
        wait_until(lambda: nimbus.session.connected, WAIT_SECS, "the session to come back")
        assert client.check_health().healthy


def test_the_ha_routes_need_the_admin_role(ha: Harness, tmp_path: Path) -> None:
    tokens = token_file(tmp_path)
    nimbus = ha.nimbus(extra={"nimbus.auth.tokens.file": str(tokens)})
    url = f"http://{nimbus.address}/ha/v1/status"
    assert httpx.get(url).status_code == 401
    for token in (READ, SUBMIT):
        refused = httpx.get(url, headers={"Authorization": f"Bearer {token}"})
        assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    assert ha.client(nimbus, ClientAuth(token=ADMIN)).status().address == nimbus.address


# ---------------------------------------------------------------------- the verdict (pure)


def facts(**changes: object) -> HealthFacts:
    fields: dict[str, object] = {
        "stopping": False,
        "zookeeper": "connected",
        "zookeeper_may_resume": False,
        "controller_running": True,
        "package_server_serving": True,
        "failing_duties": (),
        "failed_rounds": 0,
    }
    return HealthFacts(**{**fields, **changes})  # type: ignore[arg-type]


def test_the_verdict_names_every_problem_and_nothing_when_healthy() -> None:
    assert verdict(facts()) == []
    assert verdict(facts(package_server_serving=None)) == []  # shared code: no server
    problems = verdict(
        facts(
            zookeeper="suspended",
            controller_running=False,
            package_server_serving=False,
            failing_duties=("scheduling",),
            failed_rounds=FAILED_ROUNDS_UNHEALTHY,
        )
    )
    assert [p.split(":")[0] for p in problems] == [
        "zookeeper_disconnected",
        "controller_stopped",
        "package_server_down",
        "duties_failing",
    ]
    assert verdict(facts(failed_rounds=FAILED_ROUNDS_UNHEALTHY - 1)) == []


def test_a_suspension_shorter_than_the_session_timeout_is_no_health_problem() -> None:
    """ZooKeeper electing a leader of its own suspends every client: a blip, not a failover."""
    assert verdict(facts(zookeeper="suspended", zookeeper_may_resume=True)) == []
    too_long = verdict(facts(zookeeper="suspended", zookeeper_may_resume=False))
    assert [p.split(":")[0] for p in too_long] == ["zookeeper_disconnected"]
    assert verdict(facts(zookeeper="expired")) != []
