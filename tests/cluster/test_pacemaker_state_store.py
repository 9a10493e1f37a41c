"""``cluster.state.store: pacemaker``: the blocking pool and the heartbeat board on real
``stratus pacemaker`` processes.

What is proved: the blocking facade serves several threads from one loop, bounds every call
and closes cleanly; a supervisor's whole period is one ``send_pulses`` message to each
pacemaker; the leader reads every heartbeat back through the board, from either server; a
supervisor authenticates as its own principal and writes and reads only its own subtree;
removals do what the ZooKeeper store does.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import re
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from pydantic import TypeAdapter

from stratus.api.records import SupervisorHeartbeat, WorkerHeartbeat, WorkerState
from stratus.config import config_from_mapping
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.connection import PacemakerConnection
from stratus.pacemaker.errors import PacemakerRequestError, PacemakerUnavailableError
from stratus.pacemaker.protocol import Op
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.settings import state_store_settings
from stratus.state.errors import BadRoundError, StateStoreUnavailableError
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.pacemaker_store import PacemakerStateStore, round_owner
from stratus.state.rounds import Round, decode_round, encode_round, located
from tests.harness.pacemaker_process import PacemakerProcess
from tests.harness.zkfixtures import wait_until

NIMBUS_SECRET = "n" * 32
S1_SECRET = "a" * 32
S2_SECRET = "b" * 32


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pacemaker-store-logs")


@pytest.fixture(scope="module")
def pair(logs: Path) -> Iterator[tuple[PacemakerProcess, PacemakerProcess]]:
    first = PacemakerProcess(logs, ["pacemaker.pulse.ttl.secs=600"]).start()
    second = PacemakerProcess(logs, ["pacemaker.pulse.ttl.secs=600"]).start()
    yield first, second
    first.stop()
    second.stop()


OPENED: list[HeartbeatBoard] = []


@pytest.fixture(autouse=True)
def _close_boards() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def client_settings(*servers: PacemakerProcess, **kw: Any) -> PacemakerClientSettings:
    return PacemakerClientSettings(
        servers=tuple(s.address for s in servers), **({"timeout_secs": 5.0} | kw)
    )


def board_on(*servers: PacemakerProcess, owner: str | None = None) -> HeartbeatBoard:
    pool = BlockingPacemakerPool(client_settings(*servers), call_timeout_secs=10.0)
    board = HeartbeatBoard(PacemakerStateStore(pool, owner=owner))
    OPENED.append(board)
    return board


def worker(pipeline: str, supervisor: str, time_: float = 1000.0) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        pipeline=pipeline, supervisor=supervisor, epoch=1, generation=0, digest="d0",
        state=WorkerState.RUNNING, time=time_,
    )  # fmt: skip


def supervisor(sid: str, time_: float = 1000.0) -> SupervisorHeartbeat:
    return SupervisorHeartbeat(id=sid, time=time_, slots=2)


def requests_counted(server: PacemakerProcess, op: str) -> float:
    url = f"http://127.0.0.1:{server.port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as page:
        text = page.read().decode()
    found = re.search(
        rf'stratus_pacemaker_requests_total\{{op="{op}",outcome="ok"\}} ([0-9.e+]+)', text
    )
    return float(found.group(1)) if found else 0.0


# ------------------------------------------------------------------------- the layout


def test_store_paths_are_kept_in_their_supervisors_round() -> None:
    assert located("/supervisors/s1") == ("s1", None)
    assert located("/workers/etl/s1") == ("s1", "etl")
    assert located("/workers/etl") is None
    assert round_owner("/supervisors/s1") == "s1"
    assert round_owner("/supervisors/s1/workers/etl") is None  # not a round
    assert round_owner("/elsewhere/x") is None
    round_ = Round(b'{"id":"s1"}', {"etl": b'{"a":1}', "web": b'{"b":2}'})
    packed = decode_round("s1", encode_round(round_))
    assert packed.workers == b'[{"a":1},{"b":2}]'  # one JSON array: one parse per round
    assert packed.unpacked() == round_


@pytest.mark.parametrize(
    ("blob", "reason"),
    [
        (b"\xc1", "not msgpack"),
        (msgpack.packb([2, None, b"[]", msgpack.packb([])]), "format version 1"),
        (msgpack.packb([1, "text", b"[]", msgpack.packb([])]), "format version 1"),
        (msgpack.packb([1, None, b"[{}]", msgpack.packb([["etl", 1, 9]])]), "index holds"),
        (msgpack.packb([1, None, b"[{}]", msgpack.packb([["a/b", 1, 3]])]), "index holds"),
        (msgpack.packb([1, None, b"[{}]", msgpack.packb([["..", 1, 3]])]), "index holds"),
        (msgpack.packb([1, None, b"[{}]", msgpack.packb({"etl": 1})]), "not an array"),
    ],
)
def test_a_value_that_is_not_a_round_is_refused_naming_its_supervisor(
    blob: bytes, reason: str
) -> None:
    with pytest.raises(BadRoundError, match=f"'s1'.*{reason}"):
        decode_round("s1", blob).unpacked()


# ------------------------------------------------------------------------- the blocking pool


def test_the_blocking_pool_serves_several_threads_and_closes(pair) -> None:
    first, _ = pair
    pool = BlockingPacemakerPool(client_settings(first), call_timeout_secs=10.0)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for k in range(20):
                pool.send_pulses([(f"/threads/t{n}/p{k}", b"x", 1.0)])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(pool.get_all_pulses_for_path("/threads").value) == 80
    pool.delete_path("/threads")

    assert pool.is_running()
    pool.close()
    assert not pool.is_running()
    with pytest.raises(PacemakerUnavailableError, match="closed"):
        pool.get_pulse("/threads/t0/p0")


def test_a_call_to_a_server_that_never_answers_ends_at_the_call_timeout() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        port = silent.getsockname()[1]
        settings = PacemakerClientSettings(servers=(("127.0.0.1", port),), timeout_secs=300.0)
        pool = BlockingPacemakerPool(settings, call_timeout_secs=0.5)
        try:
            with pytest.raises(PacemakerUnavailableError, match=r"within 0.5 s"):
                pool.get_pulse("/x")
        finally:
            pool.close()


# ------------------------------------------------------------------------- the board


def test_a_supervisor_period_is_one_send_pulses_message_to_each_pacemaker(pair) -> None:
    first, second = pair
    board = board_on(first, second, owner="s1")
    before = [(requests_counted(s, "send_pulses"), requests_counted(s, "send_pulse")) for s in pair]

    board.put_round(supervisor("s1"), [worker(f"p{n}", "s1") for n in range(5)])

    after = [(requests_counted(s, "send_pulses"), requests_counted(s, "send_pulse")) for s in pair]
    for (batches, singles), (batches_after, singles_after) in zip(before, after, strict=True):
        assert (batches_after - batches, singles_after - singles) == (1, 0)
    board.remove_supervisor("s1")
    for n in range(5):
        board.remove_worker(f"p{n}", "s1")


def test_the_leader_reads_every_heartbeat_from_either_pacemaker(pair, logs) -> None:
    first, second = pair
    s1, s2 = board_on(first, second, owner="s1"), board_on(first, second, owner="s2")
    s1.put_round(supervisor("s1", 5.0), [worker("etl", "s1", 5.0), worker("web", "s1", 5.0)])
    s2.put_round(supervisor("s2", 6.0), [worker("etl", "s2", 6.0)])

    for servers in ((first, second), (first,), (second,)):
        read = board_on(*servers).read()
        assert {p: sorted(b) for p, b in read.workers.items()} == {
            "etl": ["s1", "s2"],
            "web": ["s1"],
        }
        assert read.supervisors["s1"].time == 5.0 and read.supervisors["s2"].time == 6.0
        assert read.workers["etl"]["s2"] == worker("etl", "s2", 6.0)
    assert set(s1.workers()) == {"etl", "web"}  # a supervisor's store sees its own only
    assert set(s1.supervisors()) == {"s1"}

    leader = board_on(first, second)
    leader.remove_pipeline("etl")
    assert set(leader.workers()) == {"web"}
    leader.remove_worker("web", "s1")
    leader.remove_supervisor("s1")
    leader.remove_supervisor("s2")
    assert leader.read().workers == {} and leader.read().supervisors == {}


def test_the_leader_reads_one_pulse_per_supervisor(pair) -> None:
    """Each supervisor's round is one pulse: the leader's read of 3 supervisors of 4
    workers each gets 3 pulses from a pacemaker, not 15, and every heartbeat from them."""
    first, _ = pair
    sids = ["r1", "r2", "r3"]
    for sid in sids:
        board_on(first, owner=sid).put_round(
            supervisor(sid), [worker(f"p{k}", sid) for k in range(4)]
        )
    pool = BlockingPacemakerPool(client_settings(first), call_timeout_secs=10.0)
    try:
        pulses = pool.get_all_pulses_for_path("/supervisors").value
    finally:
        pool.close()
    assert sorted(p for p in pulses if round_owner(p) in sids) == [
        f"/supervisors/{s}" for s in sids
    ]
    assert not any(p.startswith("/supervisors/r1/") for p in pulses)
    read = board_on(first).read()
    assert all(sorted(read.workers[f"p{k}"]) == sids for k in range(4))
    assert {sid: read.supervisors[sid].id for sid in sids} == {sid: sid for sid in sids}
    leader = board_on(first)
    for sid in sids:
        leader.remove_supervisor(sid)
        for k in range(4):
            leader.remove_worker(f"p{k}", sid)


def test_the_failover_lane_reads_one_supervisors_workers_from_its_round_alone(pair) -> None:
    """``workers_on`` gets one supervisor's worker heartbeats in one ``get_pulse`` per
    pacemaker, never a read of every round; a supervisor without a round has none."""
    first, second = pair
    board_on(first, second, owner="q1").put_round(
        supervisor("q1"), [worker("etl", "q1", 7.0), worker("web", "q1")]
    )
    board_on(first, second, owner="q2").put_round(supervisor("q2"), [worker("etl", "q2")])
    leader = board_on(first, second)
    before = [(requests_counted(s, "get_pulse"), requests_counted(s, "get_all_pulses_for_path"))
              for s in pair]  # fmt: skip

    found = leader.workers_on("q1")

    after = [(requests_counted(s, "get_pulse"), requests_counted(s, "get_all_pulses_for_path"))
             for s in pair]  # fmt: skip
    assert found == {"etl": worker("etl", "q1", 7.0), "web": worker("web", "q1")}
    for (singles, wholes), (singles_after, wholes_after) in zip(before, after, strict=True):
        assert (singles_after - singles, wholes_after - wholes) == (1, 0)
    assert leader.workers_on("q3") == {}
    leader.remove_supervisor("q1")
    assert leader.workers_on("q1") == {"etl": worker("etl", "q1", 7.0), "web": worker("web", "q1")}
    leader.remove_pipeline("etl")
    leader.remove_worker("web", "q1")
    leader.remove_supervisor("q2")
    assert leader.workers_on("q1") == {} and leader.workers_on("q2") == {}


def test_the_leader_decodes_the_heartbeats_without_running_the_garbage_collector(pair) -> None:
    """1,000 worker heartbeats decoded: the same records decoded with the collector on run
    it several times (so this test sees collections when there are some); the leader's
    read runs at most one (outside the decoding), and leaves the collector on."""
    first, _ = pair
    sids = [f"gc{n:02d}" for n in range(20)]
    for sid in sids:
        board_on(first, owner=sid).put_round(
            supervisor(sid), [worker(f"g{k}", sid) for k in range(50)]
        )
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    leader = board_on(first)
    beats = b"[" + b",".join(worker(f"g{k}", s).encode() for s in sids for k in range(50)) + b"]"
    gc.callbacks.append(count)
    try:
        TypeAdapter(list[WorkerHeartbeat]).validate_json(beats)  # the collector on
        unpaused = len(collections)
        collections.clear()
        read = leader.read()
    finally:
        gc.callbacks.remove(count)
    assert len(collections) <= 1 < unpaused and gc.isenabled()
    assert sum(len(read.workers[f"g{k}"]) for k in range(50)) == 1000
    for sid in sids:
        leader.remove_supervisor(sid)
        for k in range(50):
            leader.remove_worker(f"g{k}", sid)


def test_a_round_replaces_the_last_one_and_a_single_write_keeps_the_others(pair) -> None:
    first, second = pair
    s1 = board_on(first, second, owner="s1")
    s1.put_round(supervisor("s1", 1.0), [worker("etl", "s1", 1.0), worker("web", "s1", 1.0)])
    s1.put_round(supervisor("s1", 2.0), [worker("etl", "s1", 2.0)])  # web no longer held
    leader = board_on(first, second)
    assert {p: sorted(b) for p, b in leader.workers().items()} == {"etl": ["s1"]}

    s1.put_worker(worker("api", "s1", 3.0))  # one heartbeat: read, changed, written back
    read = leader.read()
    assert sorted(read.workers) == ["api", "etl"]
    assert read.workers["etl"]["s1"].time == 2.0 and read.supervisors["s1"].time == 2.0
    leader.remove_worker("etl", "s1")
    assert sorted(leader.workers()) == ["api"] and "s1" in leader.supervisors()
    leader.remove_worker("api", "s1")
    leader.remove_supervisor("s1")  # the round is empty: its pulse is deleted
    pool = BlockingPacemakerPool(client_settings(first, second), call_timeout_secs=10.0)
    try:
        assert pool.get_pulse("/supervisors/s1").value is None
    finally:
        pool.close()


def test_a_round_that_names_another_supervisor_or_is_no_round_is_skipped(
    pair, caplog: pytest.LogCaptureFixture
) -> None:
    """A supervisor may write only its own round's pulse; a heartbeat inside it that names
    another supervisor is not read as that supervisor's, and a pulse that is not a round is
    skipped, with a warning each, while every other heartbeat reads as usual."""
    first, _ = pair
    forged = worker("etl", "victim").encode()
    own = worker("web", "liar").encode()
    pool = BlockingPacemakerPool(client_settings(first), call_timeout_secs=10.0)
    try:
        pool.send_pulses(
            [
                ("/supervisors/liar", encode_round(Round(None, {"etl": forged, "web": own})), 1.0),
                ("/supervisors/torn", b"\x93not a round", 1.0),
            ]
        )
        board_on(first, owner="honest").put_round(supervisor("honest"), [worker("etl", "honest")])
        with caplog.at_level(logging.WARNING, logger="stratus.state"):
            read = board_on(first).read()
        assert read.workers["etl"] == {"honest": worker("etl", "honest")}  # no victim
        assert read.workers["web"] == {"liar": worker("web", "liar")}
        assert "torn" not in read.supervisors
        assert "event=bad_heartbeat_round supervisor=torn" in caplog.text
        assert "names etl on victim" in caplog.text
    finally:
        for sid in ("liar", "torn", "honest"):
            pool.delete_path(f"/supervisors/{sid}")
        pool.close()


def test_the_leader_reads_every_heartbeat_above_the_maximum_frame(logs: Path) -> None:
    """With 8 KiB frames, 120 supervisors of 5 workers each are about 60 kB of heartbeats:
    one answer could not hold them; the leader's read gets every one, page by page."""
    small = ["pacemaker.pulse.ttl.secs=600", "pacemaker.max.frame.bytes=8192"]
    server = PacemakerProcess(logs, small).start()
    try:
        settings = client_settings(server, max_frame_bytes=8192)
        writer = HeartbeatBoard(
            PacemakerStateStore(BlockingPacemakerPool(settings, call_timeout_secs=10.0))
        )
        OPENED.append(writer)
        sids = [f"s{n:03d}" for n in range(120)]
        for sid in sids:
            writer.put_round(supervisor(sid), [worker(f"p{k}", sid) for k in range(5)])

        async def whole_tree() -> None:  # the unpaged read of the same tree: one answer
            connection = PacemakerConnection(*server.address, settings)
            await connection.open()
            try:
                await connection.request(Op.GET_ALL_PULSES_FOR_PATH, path="/supervisors")
            finally:
                await connection.close()

        with pytest.raises(PacemakerRequestError) as refused:
            asyncio.run(whole_tree())
        assert refused.value.code == "too_large"

        read = writer.read()
        assert sorted(read.supervisors) == sids
        assert sorted(read.workers) == [f"p{k}" for k in range(5)]
        assert all(sorted(read.workers[f"p{k}"]) == sids for k in range(5))
    finally:
        server.stop()


def test_a_supervisor_authenticates_as_its_own_principal(logs: Path) -> None:
    secrets = logs / "store.secrets"
    secrets.write_text(
        f"nimbus nimbus {NIMBUS_SECRET}\ns1 supervisor {S1_SECRET}\ns2 supervisor {S2_SECRET}\n"
    )
    secrets.chmod(0o600)
    digest = ["pacemaker.auth.method=digest", f"pacemaker.auth.file={secrets}"]
    server = PacemakerProcess(logs, digest).start()
    try:
        overrides = {
            "cluster.state.store": "pacemaker",
            "pacemaker.servers": [f"127.0.0.1:{server.port}"],
            "pacemaker.auth.method": "digest",
            "pacemaker.auth.file": str(secrets),
        }
        conf = config_from_mapping(overrides)
        as_s1 = state_store_settings(conf, principal="s1").pacemaker
        as_nimbus = state_store_settings(
            config_from_mapping({**overrides, "pacemaker.auth.principal": "nimbus"})
        ).pacemaker
        assert as_s1 is not None and as_s1.principal == "s1"
        assert as_nimbus is not None and as_nimbus.principal == "nimbus"

        s1 = HeartbeatBoard(
            PacemakerStateStore(BlockingPacemakerPool(as_s1, call_timeout_secs=10), owner="s1")
        )
        OPENED.append(s1)
        s1.put_round(supervisor("s1"), [worker("etl", "s1")])
        with pytest.raises(PacemakerRequestError) as refused:
            s1.put_round(supervisor("s2"), [])  # another supervisor's heartbeat
        assert refused.value.code == "forbidden"

        leader = HeartbeatBoard(
            PacemakerStateStore(BlockingPacemakerPool(as_nimbus, call_timeout_secs=10))
        )
        OPENED.append(leader)
        read = leader.read()
        assert set(read.supervisors) == {"s1"} and set(read.workers) == {"etl"}
    finally:
        server.stop()


def test_every_pacemaker_down_is_an_unavailable_store(logs: Path) -> None:
    server = PacemakerProcess(logs, ["pacemaker.pulse.ttl.secs=600"]).start()
    board = board_on(server)
    board.put_round(supervisor("s1"), [])
    server.kill()

    with pytest.raises(StateStoreUnavailableError, match="pacemaker"):
        board.read()
    with pytest.raises(StateStoreUnavailableError, match="pacemaker"):
        board.put_round(supervisor("s1"), [])


def test_a_pacemaker_that_hangs_holds_up_no_call_that_another_answers(pair) -> None:
    first, _ = pair
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed now: refused at once
    settings = PacemakerClientSettings(
        servers=(first.address, ("127.0.0.1", port)), timeout_secs=60.0
    )
    pool = BlockingPacemakerPool(settings, call_timeout_secs=5.0)
    accepted: list[socket.socket] = []
    try:
        assert pool.send_pulses([("/hung/p", b"x", 1.0)]) == 1
        with socket.create_server(("127.0.0.1", port)) as hung:  # accepts, never answers
            hung.settimeout(0.05)

            def reconnecting() -> bool:
                # every call succeeds, the one that starts the attempt on the hung server too
                assert pool.send_pulses([("/hung/p", b"x", 1.0)]) == 1
                with contextlib.suppress(TimeoutError):
                    accepted.append(hung.accept()[0])
                return bool(accepted)

            wait_until(reconnecting, 30, "an attempt to reconnect to the hung server")
            for _ in range(3):
                assert pool.send_pulses([("/hung/p", b"x", 1.0)]) == 1
        pool.delete_path("/hung")
    finally:
        pool.close()
        for connection in accepted:
            connection.close()


def test_a_pacemaker_whose_pulses_die_before_the_leader_judges_them_is_reported(
    logs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    short = PacemakerProcess(logs, ["pacemaker.pulse.ttl.secs=5"]).start()
    try:
        for least, reported in ((30.0, True), (4.0, False)):
            caplog.clear()
            settings = client_settings(short, min_pulse_ttl_secs=least)
            pool = BlockingPacemakerPool(settings, call_timeout_secs=10.0)
            try:
                with caplog.at_level(logging.ERROR, logger="stratus.pacemaker.client"):
                    pool.get_pulse("/anything")
            finally:
                pool.close()
            found = [r.getMessage() for r in caplog.records if "ttl_too_short" in r.getMessage()]
            assert bool(found) is reported
            if reported:
                assert f"server=127.0.0.1:{short.port} pulse_ttl_secs=5" in found[0]
    finally:
        short.stop()
