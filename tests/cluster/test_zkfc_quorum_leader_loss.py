"""ZooKeeper's own leader lost under zkfc-mode nimbuses: the nimbus leadership does not move.

When the ZooKeeper server that leads the quorum dies, every client's connection drops until
the others elect a new one; sessions survive it. The active nimbus stops acting the moment
its connection drops (its lease ends) and reports standby meanwhile, and its zkfc's elector
goes neutral. Neither may read that as a nimbus gone astray: once the quorum serves again the
same nimbus acts under the same epoch, with no fencing and no new election, since a move
would cost the pipelines a leader's whole takeover for nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stratus.ha.protocol import HAState
from stratus.zk.ensemble import ZooKeeperEnsemble
from tests.cluster.test_zkfc_nimbus import REPLICATED, WAIT_SECS, ZkfcNimbuses
from tests.harness.nimbus_cluster import nimbus_cluster
from tests.harness.zkfixtures import kazoo_client, wait_until

pytestmark = pytest.mark.slow

SESSION_SECS = 4.0  # the ensemble ticks at 200 ms: 20 ticks, the longest session it grants


@pytest.fixture
def on_a_quorum(
    zk_ensemble: ZooKeeperEnsemble, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ZkfcNimbuses]:
    session = ("-c", f"zookeeper.session.timeout.secs={SESSION_SECS}")
    with (
        nimbus_cluster(
            zk_ensemble.connect_string,
            tmp_path,
            request.node.name,
            size=2,
            extra=(*REPLICATED, *session),
            ha_mode="zkfc",
        ) as cluster,
        kazoo_client(zk_ensemble.connect_string) as zk,
    ):
        pair = ZkfcNimbuses(cluster, zk, tmp_path, zk_ensemble.connect_string, extra=session)
        try:
            pair.start()
            yield pair
        finally:
            pair.close()


def test_losing_zookeepers_leader_keeps_the_active_nimbus_and_its_epoch(
    zk_ensemble: ZooKeeperEnsemble, on_a_quorum: ZkfcNimbuses
) -> None:
    nimbuses = on_a_quorum
    first = nimbuses.wait_new_active(not_=None, skip=[])
    active = nimbuses.cluster.by_address(first.member_id)
    zk_leader = zk_ensemble.leader()
    assert zk_leader is not None

    zk_leader.kill()
    wait_until(
        lambda: nimbuses.status(active) is HAState.STANDBY,
        WAIT_SECS,
        "the active nimbus to stop acting while ZooKeeper elects a leader",
    )
    wait_until(
        lambda: zk_ensemble.leader() not in (None, zk_leader),
        WAIT_SECS,
        "ZooKeeper to elect another leader",
    )
    wait_until(
        lambda: nimbuses.status(active) is HAState.ACTIVE,
        WAIT_SECS,
        "the same nimbus to act again once the quorum serves",
    )

    after = nimbuses.leader()
    assert after is not None
    assert (after.member_id, after.epoch) == (first.member_id, first.epoch)
    assert nimbuses.current_epoch() == first.epoch
    log = nimbuses.zkfc_log(active)
    assert "event=service_state_mismatch" not in log
    assert "event=quit_election" not in log
