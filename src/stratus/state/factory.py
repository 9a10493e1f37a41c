"""The cluster state store that ``cluster.state.store`` names, built for one daemon::

    store = create_state_store(conf, client, ClusterPaths(conf.zookeeper_root))
    board = HeartbeatBoard(store)

``zookeeper`` (the default) keeps heartbeats under ``<zookeeper.root>/heartbeats`` on the
daemon's own kazoo client. Each call is bounded by the shorter of
``zookeeper.session.timeout.secs`` (a call that takes longer would find the session expired
anyway) and ``supervisor.fence.timeout.secs`` (a supervisor stuck in one heartbeat call must
still notice in time that it has to fence itself).
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.client import KazooClient

from stratus.config import StratusConfig
from stratus.errors import ConfigError
from stratus.state.store import ClusterStateStore
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.zk.paths import ClusterPaths

_Builder = Callable[[StratusConfig, KazooClient, ClusterPaths], ClusterStateStore]


def _zookeeper(conf: StratusConfig, client: KazooClient, paths: ClusterPaths) -> ClusterStateStore:
    timeout = min(conf.zookeeper_session_timeout_secs, conf.supervisor_fence_timeout_secs)
    return ZooKeeperStateStore(client, paths.heartbeats, timeout=timeout)


_STORES: dict[str, _Builder] = {"zookeeper": _zookeeper}


def create_state_store(
    conf: StratusConfig, client: KazooClient, paths: ClusterPaths
) -> ClusterStateStore:
    """The store ``conf.cluster_state_store`` names; the kazoo client stays the caller's."""
    build = _STORES.get(conf.cluster_state_store)
    if build is None:
        raise ConfigError(
            f"cluster.state.store {conf.cluster_state_store!r} is not available; "
            f"use one of: {', '.join(sorted(_STORES))}"
        )
    return build(conf, client, paths)
