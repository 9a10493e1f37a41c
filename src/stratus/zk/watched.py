"""Watched mirrors: the decoded data of a znode's children, kept current by watches.

    pipelines = WatchedChildren(client, paths.pipelines, PipelineRecord, on_change=refresh)
    pipelines.start()
    pipelines.snapshot()["etl"].status

kazoo's ``ChildrenWatch`` and ``DataWatch`` re-arm themselves after a reconnect and a new
session, so the mirror survives both; ``on_change`` runs on kazoo's event thread and must not
block.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.protocol.states import ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from pydantic import BaseModel, ValidationError

from stratus.zk.paths import join

log = logging.getLogger(__name__)

R = TypeVar("R", bound=BaseModel)


class WatchedChildren(Generic[R]):
    """The decoded data of every child of one znode, kept current by watches."""

    def __init__(
        self,
        client: KazooClient,
        parent: str,
        record: type[R],
        on_change: Callable[[], None],
    ) -> None:
        self._client = client
        self._parent = parent
        self._record = record
        self._on_change = on_change
        self._lock = threading.Lock()
        self._items: dict[str, R] = {}
        self._watching: dict[str, object] = {}  # child name -> token of its live DataWatch

    def start(self) -> None:
        ChildrenWatch(self._client, self._parent, self._children_changed)

    def snapshot(self) -> dict[str, R]:
        with self._lock:
            return dict(self._items)

    def _children_changed(self, children: list[str]) -> None:
        current = set(children)
        with self._lock:
            gone = set(self._watching) - current
            new = current - set(self._watching)
            for name in gone:
                del self._watching[name]
                self._items.pop(name, None)
            tokens = {name: object() for name in new}
            self._watching.update(tokens)
        for name, token in tokens.items():
            DataWatch(self._client, join(self._parent, name), self._data_watcher(name, token))
        if gone:
            self._on_change()

    def _data_watcher(
        self, name: str, token: object
    ) -> Callable[[bytes | None, ZnodeStat | None], bool | None]:
        def changed(data: bytes | None, _stat: ZnodeStat | None) -> bool | None:
            with self._lock:
                if self._watching.get(name) is not token:
                    return False  # the child went away and this watch is stale
                if data is None:
                    self._items.pop(name, None)
                    del self._watching[name]
                else:
                    self._store(name, data)
            self._on_change()
            return False if data is None else None

        return changed

    def _store(self, name: str, data: bytes) -> None:
        try:
            self._items[name] = self._record.model_validate_json(data)
        except ValidationError as exc:
            log.warning(
                "event=bad_record path=%s error=%s",
                join(self._parent, name),
                exc.errors(include_input=False)[0],  # the input may hold secrets
            )
            self._items.pop(name, None)
