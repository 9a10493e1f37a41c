"""Where a pipeline runs and its workers' last heartbeats, read from the stores.

Unlike the cluster view's reads, this one asks ZooKeeper (the assignment) and the cluster
state store (the heartbeats) each time: heartbeats change too often to be watched::

    placement = Placement(AssignmentTable(client, paths), board)
    placement.of("etl").assignment.supervisor
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kazoo.exceptions import KazooException

from stratus.api.errors import UnavailableError
from stratus.api.records import Assignment, PipelineWorkers, SupervisorHeartbeat
from stratus.nimbus.scheduling.assignments import AssignmentTable
from stratus.state.errors import StateStoreUnavailableError
from stratus.state.heartbeats import HeartbeatBoard


class Placement:
    """Reads of assignments and heartbeats for the API; see the module docstring."""

    def __init__(self, assignments: AssignmentTable, board: HeartbeatBoard) -> None:
        self._assignments = assignments
        self._board = board

    def of(self, name: str) -> PipelineWorkers:
        """Where ``name`` runs, or UnavailableError when a store is unreachable."""
        with _unavailable_as_api_error():
            assignment = self._assignments.read(name)
            beats = self._board.workers().get(name, {})
        return PipelineWorkers(
            pipeline=name,
            assignment=assignment,
            workers=[beat for _, beat in sorted(beats.items())],
        )

    def everywhere(self) -> dict[str, PipelineWorkers]:
        """Every pipeline's placement (those with an assignment or a worker heartbeat), in
        one read of each store (the web UI's overview)."""
        with _unavailable_as_api_error():
            assignments = self._assignments.read_all()
            beats = self._board.workers()
        return {
            name: PipelineWorkers(
                pipeline=name,
                assignment=assignments[name][0] if name in assignments else None,
                workers=[beat for _, beat in sorted(beats.get(name, {}).items())],
            )
            for name in sorted(set(assignments) | set(beats))
        }

    def assignments(self) -> dict[str, Assignment]:
        """Every assignment, by pipeline."""
        with _unavailable_as_api_error():
            return {name: a for name, (a, _) in self._assignments.read_all().items()}

    def supervisor_beats(self) -> dict[str, SupervisorHeartbeat]:
        """Every supervisor's last heartbeat, by id."""
        with _unavailable_as_api_error():
            return self._board.supervisors()


@contextlib.contextmanager
def _unavailable_as_api_error() -> Iterator[None]:
    """A store that cannot be reached is the API's UnavailableError (503: retry)."""
    try:
        yield
    except KazooException as exc:
        raise UnavailableError(f"ZooKeeper is unreachable ({type(exc).__name__}); retry") from None
    except StateStoreUnavailableError as exc:
        raise UnavailableError(f"{exc}; retry") from None
