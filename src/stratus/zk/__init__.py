"""ZooKeeper: the local server that ``stratus zookeeper`` and the test suite run."""

from stratus.zk.errors import ZooKeeperServerError
from stratus.zk.server import ZooKeeperEnsemble, ZooKeeperServer, find_java, zookeeper_classpath

__all__ = [
    "ZooKeeperEnsemble",
    "ZooKeeperServer",
    "ZooKeeperServerError",
    "find_java",
    "zookeeper_classpath",
]
