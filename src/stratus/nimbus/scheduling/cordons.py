"""Cordoned supervisors in ZooKeeper: read by anyone, written only in the leader's fenced
transactions.

``<root>/cordons/<id>`` holds the ``SupervisorCordon`` of a supervisor that takes no new
pipeline; with ``drain`` the leader's scheduling rounds also move its pipelines away
(``scheduler.plan_round``). The cordon is the cluster's state, not the supervisor process's:
it outlives a restart of the supervisor, of every nimbus, and a change of leader. Each write
checks the leader's epoch and the version it read, so two requests racing on one supervisor
cannot lose a drain, and a deposed leader writes nothing::

    cordons = CordonTable(client, ClusterPaths("/stratus"))
    cordons.put(term, "s1", by="alice", drain=False, now=time.time())   # idempotent
    cordons.read_all()                       # {"s1": SupervisorCordon(...)}, from ZooKeeper
    cordons.remove(term, "s1")               # False if it was not cordoned

``DrainMemory`` is what the leader's last round saw of the drains under way (the pipelines
taken off a drained supervisor and not placed yet, those that found no room), for the
drain's progress (``GET /api/v1/supervisors/{id}/drain``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from pydantic import ValidationError

from stratus.api.records import SupervisorCordon
from stratus.coordination.leadership import Leadership
from stratus.zk.paths import ClusterPaths


class CordonTable:
    """Read every cordon; write and delete them fenced by the leader's term."""

    def __init__(self, client: KazooClient, paths: ClusterPaths) -> None:
        self._client = client
        self._paths = paths

    def read_all(self) -> dict[str, SupervisorCordon]:
        """Every cordon, from ZooKeeper itself (reads pipelined); one that does not decode is
        skipped."""
        try:
            names = self._client.get_children(self._paths.cordons)
        except NoNodeError:
            return {}
        pending = {name: self._client.get_async(self._paths.cordon(name)) for name in names}
        found = {}
        for name, result in pending.items():
            try:
                raw, _ = result.get()
                found[name] = SupervisorCordon.model_validate_json(raw)
            except (NoNodeError, ValidationError):
                continue
        return found

    def put(
        self, term: Leadership, supervisor: str, *, by: str | None, drain: bool, now: float
    ) -> SupervisorCordon:
        """Cordon ``supervisor`` (and with ``drain`` drain it); what it already is stays as it
        is: cordoning twice changes nothing, and a cordon never undoes a drain."""
        current, version = self._read(supervisor)
        if current is not None and (current.drain or not drain):
            return current
        drain_at = now if drain else None
        if current is None:
            cordon = SupervisorCordon(
                supervisor=supervisor,
                at=now,
                epoch=term.epoch,
                by=by,
                drain=drain,
                drain_at=drain_at,
            )
        else:  # what a newer release wrote into it is kept
            cordon = current.model_copy(
                update={"epoch": term.epoch, "drain": drain, "drain_at": drain_at}
            )
        tx = term.transaction()
        path = self._paths.cordon(supervisor)
        if current is None:
            tx.create(path, cordon.encode())
        else:
            tx.set_data(path, cordon.encode(), version)
        tx.commit()
        return cordon

    def remove(self, term: Leadership, supervisor: str) -> bool:
        """Uncordon ``supervisor`` (a drain under way stops); False if it was not cordoned."""
        current, version = self._read(supervisor)
        if current is None:
            return False
        tx = term.transaction()
        tx.delete(self._paths.cordon(supervisor), version)
        tx.commit()
        return True

    def _read(self, supervisor: str) -> tuple[SupervisorCordon | None, int]:
        try:
            raw, stat = self._client.get(self._paths.cordon(supervisor))
        except NoNodeError:
            return None, -1
        try:
            return SupervisorCordon.model_validate_json(raw), stat.version
        except ValidationError:
            return None, stat.version  # rewritten whole by the next put


@dataclass(frozen=True)
class DrainRound:
    """What one scheduling round saw of the drains: by pipeline, the supervisor drained."""

    epoch: int
    moving: Mapping[str, str] = field(default_factory=dict)  # off it, not placed yet
    no_room: Mapping[str, str] = field(default_factory=dict)  # no supervisor had room


class DrainMemory:
    """The leader's last ``DrainRound``: written by the scheduling duty, read by the API."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: DrainRound | None = None

    def note(self, round_: DrainRound) -> None:
        with self._lock:
            self._last = round_

    def last(self, epoch: int) -> DrainRound | None:
        """The last round of the term ``epoch``; None before its first (a new leader)."""
        with self._lock:
            last = self._last
        return last if last is not None and last.epoch == epoch else None
