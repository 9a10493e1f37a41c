"""The cluster state store on ZooKeeper (``cluster.state.store: zookeeper``, the default).

Every store path maps to a znode under ``root`` (``<zookeeper.root>/heartbeats``): the store's
``/workers/etl/supervisor-1`` is the znode ``/stratus/heartbeats/workers/etl/supervisor-1``.
Parents are created as needed and never hold data, so an empty value reads as no value (and
cannot be written). Every call is bounded: while the client is disconnected it fails at once,
and a call that gets no answer within ``timeout`` fails then; either way with
``StateStoreUnavailableError``, never a kazoo exception::

    store = ZooKeeperStateStore(client, "/stratus/heartbeats")
    store.set("/workers/etl/supervisor-1", heartbeat.encode())
    store.children_data("/workers/etl")      # {"supervisor-1": b"..."}, reads pipelined
    store.delete("/workers/etl")             # the whole subtree

Writers race: supervisors create and delete their own paths while the leader removes whole
subtrees. ``set`` and ``delete`` retry through those races (a node created or deleted between
two calls) instead of failing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError

from stratus.state.errors import StateStoreUnavailableError
from stratus.state.store import TreeRead

log = logging.getLogger(__name__)

STORE_NAME = "zookeeper"
OPERATION_TIMEOUT_SECS = 10.0  # default bound of one call; the factory passes the session's
RACE_RETRIES = 10  # a node created or deleted by someone else between two of our calls


def check_path(path: str) -> str:
    """Return ``path`` if it is a valid store path, else raise ``ValueError``.

    Valid: absolute, without an empty, ``.`` or ``..`` segment (so no ``//`` and no trailing
    ``/`` except for the root ``/`` itself), and without NUL characters.
    """
    if not path.startswith("/"):
        raise ValueError(f"invalid state store path {path!r}: it must be absolute (start with /)")
    if path == "/":
        return path
    if "\0" in path:
        raise ValueError(f"invalid state store path {path!r}: it holds a NUL character")
    for segment in path[1:].split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(
                f"invalid state store path {path!r}: empty, '.' and '..' segments are not "
                "allowed (no '//', no trailing '/')"
            )
    return path


class ZooKeeperStateStore:
    """``ClusterStateStore`` on kazoo, rooted at the znode ``root``; see the module docstring.

    The kazoo client is the caller's: the store neither starts nor stops it, and shares it
    safely between threads as kazoo does.
    """

    def __init__(
        self, client: KazooClient, root: str, *, timeout: float = OPERATION_TIMEOUT_SECS
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        self._client = client
        self._root = "" if check_path(root) == "/" else root
        self._timeout = timeout
        self._closed = False

    @property
    def root(self) -> str:
        """The znode that holds the store's ``/``."""
        return self._root or "/"

    def set(self, path: str, data: bytes) -> None:
        """Create or replace the data at ``path``, creating its parents as needed."""
        if check_path(path) == "/":
            raise ValueError("cannot set the state store's root '/'; set a path below it")
        if not data:
            raise ValueError(
                f"cannot set {path!r} to an empty value: in ZooKeeper it would read as a "
                "parent without data"
            )
        znode = self._znode(path)
        with self._call(znode) as wait:
            for _ in range(RACE_RETRIES):
                try:
                    wait(self._client.set_async(znode, data))
                    return
                except NoNodeError:
                    pass  # not there (yet, or any more): create it
                try:
                    wait(self._client.create_async(znode, data, makepath=True))
                    return
                except NodeExistsError:
                    continue  # created by someone else meanwhile: replace it
                except NoNodeError:
                    continue  # a parent was deleted between makepath and create
            raise self._unavailable(znode, "it kept being created and deleted concurrently")

    def set_many(self, entries: Mapping[str, bytes]) -> None:
        """Set every path of ``entries``: the replacements pipelined (one round trip for a
        supervisor's period of heartbeats once their znodes exist), then ``set`` for those
        whose znode does not exist yet."""
        znodes = {}
        for path, data in entries.items():
            if check_path(path) == "/" or not data:
                raise ValueError(f"cannot set {path!r} to {len(data)} bytes; see set()")
            znodes[path] = self._znode(path)
        missing = []
        with self._call(self.root) as wait:
            pending = {p: self._client.set_async(z, entries[p]) for p, z in znodes.items()}
            for path, result in pending.items():
                try:
                    wait(result)
                except NoNodeError:
                    missing.append(path)
        for path in missing:
            self.set(path, entries[path])

    def get(self, path: str) -> bytes | None:
        """The data at ``path``, or None if it does not exist or is only a parent."""
        znode = self._znode(path)
        with self._call(znode) as wait:
            try:
                data, _ = wait(self._client.get_async(znode))
            except NoNodeError:
                return None
        return bytes(data) if data else None

    def children(self, path: str) -> list[str]:
        """Names of the children of ``path``, sorted; empty if it does not exist."""
        znode = self._znode(path)
        with self._call(znode) as wait:
            return sorted(self._children(znode, wait))

    def children_data(self, path: str) -> dict[str, bytes]:
        """The data of every child of ``path`` that holds data, by name, reads pipelined.

        Children deleted between the listing and their read are left out.
        """
        znode = self._znode(path)
        with self._call(znode) as wait:
            names = sorted(self._children(znode, wait))
            pending = {name: self._client.get_async(_join(znode, name)) for name in names}
            found = {}
            for name, result in pending.items():
                try:
                    data, _ = wait(result)
                except NoNodeError:
                    continue  # deleted since the listing
                if data:
                    found[name] = bytes(data)
        return found

    def grandchildren_data(self, path: str) -> dict[str, dict[str, bytes]]:
        """The data of every grandchild of ``path`` that holds data, by child then grandchild
        name; every listing and read pipelined (three round trips, however many there are).

        Not (yet) part of ``ClusterStateStore``: ``HeartbeatBoard`` uses it when the store
        has it, to read every worker heartbeat at once.
        """
        znode = self._znode(path)
        with self._call(znode) as wait:
            parents = {
                name: self._client.get_children_async(_join(znode, name))
                for name in self._children(znode, wait)
            }
            pending = {}
            for name, listing in parents.items():
                try:
                    children = wait(listing)
                except NoNodeError:
                    continue  # deleted since the listing
                for child in children:
                    where = _join(_join(znode, name), child)
                    pending[name, child] = self._client.get_async(where)
            found: dict[str, dict[str, bytes]] = {}
            for (name, child), result in sorted(pending.items()):
                try:
                    data, _ = wait(result)
                except NoNodeError:
                    continue
                if data:
                    found.setdefault(name, {})[child] = bytes(data)
        return found

    def read_tree(self, path: str) -> TreeRead:
        """Every value below ``path``, level by level: each level's listings and reads
        pipelined (one round trip per level of depth). Nodes deleted meanwhile are left out;
        ZooKeeper never misses a value, so the read is complete."""
        znode = self._znode(path)
        found: dict[str, bytes] = {}
        with self._call(znode) as wait:
            level = {"": znode}
            while level:
                listings = {rel: self._client.get_children_async(z) for rel, z in level.items()}
                below = {}
                for rel, listing in listings.items():
                    try:
                        children = wait(listing)
                    except NoNodeError:
                        continue
                    for child in children:
                        below[f"{rel}/{child}" if rel else child] = _join(level[rel], child)
                reads = {rel: self._client.get_async(z) for rel, z in below.items()}
                for rel, result in reads.items():
                    try:
                        data, _ = wait(result)
                    except NoNodeError:
                        continue
                    if data:
                        found[rel] = bytes(data)
                level = below
        return TreeRead(dict(sorted(found.items())), complete=True)

    def delete(self, path: str) -> None:
        """Remove ``path`` and everything below it; nothing happens if it does not exist.

        Everything that existed when the call began is removed, and children created while
        it runs are removed too, a few times over; a writer that keeps writing faster than
        that may leave what it wrote since (as if it had written just after the delete).
        """
        if path == "/":
            raise ValueError("cannot delete the state store's root '/'; delete below it")
        znode = self._znode(path)
        with self._call(znode) as wait:
            self._delete_tree(znode, wait)

    def close(self) -> None:
        """Refuse further calls; the kazoo client stays open (it is the caller's)."""
        self._closed = True

    # ------------------------------------------------------------------ internals

    def _znode(self, path: str) -> str:
        checked = check_path(path)
        return self.root if checked == "/" else self._root + checked

    def _children(self, znode: str, wait: _Wait) -> list[str]:
        try:
            names: list[str] = wait(self._client.get_children_async(znode))
        except NoNodeError:
            return []
        return names

    def _delete_tree(self, znode: str, wait: _Wait) -> None:
        for _ in range(RACE_RETRIES):
            for child in self._children(znode, wait):
                self._delete_tree(_join(znode, child), wait)
            try:
                wait(self._client.delete_async(znode))
                return
            except NoNodeError:
                return  # deleted by someone else meanwhile
            except NotEmptyError:
                continue  # a child was created meanwhile: remove it too
        # Every node that was there when the call began is gone: what is left was written
        # since, by a writer that keeps writing; its writes come after this delete.
        log.debug("event=state_delete_outpaced znode=%s", znode)

    @contextmanager
    def _call(self, znode: str) -> Iterator[_Wait]:
        """One store call: fails at once if closed or disconnected, ends by its deadline,
        and turns kazoo's errors into ``StateStoreUnavailableError``."""
        if self._closed:
            raise self._unavailable(znode, "the store was closed")
        if not self._client.connected:
            raise self._unavailable(znode, "the ZooKeeper client is not connected")
        wait = _Wait(time.monotonic() + self._timeout)
        try:
            yield wait
        except KazooTimeoutError:
            raise self._unavailable(
                znode, f"no answer within {self._timeout:g} s (a write may still land)"
            ) from None
        except KazooException as exc:
            raise self._unavailable(znode, f"{type(exc).__name__} {exc}".strip()) from None

    def _unavailable(self, znode: str, reason: str) -> StateStoreUnavailableError:
        return StateStoreUnavailableError(STORE_NAME, znode, reason)


class _Wait:
    """Waits for kazoo's asynchronous results, all of one call sharing one deadline."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def __call__(self, result: Any) -> Any:
        return result.get(timeout=max(0.0, self._deadline - time.monotonic()))


def _join(parent: str, child: str) -> str:
    return f"{parent.rstrip('/')}/{child}"
