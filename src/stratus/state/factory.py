"""The cluster state store that ``cluster.state.store`` names, built for one daemon::

    store = create_state_store(StateStoreSettings("zookeeper", 6.0), client, paths)
    board = HeartbeatBoard(store)

``zookeeper`` (the default) keeps heartbeats under ``<zookeeper.root>/heartbeats`` on the
daemon's own kazoo client; ``pacemaker`` sends them to the pacemakers of
``settings.pacemaker`` (one client pool for the daemon, closed with the store). A
supervisor passes its id as ``owner``: a pacemaker lets it read its own subtree only, and
with Kerberos a pacemaker that grants its principal another subtree than
``/supervisors/<owner>`` stops it at start (``SubtreeMismatchError``).

Each call is bounded by ``call_timeout_secs``: the daemons pass the
shorter of ``zookeeper.session.timeout.secs`` (a call that takes longer would find the session
expired anyway) and ``supervisor.fence.timeout.secs`` (a supervisor stuck in one heartbeat call
must still notice in time that it has to fence itself); ``stratus.settings`` builds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kazoo.client import KazooClient

from stratus.errors import ConfigError
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.errors import PacemakerError, SubtreeMismatchError
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.state.pacemaker_store import PacemakerStateStore, owned_subtree
from stratus.state.store import ClusterStateStore
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.zk.paths import ClusterPaths


@dataclass(frozen=True)
class StateStoreSettings:
    """Which store a daemon uses, and how long one of its calls may take."""

    kind: str  # cluster.state.store
    call_timeout_secs: float
    pacemaker: PacemakerClientSettings | None = None  # pacemaker.*, for kind `pacemaker`


_Builder = Callable[[StateStoreSettings, KazooClient, ClusterPaths, str | None], ClusterStateStore]


def _zookeeper(
    settings: StateStoreSettings, client: KazooClient, paths: ClusterPaths, owner: str | None
) -> ClusterStateStore:
    return ZooKeeperStateStore(client, paths.heartbeats, timeout=settings.call_timeout_secs)


def _pacemaker(
    settings: StateStoreSettings, client: KazooClient, paths: ClusterPaths, owner: str | None
) -> ClusterStateStore:
    if settings.pacemaker is None:
        raise ConfigError("cluster.state.store pacemaker needs the pacemaker.* client settings")
    client_settings = settings.pacemaker
    if owner is not None:  # a supervisor: its heartbeats go to its own subtree only
        client_settings = replace(client_settings, subtree=owned_subtree(owner))
    pool = BlockingPacemakerPool(client_settings, call_timeout_secs=settings.call_timeout_secs)
    if owner is not None:
        _check_subtree(pool)
    return PacemakerStateStore(pool, owner=owner)


def _check_subtree(pool: BlockingPacemakerPool) -> None:
    """Connect now, so that a pacemaker granting this supervisor another subtree than its
    own (Kerberos: the host of its principal) stops it at start, not at every write. Any
    other failure (no pacemaker up, credentials refused) is left to the writes, which
    report it as before; each connection made later is checked the same way."""
    try:
        pool.connect()
    except SubtreeMismatchError:
        pool.close()
        raise
    except PacemakerError:
        pass


_STORES: dict[str, _Builder] = {"zookeeper": _zookeeper, "pacemaker": _pacemaker}


def create_state_store(
    settings: StateStoreSettings,
    client: KazooClient,
    paths: ClusterPaths,
    *,
    owner: str | None = None,
) -> ClusterStateStore:
    """The store ``settings.kind`` names, for the supervisor ``owner`` (None: a nimbus);
    the kazoo client stays the caller's."""
    build = _STORES.get(settings.kind)
    if build is None:
        raise ConfigError(
            f"cluster.state.store {settings.kind!r} is not available; "
            f"use one of: {', '.join(sorted(_STORES))}"
        )
    return build(settings, client, paths, owner)
