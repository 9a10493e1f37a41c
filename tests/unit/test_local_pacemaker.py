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
from stratus.client import NimbusClient
from stratus.local.cluster import LocalCluster
from stratus.local.pacemaker_restart import restart_a_pacemaker
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.client import parse_servers
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.zk.paths import ClusterPaths
from tests.harness.zkfixtures import kazoo_client, wait_until


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
    cluster = LocalCluster(  # about the pacemakers: one process per nimbus is enough
        tmp_path, console, nimbuses=1, supervisors=1, state_store="pacemaker", ha_mode="self"
    )
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

        # The demo's step: one pacemaker killed and restarted empty; it holds the
        # supervisor's round again and says it is warming up (no pipeline runs here: that
        # nothing moves is proved with Spark in test_pacemaker_e2e.py).
        victim = cluster.pacemakers[0]
        old_pid = victim.pid
        with NimbusClient(cluster.seeds, retry_deadline=30, auth=cluster.client_auth) as nimbus:
            restart = restart_a_pacemaker(cluster, nimbus, pipelines=[], watch_secs=0)
            assert [s.id for s in nimbus.cluster().supervisors] == ["supervisor-1"]
        assert victim.pid != old_pid and victim.is_running()
        assert restart.supervisors == 1 and restart.warming and restart.moved == {}
        assert restart.restarted_secs <= restart.refilled_secs <= restart.watched_secs
        assert has_supervisor_beat(victim.address)
    finally:
        cluster.close()
    assert not any(pacemaker.is_running() for pacemaker in cluster.pacemakers)


def test_stratus_local_offers_the_pacemaker_state_store() -> None:
    result = CliRunner().invoke(main, ["local", "--help"])
    assert "--state-store [zookeeper|pacemaker]" in result.output
