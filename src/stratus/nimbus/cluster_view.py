"""The cluster as this nimbus last heard it from ZooKeeper, kept current by watches.

Every nimbus, leader or standby, answers reads (cluster summary, pipeline list and status,
who leads) from this view, so a read costs no ZooKeeper request, and leader discovery
through the cluster summary is cheap. Children and data watches (kazoo's recipes,
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

from kazoo.client import KazooClient

from stratus.api.purges import PurgeOutcome
from stratus.api.records import (
    LeaderInfo,
    NimbusRegistration,
    PipelineRecord,
    PipelineStatus,
    SupervisorCordon,
    SupervisorSummary,
)
from stratus.api.standby_workers import StandbyWorkerPlacement
from stratus.coordination.records import Leader, LeaderChange
from stratus.zk.paths import NIMBUS_GROUP, ClusterPaths
from stratus.zk.watched import WatchedChildren

log = logging.getLogger(__name__)


class ClusterView:
    """Nimbuses, pipelines, supervisors, cordons, standby workers' placements and the leader,
    from watches; reads never hit ZooKeeper."""

    def __init__(self, client: KazooClient, paths: ClusterPaths) -> None:
        self._lock = threading.Condition()
        self._version = 0
        self._listeners: list[Callable[[], None]] = []
        self._leader = LeaderInfo(address=None, epoch=None)
        self._nimbuses = WatchedChildren(client, paths.nimbuses, NimbusRegistration, self._bump)
        self._pipelines = WatchedChildren(client, paths.pipelines, PipelineRecord, self._bump)
        self._supervisors = WatchedChildren(
            client, paths.supervisors, SupervisorSummary, self._bump
        )
        self._cordons = WatchedChildren(client, paths.cordons, SupervisorCordon, self._bump)
        # a supervisor's answer to a purge: the leader's duties look at it at once
        self._purge_outcomes = WatchedChildren(
            client, paths.purge_outcomes, PurgeOutcome, self._bump
        )
        # where the leader placed each hot pipeline's standby worker, for any nimbus to show:
        # the leader writes them in its round, so a change wakes no duty and no listener
        self._standby_workers = WatchedChildren(
            client, paths.standby_workers, StandbyWorkerPlacement, _unheeded
        )

    def start(self) -> None:
        for watched in (
            self._nimbuses,
            self._pipelines,
            self._supervisors,
            self._cordons,
            self._purge_outcomes,
            self._standby_workers,
        ):
            watched.start()

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change of nimbuses, pipelines, supervisors, cordons
        or purge outcomes (not of standby workers' placements, which the leader wrote).

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

    def await_pipeline(self, written: PipelineRecord, timeout: float) -> bool:
        """Wait until the view shows ``written`` or a later state of its pipeline; False at
        ``timeout``. Lets the nimbus that took a write answer it only once its own reads
        see it, as a ZooKeeper session reads its own writes."""
        with self._lock:
            return self._lock.wait_for(lambda: self._shows(written), timeout)

    def _shows(self, written: PipelineRecord) -> bool:
        current = self._pipelines.snapshot().get(written.name)
        if current is None:
            return written.status is PipelineStatus.KILLED  # removed: later than the kill
        return current.updated >= written.updated

    def supervisors(self) -> dict[str, SupervisorSummary]:
        return self._supervisors.snapshot()

    def cordons(self) -> dict[str, SupervisorCordon]:
        """The cordoned supervisors, by id (those drained have ``drain``)."""
        return self._cordons.snapshot()

    def standby_workers(self) -> dict[str, StandbyWorkerPlacement]:
        """Where the leader placed each hot pipeline's standby worker, by pipeline."""
        return self._standby_workers.snapshot()

    def leader(self) -> LeaderInfo:
        return self._leader

    def set_leaders(self, leaders: list[Leader]) -> None:
        """Take the leader from a direct read of the election (at start-up)."""
        for leader in leaders:
            self.note_leader_change(
                LeaderChange(NIMBUS_GROUP, leader.slot, leader.member_id, leader.epoch)
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
            self._lock.notify_all()
        for listener in self._listeners:
            listener()


def _unheeded() -> None:
    """A change that the view keeps and tells no one of."""
