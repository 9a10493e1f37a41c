"""The supervisor's heartbeats: its workers' and its own, every heartbeat period, from one loop.

Guarantees: each round writes every worker's heartbeat, then the supervisor's, through the
``HeartbeatBoard``, in one message where the store allows it (one ``send_pulses`` to each
pacemaker); only a round that wrote them all renews the supervisor's lease, and it
renews it to the time the round *started* (the leader saw the heartbeat no earlier than
that). With ``may_renew`` (a store that is not ZooKeeper: the pacemakers), a round renews the
lease only if it started while ZooKeeper was connected: a supervisor cut off from ZooKeeper
(its registration about to go) must fence even when it still reaches a pacemaker, which the
leader may not reach. The heartbeats of workers the supervisor no longer holds are removed,
including those a previous life of this supervisor left behind. The registration's ``used``
count follows each round. With ``warm_ready`` (the warm pool's count of ready warm workers)
each round's supervisor heartbeat says how many are ready at its write, which the leader
prefers when it places a moved pipeline; ``after_round`` runs after each round written (the
registration then shows the warm workers' memory). A round offered that changes a worker's
state (one started, stopped, crashed, gone) is published at once rather than at the period's
end, but no sooner than ``early_gap_secs`` (a quarter period by default) after the round
before: the leader acts on those changes (a hot worker started again in place is fenced and
its standby worker promoted; a crash then a start are two changes 0.3 s apart), and the
store's load stays bounded (four rounds a period at most, while states change at every
tick). Writes may block while the store is unreachable: they run on this thread,
never on the control loop's, which fences on its own clock::

    publisher = HeartbeatPublisher(board, "s1", interval_secs=1.0, on_written=loop.post_written)
    publisher.offer(round_)     # the control loop's latest picture; the newest wins; a
                                # change of a worker's state wakes the loop
    publisher.start()
    publisher.stop()
    publisher.publish(final_round)   # the last one (stopping=True), on the caller's thread
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

from kazoo.exceptions import KazooException

from stratus.api.clock import Clock
from stratus.api.records import SupervisorHeartbeat, WorkerHeartbeat, WorkerState
from stratus.errors import StratusError

log = logging.getLogger(__name__)


class Board(Protocol):
    """The part of ``HeartbeatBoard`` a supervisor writes with."""

    def put_round(
        self, supervisor: SupervisorHeartbeat, workers: Iterable[WorkerHeartbeat]
    ) -> None: ...

    def remove_worker(self, pipeline: str, supervisor: str) -> None: ...

    def workers(self) -> dict[str, dict[str, WorkerHeartbeat]]: ...


@dataclass(frozen=True)
class HeartbeatRound:
    """What one round publishes: the control loop's picture at one moment."""

    supervisor: SupervisorHeartbeat
    workers: dict[str, WorkerHeartbeat] = field(default_factory=dict)
    used: int = 0  # the registration's ``used``

    def worker_states(self) -> dict[str, WorkerState]:
        """Each worker's state, by pipeline: what a round published at once is about."""
        return {pipeline: beat.state for pipeline, beat in self.workers.items()}


class HeartbeatPublisher:
    """Publishes the newest ``HeartbeatRound`` every period; see the module docstring."""

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        board: Board,
        supervisor: str,
        *,
        interval_secs: float,
        early_gap_secs: float | None = None,
        on_written: Callable[[float], None],
        on_used: Callable[[int], None] = lambda _used: None,
        may_renew: Callable[[], bool] = lambda: True,
        warm_ready: Callable[[], int] | None = None,
        after_round: Callable[[], None] = lambda: None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._board = board
        self._supervisor = supervisor
        self._interval = interval_secs
        self._early_gap = interval_secs / 4 if early_gap_secs is None else early_gap_secs
        self._on_written = on_written
        self._on_used = on_used
        self._may_renew = may_renew
        self._warm_ready = warm_ready
        self._after_round = after_round  # after each round written (the registration's warm)
        self._renewing = True  # the last round's may_renew (its change is logged)
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: HeartbeatRound | None = None
        self._offered = threading.Event()
        self._changed = threading.Event()  # a round offered changes a worker's state
        self._taken: dict[str, WorkerState] | None = None  # the states of the last round taken
        self._stopping = threading.Event()
        self._published: set[str] | None = None  # worker heartbeats of ours in the store
        self._used: int | None = None
        self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)

    def offer(self, round_: HeartbeatRound) -> None:
        """The round to publish next (replacing one not published yet); never blocks."""
        with self._lock:
            self._latest = round_
            if self._taken is not None and round_.worker_states() != self._taken:
                self._changed.set()
        self._offered.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """End the loop (a round under way finishes first, within ``timeout``)."""
        self._stopping.set()
        self._offered.set()
        self._changed.set()
        self._thread.join(timeout=timeout)

    def publish(self, round_: HeartbeatRound) -> bool:
        """Write one round now; True if every heartbeat of it was written."""
        started = self._clock()
        renews = self._may_renew()
        round_ = self._with_warm(round_)
        try:
            self._write(round_)
        except (StratusError, KazooException) as exc:  # the store is unreachable: next round
            log.warning(
                "event=heartbeat_failed supervisor=%s workers=%d error=%s",
                self._supervisor,
                len(round_.workers),
                exc,
            )
            return False
        self._note_renewing(renews)
        if renews:
            self._on_written(started)
        self._remove_gone(round_)
        if round_.used != self._used:
            self._on_used(round_.used)
            self._used = round_.used
        self._after_round()
        return True

    def _with_warm(self, round_: HeartbeatRound) -> HeartbeatRound:
        """The round with its supervisor's count of ready warm workers, if it has a pool."""
        if self._warm_ready is None or round_.supervisor.stopping:
            return round_
        beat = round_.supervisor.model_copy(update={"warm_ready": max(0, self._warm_ready())})
        return replace(round_, supervisor=beat)

    def _note_renewing(self, renews: bool) -> None:
        if renews != self._renewing:
            self._renewing = renews
            if renews:
                log.info("event=heartbeat_renews_lease_again supervisor=%s", self._supervisor)
            else:
                log.warning(
                    "event=heartbeat_renews_no_lease supervisor=%s reason=zookeeper_disconnected",
                    self._supervisor,
                )

    def _run(self) -> None:
        self._offered.wait()  # the first picture of the control loop
        while not self._stopping.is_set():
            started = self._clock()
            with self._lock:
                round_ = self._latest
                self._changed.clear()
                self._taken = None if round_ is None else round_.worker_states()
            if round_ is not None:
                self.publish(round_)
            self._wait(started)

    def _wait(self, started: float) -> None:
        """Wait until the period that began at ``started`` ends, or the stop, or a round that
        changes a worker's state is offered once the early gap has passed."""
        if self._stopping.wait(max(0.0, started + self._early_gap - self._clock())):
            return
        self._changed.wait(max(0.0, started + self._interval - self._clock()))

    def _write(self, round_: HeartbeatRound) -> None:
        if self._published is None:
            self._published = self._found_in_store()
        self._board.put_round(round_.supervisor, round_.workers.values())  # one message
        self._published.update(beat.pipeline for beat in round_.workers.values())

    def _found_in_store(self) -> set[str]:
        """Pipelines whose worker heartbeat of this supervisor the store holds (a past life's)."""
        return {
            pipeline
            for pipeline, beats in self._board.workers().items()
            if self._supervisor in beats
        }

    def _remove_gone(self, round_: HeartbeatRound) -> None:
        """Remove the heartbeats of workers no longer held; a failure is retried next round."""
        assert self._published is not None
        for pipeline in sorted(self._published - set(round_.workers)):
            try:
                self._board.remove_worker(pipeline, self._supervisor)
            except (StratusError, KazooException) as exc:
                log.warning(
                    "event=heartbeat_remove_failed pipeline=%s supervisor=%s error=%s",
                    pipeline,
                    self._supervisor,
                    exc,
                )
                return
            self._published.discard(pipeline)
            log.info(
                "event=heartbeat_removed pipeline=%s supervisor=%s", pipeline, self._supervisor
            )
