"""The cluster as this nimbus last heard it from ZooKeeper, kept current by watches.

Every nimbus, leader or standby, answers reads (cluster summary, pipeline list and status,
who leads) from this view, so a read costs no ZooKeeper request: that is why SPEC 001 moved
leader discovery into the cluster summary. Children and data watches (kazoo's recipes,
which re-arm themselves after a reconnect and a new session) feed it; the leader comes from
the election's leader-change subscription::

    view = ClusterView(client, ClusterPaths("/stratus"))
    view.start()
    view.pipelines()["etl"].status
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

from stratus.coordination.records import Leader, LeaderChange
from stratus.nimbus.records import (
    LeaderInfo,
    NimbusRegistration,
    PipelineRecord,
    SupervisorSummary,
)
from stratus.zk.paths import ClusterPaths, join

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
                "event=bad_record path=%s error=%s", join(self._parent, name), exc.errors()[0]
            )
            self._items.pop(name, None)


class ClusterView:
    """Nimbuses, pipelines, supervisors and the leader, from watches; reads never hit ZooKeeper."""

    def __init__(self, client: KazooClient, paths: ClusterPaths) -> None:
        self._lock = threading.Lock()
        self._version = 0
        self._listeners: list[Callable[[], None]] = []
        self._leader = LeaderInfo(address=None, epoch=None)
        self._nimbuses = WatchedChildren(client, paths.nimbuses, NimbusRegistration, self._bump)
        self._pipelines = WatchedChildren(client, paths.pipelines, PipelineRecord, self._bump)
        self._supervisors = WatchedChildren(
            client, paths.supervisors, SupervisorSummary, self._bump
        )

    def start(self) -> None:
        for watched in (self._nimbuses, self._pipelines, self._supervisors):
            watched.start()

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change of nimbuses, pipelines or supervisors.

        It runs on kazoo's event thread, so it must not block.
        """
        self._listeners.append(listener)

    @property
    def version(self) -> int:
        """Grows at every change the view sees; lets callers cache what they derive from it."""
        return self._version

    def nimbuses(self) -> dict[str, NimbusRegistration]:
        return self._nimbuses.snapshot()

    def pipelines(self) -> dict[str, PipelineRecord]:
        return self._pipelines.snapshot()

    def supervisors(self) -> dict[str, SupervisorSummary]:
        return self._supervisors.snapshot()

    def leader(self) -> LeaderInfo:
        return self._leader

    def set_leaders(self, leaders: list[Leader]) -> None:
        """Take the leader from a direct read of the election (at start-up)."""
        for leader in leaders:
            self.note_leader_change(
                LeaderChange("nimbus", leader.slot, leader.member_id, leader.epoch)
            )

    def note_leader_change(self, change: LeaderChange) -> None:
        """Apply a leader change unless the view already knows a later term."""
        with self._lock:
            known = self._leader.epoch
            if known is not None and change.epoch < known:
                return
            if change.member_id is None and known is not None and change.epoch != known:
                return  # a vacancy of an older term
            self._leader = LeaderInfo(address=change.member_id, epoch=change.epoch)
            self._version += 1

    def _bump(self) -> None:
        with self._lock:
            self._version += 1
        for listener in self._listeners:
            listener()
