"""The ``ClusterStateStore`` interface: heartbeats on ZooKeeper-like paths.

Workers (through their supervisor) and supervisors write heartbeats; the leader reads them.
``cluster.state.store`` picks the implementation: ZooKeeper now, pacemaker (an in-memory
store built for exactly this load) later. Paths are absolute within the store, such as
``/workers/etl/supervisor-1``; parents exist implicitly::

    store.set("/workers/etl/supervisor-1", heartbeat.encode())
    store.get("/workers/etl/supervisor-1")          # bytes, or None
    store.children("/workers")                      # ["etl", ...]
    store.children_data("/workers/etl")             # {"supervisor-1": b"...", ...}
    store.delete("/workers/etl")                    # the path and everything below it
"""

from __future__ import annotations

from typing import Protocol


class ClusterStateStore(Protocol):
    """Set, get, list and delete heartbeat data by path; every call may raise
    ``StateStoreUnavailableError`` when the store cannot be reached."""

    def set(self, path: str, data: bytes) -> None:
        """Create or replace the data at ``path`` (its parents are created as needed)."""

    def get(self, path: str) -> bytes | None:
        """The data at ``path``, or None if there is none."""

    def children(self, path: str) -> list[str]:
        """Names of the children of ``path``; empty if it does not exist."""

    def children_data(self, path: str) -> dict[str, bytes]:
        """The data of every child of ``path`` that holds data, by name, in one call."""

    def delete(self, path: str) -> None:
        """Remove ``path`` and everything below it; nothing happens if it does not exist."""

    def close(self) -> None:
        """Release the store's resources (not the ZooKeeper client it was given)."""
