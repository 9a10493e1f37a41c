"""The heartbeat publisher's loop: a round on time each period, and a round that changes a
worker's state at once, at most once between two on time (a board in memory stands for the
store; ``tests/cluster/test_heartbeat_board.py`` writes through the real one)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

import pytest

from stratus.api.records import SupervisorHeartbeat, WorkerHeartbeat, WorkerState
from stratus.supervisor.heartbeat_publisher import HeartbeatPublisher, HeartbeatRound
from tests.harness.zkfixtures import holds_within, wait_until

PERIOD_SECS = 60.0  # no round on time within a test: any round after the first is early
WAIT_SECS = 10.0


class MemoryBoard:
    """The rounds written, in order: (supervisor beat's time, workers' states)."""

    def __init__(self) -> None:
        self.rounds: list[tuple[float, dict[str, WorkerState]]] = []
        self._lock = threading.Lock()

    def put_round(
        self, supervisor: SupervisorHeartbeat, workers: Iterable[WorkerHeartbeat]
    ) -> None:
        with self._lock:
            self.rounds.append((supervisor.time, {w.pipeline: w.state for w in workers}))

    def remove_worker(self, pipeline: str, supervisor: str) -> None:
        pass

    def workers(self) -> dict[str, dict[str, WorkerHeartbeat]]:
        return {}

    def written(self) -> list[float]:
        with self._lock:
            return [time for time, _states in self.rounds]


def round_at(time: float, state: WorkerState) -> HeartbeatRound:
    beat = WorkerHeartbeat(
        pipeline="orders", supervisor="s1", epoch=1, generation=0, state=state, time=time
    )
    return HeartbeatRound(
        supervisor=SupervisorHeartbeat(id="s1", time=time, slots=1), workers={"orders": beat}
    )


@pytest.fixture
def published() -> Iterator[tuple[HeartbeatPublisher, MemoryBoard]]:
    board = MemoryBoard()
    publisher = HeartbeatPublisher(
        board, "s1", interval_secs=PERIOD_SECS, on_written=lambda _at: None
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


def test_a_second_change_waits_for_the_round_on_time(published) -> None:
    publisher, board = published
    publisher.offer(round_at(2.0, WorkerState.STARTING))
    wait_until(lambda: board.written() == [1.0, 2.0], WAIT_SECS, "the first change")
    publisher.offer(round_at(3.0, WorkerState.RUNNING))
    # a worker whose state changes at every tick costs one round more per period, no more
    assert not holds_within(lambda: len(board.written()) > 2, 1.0)


def test_stop_ends_the_wait_at_once(published) -> None:
    publisher, board = published
    publisher.stop(timeout=WAIT_SECS)
    assert not publisher._thread.is_alive()
    assert board.written() == [1.0]
