"""The cluster state store: where heartbeats go (ZooKeeper now, pacemaker later)."""
