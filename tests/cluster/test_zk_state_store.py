"""The ZooKeeper cluster state store against a real ZooKeeper: data, races and outages.

Races are made two ways: for real, with several clients at once, and deterministically, by a
client whose calls let another client act first (``Interfering``), so that each branch of
the race handling is known to run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stratus.config import config_from_mapping
from stratus.errors import ConfigError
from stratus.settings import state_store_settings
from stratus.state.errors import StateStoreUnavailableError
from stratus.state.factory import StateStoreSettings, create_state_store
from stratus.state.zk_store import ZooKeeperStateStore, check_path
from stratus.zk.paths import ClusterPaths
from stratus.zk.server import ZooKeeperServer
from tests.harness.zkfixtures import kazoo_client, process_stopped, wait_until

ROOT = "/stratus/heartbeats"


@pytest.fixture
def client(zk_hosts: str) -> Iterator[Any]:
    with kazoo_client(zk_hosts) as zk:
        yield zk


@pytest.fixture
def store(client: Any) -> Iterator[ZooKeeperStateStore]:
    store = ZooKeeperStateStore(client, ROOT)
    yield store
    store.close()


class Interfering:
    """A kazoo client whose first call of ``method`` lets ``act`` run first (another client's
    action), to force one side of a race; every other call goes straight through."""

    def __init__(self, client: Any, method: str, act: Callable[[], None]) -> None:
        self._client = client
        self._method = method
        self._act: Callable[[], None] | None = act
        self.interfered = False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._client, name)
        if name != self._method or self._act is None:
            return real

        def first_call(*args: Any, **kwargs: Any) -> Any:
            act, self._act = self._act, None
            assert act is not None
            act()
            self.interfered = True
            return real(*args, **kwargs)

        return first_call


# ---------------------------------------------------------------------------------------------
# Data


def test_set_then_get_returns_the_data_and_a_second_set_replaces_it(
    store: ZooKeeperStateStore,
) -> None:
    store.set("/workers/etl/s1", b"one")
    assert store.get("/workers/etl/s1") == b"one"
    store.set("/workers/etl/s1", b"two")
    assert store.get("/workers/etl/s1") == b"two"


def test_paths_live_under_the_root_znode(store: ZooKeeperStateStore, client: Any) -> None:
    store.set("/supervisors/s1", b"x")
    assert client.get(f"{ROOT}/supervisors/s1")[0] == b"x"
    assert store.root == ROOT


def test_a_store_rooted_at_slash_uses_the_clients_own_root(client: Any) -> None:
    store = ZooKeeperStateStore(client, "/")
    store.set("/a/b", b"x")
    assert client.get("/a/b")[0] == b"x"
    assert store.children("/") == ["a"]


def test_get_of_a_missing_path_or_a_bare_parent_is_none(store: ZooKeeperStateStore) -> None:
    assert store.get("/nothing/here") is None
    store.set("/workers/etl/s1", b"x")
    assert store.get("/workers/etl") is None  # created as a parent: no data


def test_children_are_listed_sorted_and_missing_paths_have_none(
    store: ZooKeeperStateStore,
) -> None:
    for name in ("s2", "s10", "s1"):
        store.set(f"/workers/etl/{name}", name.encode())
    store.set("/workers/other/s1", b"y")
    assert store.children("/workers") == ["etl", "other"]
    assert store.children("/workers/etl") == ["s1", "s10", "s2"]
    assert store.children("/nowhere") == []
    assert store.children("/workers/etl/s1") == []


def test_children_data_reads_every_child_that_holds_data(store: ZooKeeperStateStore) -> None:
    store.set("/workers/etl/s1", b"one")
    store.set("/workers/etl/s2", b"two")
    store.set("/workers/etl/sub/deeper", b"x")  # "sub" is a bare parent: left out
    assert store.children_data("/workers/etl") == {"s1": b"one", "s2": b"two"}
    assert store.children_data("/workers") == {}
    assert store.children_data("/nowhere") == {}


def test_children_data_of_many_children(store: ZooKeeperStateStore) -> None:
    for i in range(200):
        store.set(f"/supervisors/s{i:03d}", str(i).encode())
    data = store.children_data("/supervisors")
    assert len(data) == 200 and data["s150"] == b"150"


def test_children_data_skips_a_child_deleted_after_the_listing(client: Any, zk_hosts: str) -> None:
    plain = ZooKeeperStateStore(client, ROOT)
    plain.set("/workers/etl/s1", b"one")
    plain.set("/workers/etl/s2", b"two")
    with kazoo_client(zk_hosts) as other:
        gets = Interfering(client, "get_async", lambda: other.delete(f"{ROOT}/workers/etl/s1"))
        store = ZooKeeperStateStore(gets, ROOT)
        assert store.children_data("/workers/etl") == {"s2": b"two"}
    assert gets.interfered


def test_grandchildren_data_reads_two_levels_at_once(store: ZooKeeperStateStore) -> None:
    store.set("/workers/etl/s1", b"a")
    store.set("/workers/etl/s2", b"b")
    store.set("/workers/report/s1", b"c")
    store.set("/workers/report/s3/deeper", b"x")  # "s3" is a bare parent: left out
    store.set("/workers/empty/bare/deeper", b"x")  # nothing with data two levels down
    assert store.grandchildren_data("/workers") == {
        "etl": {"s1": b"a", "s2": b"b"},
        "report": {"s1": b"c"},
    }
    assert store.grandchildren_data("/nowhere") == {}


def test_grandchildren_data_skips_what_is_deleted_during_the_read(
    client: Any, zk_hosts: str
) -> None:
    ZooKeeperStateStore(client, ROOT).set("/workers/etl/s1", b"a")
    ZooKeeperStateStore(client, ROOT).set("/workers/gone/s1", b"b")
    with kazoo_client(zk_hosts) as other:
        lists = Interfering(
            client,
            "get_children_async",
            lambda: other.delete(f"{ROOT}/workers/gone", recursive=True),
        )
        store = ZooKeeperStateStore(lists, ROOT)
        assert store.grandchildren_data("/workers") == {"etl": {"s1": b"a"}}
    assert lists.interfered


def test_delete_removes_the_whole_subtree_and_ignores_missing_paths(
    store: ZooKeeperStateStore,
) -> None:
    store.set("/workers/etl/s1", b"x")
    store.set("/workers/etl/s2/deep/er", b"y")
    store.set("/workers/keep/s1", b"z")
    store.delete("/workers/etl")
    assert store.children("/workers") == ["keep"]
    store.delete("/workers/etl")
    store.delete("/never/was")
    store.delete("/workers/keep/s1")
    assert store.children("/workers/keep") == []


# ---------------------------------------------------------------------------------------------
# Races


def test_concurrent_sets_of_new_nested_paths_from_many_clients_all_succeed(
    zk_hosts: str,
) -> None:
    writers = 6
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(index: int) -> None:
        with kazoo_client(zk_hosts) as zk:
            store = ZooKeeperStateStore(zk, ROOT)
            barrier.wait(timeout=30)
            try:
                for round_ in range(20):
                    store.set(f"/workers/p{round_}/shared", f"{index}".encode())
                    store.set(f"/workers/p{round_}/s{index}", b"mine")
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    with kazoo_client(zk_hosts) as zk:
        store = ZooKeeperStateStore(zk, ROOT)
        for round_ in range(20):
            data = store.children_data(f"/workers/p{round_}")
            assert set(data) == {"shared", *(f"s{i}" for i in range(writers))}
            assert data["shared"] in {str(i).encode() for i in range(writers)}


def test_set_replaces_a_node_created_by_someone_else_after_it_found_none(
    client: Any, zk_hosts: str
) -> None:
    with kazoo_client(zk_hosts) as other:
        theirs = Interfering(
            client, "create_async", lambda: other.create(f"{ROOT}/w/s1", b"theirs", makepath=True)
        )
        ZooKeeperStateStore(theirs, ROOT).set("/w/s1", b"ours")
    assert theirs.interfered
    assert client.get(f"{ROOT}/w/s1")[0] == b"ours"


def test_set_recreates_a_node_deleted_just_before_it_wrote(client: Any, zk_hosts: str) -> None:
    ZooKeeperStateStore(client, ROOT).set("/w/s1", b"old")
    with kazoo_client(zk_hosts) as other:
        gone = Interfering(client, "set_async", lambda: other.delete(f"{ROOT}/w", recursive=True))
        ZooKeeperStateStore(gone, ROOT).set("/w/s1", b"new")
    assert gone.interfered
    assert client.get(f"{ROOT}/w/s1")[0] == b"new"


def test_delete_also_removes_a_child_created_while_it_deleted(client: Any, zk_hosts: str) -> None:
    ZooKeeperStateStore(client, ROOT).set("/workers/etl/s1", b"x")
    with kazoo_client(zk_hosts) as other:
        late = Interfering(
            client,
            "delete_async",
            lambda: other.create(f"{ROOT}/workers/etl/late/x", b"y", makepath=True),
        )
        ZooKeeperStateStore(late, ROOT).delete("/workers/etl")
    assert late.interfered
    assert client.exists(f"{ROOT}/workers/etl") is None


def test_delete_never_fails_against_a_writer_that_keeps_writing(zk_hosts: str, client: Any) -> None:
    store = ZooKeeperStateStore(client, ROOT)
    stop = threading.Event()
    errors: list[BaseException] = []

    def keep_writing() -> None:
        with kazoo_client(zk_hosts) as zk:
            writer = ZooKeeperStateStore(zk, ROOT)
            index = 0
            while not stop.is_set():
                try:
                    writer.set(f"/workers/etl/s{index % 5}", b"beat")
                except BaseException as exc:
                    errors.append(exc)
                    return
                index += 1

    thread = threading.Thread(target=keep_writing)
    thread.start()
    try:
        wait_until(lambda: store.children("/workers/etl"), 10, "the writer's first heartbeat")
        for _ in range(20):
            store.delete("/workers/etl")
    finally:
        stop.set()
        thread.join(timeout=30)
    assert errors == []
    store.delete("/workers/etl")
    assert store.children("/workers") == []


# ---------------------------------------------------------------------------------------------
# Paths


@pytest.mark.parametrize(
    "path", ["workers/etl", "/workers/../x", "/workers//etl", "/workers/", "/./x", "", "/a\0b"]
)
def test_invalid_paths_are_refused_with_a_clear_error(
    store: ZooKeeperStateStore, path: str
) -> None:
    with pytest.raises(ValueError, match="invalid state store path"):
        check_path(path)
    with pytest.raises(ValueError, match="invalid state store path"):
        store.get(path)
    with pytest.raises(ValueError, match="invalid state store path"):
        store.set(path, b"x")


def test_the_root_cannot_be_set_or_deleted_nor_a_value_be_empty(
    store: ZooKeeperStateStore, client: Any
) -> None:
    with pytest.raises(ValueError, match="root"):
        store.set("/", b"x")
    with pytest.raises(ValueError, match="root"):
        store.delete("/")
    with pytest.raises(ValueError, match="empty value"):
        store.set("/a", b"")
    with pytest.raises(ValueError, match="invalid state store path"):
        ZooKeeperStateStore(client, "relative")


# ---------------------------------------------------------------------------------------------
# Outages


def test_every_call_fails_with_state_store_unavailable_while_zookeeper_is_down(
    zk_restartable: ZooKeeperServer,
) -> None:
    with kazoo_client(zk_restartable.connect_string, session_timeout=15.0) as zk:
        store = ZooKeeperStateStore(zk, ROOT)
        store.set("/workers/etl/s1", b"x")
        zk_restartable.stop()
        wait_until(lambda: not zk.connected, 15, "the client to notice the server is gone")
        calls: list[Callable[[], object]] = [
            lambda: store.set("/workers/etl/s1", b"y"),
            lambda: store.get("/workers/etl/s1"),
            lambda: store.children("/workers"),
            lambda: store.children_data("/workers/etl"),
            lambda: store.delete("/workers/etl"),
        ]
        for call in calls:
            with pytest.raises(StateStoreUnavailableError) as caught:
                call()
            assert "zookeeper" in str(caught.value) and f"{ROOT}/workers" in str(caught.value)
            assert caught.value.path.startswith(f"{ROOT}/workers")
        zk_restartable.start()
        wait_until(lambda: zk.connected, 15, "the client to reconnect")
        assert store.get("/workers/etl/s1") == b"x"


def test_a_call_the_server_does_not_answer_fails_at_its_timeout(
    zk_restartable: ZooKeeperServer,
) -> None:
    with kazoo_client(zk_restartable.connect_string, session_timeout=15.0) as zk:
        store = ZooKeeperStateStore(zk, ROOT, timeout=0.3)
        store.set("/s1", b"x")
        pid = zk_restartable.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # frozen: the connection stays open, nothing answers
        try:
            wait_until(lambda: process_stopped(pid), 10, "every thread of the JVM to stop")
            with pytest.raises(StateStoreUnavailableError, match=r"no answer within 0\.3 s"):
                store.get("/s1")
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_until(lambda: _answers(store), 15, "the server to answer again")


def _answers(store: ZooKeeperStateStore) -> bool:
    with contextlib.suppress(StateStoreUnavailableError):
        return store.get("/s1") == b"x"
    return False


def test_a_closed_store_refuses_calls_and_leaves_the_client_open(
    store: ZooKeeperStateStore, client: Any
) -> None:
    store.close()
    with pytest.raises(StateStoreUnavailableError, match="closed"):
        store.get("/a")
    assert client.connected


def test_a_stopped_client_makes_the_store_unavailable(zk_hosts: str) -> None:
    with kazoo_client(zk_hosts) as zk:
        store = ZooKeeperStateStore(zk, ROOT)
        zk.stop()
        with pytest.raises(StateStoreUnavailableError, match="not connected"):
            store.set("/a", b"x")


# ---------------------------------------------------------------------------------------------
# Factory


def test_the_factory_builds_the_zookeeper_store_under_the_heartbeats_path(client: Any) -> None:
    conf = config_from_mapping({"zookeeper.session.timeout.secs": 8})
    paths = ClusterPaths("/stratus")
    store = create_state_store(state_store_settings(conf), client, paths)
    assert isinstance(store, ZooKeeperStateStore)
    assert store.root == paths.heartbeats
    store.set("/supervisors/s1", b"x")
    assert client.get(f"{paths.heartbeats}/supervisors/s1")[0] == b"x"


def test_a_store_call_is_bounded_by_the_shorter_of_the_session_and_the_fence_timeout() -> None:
    fenced_first = config_from_mapping({"zookeeper.session.timeout.secs": 8})
    session_first = config_from_mapping({"zookeeper.session.timeout.secs": 2})
    assert state_store_settings(fenced_first) == StateStoreSettings("zookeeper", 6.0)
    assert state_store_settings(session_first) == StateStoreSettings("zookeeper", 2.0)


def test_the_factory_refuses_a_store_it_does_not_know(client: Any) -> None:
    with pytest.raises(ConfigError, match="'redis' is not available; use one of: pacemaker, zoo"):
        create_state_store(StateStoreSettings("redis", 1.0), client, ClusterPaths("/s"))
