"""The zkfc under stress: random session expiries and random health failures, never two actives.

Three real dummy HA services (processes) are managed by three failover controllers that run
in this process (the real ``Zkfc`` wiring, so that the test can read each one's ZooKeeper
session and expire it). For ``STRATUS_ZKFC_STRESS_SECS`` seconds (default 30; ``make
stress-zkfc`` sets 300), driven by a seeded ``random.Random`` (the seed is printed;
``STRATUS_ZKFC_STRESS_SEED`` replays one), every 0 to 300 ms the test either expires a
random controller's session or turns a random service unhealthy or healthy again. The
services hold a shared lock while active, so two actives at once are recorded as a conflict.
At the end every service is made healthy, and exactly one must become active.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.exceptions import KazooException

from stratus.ha.daemon import Zkfc
from stratus.ha.failover_controller import ControllerSettings
from stratus.ha.fencing import FenceTarget, parse_methods
from stratus.ha.health_monitor import HealthSettings
from stratus.ha.settings import ZkfcSettings
from stratus.security.client_auth import NO_AUTH
from stratus.zk.session import ZkSession, ZkSettings
from tests.cluster.test_stress import expire_session
from tests.harness.zkfc_cluster import SESSION, WAIT, ZkfcCluster
from tests.harness.zkfixtures import wait_until

STRESS_SECS = float(os.environ.get("STRATUS_ZKFC_STRESS_SECS", "30"))
NAMES = ["a", "b", "c"]


def settings(address: str) -> ZkfcSettings:
    return ZkfcSettings(
        target=FenceTarget.parse(address),
        group="svc",
        rpc_timeout=1.0,
        health=HealthSettings(check_interval=0.05, max_backoff=0.5),
        controller=ControllerSettings(rejoin_delay=0.2),
        fencing_methods=parse_methods("graceful, process"),
        fencing_timeout=5.0,
        graceful_timeout=1.0,
    )


@pytest.fixture
def nodes(zk_hosts: str, tmp_path: Path) -> Iterator[tuple[ZkfcCluster, dict[str, Zkfc]]]:
    cluster = ZkfcCluster(zk_hosts, tmp_path, NAMES)
    zkfcs: dict[str, Zkfc] = {}
    for name in NAMES:
        node = cluster.start_service(name)
        session = ZkSession(ZkSettings(zk_hosts, "/stratus", SESSION, 15.0))
        zkfcs[name] = Zkfc(settings(node.address), session, NO_AUTH)
        zkfcs[name].start()
    yield cluster, zkfcs
    for zkfc in zkfcs.values():
        zkfc.stop()
    cluster.stop()


@pytest.mark.slow
@pytest.mark.solo
@pytest.mark.timeout(STRESS_SECS * 2 + 300)
def test_random_session_expiries_and_health_failures_never_make_two_actives(
    nodes, zk_hosts: str
) -> None:
    cluster, zkfcs = nodes
    seed = int(os.environ.get("STRATUS_ZKFC_STRESS_SEED", random.randrange(2**32)))
    print(f"\nzkfc stress: seed={seed} secs={STRESS_SECS:g}")
    rng = random.Random(seed)
    wait_until(lambda: len(cluster.actives()) == 1, WAIT, "a first active")
    expiries = health_flips = 0
    end = time.monotonic() + STRESS_SECS
    while time.monotonic() < end:
        time.sleep(rng.uniform(0.0, 0.3))
        name = rng.choice(NAMES)
        if rng.random() < 0.5:
            client_id = zkfcs[name].session.client.client_id
            with contextlib.suppress(KazooException):  # the intruder's own connection broke
                if client_id is not None and expire_session(zk_hosts, *client_id):
                    expiries += 1
        else:
            cluster.control(name, healthy=rng.random() < 0.6)
            health_flips += 1
        assert cluster.conflicts() == [], f"two actives at once (seed {seed})"
    activations = [event for event in cluster.events() if event[0] == "active"]
    print(
        f"zkfc stress: {expiries} session expiries, {health_flips} health changes, "
        f"{len(activations)} activations"
    )

    for name in NAMES:
        cluster.control(name, healthy=True)
    wait_until(lambda: len(cluster.actives()) == 1, WAIT + 2 * SESSION, "one active at the end")
    assert cluster.conflicts() == [], f"two actives at once (seed {seed})"
    assert all(zkfc.failure is None for zkfc in zkfcs.values())
    assert expiries > 0 and health_flips > 0
    assert len({name for _, name, _ in activations}) > 1  # the faults did cause failovers
