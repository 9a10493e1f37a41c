"""Hot workers run on the beat lease: the control loop's gate for them.

A hot worker is the worker of a pipeline with a standby worker: its host's death must be
seen within the beat lease, so with the pacemaker store it starts (or is promoted) only
while this supervisor's beat agent (``BeatKeeper``) holds that lease, on a read of the
assignments that began after the lease was last gained, and is retired as at a fence once
the lease has ended. The agent is kept only while a hot worker is held or assigned here and
the supervisor's own lease holds. Without a beat agent every worker may start. Used by the
control loop's thread only::

    gate = HotWorkers("s1", beats, request_read=reader.request)
    gate.assigned(desired)                          # at each reconcile
    hot_may_start = gate.keep(now, workers, last_read=..., lease=..., stopping=False)
    worker.step(may_start=may_start and (hot_may_start or not gate.is_hot(worker.assignment)))
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from stratus.api.records import Assignment
from stratus.api.standby_workers import wants_standby_worker
from stratus.supervisor.beat_keeper import BeatChange, BeatKeeper
from stratus.supervisor.heartbeat_lease import LeaseState
from stratus.supervisor.managed_worker import ManagedWorker, Phase
from stratus.supervisor.run_outcome import StopReason

# the control loop's events: under its logger, as operators filter them
log = logging.getLogger("stratus.supervisor.control_loop")


def hot(assignment: Assignment) -> bool:
    """Whether ``assignment``'s worker is a hot worker: its pipeline has a standby worker."""
    return wants_standby_worker(assignment.conf)


class HotWorkers:
    """The beat-lease gate of the hot workers; see the module docstring."""

    def __init__(
        self, supervisor: str, beats: BeatKeeper | None, *, request_read: Callable[[], None]
    ) -> None:
        self.supervisor = supervisor
        self._beats = beats  # the pacemaker store: hot workers run on the beat lease
        self._request_read = request_read
        self._assigned = False  # the newest read assigns a hot pipeline here

    def is_hot(self, assignment: Assignment) -> bool:
        """Whether ``assignment``'s worker runs on the beat lease here."""
        return self._beats is not None and hot(assignment)

    def assigned(self, desired: Mapping[str, Assignment]) -> None:
        """The newest read's assignments here: whether a hot pipeline is among them."""
        self._assigned = any(hot(assignment) for assignment in desired.values())

    def promotion_waits(self, assignment: Assignment | None, read: float | None) -> bool:
        """Whether a promotion to ``assignment`` waits for the beat lease (a promoted
        worker is a hot worker); the beat lease's regain asks for the next read. Asked of
        ``read``, the start of the read being applied, not of the last keep's: that read may
        be the one begun after the beat lease was regained, which nothing but the next
        periodic read would otherwise follow."""
        if assignment is None or not self.is_hot(assignment):
            return False
        return self._beats is not None and not self._beats.may_start(read)

    def keep(
        self,
        now: float,
        workers: Mapping[str, ManagedWorker],
        *,
        last_read: float | None,
        lease: LeaseState,
        stopping: bool,
        holds_standby: bool = False,
    ) -> bool:
        """Keep the beat agent while a hot worker or a standby worker is held or assigned
        here (started only while the lease holds), none otherwise; retire every hot worker
        running once the beat lease has ended. Whether hot workers may start on the newest
        read. A standby worker keeps the agent so that its promotion finds the beat lease
        already held: starting the agent then would cost the failover its start and a read."""
        beats = self._beats
        if beats is None:
            return True
        if last_read is not None and not stopping:
            held = (w for w in workers.values() if w.alive or not w.retiring)
            wanted = self._assigned or holds_standby or any(hot(w.assignment) for w in held)
            if not wanted:
                beats.keep(False)
            elif lease is LeaseState.HELD:
                beats.keep(True)
            else:  # start none without a lease; one running exits once the lease file ended
                beats.keep(None)
        change = beats.observe(now)
        if change is BeatChange.REGAINED:
            log.info("event=beat_lease_held supervisor=%s action=read_assignments", self.supervisor)
            self._request_read()  # start no hot worker before a read newer than the lease
        lapsed = [
            worker
            for worker in workers.values()
            if hot(worker.assignment) and worker.phase is Phase.RUNNING
        ]
        if lapsed and not beats.held(now):
            log.warning(
                "event=beat_lease_lapsed supervisor=%s pipelines=%s action=retire",
                self.supervisor,
                ",".join(sorted(w.pipeline for w in lapsed)),
            )
            for worker in lapsed:
                worker.retire(StopReason.FENCED)
        return beats.may_start(last_read)

    def leave(self) -> None:
        """The supervisor leaves its workers running: the beat agent is left too."""
        if self._beats is not None:
            self._beats.leave()

    def stop(self) -> None:
        """After the hot workers' graceful stop, not before: the beat agent stops."""
        if self._beats is not None:
            self._beats.stop()
