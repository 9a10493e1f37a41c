"""ZooKeeper: the local server that ``stratus zookeeper`` and the test suite run."""

from stratus.zk.ensemble import ZooKeeperEnsemble
from stratus.zk.errors import ZooKeeperServerError
from stratus.zk.java import find_java, zookeeper_classpath
from stratus.zk.server import ZooKeeperServer

__all__ = [
    "ZooKeeperEnsemble",
    "ZooKeeperServer",
    "ZooKeeperServerError",
    "find_java",
    "zookeeper_classpath",
]
