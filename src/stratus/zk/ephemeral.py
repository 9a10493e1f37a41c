"""Ephemeral znodes that stay registered for as long as their owner wants them.

ZooKeeper deletes ephemeral nodes when their session expires; kazoo then opens a new
session, but nothing puts the nodes back (Storm loses its registrations this way:
STORM-2736, STORM-3308). ``EphemeralNodes`` keeps any number of nodes of one client and
re-creates all of them after every session expiry, from one thread of its own since kazoo's
listeners must not block; ``EphemeralNode`` is the same for a single node::

    nodes = EphemeralNodes(client)
    nodes.start()
    nodes.add("/stratus/code/etl/host-a:6627", b"{...}")   # created now, or when it can be
    nodes.remove("/stratus/code/etl/host-a:6627")           # deleted; no longer re-created
    nodes.close()                                           # every node deleted

A node is *wanted* from ``add`` until ``remove``: the thread makes ZooKeeper match what is
wanted whenever it may not (an expired session, a call that failed while disconnected).
"""

from __future__ import annotations

import contextlib
import logging
import threading

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import ForceRetryError, RetryFailedError

from stratus.zk.retries import retry_policy

log = logging.getLogger(__name__)

RETRY_PAUSE_SECS = 0.2  # between two rounds of the thread while some node is not as wanted
ADD_DEADLINE_SECS = 10.0  # how long add/remove try at once before leaving it to the thread
THREAD_ATTEMPTS = 3  # tries of one node per round of the thread


class _NotConnectedError(Exception):
    """A bounded ``add`` or ``remove`` found the client disconnected: the thread does it."""


class EphemeralNodes:
    """Ephemeral znodes of one client, each re-created after a session expiry until removed."""

    def __init__(self, client: KazooClient, *, name: str = "ephemeral-nodes") -> None:
        self._client = client
        self._lock = threading.Lock()  # guards the three fields below; never held over a call
        self._wanted: dict[str, bytes] = {}
        self._pending: set[str] = set()  # nodes that ZooKeeper may not hold as wanted
        self._generation = 0  # sessions lost so far
        self._io = threading.Lock()  # one node is made to match at a time
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start following the session; nodes are re-created from now on."""
        self._client.add_listener(self._on_state)
        self._thread.start()

    def add(self, path: str, data: bytes, *, deadline: float | None = ADD_DEADLINE_SECS) -> bool:
        """Keep ``path`` ephemeral with ``data`` (new data replaces old); True once done now.

        A node left by an older session of ours is replaced. While ZooKeeper is unreachable
        this tries for ``deadline`` seconds (None: until done), then returns False and the
        node is created by the thread as soon as it can be.
        """
        return self._want(path, data, deadline)

    def remove(self, path: str, *, deadline: float | None = ADD_DEADLINE_SECS) -> bool:
        """Stop keeping ``path`` and delete it if it is ours; True once deleted now."""
        return self._want(path, None, deadline)

    def wanted(self) -> dict[str, bytes]:
        """The nodes kept, with their data."""
        with self._lock:
            return dict(self._wanted)

    def close(self) -> None:
        """Stop re-creating nodes and delete those still ours (the session's end would too)."""
        self._closed.set()
        self._wake.set()
        self._client.remove_listener(self._on_state)
        with self._lock:
            paths = sorted(self._wanted)
            self._wanted.clear()
            self._pending.clear()
        if not self._client.connected:
            return  # a call would block until reconnection; the session's end removes them
        with self._io:
            for path in paths:
                # gone already, or the session is: ZooKeeper removes it either way
                with contextlib.suppress(KazooException):
                    self._delete_if_ours(path)

    # ------------------------------------------------------------------ making nodes match

    def _want(self, path: str, data: bytes | None, deadline: float | None) -> bool:
        if self._closed.is_set():
            raise RuntimeError(f"EphemeralNodes closed: cannot change {path}")
        with self._lock:
            if data is None:
                self._wanted.pop(path, None)
            else:
                self._wanted[path] = data
            self._pending.add(path)
        retry = retry_policy(deadline=deadline, interrupt=self._closed.is_set)
        try:
            retry(self._reconcile_now, path, bounded=deadline is not None)
        except (RetryFailedError, _NotConnectedError) as exc:
            log.warning("event=ephemeral_deferred path=%s error=%r", path, exc)
            self._wake.set()
            return False
        except KazooException:
            self._wake.set()  # still wanted: the thread keeps trying
            raise
        return True

    def _reconcile_now(self, path: str, *, bounded: bool) -> None:
        """``_reconcile``, but a bounded wait gives up while disconnected.

        A call made while kazoo reconnects waits for the connection, however long that is.
        """
        if bounded and not self._client.connected:
            raise _NotConnectedError("not connected to ZooKeeper")
        self._reconcile(path)

    def _reconcile(self, path: str) -> None:
        """Make ZooKeeper hold ``path`` as wanted; done unless a session was lost meanwhile."""
        with self._io:
            with self._lock:
                data = self._wanted.get(path)
                generation = self._generation
            if data is None:
                self._delete_if_ours(path)
            else:
                self._ensure(path, data)
            with self._lock:
                if self._generation == generation and self._wanted.get(path) == data:
                    self._pending.discard(path)

    def _ensure(self, path: str, data: bytes) -> None:
        try:
            self._client.create(path, data, ephemeral=True, makepath=True)
            return
        except NodeExistsError:
            pass
        try:
            current, stat = self._client.get(path)
        except NoNodeError:
            raise ForceRetryError() from None  # deleted since: create it again
        if self._is_ours(stat):
            if current != data:
                self._client.set(path, data, version=stat.version)
                log.info("event=ephemeral_updated path=%s", path)
            return  # ours already (a retried create that did land)
        log.info("event=ephemeral_replaced path=%s old_session=%x", path, stat.owner_session_id)
        with contextlib.suppress(NoNodeError):  # its session ended meanwhile
            self._client.delete(path, version=stat.version)
        self._client.create(path, data, ephemeral=True, makepath=True)

    def _delete_if_ours(self, path: str) -> None:
        try:
            _, stat = self._client.get(path)
            if self._is_ours(stat):
                self._client.delete(path, version=stat.version)
        except NoNodeError:
            pass

    def _is_ours(self, stat: ZnodeStat) -> bool:
        client_id = self._client.client_id
        return client_id is not None and bool(stat.owner_session_id == client_id[0])

    # ------------------------------------------------------------------ the thread

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            with self._lock:
                self._generation += 1
                self._pending.update(self._wanted)
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._closed.is_set():
                return
            self._wake.clear()
            if self._client.connected and not self._reconcile_pending():
                self._closed.wait(RETRY_PAUSE_SECS)
                self._wake.set()

    def _reconcile_pending(self) -> bool:
        """One round over the nodes that may not match; True if all match now."""
        with self._lock:
            pending = sorted(self._pending)
        for path in pending:
            if self._closed.is_set():
                return True
            try:
                retry_policy(max_tries=THREAD_ATTEMPTS)(self._reconcile, path)
            except Exception as exc:  # the thread must live on: it is retried next round
                log.warning("event=ephemeral_retry path=%s error=%r", path, exc)
                continue
            with self._lock:
                action = "recreated" if path in self._wanted else "deleted"
            log.info("event=ephemeral_%s path=%s", action, path)
        with self._lock:
            return not self._pending


class EphemeralNode:
    """One ephemeral znode, re-created after each session expiry until ``close()``."""

    def __init__(self, client: KazooClient, path: str, data: bytes) -> None:
        self.path = path
        self.data = data
        self._nodes = EphemeralNodes(client, name=f"ephemeral {path}")

    def start(self) -> None:
        """Create the node (replacing one a previous life of ours left behind)."""
        self._nodes.start()
        self._nodes.add(self.path, self.data, deadline=None)

    def close(self) -> None:
        """Stop re-creating the node and delete it if it is still ours."""
        self._nodes.close()
