"""The placements of standby workers in ZooKeeper: read by anyone, written only in the
leader's fenced transactions.

``<root>/standby-workers/<pipeline>`` holds the ``StandbyWorkerPlacement`` that names the
supervisor where a hot pipeline's standby worker waits (or none, and why). The leader writes
a ``StandbyPlan`` (``standby_plan.plan_standby_workers``) as it writes assignments
(``assignments.AssignmentTable``): in fenced transactions, each write checking the version
it read, so a plan made from a stale read writes nothing, and a deposed leader nothing at
all. A round with no hot pipeline and no placement costs one listing of ``standby-workers/``::

    table = StandbyWorkerTable(client, ClusterPaths("/stratus"))
    current = table.read_all()        # {pipeline: (placement or None if unreadable, version)}
    table.apply(term, plan, current)
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from pydantic import ValidationError

from stratus.api.standby_workers import StandbyWorkerPlacement
from stratus.coordination.leadership import FencedTransaction, Leadership
from stratus.nimbus.scheduling.assignments import (
    VersionedWrite,
    commit_in_batches,
    read_children,
)
from stratus.nimbus.scheduling.standby_plan import StandbyPlan, StandbyWriteKind
from stratus.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

Placements = Mapping[str, tuple[StandbyWorkerPlacement | None, int]]


class StandbyWorkerTable:
    """Read every placement; apply a plan of the leader's, fenced by its term."""

    def __init__(self, client: KazooClient, paths: ClusterPaths) -> None:
        self._client = client
        self._paths = paths

    def read(self, pipeline: str) -> StandbyWorkerPlacement | None:
        """One pipeline's placement, or None if it has none."""
        try:
            raw, _ = self._client.get(self._paths.standby_worker(pipeline))
        except NoNodeError:
            return None
        return StandbyWorkerPlacement.model_validate_json(raw)

    def read_all(self) -> dict[str, tuple[StandbyWorkerPlacement | None, int]]:
        """Every placement with its znode version, from ZooKeeper itself: one listing, then
        the reads of what it lists, pipelined. One that does not decode is None (logged,
        naming the pipeline): the next write of it replaces it whole, by its version."""
        try:
            stored = read_children(self._client, self._paths.standby_workers)
        except NoNodeError:
            return {}  # a cluster whose parents an older release made
        found: dict[str, tuple[StandbyWorkerPlacement | None, int]] = {}
        for name, (raw, version) in stored.items():
            try:
                found[name] = (StandbyWorkerPlacement.model_validate_json(raw), version)
            except ValidationError as exc:
                error = exc.errors(include_input=False)[0]  # the input may hold secrets
                log.warning("event=bad_standby_placement pipeline=%s error=%s", name, error)
                found[name] = (None, version)
        return found

    def apply(
        self,
        term: Leadership,
        plan: StandbyPlan,
        current: Placements,
        assignment_versions: Mapping[str, int] | None = None,
    ) -> None:
        """Write the plan: creates, sets and deletes, each against the version read. A write
        of a pipeline in ``assignment_versions`` also checks that its assignment is still at
        that version: a placement planned against an assignment the failover lane has since
        rewritten (a promotion) would name the supervisor the pipeline now runs on."""
        checked = assignment_versions or {}

        def check_assignment(tx: FencedTransaction, write: VersionedWrite) -> int:
            if write.pipeline not in checked:
                return 0
            tx.check(self._paths.assignment(write.pipeline), checked[write.pipeline])
            return 1

        commit_in_batches(term, self._writes(plan, current), check_assignment)
        for write in plan.writes:
            placement = write.placement
            unplaced = placement is not None and placement.supervisor is None
            log.log(
                logging.WARNING if unplaced else logging.INFO,
                "event=standby_worker_%s pipeline=%s epoch=%d reason=%s from=%s to=%s%s",
                "unplaced" if unplaced else _EVENTS[write.kind],
                write.pipeline,
                term.epoch,
                write.reason.value,
                write.previous or "-",
                (placement.supervisor or "-") if placement is not None else "-",
                _because(placement),
            )

    def _writes(self, plan: StandbyPlan, current: Placements) -> Iterator[VersionedWrite]:
        for write in plan.writes:
            name = write.pipeline
            version = current[name][1] if name in current else None
            path = self._paths.standby_worker(name)
            if write.placement is not None:
                yield VersionedWrite(name, path, write.placement.encode(), version)
            elif version is not None:
                yield VersionedWrite(name, path, None, version)


_EVENTS = {
    StandbyWriteKind.PLACE: "placed",
    StandbyWriteKind.MOVE: "moved",
    StandbyWriteKind.REWRITE: "rewritten",
    StandbyWriteKind.DELETE: "dropped",
}


def _because(placement: StandbyWorkerPlacement | None) -> str:
    if placement is None or placement.unplaced_because is None:
        return ""
    return f' unplaced_because="{placement.unplaced_because}"'
