"""Fast beats on three real ``stratus pacemaker`` processes, one of them blackholed.

The clients wait up to a minute for a server (``pacemaker.client.timeout.secs`` 60 s): a call
that waited for every server would hang on the blackholed one far past the bound each call is
given here. What is proved: a beat counts once two of the three pacemakers stored it, whether
the silent one went silent under an open connection or before the writer connected; the
reader says how many pacemakers answered; a supervisor writes its own ``/beats/<id>`` only and
does not read the others'; an unreadable beat is skipped, never raised.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

import msgpack
import pytest

from stratus.pacemaker.auth import AuthMethod
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.pacemaker.errors import PacemakerRequestError
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.state.beats import BEATS_PATH, BeatBoard, beat_path
from tests.harness.pacemaker_process import PacemakerProcess, digest_pacemakers
from tests.harness.tcp_proxy import TcpProxy

T = TypeVar("T")
SECRETS = {"nimbus": "n" * 32, "s1": "a" * 32, "s2": "b" * 32}
ROLES = {"nimbus": "nimbus", "s1": "supervisor", "s2": "supervisor"}
CLIENT_TIMEOUT_SECS = 60.0  # how long a pool waits for one server's answer
CALL_TIMEOUT_SECS = 120.0  # the blocking facade's bound on one call
WITHIN_SECS = 30.0  # this test's bound on one call: far below the client timeout
LEASE_SECS = 120.0  # a beat's deadline is half of it, past WITHIN_SECS: what returns a call
# within the bound is its majority, never its deadline
Address = tuple[str, int]


@pytest.fixture(scope="module")
def pacemakers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[PacemakerProcess]]:
    with digest_pacemakers(tmp_path_factory.mktemp("pacemaker-beats"), SECRETS, ROLES) as servers:
        yield servers


@pytest.fixture(autouse=True)
def no_beats(pacemakers: list[PacemakerProcess]) -> None:
    """Each test starts with no pulse under /beats on any pacemaker."""
    nimbus = pool_of([p.address for p in pacemakers], "nimbus")
    try:
        nimbus.delete_path(BEATS_PATH)
    finally:
        nimbus.close()


def pool_of(servers: Sequence[Address], principal: str) -> BlockingPacemakerPool:
    settings = PacemakerClientSettings(
        servers=tuple(servers),
        auth_method=AuthMethod.DIGEST,
        principal=principal,
        secret=SECRETS[principal].encode(),
        timeout_secs=CLIENT_TIMEOUT_SECS,
    )
    return BlockingPacemakerPool(settings, call_timeout_secs=CALL_TIMEOUT_SECS)


def within(call: Callable[[], T]) -> T:
    """``call()``, failing the test if it has not returned after ``WITHIN_SECS``."""
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return executor.submit(call).result(timeout=WITHIN_SECS)
    except concurrent.futures.TimeoutError:
        raise AssertionError(f"the call did not return within {WITHIN_SECS:g} s") from None
    finally:
        executor.shutdown(wait=False, cancel_futures=True)


def through(proxy: TcpProxy, pacemakers: list[PacemakerProcess]) -> list[Address]:
    """The three pacemakers, the third reached through ``proxy``."""
    return [pacemakers[0].address, pacemakers[1].address, ("127.0.0.1", proxy.port)]


def test_a_beat_counts_at_a_majority_while_a_blackholed_pacemaker_never_answers(
    pacemakers: list[PacemakerProcess],
) -> None:
    with TcpProxy("127.0.0.1", pacemakers[2].port) as proxy:
        servers = through(proxy, pacemakers)
        writer, reader = pool_of(servers, "s1"), pool_of(servers, "nimbus")
        try:
            assert writer.connect() == 3 and reader.connect() == 3
            board, leader = BeatBoard(writer), BeatBoard(reader)
            boot = uuid.uuid4().hex
            proxy.blackhole()  # the third pacemaker's connections stay open, and answer nothing
            for seq in (1, 2):  # the second is not queued behind the first's silent server
                ack = within(functools.partial(board.beat, "s1", boot, seq, LEASE_SECS))
                assert (ack.acknowledged, ack.servers, ack.need, ack.counted) == (2, 3, 2, True)

            read = within(lambda: leader.read(deadline_secs=LEASE_SECS / 2))
            assert (read.answered, read.servers, read.from_majority) == (2, 3, True)
            beat = read.beats["s1"]
            assert (beat.boot_id, beat.seq, beat.lease_secs) == (boot, 2, LEASE_SECS)

            # Asked for all three, a read still comes back: the silent one, which still owes
            # the last read its answer, is not asked again.
            every = within(
                lambda: reader.get_all_pulses_quorum(
                    BEATS_PATH, need=3, deadline_secs=LEASE_SECS / 2
                )
            )
            assert (every.answered, every.servers, every.from_majority) == (2, 3, True)
            assert list(every.value) == [beat_path("s1")]
        finally:
            writer.close()
            reader.close()


def test_a_writer_connecting_while_a_pacemaker_is_blackholed_counts_its_beat(
    pacemakers: list[PacemakerProcess],
) -> None:
    with TcpProxy("127.0.0.1", pacemakers[2].port) as proxy:
        proxy.blackhole()  # the connection is accepted; the handshake is never answered
        writer = pool_of(through(proxy, pacemakers), "s1")
        try:
            ack = within(lambda: BeatBoard(writer).beat("s1", "boot-1", 7, LEASE_SECS))
            assert (ack.acknowledged, ack.servers, ack.counted) == (2, 3, True)
        finally:
            writer.close()


def test_a_supervisor_beats_only_for_itself_and_reads_no_other(
    pacemakers: list[PacemakerProcess],
) -> None:
    servers = [p.address for p in pacemakers]
    s1, nimbus = pool_of(servers, "s1"), pool_of(servers, "nimbus")
    try:
        board = BeatBoard(s1)
        assert within(lambda: board.beat("s1", "boot-1", 1, LEASE_SECS)).counted
        with pytest.raises(PacemakerRequestError) as refused:
            within(lambda: board.beat("s2", "boot-1", 1, LEASE_SECS))
        assert refused.value.code == "forbidden"
        with pytest.raises(PacemakerRequestError) as refused:  # the leader's read is not its
            within(lambda: board.read(deadline_secs=LEASE_SECS / 2))
        assert refused.value.code == "forbidden"

        read = within(lambda: BeatBoard(nimbus).read(deadline_secs=LEASE_SECS / 2))
        assert read.from_majority and set(read.beats) == {"s1"}  # nothing forged for s2
    finally:
        s1.close()
        nimbus.close()


def test_an_unreadable_beat_is_skipped_and_the_others_are_read(
    pacemakers: list[PacemakerProcess], caplog: pytest.LogCaptureFixture
) -> None:
    servers = [p.address for p in pacemakers]
    s1, nimbus = pool_of(servers, "s1"), pool_of(servers, "nimbus")
    try:
        assert within(lambda: BeatBoard(s1).beat("s1", "boot-1", 3, LEASE_SECS)).counted
        bad = {
            "/beats/torn": b"\x94\x01",  # an array cut short
            "/beats/v2": msgpack.packb([2, "boot-1", 1, 0.8]),
            "/beats/huge": msgpack.packb([1, "b" * 500, 1, 0.8]),
            "/beats/negative": msgpack.packb([1, "boot-1", -1, 0.8]),
            "/beats/s1/below": b"not a beat, and not read as one",
        }
        written = within(
            lambda: nimbus.send_pulses_quorum(
                [(path, data, 1.0) for path, data in bad.items()], need=3
            )
        )
        assert written.acknowledged == 3
        with caplog.at_level(logging.WARNING, logger="stratus.state.beats"):
            read = within(lambda: BeatBoard(nimbus).read(deadline_secs=LEASE_SECS / 2))
        assert set(read.beats) == {"s1"} and read.beats["s1"].seq == 3
        warned = {r.getMessage().split()[1] for r in caplog.records if "bad_beat" in r.getMessage()}
        assert warned == {f"supervisor={name}" for name in ("torn", "v2", "huge", "negative")}
    finally:
        s1.close()
        nimbus.close()
