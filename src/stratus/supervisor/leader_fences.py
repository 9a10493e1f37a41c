"""A leader's fences, as the control loop obeys and answers them.

A fence of the whole supervisor (``FenceOrder``) takes the lease away and stops every worker
as a lapse does (the loop does that); it is answered once no worker process is left. A
pipeline fence (``PipelineFenceOrder``) stops the named pipelines' workers only (and those a
previous supervisor left running for them), holds each back until an assignment with a newer
fencing token (``pipeline_fence``), and is answered once those processes are gone; the lease
and the other workers stay. Either is refused at once when its epoch is older than the newest
this supervisor has seen (an assignment's, or an earlier fence's): a deposed leader stops
nothing. Used by the control loop's thread only::

    fences = LeaderFences("s1", stop_secs=10.0)
    if not fences.refuses(order, seen_epochs):
        ...                                     # stop every worker
        fences.obeyed(order)
    fences.fence_pipelines(pipeline_order, workers, left)
    fences.answer(workers, left)                # each tick
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from stratus.api.echo import clip
from stratus.api.records import Assignment, FencingToken, RunOutcome
from stratus.supervisor.left_running import LeftRunning, Orphan
from stratus.supervisor.loop_messages import FenceOrder, PipelineFenceOrder
from stratus.supervisor.managed_worker import ManagedWorker
from stratus.supervisor.pipeline_fence import PipelineHolds, newest
from stratus.supervisor.run_outcome import StopReason

# the control loop's events: under its logger, as operators filter them
log = logging.getLogger("stratus.supervisor.control_loop")


@dataclass(frozen=True, eq=False)
class _PipelineFence:
    """A pipeline fence obeyed: answered once these workers and orphans are gone."""

    order: PipelineFenceOrder
    workers: tuple[ManagedWorker, ...]
    orphans: tuple[Orphan, ...]


class LeaderFences:
    """The fences obeyed and the pipelines they hold; see the module docstring."""

    def __init__(self, supervisor: str, *, stop_secs: float) -> None:
        self.supervisor = supervisor
        self._stop_secs = stop_secs
        self._epoch = 0  # the newest epoch of a leader's fence obeyed
        self._orders: list[FenceOrder] = []  # obeyed, waiting for the workers' exits
        self._pipeline_fences: list[_PipelineFence] = []  # obeyed, waiting for those exits
        self._holds = PipelineHolds(supervisor)  # pipelines fenced: held till a newer token

    def refuses(self, order: FenceOrder | PipelineFenceOrder, seen: Mapping[str, int]) -> bool:
        """Refuse ``order`` when its epoch is older than the newest seen (``seen``: the
        assignments' epochs, by pipeline; or an earlier fence's); else its epoch is seen."""
        newest_epoch = max([self._epoch, *seen.values()])
        if order.epoch >= newest_epoch:
            self._epoch = order.epoch
            return False
        if isinstance(order, FenceOrder):
            log.warning(
                "event=fence_refused supervisor=%s epoch=%d seen_epoch=%d reason=stale_epoch",
                self.supervisor,
                order.epoch,
                newest_epoch,
            )
        else:
            log.warning(
                "event=pipeline_fence_refused supervisor=%s epoch=%d seen_epoch=%d "
                "pipelines=%s reason=stale_epoch",
                self.supervisor,
                order.epoch,
                newest_epoch,
                clip(",".join(sorted(order.pipelines))),
            )
        order.refuse(newest_epoch)
        return True

    def obeyed(self, order: FenceOrder) -> None:
        """A fence of the supervisor obeyed: answered once no worker process is left."""
        self._orders.append(order)

    def fence_pipelines(
        self, order: PipelineFenceOrder, workers: Mapping[str, ManagedWorker], left: LeftRunning
    ) -> None:
        """Stop the workers of ``order``'s pipelines (and those a previous supervisor left
        running for them) and hold each back until an assignment with a newer token; the
        order is answered once their processes are gone (``answer``)."""
        fenced: list[ManagedWorker] = []
        orphans: list[Orphan] = []
        for name in sorted(order.pipelines):
            token: FencingToken | None = None
            worker = workers.get(name)
            if worker is not None:
                token = worker.assignment.token
                if worker.alive:
                    order.stopped.append(name)
                if not worker.retiring:  # one being stopped already keeps its reason
                    worker.retire(StopReason.FENCED)
                fenced.append(worker)
            found = left.take(name)
            if found is not None:  # left running by a previous supervisor, not adopted yet
                token = newest(token, found.record.token)
                left.orphan(found, "pipeline_fenced", RunOutcome.FENCED)
                order.stopped.append(name)
            orphans += [orphan for orphan in left.orphans if orphan.pipeline == name]
            self._holds.hold(name, token)
        log.warning(
            "event=pipelines_fenced supervisor=%s epoch=%d pipelines=%s stopped=%s by=leader "
            "stop_secs=%g",
            self.supervisor,
            order.epoch,
            clip(",".join(sorted(order.pipelines))),
            clip(",".join(order.stopped)) or "-",
            self._stop_secs,
        )
        self._pipeline_fences.append(_PipelineFence(order, tuple(fenced), tuple(orphans)))

    def admit(self, desired: Mapping[str, Assignment]) -> dict[str, Assignment]:
        """``desired`` without the pipelines a fence holds back (``PipelineHolds.admit``)."""
        return self._holds.admit(desired)

    def answer(self, workers: Mapping[str, ManagedWorker], left: LeftRunning) -> None:
        """Answer the fences of the supervisor once no worker process is left, and each
        pipeline fence once the processes it stopped are gone."""
        if self._orders and not any(w.alive for w in workers.values()):
            for order in self._orders:
                order.done()
            self._orders.clear()
        orphans_left = {id(orphan) for orphan in left.orphans}
        for fence in list(self._pipeline_fences):
            if any(w.alive for w in fence.workers) or any(
                id(orphan) in orphans_left for orphan in fence.orphans
            ):
                continue
            fence.order.done()
            self._pipeline_fences.remove(fence)
