"""Where a pipeline runs, its workers' last heartbeats and its standby worker, read from the
stores.

Unlike the cluster view's reads, this one asks ZooKeeper (the assignment) and the cluster
state store (the heartbeats) each time: heartbeats change too often to be watched. A hot
pipeline's standby worker joins the leader's placement, from the nimbus's watched view, with
what the supervisor it names reports in its heartbeat, so any nimbus shows it::

    placement = Placement(AssignmentTable(client, paths), board, view)
    placement.of("etl").assignment.supervisor
    placement.of("orders").standby_worker.state    # READY
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from kazoo.exceptions import KazooException

from stratus.api.errors import UnavailableError
from stratus.api.records import (
    Assignment,
    PipelineRecord,
    PipelineStatus,
    PipelineWorkers,
    SupervisorHeartbeat,
    SupervisorSummary,
)
from stratus.api.standby_workers import (
    StandbyWorkerPlacement,
    StandbyWorkerView,
    wants_standby_worker,
)
from stratus.nimbus.cluster_view import ClusterView
from stratus.nimbus.scheduling.assignments import AssignmentTable
from stratus.nimbus.scheduling.standby_plan import placement_beat
from stratus.state.errors import StateStoreUnavailableError
from stratus.state.heartbeats import HeartbeatBoard


class Placement:
    """Reads of assignments, heartbeats and standby workers for the API; see the module
    docstring. Without a ``view`` no standby worker is shown (``standby_worker`` null)."""

    def __init__(
        self, assignments: AssignmentTable, board: HeartbeatBoard, view: ClusterView | None = None
    ) -> None:
        self._assignments = assignments
        self._board = board
        self._view = view

    def of(self, name: str) -> PipelineWorkers:
        """Where ``name`` runs, or UnavailableError when a store is unreachable."""
        placements = self._placements()
        with _unavailable_as_api_error():
            assignment = self._assignments.read(name)
            beats = self._board.workers().get(name, {})
            supervisor_beats = self._supervisor_beats_for(placements.get(name))
        return PipelineWorkers(
            pipeline=name,
            assignment=assignment,
            workers=[beat for _, beat in sorted(beats.items())],
            standby_worker=self._standby_worker(name, placements.get(name), supervisor_beats),
        )

    def everywhere(self) -> dict[str, PipelineWorkers]:
        """Every pipeline's placement (those with an assignment, a worker heartbeat or a
        standby worker's placement), in one read of each store (the web UI's overview)."""
        placements = self._placements()
        with _unavailable_as_api_error():
            assignments = self._assignments.read_all()
            beats = self._board.workers()
            supervisor_beats = self._supervisor_beats_for(*placements.values())
        return {
            name: PipelineWorkers(
                pipeline=name,
                assignment=assignments[name][0] if name in assignments else None,
                workers=[beat for _, beat in sorted(beats.get(name, {}).items())],
                standby_worker=self._standby_worker(name, placements.get(name), supervisor_beats),
            )
            for name in sorted(set(assignments) | set(beats) | set(placements))
        }

    def _placements(self) -> dict[str, StandbyWorkerPlacement]:
        return self._view.standby_workers() if self._view is not None else {}

    def _supervisor_beats_for(
        self, *placements: StandbyWorkerPlacement | None
    ) -> dict[str, SupervisorHeartbeat]:
        """The supervisors' heartbeats, read only when a placement names a supervisor."""
        if any(p is not None and p.supervisor is not None for p in placements):
            return self._board.supervisors()
        return {}

    def _standby_worker(
        self,
        name: str,
        placement: StandbyWorkerPlacement | None,
        beats: Mapping[str, SupervisorHeartbeat],
    ) -> StandbyWorkerView | None:
        if self._view is None:
            return None
        record = self._view.pipelines().get(name)
        return standby_worker_view(record, placement, beats, self._view.supervisors())

    def assignments(self) -> dict[str, Assignment]:
        """Every assignment, by pipeline."""
        with _unavailable_as_api_error():
            return {name: a for name, (a, _) in self._assignments.read_all().items()}

    def supervisor_beats(self) -> dict[str, SupervisorHeartbeat]:
        """Every supervisor's last heartbeat, by id."""
        with _unavailable_as_api_error():
            return self._board.supervisors()


def standby_worker_view(
    record: PipelineRecord | None,
    placement: StandbyWorkerPlacement | None,
    beats: Mapping[str, SupervisorHeartbeat],
    registered: Mapping[str, SupervisorSummary],
) -> StandbyWorkerView | None:
    """A pipeline's standby worker as operators see it: its ``placement`` joined with the beat
    its supervisor's heartbeat (``beats``) reports for the placement's generation and code,
    and that supervisor's host (``registered``). None when the pipeline wants none and has
    no placement; a pipeline that wants one and has none yet is shown unplaced, and why."""
    if placement is None:
        if record is None or not wants_standby_worker(record.conf):
            return None
        if record.status is PipelineStatus.ACTIVE:
            why = "not placed yet: the leader places it in its next round"
        else:
            why = f"none while the pipeline is {record.status.value}"
        return StandbyWorkerView(supervisor=None, unplaced_because=why)
    where = placement.supervisor
    summary = registered.get(where) if where is not None else None
    beat = placement_beat(placement, beats)
    return StandbyWorkerView(
        supervisor=where,
        host=(summary.host or None) if summary is not None else None,
        unplaced_because=placement.unplaced_because,
        generation=placement.generation,
        placed=placement.placed,
        refusals=placement.refusals,
        state=beat.state if beat is not None else None,
        since=beat.since if beat is not None else None,
        pid=beat.pid if beat is not None else None,
        rss_mb=beat.rss_mb if beat is not None else None,
        error=beat.error if beat is not None else None,
    )


@contextlib.contextmanager
def _unavailable_as_api_error() -> Iterator[None]:
    """A store that cannot be reached is the API's UnavailableError (503: retry)."""
    try:
        yield
    except KazooException as exc:
        raise UnavailableError(f"ZooKeeper is unreachable ({type(exc).__name__}); retry") from None
    except StateStoreUnavailableError as exc:
        raise UnavailableError(f"{exc}; retry") from None
