"""The heartbeat board on the ZooKeeper state store, against a real ZooKeeper."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from stratus.api.records import (
    QueryProgress,
    SupervisorHeartbeat,
    WorkerHeartbeat,
    WorkerState,
)
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.store import ClusterStateStore
from stratus.state.zk_store import ZooKeeperStateStore
from stratus.supervisor.heartbeat_publisher import HeartbeatPublisher, HeartbeatRound
from tests.harness.zkfixtures import kazoo_client


@pytest.fixture
def store(zk_hosts: str) -> Iterator[ZooKeeperStateStore]:
    with kazoo_client(zk_hosts) as client:
        store = ZooKeeperStateStore(client, "/heartbeats")
        yield store
        store.close()


class ProtocolOnly:
    """The store with nothing beyond ``ClusterStateStore`` (no two-level read)."""

    def __init__(self, store: ClusterStateStore) -> None:
        self.set = store.set
        self.set_many = store.set_many
        self.read_tree = store.read_tree
        self.get = store.get
        self.children = store.children
        self.children_data = store.children_data
        self.delete = store.delete
        self.close = store.close


@pytest.fixture(params=["zookeeper", "protocol-only"])
def board(request: pytest.FixtureRequest, store: ZooKeeperStateStore) -> HeartbeatBoard:
    """The board on the ZooKeeper store, and on the same store seen through the bare
    ``ClusterStateStore`` interface (one pipeline read at a time)."""
    if request.param == "protocol-only":
        return HeartbeatBoard(ProtocolOnly(store))
    return HeartbeatBoard(store)


def worker(pipeline: str, supervisor: str, **changes: Any) -> WorkerHeartbeat:
    fields: dict[str, Any] = {
        "pipeline": pipeline,
        "supervisor": supervisor,
        "epoch": 3,
        "generation": 0,
        "digest": "d0",
        "state": WorkerState.RUNNING,
        "time": 1000.0,
    }
    return WorkerHeartbeat(**{**fields, **changes})


def supervisor(sid: str, **changes: Any) -> SupervisorHeartbeat:
    return SupervisorHeartbeat(**{"id": sid, "time": 1000.0, "slots": 4, **changes})


def test_a_worker_heartbeat_reads_back_whole(board: HeartbeatBoard) -> None:
    beat = worker(
        "etl",
        "s1",
        pid=4242,
        app_id="local-1",
        queries=[QueryProgress(name="q", batch_id=7, rows_total=90)],
    )
    board.put_worker(beat)
    assert board.workers() == {"etl": {"s1": beat}}


def test_workers_are_grouped_by_pipeline_then_supervisor(board: HeartbeatBoard) -> None:
    beats = [worker("etl", "s1"), worker("etl", "s2"), worker("report", "s1")]
    for beat in beats:
        board.put_worker(beat)
    newer = worker("etl", "s1", time=2000.0, state=WorkerState.RESTARTING, restarts=1)
    board.put_worker(newer)
    assert board.workers() == {
        "etl": {"s1": newer, "s2": beats[1]},
        "report": {"s1": beats[2]},
    }


def test_removing_a_worker_and_a_pipeline(board: HeartbeatBoard) -> None:
    for pipeline, sid in (("etl", "s1"), ("etl", "s2"), ("report", "s1")):
        board.put_worker(worker(pipeline, sid))
    board.remove_worker("etl", "s1")
    assert set(board.workers()["etl"]) == {"s2"}
    board.remove_pipeline("etl")
    assert set(board.workers()) == {"report"}
    board.remove_worker("report", "s1")
    assert board.workers() == {}  # a pipeline with no worker left is not listed
    board.remove_pipeline("never-was")
    board.remove_worker("never", "was")


def test_supervisor_heartbeats_by_id(board: HeartbeatBoard) -> None:
    one = supervisor("s1", running=["etl"])
    two = supervisor("s2", stopping=True)
    board.put_supervisor(one)
    board.put_supervisor(two)
    board.put_supervisor(supervisor("s1", time=2000.0, running=[]))
    assert board.supervisors() == {"s1": supervisor("s1", time=2000.0, running=[]), "s2": two}
    board.remove_supervisor("s2")
    board.remove_supervisor("s9")
    assert set(board.supervisors()) == {"s1"}


def test_an_empty_board_has_no_heartbeats(board: HeartbeatBoard) -> None:
    assert board.workers() == {}
    assert board.supervisors() == {}


def test_an_undecodable_heartbeat_is_skipped_with_a_warning_naming_its_path(
    board: HeartbeatBoard, store: ZooKeeperStateStore, caplog: pytest.LogCaptureFixture
) -> None:
    good = worker("etl", "s1")
    board.put_worker(good)
    store.set("/workers/etl/s2", b"not json")
    store.set("/workers/etl/s3", b'{"pipeline": "etl"}')
    board.put_supervisor(supervisor("s1"))
    store.set("/supervisors/s2", b"\xff\xfe")
    with caplog.at_level(logging.WARNING, logger="stratus.state.heartbeats"):
        assert board.workers() == {"etl": {"s1": good}}
        assert set(board.supervisors()) == {"s1"}
    warned = caplog.text
    for path in ("/workers/etl/s2", "/workers/etl/s3", "/supervisors/s2"):
        assert f"path={path} " in warned


@pytest.mark.parametrize("name", ["", "a/b", "..", "."])
def test_names_that_are_not_one_path_segment_are_refused(board: HeartbeatBoard, name: str) -> None:
    with pytest.raises(ValueError, match="invalid heartbeat name"):
        board.put_worker(worker(name, "s1"))
    with pytest.raises(ValueError, match="invalid heartbeat name"):
        board.put_worker(worker("etl", name))
    with pytest.raises(ValueError, match="invalid heartbeat name"):
        board.remove_pipeline(name)
    with pytest.raises(ValueError, match="invalid heartbeat name"):
        board.put_supervisor(supervisor(name))


def test_a_supervisor_period_written_at_once_reads_back_with_every_other(
    board: HeartbeatBoard,
) -> None:
    board.put_round(supervisor("s1"), [worker("etl", "s1"), worker("web", "s1")])
    board.put_round(supervisor("s1", time=2000.0), [worker("etl", "s1", time=2000.0)])
    board.put_round(supervisor("s2"), [])

    read = board.read()

    assert read.complete is True  # ZooKeeper never misses a heartbeat
    assert read.workers == {
        "etl": {"s1": worker("etl", "s1", time=2000.0)},
        "web": {"s1": worker("web", "s1")},
    }
    assert read.supervisors == {"s1": supervisor("s1", time=2000.0), "s2": supervisor("s2")}


def test_one_supervisors_workers_read_alone(board: HeartbeatBoard) -> None:
    board.put_round(supervisor("s1"), [worker("etl", "s1"), worker("web", "s1")])
    board.put_round(supervisor("s2"), [worker("etl", "s2", time=2000.0)])

    assert board.workers_on("s1") == {"etl": worker("etl", "s1"), "web": worker("web", "s1")}
    assert board.workers_on("s2") == {"etl": worker("etl", "s2", time=2000.0)}
    assert board.workers_on("s3") == {}


def test_values_that_are_json_fragments_never_move_a_heartbeat_onto_another_name(
    board: HeartbeatBoard, store: ZooKeeperStateStore
) -> None:
    """``read`` decodes every heartbeat in one parse of the joined values; values written as
    fragments of JSON (two records in one, half a record) must not shift a record onto a
    neighbour's name: the read is the one a value-by-value decode gives."""
    s1, s3, s4 = worker("etl", "s1"), worker("etl", "s3"), worker("etl", "s4")
    half = s4.encode()
    board.put_worker(s1)
    store.set("/workers/etl/s2", s3.encode() + b"," + worker("etl", "s2").encode())
    store.set("/workers/etl/s3", half[: len(half) // 2])
    store.set("/workers/etl/s4", half[len(half) // 2 :])
    board.put_round(supervisor("a"), [])
    store.set("/supervisors/b", supervisor("a").encode())  # names another: kept at its path

    read = board.read()

    assert read.workers == {"etl": {"s1": s1}}
    assert read.supervisors == {"a": supervisor("a"), "b": supervisor("a")}


def test_a_heartbeat_round_says_how_many_warm_workers_are_ready_and_a_stop_says_none(
    store: ZooKeeperStateStore,
) -> None:
    board = HeartbeatBoard(store)
    ready = [2]
    publisher = HeartbeatPublisher(
        board, "s1", interval_secs=1.0, on_written=lambda _at: None, warm_ready=lambda: ready[0]
    )
    beat = SupervisorHeartbeat(id="s1", time=1.0, slots=2)

    assert publisher.publish(HeartbeatRound(supervisor=beat))
    assert board.supervisors()["s1"].warm_ready == 2
    ready[0] = 1  # one handed over
    assert publisher.publish(HeartbeatRound(supervisor=beat))
    assert board.supervisors()["s1"].warm_ready == 1
    stopping = beat.model_copy(update={"stopping": True})
    assert publisher.publish(HeartbeatRound(supervisor=stopping))
    assert board.supervisors()["s1"].warm_ready == 0  # its warm workers stop with it
