"""The ``ClusterStateStore`` interface: heartbeats on ZooKeeper-like paths.

Workers (through their supervisor) and supervisors write heartbeats; the leader reads them.
``cluster.state.store`` picks the implementation: ZooKeeper (``zk_store``) or the pacemakers
(``pacemaker_store``, an in-memory store built for exactly this load). Paths are absolute
within the store, such as ``/workers/etl/supervisor-1``; parents exist implicitly::

    store.set("/workers/etl/supervisor-1", heartbeat.encode())
    store.set_many({"/workers/etl/s1": b"...", "/supervisors/s1": b"..."})  # one message
    store.get("/workers/etl/supervisor-1")          # bytes, or None
    store.children("/workers")                      # ["etl", ...]
    store.children_data("/workers/etl")             # {"supervisor-1": b"...", ...}
    store.read_tree("/")                            # TreeRead: every value, and `complete`
    store.delete("/workers/etl")                    # the path and everything below it
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class TreeRead:
    """Every value below a path, by its path relative to it (``workers/etl/s1``).

    ``complete`` is False when the store may be missing values that were written: every
    pacemaker that answered started recently (it is warming up) and holds only what was
    written since. A value missing from an incomplete read is unknown, not absent.

    ``partial`` is True when a configured pacemaker did not answer: any value may be older
    than the newest written, since a writer that reached only that server renewed its
    lease with it.
    """

    data: dict[str, bytes]
    complete: bool = True
    partial: bool = False


class ClusterStateStore(Protocol):
    """Set, get, list and delete heartbeat data by path; every call may raise
    ``StateStoreUnavailableError`` when the store cannot be reached."""

    def set(self, path: str, data: bytes) -> None:
        """Create or replace the data at ``path`` (its parents are created as needed)."""

    def set_many(self, entries: Mapping[str, bytes]) -> None:
        """Set every path of ``entries``, in one message where the store allows it (a
        supervisor's whole period of heartbeats); in order, as ``set`` would."""

    def get(self, path: str) -> bytes | None:
        """The data at ``path``, or None if there is none."""

    def children(self, path: str) -> list[str]:
        """Names of the children of ``path``; empty if it does not exist."""

    def children_data(self, path: str) -> dict[str, bytes]:
        """The data of every child of ``path`` that holds data, by name, in one call."""

    def read_tree(self, path: str) -> TreeRead:
        """Every value below ``path`` (not its own), in as few round trips as the store can."""

    def delete(self, path: str) -> None:
        """Remove ``path`` and everything below it; nothing happens if it does not exist."""

    def close(self) -> None:
        """Release the store's resources (not the ZooKeeper client it was given)."""
