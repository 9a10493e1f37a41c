"""The warm workers kept beside a supervisor's workers: one per free slot, within the budget.

At each tick the control loop asks its warm pool (``warm_pool``) for as many warm workers
as slots are free: slots whose pipeline has no process (a pipeline about to start keeps its
slot's warm worker, which it may be handed), nor a standby worker. None starts beside a
pipeline's worker whose JVM is starting. The spare budget admits the standby workers first
(``StandbyWorkers.plan``); without a warm pool the standby workers are planned alone. Used
by the control loop's thread only::

    keeping = WarmKeeping(pool, standby, slots=4)
    keeping.keep(round_, loop.workers, stopping=False)   # each tick
    keeping.stop()                                       # with the supervisor
"""

from __future__ import annotations

from collections.abc import Mapping

from stratus.api.records import WorkerState
from stratus.supervisor.heartbeat_publisher import HeartbeatRound
from stratus.supervisor.loop_protocols import WarmKeeper
from stratus.supervisor.managed_worker import ManagedWorker
from stratus.supervisor.standby_worker import StandbyWorkers


class WarmKeeping:
    """The warm workers kept to the free slots; see the module docstring."""

    def __init__(self, warm: WarmKeeper | None, standby: StandbyWorkers, *, slots: int) -> None:
        self._warm = warm
        self._standby = standby
        self._slots = slots

    def keep(
        self, round_: HeartbeatRound, workers: Mapping[str, ManagedWorker], *, stopping: bool
    ) -> None:
        """Keep the warm workers to the free slots (none once ``stopping``)."""
        if self._warm is not None and not stopping:
            self._warm.keep(
                self.free_slots(workers),
                pipelines_starting=_starting(round_, workers),
                plan=self._standby.plan,
            )
        else:
            self._standby.plan_alone()

    def free_slots(self, workers: Mapping[str, ManagedWorker]) -> int:
        """How many warm workers fit: slots whose pipeline has no process (a pipeline about
        to start keeps its slot's warm worker, which it may be handed), nor a standby worker."""
        standby = sum(w.held().takes_slot for w in self._standby)
        return max(0, self._slots - sum(w.alive for w in workers.values()) - standby)

    def stop(self) -> None:
        """The supervisor stops, or leaves its workers running: the warm workers stop."""
        if self._warm is not None:
            self._warm.stop()


def _starting(round_: HeartbeatRound, workers: Mapping[str, ManagedWorker]) -> bool:
    """Whether a pipeline's worker process runs and has not said RUNNING yet (its JVM is
    starting: no warm worker starts beside it)."""
    return any(
        worker.alive and round_.workers[name].state is WorkerState.STARTING
        for name, worker in workers.items()
    )
