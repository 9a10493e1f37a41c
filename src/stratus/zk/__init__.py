"""ZooKeeper: the session a process owns (``session``), the znode layout (``paths``), watched
mirrors and ephemeral registrations, and the local server that ``stratus zookeeper`` and the
test suite run."""

from stratus.zk.ensemble import ZooKeeperEnsemble
from stratus.zk.errors import ZooKeeperServerError, ZooKeeperUnavailableError
from stratus.zk.java import find_java, zookeeper_classpath
from stratus.zk.server import ZooKeeperServer
from stratus.zk.session import SessionChange, SessionState, ZkSession, ZkSettings

__all__ = [
    "SessionChange",
    "SessionState",
    "ZkSession",
    "ZkSettings",
    "ZooKeeperEnsemble",
    "ZooKeeperServer",
    "ZooKeeperServerError",
    "ZooKeeperUnavailableError",
    "find_java",
    "zookeeper_classpath",
]
