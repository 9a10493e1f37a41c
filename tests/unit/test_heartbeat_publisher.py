"""The heartbeat publisher's loop: a round on time each period, and a round that changes a
worker's state at once, but no sooner than the early gap after the round before (a board in
memory stands for the store; ``tests/cluster/test_heartbeat_board.py`` writes through the
real one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator

import pytest

from stratus.api.records import SupervisorHeartbeat, WorkerHeartbeat, WorkerState
from stratus.supervisor.heartbeat_publisher import HeartbeatPublisher, HeartbeatRound
from tests.harness.zkfixtures import wait_until

PERIOD_SECS = 60.0  # no round on time within a test: any round after the first is early
EARLY_GAP_SECS = 0.5
WAIT_SECS = 10.0


class MemoryBoard:
    """The rounds written, in order: (supervisor beat's time, when it was written)."""

    def __init__(self) -> None:
        self.rounds: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def put_round(
        self, supervisor: SupervisorHeartbeat, workers: Iterable[WorkerHeartbeat]
    ) -> None:
        with self._lock:
            self.rounds.append((supervisor.time, time.monotonic()))

    def remove_worker(self, pipeline: str, supervisor: str) -> None:
        pass

    def workers(self) -> dict[str, dict[str, WorkerHeartbeat]]:
        return {}

    def written(self) -> list[float]:
        with self._lock:
            return [beat_time for beat_time, _at in self.rounds]

    def written_at(self) -> list[float]:
        with self._lock:
            return [at for _beat_time, at in self.rounds]


def round_at(beat_time: float, state: WorkerState) -> HeartbeatRound:
    beat = WorkerHeartbeat(
        pipeline="orders", supervisor="s1", epoch=1, generation=0, state=state, time=beat_time
    )
    return HeartbeatRound(
        supervisor=SupervisorHeartbeat(id="s1", time=beat_time, slots=1),
        workers={"orders": beat},
    )


@pytest.fixture
def published() -> Iterator[tuple[HeartbeatPublisher, MemoryBoard]]:
    board = MemoryBoard()
    publisher = HeartbeatPublisher(
        board,
        "s1",
        interval_secs=PERIOD_SECS,
        early_gap_secs=EARLY_GAP_SECS,
        on_written=lambda _at: None,
    )
    publisher.offer(round_at(1.0, WorkerState.RUNNING))
    publisher.start()
    wait_until(lambda: board.written() == [1.0], WAIT_SECS, "the first round")
    yield publisher, board
    publisher.stop(timeout=WAIT_SECS)


def test_a_round_that_changes_a_workers_state_is_published_at_once(published) -> None:
    publisher, board = published
    publisher.offer(round_at(2.0, WorkerState.RUNNING))  # the same states: waits its period
    publisher.offer(round_at(3.0, WorkerState.STARTING))  # the worker started again
    wait_until(lambda: board.written() == [1.0, 3.0], WAIT_SECS, "the change, at once")


def test_a_worker_gone_from_the_round_is_a_change(published) -> None:
    publisher, board = published
    publisher.offer(HeartbeatRound(supervisor=SupervisorHeartbeat(id="s1", time=2.0, slots=1)))
    wait_until(lambda: board.written() == [1.0, 2.0], WAIT_SECS, "the worker's removal")


def test_changes_in_a_row_are_written_an_early_gap_apart(published) -> None:
    """A crash, then the start 0.3 s later: both reach the leader before the period ends, and
    a worker whose state changes at every tick costs a few rounds a period, no more."""
    publisher, board = published
    publisher.offer(round_at(2.0, WorkerState.RESTARTING))
    wait_until(lambda: board.written() == [1.0, 2.0], WAIT_SECS, "the crash")
    publisher.offer(round_at(3.0, WorkerState.STARTING))
    wait_until(lambda: board.written() == [1.0, 2.0, 3.0], WAIT_SECS, "the start, early")
    first, crash, start = board.written_at()
    assert crash - first >= EARLY_GAP_SECS
    assert start - crash >= EARLY_GAP_SECS


def test_stop_ends_the_wait_at_once(published) -> None:
    publisher, board = published
    publisher.stop(timeout=WAIT_SECS)
    assert not publisher._thread.is_alive()
    assert board.written() == [1.0]
