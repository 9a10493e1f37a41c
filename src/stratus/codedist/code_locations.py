"""Which nimbuses hold which pipeline's code: ZooKeeper's registrations, kept in memory.

Each holder of a pipeline's code registers ``<root>/code/<pipeline>/<host:port>``
(ephemeral, data ``{"digest": ..., "size_bytes": ...}``, and ``"served_from"``: the
``host:port`` of its package server, if it runs one). ``CodeLocations`` watches those
nodes and answers from memory, so a question costs no ZooKeeper request; it is up to date
once the watches have fired (ZooKeeper's usual eventual consistency), and again after a
session expiry, when every watch is set anew and everything is read again::

    locations = CodeLocations(client, ClusterPaths("/stratus"))
    locations.on_change(sync.request)           # must not block: called from kazoo's thread
    locations.start()
    locations.count("etl", digest)              # how many nimbuses hold etl's code
    locations.holders("etl", digest)            # ["host-a:6627", "host-b:6627"]
    locations.source("host-a:6627")             # "host-a:40123": where to GET its code
    locations.close()
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.recipe.watchers import ChildrenWatch

from stratus.codedist.distributor import CodeMeta
from stratus.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

Holders = dict[str, CodeMeta]  # nimbus address -> the code it holds


def holder_data(meta: CodeMeta, served_from: str | None = None) -> bytes:
    """The data of a holder's registration (``served_from``: its package server)."""
    fields: dict[str, object] = {"digest": meta.digest, "size_bytes": meta.size_bytes}
    if served_from is not None:
        fields["served_from"] = served_from
    return json.dumps(fields).encode()


def parse_holder_data(data: bytes) -> CodeMeta | None:
    """The code a registration names; None if its data is not a registration's."""
    fields = _fields(data)
    digest, size = fields.get("digest"), fields.get("size_bytes")
    if not isinstance(digest, str) or not isinstance(size, int):
        return None
    return CodeMeta(digest, size)


def parse_served_from(data: bytes) -> str | None:
    """The package server a registration names, if any."""
    served_from = _fields(data).get("served_from")
    return served_from if isinstance(served_from, str) and served_from else None


def _fields(data: bytes) -> dict[str, object]:
    try:
        fields = json.loads(data)
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}


class CodeLocations:
    """The holders of every pipeline's code, from ZooKeeper watches; see the module docstring."""

    def __init__(self, client: KazooClient, paths: ClusterPaths) -> None:
        self._client = client
        self._paths = paths
        self._lock = threading.Lock()  # guards the map and the callbacks; never held over a call
        self._holders: dict[str, Holders] = {}
        self._sources: dict[str, str] = {}  # holder -> its package server, if it named one
        self._callbacks: list[Callable[[], None]] = []
        self._reads = threading.Lock()  # one read at a time: the last one read is the newest
        self._watchers: dict[str, Callable[[WatchedEvent], None]] = {}
        self._resync = False  # the watches may be gone (a lost session, a failed read)
        self._closed = False

    def start(self) -> None:
        """Read every registration and watch them; returns once the first read is done."""
        self._client.ensure_path(self._paths.code)
        self._client.add_listener(self._on_state)
        ChildrenWatch(self._client, self._paths.code, self._pipelines_changed)

    def close(self) -> None:
        """Stop following ZooKeeper; answers stay those of the last read."""
        self._closed = True
        self._client.remove_listener(self._on_state)
        with self._lock:
            self._callbacks.clear()

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (it must not block) after any change of any pipeline's holders."""
        with self._lock:
            self._callbacks.append(callback)

    def holders(self, pipeline: str, digest: str) -> list[str]:
        """The nimbuses registered as holding ``pipeline``'s code with ``digest``."""
        with self._lock:
            held = self._holders.get(pipeline, {})
            return sorted(address for address, meta in held.items() if meta.digest == digest)

    def count(self, pipeline: str, digest: str) -> int:
        """How many nimbuses hold ``pipeline``'s code with ``digest`` (no ZooKeeper request)."""
        return len(self.holders(pipeline, digest))

    def holders_of(self, digest: str) -> list[str]:
        """The nimbuses holding ``digest`` for any pipeline (the same code under two names)."""
        with self._lock:
            return sorted(
                {
                    address
                    for held in self._holders.values()
                    for address, meta in held.items()
                    if meta.digest == digest
                }
            )

    def source(self, address: str) -> str:
        """Where to GET ``address``'s code: its package server, or its API if it has none."""
        with self._lock:
            return self._sources.get(address, address)

    def pipelines(self) -> dict[str, Holders]:
        """Every pipeline with a node under ``<root>/code``, and its holders."""
        with self._lock:
            return {pipeline: dict(held) for pipeline, held in self._holders.items()}

    # ------------------------------------------------------------------ reading ZooKeeper

    def _pipelines_changed(self, pipelines: list[str]) -> bool | None:
        """The ChildrenWatch of ``<root>/code``: read new pipelines, confirm removed ones."""
        if self._closed:
            return False  # stops the watch
        with self._lock:
            known = set(self._holders)
        for pipeline in sorted(known.symmetric_difference(pipelines)):
            self._update(pipeline)
        return None

    def _update(self, pipeline: str) -> None:
        """Read ``pipeline``'s holders (watching them) and keep what was read."""
        with self._reads:
            try:
                held = self._read(pipeline)
            except KazooException as exc:
                self._resync = True  # its watches may not be set: read again once connected
                log.warning("event=code_locations_read_failed pipeline=%s error=%r", pipeline, exc)
                return
            changed = self._keep(pipeline, held)
        if changed:
            log.info(
                "event=code_holders_changed pipeline=%s holders=%s",
                pipeline,
                ",".join(f"{a}={m.digest[:12]}" for a, m in sorted((held or {}).items())) or "-",
            )
            self._notify()

    def _read(self, pipeline: str) -> Holders | None:
        """The holders of ``pipeline``'s code; None once its node is gone."""
        watcher = self._watcher(pipeline)
        try:
            addresses = self._client.get_children(self._paths.code_holders(pipeline), watch=watcher)
        except NoNodeError:
            return None
        replies = {
            address: self._client.get_async(
                self._paths.code_holder(pipeline, address), watch=watcher
            )
            for address in addresses
        }
        held: Holders = {}
        for address, reply in replies.items():
            try:
                data, _ = reply.get()
            except NoNodeError:
                continue  # unregistered since: the children watch fires
            meta = parse_holder_data(data)
            if meta is None:
                log.warning("event=code_holder_unreadable pipeline=%s node=%s", pipeline, address)
                continue
            held[address] = meta
            self._note_source(address, parse_served_from(data))
        return held

    def _note_source(self, address: str, served_from: str | None) -> None:
        with self._lock:
            if served_from is None:
                self._sources.pop(address, None)
            else:
                self._sources[address] = served_from

    def _watcher(self, pipeline: str) -> Callable[[WatchedEvent], None]:
        """One callable per pipeline: kazoo keeps a set of watchers, so it is set once."""
        with self._lock:
            if pipeline not in self._watchers:
                self._watchers[pipeline] = functools.partial(self._on_event, pipeline)
            return self._watchers[pipeline]

    def _keep(self, pipeline: str, held: Holders | None) -> bool:
        with self._lock:
            before = self._holders.get(pipeline)
            if held is None:
                self._holders.pop(pipeline, None)
                self._watchers.pop(pipeline, None)
            else:
                self._holders[pipeline] = held
            return before != held

    def _notify(self) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("event=code_locations_callback_failed")

    # ------------------------------------------------------------------ events

    def _on_event(self, pipeline: str, event: WatchedEvent) -> None:
        if self._closed or event.type == EventType.NONE:
            return  # NONE: the session changed, handled by _on_state
        self._update(pipeline)

    def _on_state(self, state: str) -> None:
        """A lost session took every watch with it: read everything again once connected."""
        if state == KazooState.LOST:
            self._resync = True
        elif state == KazooState.CONNECTED and self._resync and not self._closed:
            self._client.handler.spawn(self._resync_all)

    def _resync_all(self) -> None:
        self._resync = False
        try:
            listed = set(self._client.get_children(self._paths.code))
        except KazooException as exc:
            self._resync = True
            log.warning("event=code_locations_resync_failed error=%r", exc)
            return
        with self._lock:
            known = set(self._holders)
        for pipeline in sorted(listed | known):
            self._update(pipeline)
        log.info("event=code_locations_resynced pipelines=%d", len(listed))
