"""Subscriptions: leader changes of a group, and connection trouble, told to user callbacks.

Leader changes are read from the group's log of terms (``terms/t-<seq>``, one entry per term
won, the newest ``TERMS_KEPT`` kept), so a subscriber misses none even when leaders change
faster than watches fire; a slot falling vacant is reported when observed. ``LeaderChanges``
runs on the coordinator's worker thread; ``ConnectionEvents`` is called from there too, and
its callback lists may change from any thread. Every callback runs through ``dispatch``.
"""

from __future__ import annotations

import posixpath
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError

from stratus.coordination.reads import read_leaders
from stratus.coordination.records import (
    CoordinationEvent,
    ErrorKind,
    LeaderChange,
    SlotRecord,
)
from stratus.coordination.serial import Dispatch, Post
from stratus.zk.paths import GroupPaths, sequence_of
from stratus.zk.session import SessionChange, SessionState, ZkSession

ChangeCallback = Callable[[LeaderChange], None]
ErrorCallback = Callable[[CoordinationEvent], None]


@dataclass(eq=False)
class _Subscription:
    group: str
    paths: GroupPaths
    callbacks: list[ChangeCallback] = field(default_factory=list)
    last_term: int = -1
    holders: dict[int, tuple[str, int] | None] = field(default_factory=dict)
    primed: bool = False


class LeaderChanges:
    """Every group some callback follows, and what each was last told (worker thread only)."""

    def __init__(self, session: ZkSession, *, post: Post, dispatch: Dispatch) -> None:
        self._session = session
        self._client = session.client
        self._post = post
        self._dispatch = dispatch
        self._by_group: dict[str, _Subscription] = {}
        self._watch: dict[str, Callable[[Any], None]] = {}

    def add(self, group: str, paths: GroupPaths, callback: ChangeCallback) -> None:
        """Follow ``group`` for ``callback`` from now on (the current leaders are not news)."""
        sub = self._by_group.setdefault(group, _Subscription(group, paths))
        sub.callbacks.append(callback)
        self.refresh(group)

    def remove(self, group: str, callback: ChangeCallback) -> None:
        sub = self._by_group.get(group)
        if sub and callback in sub.callbacks:
            sub.callbacks.remove(callback)
            if not sub.callbacks:
                del self._by_group[group]

    def on_session(self, change: SessionChange) -> None:
        """Once connected again, catch up on the terms won meanwhile."""
        if change.state is SessionState.CONNECTED:
            for group in list(self._by_group):
                self.refresh(group)

    def refresh(self, group: str) -> None:
        """Announce the terms won and the slots vacated since the last refresh."""
        sub = self._by_group.get(group)
        if sub is None or not self._session.connected:
            return
        watch = self._watcher(group)
        names = sorted(self._client.get_children(sub.paths.terms, watch=watch), key=sequence_of)
        if not sub.primed:
            sub.last_term = sequence_of(names[-1]) if names else -1
            for leader in read_leaders(self._client, sub.paths):
                sub.holders[leader.slot] = (leader.member_id, leader.epoch)
            sub.primed = True
        for name in names:
            if sequence_of(name) <= sub.last_term:
                continue
            sub.last_term = sequence_of(name)
            try:
                raw, _ = self._client.get(posixpath.join(sub.paths.terms, name))
            except NoNodeError:
                continue
            record = SlotRecord.decode(raw)
            sub.holders[record.slot] = (record.member_id, record.epoch)
            self._announce(sub, LeaderChange(group, record.slot, record.member_id, record.epoch))
        occupied = set(self._client.get_children(sub.paths.slots, watch=watch))
        for slot, holder in sub.holders.items():
            if holder is not None and str(slot) not in occupied:
                sub.holders[slot] = None
                self._announce(sub, LeaderChange(group, slot, None, holder[1]))

    def _announce(self, sub: _Subscription, change: LeaderChange) -> None:
        for callback in list(sub.callbacks):
            self._dispatch(callback, change)

    def _watcher(self, group: str) -> Callable[[Any], None]:
        """One stable watch function per group, so kazoo does not stack duplicates."""
        if group not in self._watch:
            self._watch[group] = lambda _event: self._post(lambda: self.refresh(group))
        return self._watch[group]


class ConnectionEvents:
    """Callbacks told of connection suspension, session expiry and recovery, per group."""

    def __init__(self, dispatch: Dispatch) -> None:
        self._dispatch = dispatch
        self._lock = threading.Lock()
        self._by_group: dict[str, list[ErrorCallback]] = defaultdict(list)

    def add(self, group: str, callback: ErrorCallback) -> None:
        with self._lock:
            self._by_group[group].append(callback)

    def remove(self, group: str, callback: ErrorCallback) -> None:
        with self._lock:
            if callback in self._by_group.get(group, []):
                self._by_group[group].remove(callback)

    def on_session(self, change: SessionChange) -> None:
        event = _event_of(change)
        if event is None:
            return
        kind, detail = event
        with self._lock:
            targets = [(group, list(callbacks)) for group, callbacks in self._by_group.items()]
        for group, callbacks in targets:
            for callback in callbacks:
                self._dispatch(callback, CoordinationEvent(group, kind, detail))


def _event_of(change: SessionChange) -> tuple[ErrorKind, str] | None:
    """What subscribers of errors hear about a session change, if anything."""
    if change.state is SessionState.SUSPENDED:
        return ErrorKind.CONNECTION_SUSPENDED, "connection to ZooKeeper lost"
    if change.state is SessionState.EXPIRED:
        return ErrorKind.SESSION_EXPIRED, "ZooKeeper session expired"
    if change.resumed:
        return ErrorKind.CONNECTION_RESTORED, "reconnected, same session"
    if change.renewed:
        return ErrorKind.CONNECTION_RESTORED, "reconnected, new session"
    return None
