"""An ephemeral znode that stays registered for as long as its owner runs.

ZooKeeper deletes ephemeral nodes when their session expires; kazoo then opens a new
session, but nothing puts the nodes back (Storm loses its registrations this way:
STORM-2736, STORM-3308). ``EphemeralNode`` re-creates its node after every session
expiry, from a thread of its own since kazoo's listeners must not block::

    node = EphemeralNode(client, "/stratus/nimbuses/host-a:6627", b"{...}")
    node.start()          # created now, or an error
    ...
    node.close()          # deleted; no longer re-created
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.retry import KazooRetry

log = logging.getLogger(__name__)

RETRY_PAUSE_SECS = 0.2


class EphemeralNode:
    """One ephemeral znode, re-created after each session expiry until ``close()``."""

    def __init__(self, client: KazooClient, path: str, data: bytes) -> None:
        self._client = client
        self.path = path
        self.data = data
        self._recreate = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ephemeral {path}", daemon=True)
        self._retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5)

    def start(self) -> None:
        """Create the node (replacing one a previous life of ours left behind)."""
        self._retry(self._create)
        self._client.add_listener(self._on_state)
        self._thread.start()

    def close(self) -> None:
        """Stop re-creating the node and delete it if it is still ours."""
        self._closed.set()
        self._recreate.set()
        self._client.remove_listener(self._on_state)
        if not self._client.connected:
            return  # a call would block until reconnection; the session's end removes the node
        try:
            _, stat = self._client.get(self.path)
            if stat.owner_session_id == self._client.client_id[0]:
                self._client.delete(self.path)
        except (NoNodeError, KazooException):
            pass  # gone already, or the session is: ZooKeeper removes it either way

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._recreate.set()

    def _run(self) -> None:
        while True:
            self._recreate.wait()
            if self._closed.is_set():
                return
            self._recreate.clear()
            self._recreate_until_done()

    def _recreate_until_done(self) -> None:
        while not self._closed.is_set():
            try:
                self._create()
                log.info("event=ephemeral_recreated path=%s", self.path)
                return
            except KazooException as exc:
                log.warning("event=ephemeral_retry path=%s error=%r", self.path, exc)
                self._closed.wait(RETRY_PAUSE_SECS)

    def _create(self) -> Any:
        try:
            return self._client.create(self.path, self.data, ephemeral=True, makepath=True)
        except NodeExistsError:
            _, stat = self._client.get(self.path)
            if stat.owner_session_id == self._client.client_id[0]:
                return self.path  # ours already (a retried create that did land)
            log.info(
                "event=ephemeral_replaced path=%s old_session=%x", self.path, stat.owner_session_id
            )
            self._client.delete(self.path)
            return self._client.create(self.path, self.data, ephemeral=True)
