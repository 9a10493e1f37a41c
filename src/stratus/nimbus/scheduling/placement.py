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
        standby = self._standby_reader()
        with _unavailable_as_api_error():
            assignment = self._assignments.read(name)
            beats = self._board.workers().get(name, {})
            standby.read_beats(name)
        return PipelineWorkers(
            pipeline=name,
            assignment=assignment,
            workers=[beat for _, beat in sorted(beats.items())],
            standby_worker=standby.of(name),
        )

    def everywhere(self) -> dict[str, PipelineWorkers]:
        """Every pipeline's placement (those with an assignment, a worker heartbeat or a
        standby worker's placement), in one read of each store (the web UI's overview)."""
        standby = self._standby_reader()
        with _unavailable_as_api_error():
            assignments = self._assignments.read_all()
            beats = self._board.workers()
            standby.read_beats(*standby.placements)
        return {
            name: PipelineWorkers(
                pipeline=name,
                assignment=assignments[name][0] if name in assignments else None,
                workers=[beat for _, beat in sorted(beats.get(name, {}).items())],
                standby_worker=standby.of(name),
            )
            for name in sorted(set(assignments) | set(beats) | set(standby.placements))
        }

    def _standby_reader(self) -> _StandbyReader:
        if self._view is None:
            return _StandbyReader(self._board, {}, {}, {}, shown=False)
        view = self._view
        return _StandbyReader(
            self._board, view.standby_workers(), view.pipelines(), view.supervisors(), shown=True
        )

    def assignments(self) -> dict[str, Assignment]:
        """Every assignment, by pipeline."""
        with _unavailable_as_api_error():
            return {name: a for name, (a, _) in self._assignments.read_all().items()}

    def supervisor_beats(self) -> dict[str, SupervisorHeartbeat]:
        """Every supervisor's last heartbeat, by id."""
        with _unavailable_as_api_error():
            return self._board.supervisors()


class _StandbyReader:
    """One read's standby workers: the view's snapshot, and the supervisors' heartbeats,
    read only when a placement names a supervisor."""

    def __init__(
        self,
        board: HeartbeatBoard,
        placements: Mapping[str, StandbyWorkerPlacement],
        records: Mapping[str, PipelineRecord],
        registered: Mapping[str, SupervisorSummary],
        *,
        shown: bool,
    ) -> None:
        self._board = board
        self.placements = placements
        self._records = records
        self._registered = registered
        self._shown = shown
        self._beats: dict[str, SupervisorHeartbeat] = {}

    def read_beats(self, *pipelines: str) -> None:
        """Read the supervisors' heartbeats if a placement of ``pipelines`` names one."""
        named = (self.placements.get(name) for name in pipelines)
        if any(p is not None and p.supervisor is not None for p in named):
            self._beats = self._board.supervisors()

    def of(self, name: str) -> StandbyWorkerView | None:
        if not self._shown:
            return None
        placement = self.placements.get(name)
        return standby_worker_view(
            self._records.get(name), placement, self._beats, self._registered
        )


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
