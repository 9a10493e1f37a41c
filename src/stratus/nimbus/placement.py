"""Where a pipeline runs and its workers' last heartbeats, read from the stores.

Unlike the cluster view's reads, this one asks ZooKeeper (the assignment) and the cluster
state store (the heartbeats) each time: heartbeats change too often to be watched::

    placement = Placement(AssignmentTable(client, paths), board)
    placement.of("etl").assignment.supervisor
"""

from __future__ import annotations

from kazoo.exceptions import KazooException

from stratus.api.errors import UnavailableError
from stratus.api.records import PipelineWorkers
from stratus.nimbus.assignments import AssignmentTable
from stratus.state.errors import StateStoreUnavailableError
from stratus.state.heartbeats import HeartbeatBoard


class Placement:
    """Reads of assignments and heartbeats for the API; see the module docstring."""

    def __init__(self, assignments: AssignmentTable, board: HeartbeatBoard) -> None:
        self._assignments = assignments
        self._board = board

    def of(self, name: str) -> PipelineWorkers:
        """Where ``name`` runs, or UnavailableError when a store is unreachable."""
        try:
            assignment = self._assignments.read(name)
            beats = self._board.workers().get(name, {})
        except KazooException as exc:
            raise UnavailableError(
                f"ZooKeeper is unreachable ({type(exc).__name__}); retry"
            ) from None
        except StateStoreUnavailableError as exc:
            raise UnavailableError(f"{exc}; retry") from None
        return PipelineWorkers(
            pipeline=name,
            assignment=assignment,
            workers=[beat for _, beat in sorted(beats.items())],
        )
