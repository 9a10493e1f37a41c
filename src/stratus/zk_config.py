"""The ZooKeeper session settings of a daemon or command, read from the configuration.

The one place where the ``zookeeper.*`` keys become a ``ZkSettings``: the ZooKeeper layer
never reads the configuration itself, and the configuration sits below it::

    session = ZkSession(zk_settings(conf))
"""

from __future__ import annotations

from stratus.config import StratusConfig
from stratus.zk.session import ZkSettings


def zk_settings(conf: StratusConfig) -> ZkSettings:
    """``zookeeper.servers``, ``.root``, ``.session.timeout.secs``, ``.connection.timeout.secs``."""
    return ZkSettings(
        hosts=conf.zookeeper_hosts(),
        root=conf.zookeeper_root,
        session_timeout=conf.zookeeper_session_timeout_secs,
        connection_timeout=conf.zookeeper_connection_timeout_secs,
    )
