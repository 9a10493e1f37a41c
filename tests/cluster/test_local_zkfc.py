"""``stratus local --ha zkfc`` and the default: nimbuses under zkfcs or under their own
controllers, and the demo's kill.

No Spark: a pipeline without supervisors is enough for a leader-only call. The demo's kill of
the leader nimbus is seen by its zkfc, a child process of the local cluster that lives on (or,
by default, by the controller that runs the killed nimbus as its child, which lives on), and
another nimbus leads at a later epoch; closing the cluster leaves no process behind.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from stratus.client import NimbusClient
from stratus.local.cluster import LocalCluster
from stratus.local.demo import REPLICATION, kill_leader_nimbus
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import descendants, left_behind, process_gone

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("ha_mode", "secure"),
    [("zkfc", False), ("zkfc", True), ("supervised", True)],
    ids=["zkfc-open", "zkfc-secure", "supervised-secure"],
)
def test_the_local_cluster_under_zkfcs_fails_a_killed_leader_over_and_stops_every_process(
    tmp_path: Path, ha_mode: str, secure: bool
) -> None:
    """Secured (stratus local --secure --ha zkfc), the zkfcs reach their nimbuses over https
    with an admin token of their own, and ZooKeeper with stratus's digest identity; by
    default each controller reaches its child with the token it made for it."""
    out = io.StringIO()
    cluster = LocalCluster(
        tmp_path,
        Console(file=out, width=200),
        ha_mode=ha_mode,
        nimbuses=2,
        supervisors=0,
        secure=secure,
    )
    try:
        cluster.start()
        assert [z.target for z in cluster.zkfcs] == (cluster.seeds if ha_mode == "zkfc" else [])
        if secure:
            anonymous = httpx.get(
                f"{cluster.nimbuses[0].url}/api/v1/pipelines",
                verify=cluster.client_auth.verify(),
                timeout=10,
            )
            assert anonymous.status_code == 401
        with NimbusClient(cluster.seeds, retry_deadline=60, auth=cluster.client_auth) as client:
            record = client.wait_replicated(
                client.submit("etl", valid_package("etl"), REPLICATION).name
            )
            before = cluster.leader_term()
            assert before is not None and record.epoch == before.epoch
            timings = kill_leader_nimbus(cluster, client, cluster.console, "etl")
            after = cluster.leader_term()
        assert after is not None and after.address != before.address
        assert after.epoch > before.epoch
        # the dead nimbus's zkfc, or its controller, lives on
        controllers = cluster.zkfcs if ha_mode == "zkfc" else cluster.nimbuses
        assert all(controller.is_running() for controller in controllers)
        assert [t.detail.split(":")[-1].strip() for t in timings] == [
            "first leader-only call",
            f"new leader record, epoch {after.epoch}",
        ]
        assert f"took the lock at epoch {after.epoch}" in out.getvalue()
    finally:
        pids = [p.pid for p in (*cluster.nimbuses, *cluster.zkfcs) if p.pid is not None]
        below = {child: at for pid in pids for child, at in descendants(pid).items()}
        cluster.close()
    assert len(pids) == (4 if ha_mode == "zkfc" else 2)
    assert bool(below) == (ha_mode == "supervised")  # a supervised nimbus's child
    assert all(process_gone(pid) for pid in pids)
    assert left_behind(below) == []


def test_stratus_local_offers_the_zkfc_mode() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "stratus", "local", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--ha [supervised|self|zkfc]" in help_text
