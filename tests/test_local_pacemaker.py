"""``stratus local --state-store pacemaker``: the local cluster with two pacemakers as child
processes, and every daemon's heartbeats in them (none in ZooKeeper). No Spark: no pipeline
is submitted; the supervisor's own heartbeat proves where heartbeats go."""

from __future__ import annotations

import io
from functools import partial
from pathlib import Path

from click.testing import CliRunner
from rich.console import Console

from stratus.cli.main import main
from stratus.local.cluster import LocalCluster
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.client import parse_servers
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.zk.paths import ClusterPaths
from tests.zkfixtures import kazoo_client, wait_until


def pulses_on(address: str) -> dict[str, bytes]:
    """Every pulse one pacemaker holds, by path."""
    settings = PacemakerClientSettings(servers=parse_servers([address], 0), timeout_secs=5.0)
    pool = BlockingPacemakerPool(settings, call_timeout_secs=10.0)
    try:
        return {p: pulse.data for p, pulse in pool.get_all_pulses_for_path("/").value.items()}
    finally:
        pool.close()


def has_supervisor_beat(address: str) -> bool:
    return "/supervisors/supervisor-1" in pulses_on(address)


def test_the_local_cluster_runs_two_pacemakers_and_sends_them_every_heartbeat(
    tmp_path: Path,
) -> None:
    console = Console(file=io.StringIO())
    cluster = LocalCluster(tmp_path, console, nimbuses=1, supervisors=1, state_store="pacemaker")
    try:
        cluster.start()
        assert len(cluster.pacemakers) == 2
        assert all(pacemaker.is_running() for pacemaker in cluster.pacemakers)
        for address in (pacemaker.address for pacemaker in cluster.pacemakers):
            wait_until(
                partial(has_supervisor_beat, address),
                30,
                f"supervisor-1's heartbeat on the pacemaker {address}",
            )
        with kazoo_client(cluster.zookeeper.connect_string) as client:
            heartbeats = ClusterPaths("/stratus").heartbeats
            assert client.exists(f"{heartbeats}/supervisors/supervisor-1") is None
    finally:
        cluster.close()
    assert not any(pacemaker.is_running() for pacemaker in cluster.pacemakers)


def test_stratus_local_offers_the_pacemaker_state_store() -> None:
    result = CliRunner().invoke(main, ["local", "--help"])
    assert "--state-store [zookeeper|pacemaker]" in result.output
