"""The cluster state store settings of a daemon, read from the configuration.

The one place where ``cluster.state.store`` and the bound of one store call become a
``StateStoreSettings``: the state layer never reads the configuration itself::

    store = create_state_store(state_store_settings(conf), client, paths)
"""

from __future__ import annotations

from stratus.config import StratusConfig
from stratus.state.factory import StateStoreSettings


def state_store_settings(conf: StratusConfig) -> StateStoreSettings:
    """``cluster.state.store``; a call bounded by the shorter of ``zookeeper.session.timeout.secs``
    and ``supervisor.fence.timeout.secs``."""
    return StateStoreSettings(
        kind=conf.cluster_state_store,
        call_timeout_secs=min(
            conf.zookeeper_session_timeout_secs, conf.supervisor_fence_timeout_secs
        ),
    )
