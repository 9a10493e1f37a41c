"""The pacemaker, as real ``stratus pacemaker`` processes on real sockets."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import urllib.request
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import pytest

from stratus.pacemaker.auth import AuthMethod
from stratus.pacemaker.client import PacemakerPool
from stratus.pacemaker.connection import PacemakerConnection
from stratus.pacemaker.errors import PacemakerRequestError, PacemakerUnavailableError
from stratus.pacemaker.protocol import Op
from stratus.pacemaker.settings import PacemakerClientSettings
from stratus.security.tls import TlsSettings
from tests.harness.pacemaker_process import PacemakerProcess
from tests.harness.tls_certs import TestCa

T = TypeVar("T")
NIMBUS_SECRET = "n" * 32
S1_SECRET = "a" * 32
S2_SECRET = "b" * 32
WAIT_SECS = 30.0


def run(coro: Awaitable[T]) -> T:
    return asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pacemaker-logs")


@pytest.fixture(scope="module")
def plain(logs: Path) -> Iterator[PacemakerProcess]:
    server = PacemakerProcess(logs, ["pacemaker.pulse.ttl.secs=600"]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tiny(logs: Path) -> Iterator[PacemakerProcess]:
    """Four entries at most, pulses live one second, two connections, idle one second."""
    server = PacemakerProcess(
        logs,
        [
            "pacemaker.max.entries=4",
            "pacemaker.pulse.ttl.secs=1",
            "pacemaker.max.connections=2",
            "pacemaker.idle.timeout.secs=1",
        ],
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def secrets_file(logs: Path) -> Path:
    path = logs / "pacemaker.secrets"
    path.write_text(
        f"# principal role secret\nnimbus nimbus {NIMBUS_SECRET}\n"
        f"s1 supervisor {S1_SECRET}\ns2 supervisor {S2_SECRET}\n"
    )
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def guarded(logs: Path, secrets_file: Path) -> Iterator[PacemakerProcess]:
    server = PacemakerProcess(
        logs, ["pacemaker.auth.method=digest", f"pacemaker.auth.file={secrets_file}"]
    ).start()
    yield server
    server.stop()


def settings(*servers: PacemakerProcess, **kw: Any) -> PacemakerClientSettings:
    return PacemakerClientSettings(
        servers=tuple(s.address for s in servers), **({"timeout_secs": 5.0} | kw)
    )


def digest(principal: str, secret: str) -> dict[str, Any]:
    return {"auth_method": AuthMethod.DIGEST, "principal": principal, "secret": secret.encode()}


async def connected(server: PacemakerProcess, **kw: Any) -> PacemakerConnection:
    connection = PacemakerConnection(*server.address, settings(server, **kw))
    await connection.open()
    return connection


# ------------------------------------------------------------------------- operations


def test_every_operation_answers_with_the_request_id(plain: PacemakerProcess) -> None:
    async def scenario() -> None:
        async with PacemakerPool(settings(plain)) as pool:
            await pool.create_path("/ops/empty")
            assert (await pool.exists("/ops/empty")).value is True
            assert (await pool.exists("/ops/none")).value is False
            await pool.send_pulse("/ops/p/w1", b"one", 10.0)
            await pool.send_pulse("/ops/p/w2", b"two", 11.0)
            pulse = (await pool.get_pulse("/ops/p/w1")).value
            assert pulse is not None and (pulse.data, pulse.time) == (b"one", 10.0)
            assert (await pool.get_all_nodes_for_path("/ops")).value == ["empty", "p"]
            pulses = (await pool.get_all_pulses_for_path("/ops/p")).value
            assert {k: v.data for k, v in pulses.items()} == {
                "/ops/p/w1": b"one",
                "/ops/p/w2": b"two",
            }
            await pool.delete_pulse_id("/ops/p/w1")
            assert (await pool.get_pulse("/ops/p/w1")).value is None
            assert (await pool.exists("/ops/p/w2")).value is True
            await pool.delete_path("/ops")
            assert (await pool.exists("/ops/p/w2")).value is False
            assert (await pool.exists("/ops")).value is False

    run(scenario())


def test_a_batch_of_pulses_is_one_message(plain: PacemakerProcess) -> None:
    async def scenario() -> None:
        async with PacemakerPool(settings(plain)) as pool:
            batch = [(f"/batch/s1/w{n}", f"beat-{n}".encode(), 5.0) for n in range(20)]
            assert await pool.send_pulses(batch) == 1
            pulses = (await pool.get_all_pulses_for_path("/batch/s1")).value
            assert {k: v.data for k, v in pulses.items()} == {p: d for p, d, _ in batch}
            with pytest.raises(PacemakerRequestError) as refused:
                await pool.send_pulses([("/batch/ok", b"x", 1.0), ("no-slash", b"x", 1.0)])
            assert refused.value.code == "bad_path"
            assert (await pool.exists("/batch/ok")).value is False  # all or nothing
            await pool.delete_path("/batch")

    run(scenario())


def test_pipelined_answers_carry_their_own_ids(plain: PacemakerProcess) -> None:
    with socket.create_connection(plain.address, timeout=10) as sock:
        frames = b"".join(
            _frame({"id": 1000 + n, "op": "exists", "path": f"/nothing/{n}"}) for n in range(50)
        )
        sock.sendall(frames)
        answers = [_read_frame(sock) for _ in range(50)]
    assert [a["id"] for a in answers] == [1000 + n for n in range(50)]
    assert all(a["ok"] and a["exists"] is False for a in answers)


def test_paths_with_regex_metacharacters_are_literal(plain: PacemakerProcess) -> None:
    async def scenario() -> None:
        async with PacemakerPool(settings(plain)) as pool:
            await pool.send_pulse("/re/a.*", b"star", 1.0)
            await pool.send_pulse("/re/abc", b"abc", 1.0)
            await pool.send_pulse("/re/[x]+", b"brackets", 1.0)
            assert (await pool.get_pulse("/re/a.*")).value.data == b"star"  # type: ignore[union-attr]
            assert (await pool.exists("/re/a.")).value is False
            assert (await pool.exists("/re/.*")).value is False
            await pool.delete_path("/re/a.*")
            assert (await pool.exists("/re/abc")).value is True
            pulses = (await pool.get_all_pulses_for_path("/re")).value
            assert sorted(pulses) == ["/re/[x]+", "/re/abc"]
            await pool.delete_path("/re")

    run(scenario())


def test_subtree_listing_and_deletion_leave_siblings(plain: PacemakerProcess) -> None:
    async def scenario() -> None:
        async with PacemakerPool(settings(plain)) as pool:
            for sup in ("s1", "s2"):
                for worker in ("w1", "w2"):
                    await pool.send_pulse(f"/tree/{sup}/{worker}", sup.encode(), 1.0)
            await pool.send_pulse("/tree-sibling/s1", b"x", 1.0)
            s1 = (await pool.get_all_pulses_for_path("/tree/s1")).value
            assert sorted(s1) == ["/tree/s1/w1", "/tree/s1/w2"]
            await pool.delete_path("/tree/s1")
            everything = (await pool.get_all_pulses_for_path("/tree")).value
            assert sorted(everything) == ["/tree/s2/w1", "/tree/s2/w2"]
            assert (await pool.exists("/tree-sibling/s1")).value is True
            await pool.delete_path("/tree")
            await pool.delete_path("/tree-sibling")

    run(scenario())


def test_a_started_server_reports_warming_up(plain: PacemakerProcess) -> None:
    async def scenario() -> bool:
        async with PacemakerPool(settings(plain)) as pool:
            return (await pool.get_all_pulses_for_path("/")).warming

    assert run(scenario()) is True  # its TTL is 600 s


def test_metrics_on_the_same_port(plain: PacemakerProcess) -> None:
    run(_send(plain, "/metrics-probe", b"x"))
    with urllib.request.urlopen(f"http://127.0.0.1:{plain.port}/metrics", timeout=10) as page:
        text = page.read().decode()
    assert 'stratus_pacemaker_requests_total{op="send_pulse",outcome="ok"}' in text
    assert "stratus_pacemaker_warming 1.0" in text


def test_an_answer_above_the_maximum_frame_is_refused_as_too_large(plain: PacemakerProcess) -> None:
    async def scenario() -> None:
        async with PacemakerPool(settings(plain)) as pool:
            for n in range(6):  # 6 x 200 kB: each fits a frame, all together do not
                await pool.send_pulse(f"/big/w{n}", bytes(200_000), 1.0)
            connection = await connected(plain)
            try:  # asked unpaged, the whole subtree is one answer: refused
                with pytest.raises(PacemakerRequestError) as refused:
                    await connection.request(Op.GET_ALL_PULSES_FOR_PATH, path="/big")
                assert refused.value.code == "too_large"
            finally:
                await connection.close()
            assert len((await pool.get_all_pulses_for_path("/big/w1")).value) == 1
            await pool.delete_path("/big")

    run(scenario())


def test_a_subtree_above_the_maximum_frame_is_read_in_pages(plain: PacemakerProcess) -> None:
    async def scenario() -> None:
        async with PacemakerPool(settings(plain)) as pool:
            for n in range(6):  # 6 x 200 kB: about two per 1 MiB frame
                await pool.send_pulse(f"/paged/w{n}", bytes([n]) * 200_000, float(n))
            connection = await connected(plain)
            try:
                first = await connection.request(
                    Op.GET_ALL_PULSES_FOR_PATH, path="/paged", after=""
                )
            finally:
                await connection.close()
            assert 0 < len(first["pulses"]) < 6
            assert first["next"] == max(first["pulses"])
            read = await pool.get_all_pulses_for_path("/paged")
            assert sorted(read.value) == [f"/paged/w{n}" for n in range(6)]
            assert all(read.value[f"/paged/w{n}"].data[:1] == bytes([n]) for n in range(6))
            await pool.delete_path("/paged")

    run(scenario())


# ------------------------------------------------------------------------- bounds, TTL


def test_pulses_are_evicted_after_their_ttl(tiny: PacemakerProcess) -> None:
    async def scenario() -> None:
        async with PacemakerPool(settings(tiny)) as pool:
            await pool.send_pulse("/ttl/w", b"x", 1.0)
            assert (await pool.exists("/ttl/w")).value is True
            deadline = time.monotonic() + WAIT_SECS
            while (await pool.exists("/ttl")).value:
                assert time.monotonic() < deadline, "the pulse was never evicted"
                await asyncio.sleep(0.2)

    run(scenario())


def test_a_full_store_refuses_writes_with_full(tiny: PacemakerProcess) -> None:
    async def scenario() -> None:
        async with PacemakerPool(settings(tiny)) as pool:
            await pool.create_path("/f/a/b/c")  # four entries, kept (no TTL on created paths)
            with pytest.raises(PacemakerRequestError) as refused:
                await pool.send_pulse("/g", b"x", 1.0)
            assert refused.value.code == "full"
            assert "pacemaker.max.entries" in str(refused.value)
            await pool.delete_path("/f")
            await pool.send_pulse("/g", b"x", 1.0)  # room again

    run(scenario())


def test_connections_are_bounded_and_idle_ones_closed(tiny: PacemakerProcess) -> None:
    first = socket.create_connection(tiny.address, timeout=WAIT_SECS)
    second = socket.create_connection(tiny.address, timeout=WAIT_SECS)
    try:
        for sock in (first, second):  # both served
            sock.sendall(_frame({"id": 1, "op": "exists", "path": "/"}))
            assert _read_frame(sock)["exists"] is True
        with socket.create_connection(tiny.address, timeout=WAIT_SECS) as third:
            assert third.recv(1) == b""  # closed at once: two are open
        assert first.recv(1) == b""  # silent past the idle timeout: closed by the server
        assert second.recv(1) == b""
    finally:
        first.close()
        second.close()


# ------------------------------------------------------------------------- bad frames


def test_bad_frames_close_their_connection_and_others_are_served(plain: PacemakerProcess) -> None:
    async def scenario() -> None:
        healthy = await connected(plain)
        try:
            bad_inputs = [
                struct.pack(">I", 1 << 30),  # oversized
                struct.pack(">I", 3) + b"\xc1\xc1\xc1",  # not msgpack
                struct.pack(">I", 1) + b"\x01",  # msgpack, not a map
            ]
            for bad in bad_inputs:
                with socket.create_connection(plain.address, timeout=10) as sock:
                    sock.sendall(bad)
                    answer = _read_frame(sock)
                    assert answer["ok"] is False and answer["error"] == "malformed"
                    assert sock.recv(1) == b""  # closed
            with socket.create_connection(plain.address, timeout=10) as sock:
                sock.sendall(struct.pack(">I", 100) + b"\x81")  # truncated, then gone
            with socket.create_connection(plain.address, timeout=10) as sock:
                sock.sendall(_frame({"id": 5, "op": "no_such_op"}))
                answer = _read_frame(sock)
                assert (answer["id"], answer["error"]) == (5, "malformed")
                sock.sendall(_frame({"id": 6, "op": "exists", "path": "relative"}))
                answer = _read_frame(sock)
                assert (answer["id"], answer["error"]) == (6, "bad_path")
            assert (await healthy.request(Op.EXISTS, path="/"))["exists"] is True
        finally:
            await healthy.close()

    run(scenario())


# ------------------------------------------------------------------------- digest auth


def test_unauthenticated_reads_and_writes_are_refused(guarded: PacemakerProcess) -> None:
    async def scenario() -> None:
        connection = await connected(guarded)  # auth method none: no authenticate
        try:
            for op, fields in (
                (Op.SEND_PULSE, {"path": "/supervisors/s1/x", "data": b"x", "time": 1.0}),
                (Op.GET_ALL_PULSES_FOR_PATH, {"path": "/"}),
                (Op.EXISTS, {"path": "/"}),
            ):
                with pytest.raises(PacemakerRequestError) as refused:
                    await connection.request(op, **fields)
                assert refused.value.code == "not_authenticated"
        finally:
            await connection.close()

    run(scenario())


def test_a_wrong_secret_is_refused_and_never_sent(guarded: PacemakerProcess) -> None:
    async def scenario() -> None:
        with pytest.raises(PacemakerRequestError) as refused:
            await connected(guarded, **digest("s1", "w" * 32))
        assert refused.value.code == "auth_failed"
        with pytest.raises(PacemakerRequestError):
            await connected(guarded, **digest("nobody", S1_SECRET))

    run(scenario())


def test_a_supervisor_writes_only_its_own_subtree(guarded: PacemakerProcess) -> None:
    async def scenario() -> None:
        s1 = await connected(guarded, **digest("s1", S1_SECRET))
        nimbus = await connected(guarded, **digest("nimbus", NIMBUS_SECRET))
        try:
            await s1.request(Op.SEND_PULSE, path="/supervisors/s1/w", data=b"ok", time=1.0)
            for path in ("/supervisors/s2/w", "/supervisors/s1x", "/elsewhere"):
                with pytest.raises(PacemakerRequestError) as refused:
                    await s1.request(Op.SEND_PULSE, path=path, data=b"forged", time=2.0)
                assert refused.value.code == "forbidden"
            with pytest.raises(PacemakerRequestError) as refused:  # one forged pulse: none stored
                await s1.request(
                    Op.SEND_PULSES,
                    pulses=[["/supervisors/s1/b", b"ok", 1.0], ["/supervisors/s2/b", b"no", 1.0]],
                )
            assert refused.value.code == "forbidden"
            with pytest.raises(PacemakerRequestError) as refused:
                await s1.request(Op.DELETE_PATH, path="/supervisors")
            assert refused.value.code == "forbidden"
            with pytest.raises(PacemakerRequestError) as refused:
                await s1.request(Op.GET_ALL_PULSES_FOR_PATH, path="/supervisors")
            assert refused.value.code == "forbidden"
            everything = await nimbus.request(Op.GET_ALL_PULSES_FOR_PATH, path="/supervisors")
            assert list(everything["pulses"]) == ["/supervisors/s1/w"]
        finally:
            await s1.close()
            await nimbus.close()

    run(scenario())


def test_tls_with_digest_and_a_plaintext_client_gets_nothing(
    logs: Path, secrets_file: Path, tmp_path: Path
) -> None:
    ca = TestCa(tmp_path)
    issued = ca.issue("pacemaker", ip="127.0.0.1")
    server = PacemakerProcess(
        logs,
        [
            "pacemaker.auth.method=digest",
            f"pacemaker.auth.file={secrets_file}",
            f"pacemaker.tls.cert={issued.cert}",
            f"pacemaker.tls.key={issued.key}",
        ],
    ).start()
    try:
        tls = TlsSettings(ca=str(ca.cert))

        async def scenario() -> None:
            async with PacemakerPool(settings(server, tls=tls, **digest("s1", S1_SECRET))) as pool:
                await pool.send_pulse("/supervisors/s1/w", b"over tls", 1.0)
                read = await pool.get_pulse("/supervisors/s1/w")
                assert read.value is not None and read.value.data == b"over tls"
            with pytest.raises(PacemakerUnavailableError):  # plaintext: no answer, closed
                await connected(server, timeout_secs=3.0)

        run(scenario())
    finally:
        server.stop()


# ------------------------------------------------------------------------- HA


def test_two_servers_one_killed_the_pool_keeps_working(logs: Path) -> None:
    first = PacemakerProcess(logs, ["pacemaker.pulse.ttl.secs=600"]).start()
    second = PacemakerProcess(logs, ["pacemaker.pulse.ttl.secs=600"]).start()
    try:

        async def scenario() -> None:
            async with PacemakerPool(settings(first, second)) as pool:
                assert await pool.send_pulse("/ha/w", b"old", 1.0) == 2
                first.kill()
                assert await pool.send_pulse("/ha/w", b"new", 2.0) == 1
                read = await pool.get_pulse("/ha/w")
                assert read.value is not None and read.value.data == b"new"
                assert read.answered == 1
                second.kill()
                with pytest.raises(PacemakerUnavailableError):
                    await pool.get_pulse("/ha/w")
                first.start()  # same port, empty
                deadline = time.monotonic() + WAIT_SECS
                while True:
                    try:
                        read = await pool.get_pulse("/ha/w")
                        break
                    except PacemakerUnavailableError:
                        assert time.monotonic() < deadline
                        await asyncio.sleep(0.2)
                assert read.value is None and read.warming is True  # empty, and says so

        run(scenario())
    finally:
        first.stop()
        second.stop()


def test_newest_pulse_wins_across_servers(logs: Path) -> None:
    first = PacemakerProcess(logs).start()
    second = PacemakerProcess(logs).start()
    try:

        async def scenario() -> None:
            async with PacemakerPool(settings(first)) as only_first:
                await only_first.send_pulse("/m/w", b"newer", 20.0)
            async with PacemakerPool(settings(second)) as only_second:
                await only_second.send_pulse("/m/w", b"older", 10.0)
                await only_second.send_pulse("/m/v", b"only-here", 5.0)
            async with PacemakerPool(settings(first, second)) as both:
                assert (await both.get_pulse("/m/w")).value.data == b"newer"  # type: ignore[union-attr]
                merged = (await both.get_all_pulses_for_path("/m")).value
                assert {k: v.data for k, v in merged.items()} == {
                    "/m/w": b"newer",
                    "/m/v": b"only-here",
                }

        run(scenario())
    finally:
        first.stop()
        second.stop()


# ------------------------------------------------------------------------- helpers


async def _send(server: PacemakerProcess, path: str, data: bytes) -> None:
    async with PacemakerPool(settings(server)) as pool:
        await pool.send_pulse(path, data)


def _frame(message: dict[str, Any]) -> bytes:
    body: bytes = msgpack.packb(message, use_bin_type=True)
    return struct.pack(">I", len(body)) + body


def _read_frame(sock: socket.socket) -> dict[str, Any]:
    header = _recv_exactly(sock, 4)
    (length,) = struct.unpack(">I", header)
    result: dict[str, Any] = msgpack.unpackb(_recv_exactly(sock, length), raw=False)
    return result


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "the server closed the connection"
        data += chunk
    return data
