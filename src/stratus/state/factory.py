"""The cluster state store that ``cluster.state.store`` names, built for one daemon::

    store = create_state_store(StateStoreSettings("zookeeper", 6.0), client, paths)
    board = HeartbeatBoard(store)

``zookeeper`` (the default) keeps heartbeats under ``<zookeeper.root>/heartbeats`` on the
daemon's own kazoo client. Each call is bounded by ``call_timeout_secs``: the daemons pass the
shorter of ``zookeeper.session.timeout.secs`` (a call that takes longer would find the session
expired anyway) and ``supervisor.fence.timeout.secs`` (a supervisor stuck in one heartbeat call
must still notice in time that it has to fence itself); ``stratus.settings`` builds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kazoo.client import KazooClient

from stratus.errors import ConfigError
from stratus.state.store import ClusterStateStore
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.zk.paths import ClusterPaths


@dataclass(frozen=True)
class StateStoreSettings:
    """Which store a daemon uses, and how long one of its calls may take."""

    kind: str  # cluster.state.store
    call_timeout_secs: float


_Builder = Callable[[StateStoreSettings, KazooClient, ClusterPaths], ClusterStateStore]


def _zookeeper(
    settings: StateStoreSettings, client: KazooClient, paths: ClusterPaths
) -> ClusterStateStore:
    return ZooKeeperStateStore(client, paths.heartbeats, timeout=settings.call_timeout_secs)


_STORES: dict[str, _Builder] = {"zookeeper": _zookeeper}


def create_state_store(
    settings: StateStoreSettings, client: KazooClient, paths: ClusterPaths
) -> ClusterStateStore:
    """The store ``settings.kind`` names; the kazoo client stays the caller's."""
    build = _STORES.get(settings.kind)
    if build is None:
        raise ConfigError(
            f"cluster.state.store {settings.kind!r} is not available; "
            f"use one of: {', '.join(sorted(_STORES))}"
        )
    return build(settings, client, paths)
