"""Fetching a package from real HTTP servers (uvicorn serving the code routes of real stores).

Each holder is a store behind ``code_server``; its ``Recorder`` counts the requests it got
and can cut a body short, ignore Range, lie about Content-Range or stall. Every test runs
twice: with bodies spliced from the socket into the file (Linux), and read into a buffer
and written (elsewhere, or where the kernel refuses splice).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import blake3
import pytest

from stratus.codedist.distributor import CodeMeta
from stratus.codedist.errors import CodeUnavailableError, DigestMismatchError
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer import client as http_body
from stratus.codedist.transfer import splice
from stratus.codedist.transfer.client import CodeClient
from stratus.codedist.transfer.fetch import (
    FetchSettings,
    fetch_package,
    http_client,
    part_path,
)
from stratus.codedist.transfer.plan import split_ranges
from tests.harness.code_server import (
    CodeServer,
    Recorder,
    code_server,
    free_address,
    stored,
    unanswered_address,
)
from tests.harness.supervisor_fakes import FakeClock

MIB = 1 << 20
DATA = os.urandom(3 * MIB + 4321)
META = CodeMeta(hashlib.sha256(DATA).hexdigest(), len(DATA))  # a record without BLAKE3
META_B3 = CodeMeta(META.digest, META.size_bytes, blake3.blake3(DATA).hexdigest())
ONE_STREAM = FetchSettings(parts=1, timeout=10.0)
IN_PARTS = FetchSettings(parts=3, part_min_bytes=MIB, timeout=10.0)


@pytest.fixture(autouse=True, params=["splice", "buffered"])
def transfer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How bodies reach the part file: ``splice(2)``, or a buffer and ``pwrite``."""
    if request.param == "splice" and not http_body.SPLICE:
        pytest.skip("no os.splice on this platform")
    monkeypatch.setattr(http_body, "SPLICE", request.param == "splice")
    return str(request.param)


@dataclass
class Holder:
    address: str
    recorder: Recorder
    store: PackageStore
    server: CodeServer

    def corrupt(self) -> None:
        """Flip a byte of its copy: same size, other digest."""
        path = self.store.path(META.digest)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))


@pytest.fixture
def holders(tmp_path: Path) -> Iterator[list[Holder]]:
    """Three stores holding DATA, each served by its own HTTP server."""
    with contextlib.ExitStack() as stack:
        running = []
        for i in range(3):
            store = PackageStore(tmp_path / f"holder-{i}", max_bytes=64 * MIB)
            assert stored(store, DATA) == META.digest
            server = stack.enter_context(code_server(store))
            running.append(Holder(server.address, server.recorder, store, server))
        yield running
        for holder in running:
            holder.server.stop_soon()


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    path = tmp_path / "dest"
    path.mkdir()
    return path


def fetched(path: Path) -> bytes:
    assert path == part_path(path.parent, META.digest)
    return path.read_bytes()


def test_one_holder_gives_the_verified_package(holders, dest):
    path = fetch_package("etl", META, [holders[0].address], dest, ONE_STREAM)
    assert fetched(path) == DATA
    assert holders[0].recorder.ranges() == [None]


def test_a_body_cut_short_is_resumed_with_a_range_request(holders, dest):
    holder = holders[0]
    holder.recorder.cuts, holder.recorder.cut_after = 1, MIB + 5

    path = fetch_package("etl", META, [holder.address], dest, ONE_STREAM)

    assert fetched(path) == DATA
    first, second = holder.recorder.ranges()
    assert first is None
    assert second is not None and second.startswith("bytes=")
    resumed_from = int(second.removeprefix("bytes=").removesuffix("-"))
    assert 0 < resumed_from <= MIB + 5
    assert second == f"bytes={resumed_from}-"


def test_an_interrupted_download_resumes_in_the_next_call(holders, dest):
    holder = holders[0]
    holder.recorder.cuts, holder.recorder.cut_after = 100, MIB // 4

    with pytest.raises(CodeUnavailableError, match=holder.address):
        fetch_package("etl", META, [holder.address], dest, ONE_STREAM)
    kept = part_path(dest, META.digest).stat().st_size
    assert 0 < kept < len(DATA)

    holder.recorder.cuts = 0
    requests_before = len(holder.recorder.ranges())
    path = fetch_package("etl", META, [holder.address], dest, ONE_STREAM)

    assert fetched(path) == DATA
    assert holder.recorder.ranges()[requests_before:] == [f"bytes={kept}-"]


def test_a_download_given_up_leaves_nothing_when_not_to_be_resumed(holders, dest):
    holder = holders[0]
    holder.recorder.cuts, holder.recorder.cut_after = 100, MIB // 4
    settings = FetchSettings(parts=1, timeout=10.0, keep_partial=False)
    with pytest.raises(CodeUnavailableError):
        fetch_package("etl", META, [holder.address], dest, settings)
    assert list(dest.iterdir()) == []


def test_a_holder_that_ignores_range_is_read_from_the_start(holders, dest):
    holder = holders[0]
    holder.recorder.cuts, holder.recorder.cut_after = 1, MIB
    holder.recorder.ignore_range = True
    path = fetch_package("etl", META, [holder.address], dest, ONE_STREAM)
    assert fetched(path) == DATA
    assert len(holder.recorder.ranges()) == 2


def test_a_206_naming_another_range_starts_the_download_again(holders, dest):
    holder = holders[0]
    holder.recorder.cuts, holder.recorder.cut_after = 1, MIB
    holder.recorder.bad_content_range = True
    path = fetch_package("etl", META, [holder.address], dest, ONE_STREAM)
    assert fetched(path) == DATA
    first, second, third = holder.recorder.ranges()
    assert (first, third) == (None, None)
    assert second is not None and second.startswith("bytes=")


def test_a_large_package_comes_in_parts_from_every_holder(holders, dest):
    path = fetch_package("etl", META, [h.address for h in holders], dest, IN_PARTS)
    assert fetched(path) == DATA
    expected = [f"bytes={start}-{end - 1}" for start, end in split_ranges(len(DATA), 3)]
    assert [h.recorder.ranges() for h in holders] == [[rng] for rng in expected]


def test_a_part_whose_holder_fails_comes_from_another(holders, dest):
    holders[1].store.remove(META.digest)  # 404 for its part
    path = fetch_package("etl", META, [h.address for h in holders], dest, IN_PARTS)
    assert fetched(path) == DATA
    assert len(holders[1].recorder.ranges()) == 1
    assert len(holders[0].recorder.ranges()) + len(holders[2].recorder.ranges()) == 3


def test_a_package_below_part_min_bytes_comes_in_one_request(holders, dest):
    settings = FetchSettings(parts=3, part_min_bytes=len(DATA) + 1, timeout=10.0)
    fetch_package("etl", META, [h.address for h in holders], dest, settings)
    assert [len(h.recorder.ranges()) for h in holders] == [1, 0, 0]


@pytest.mark.parametrize("settings", [ONE_STREAM, IN_PARTS], ids=["one-stream", "in-parts"])
def test_a_holder_with_corrupt_bytes_is_skipped_for_a_good_one(holders, dest, settings):
    bad, good = holders[0], holders[1]
    bad.corrupt()
    path = fetch_package("etl", META, [bad.address, good.address], dest, settings)
    assert fetched(path) == DATA
    assert bad.recorder.ranges(), "the corrupt holder was not even asked"


def test_when_every_holder_has_corrupt_bytes_the_mismatch_is_raised_and_nothing_left(holders, dest):
    for holder in holders[:2]:
        holder.corrupt()
    addresses = [h.address for h in holders[:2]]
    with pytest.raises(DigestMismatchError) as caught:
        fetch_package("etl", META, addresses, dest, IN_PARTS)
    message = str(caught.value)
    assert "etl" in message
    assert META.digest in message
    assert all(address in message for address in addresses)
    assert list(dest.iterdir()) == []


def test_refused_and_404_holders_are_skipped(holders, dest):
    refused = free_address()
    holders[0].store.remove(META.digest)
    path = fetch_package(
        "etl", META, [refused, holders[0].address, holders[1].address], dest, ONE_STREAM
    )
    assert fetched(path) == DATA
    assert holders[0].recorder.ranges() == [None]


def test_when_no_holder_can_serve_the_error_names_each(holders, dest):
    refused = free_address()
    holders[0].store.remove(META.digest)
    with pytest.raises(CodeUnavailableError) as caught:
        fetch_package("etl", META, [refused, holders[0].address], dest, IN_PARTS)
    assert not isinstance(caught.value, DigestMismatchError)
    message = str(caught.value)
    assert f"{refused}: ConnectError" in message
    assert f"{holders[0].address}: does not have the package (404)" in message
    assert list(dest.iterdir()) == []


def test_a_holder_that_stalls_past_the_timeout_is_skipped(holders, dest):
    holders[0].recorder.stall = threading.Event()
    settings = FetchSettings(parts=1, timeout=0.5)
    path = fetch_package("etl", META, [holders[0].address, holders[1].address], dest, settings)
    assert fetched(path) == DATA
    assert holders[1].recorder.ranges() == [None]


CONNECT_SECS = 0.25  # far below the read timeout: what a holder on a dead host costs
HOUR = 3600.0
ONE_STREAM_DEAD = replace(ONE_STREAM, connect_timeout=CONNECT_SECS)
IN_PARTS_DEAD = replace(IN_PARTS, connect_timeout=CONNECT_SECS)
WITH_A_DEAD_HOLDER = pytest.mark.parametrize(
    "settings", [ONE_STREAM_DEAD, IN_PARTS_DEAD], ids=["one-stream", "in-parts"]
)


class CountingClient(CodeClient):
    """The real client, counting the TCP connects it starts, per holder."""

    def __init__(self, settings: FetchSettings, clock: FakeClock) -> None:
        super().__init__(
            settings.timeout,
            connect_timeout=settings.connect_timeout,
            max_idle=settings.parts,
            clock=clock,
        )
        self.connects: Counter[str] = Counter()

    def _connect(self, holder: str, connection: http.client.HTTPConnection) -> None:
        if connection.sock is None:  # a kept connection is connected already
            self.connects[holder] += 1
        super()._connect(holder, connection)


@WITH_A_DEAD_HOLDER
@pytest.mark.timeout(60)
def test_a_holder_that_takes_no_connection_is_left_after_the_connect_timeout(
    holders, dest, settings
):
    settings = replace(settings, timeout=HOUR)  # a connect that waited it would hang the test
    client = CountingClient(settings, FakeClock(100.0))
    with unanswered_address() as dead, contextlib.closing(client):
        path = fetch_package("etl", META, [dead, holders[0].address], dest, settings, client=client)
        assert fetched(path) == DATA
        assert holders[0].recorder.ranges()  # the live holder sent it all
        assert 1 <= client.connects[dead] <= settings.parts  # each part tried it once at most
        assert client.suspected(dead)


@WITH_A_DEAD_HOLDER
def test_a_holder_that_took_no_connection_is_asked_last_for_one_request_timeout(
    holders, tmp_path, settings
):
    clock = FakeClock(100.0)
    client = CountingClient(settings, clock)
    with unanswered_address() as dead, contextlib.closing(client):
        addresses = [dead, holders[0].address, holders[1].address]

        def fetch(into: str) -> Path:
            (tmp_path / into).mkdir()
            return fetch_package("etl", META, addresses, tmp_path / into, settings, client=client)

        assert fetched(fetch("first")) == DATA
        assert client.connects[dead] >= 1 and client.suspected(dead)
        tried = client.connects[dead]

        assert fetched(fetch("second")) == DATA  # from the others: it is not asked again
        assert client.connects[dead] == tried

        clock.advance(settings.timeout)  # no longer a suspect: asked in its turn again
        assert fetched(fetch("third")) == DATA
        assert client.connects[dead] > tried


def test_no_holder_at_all_is_unavailable(dest):
    with pytest.raises(CodeUnavailableError, match="no other nimbus holds etl's package"):
        fetch_package("etl", META, [], dest, ONE_STREAM)


def test_a_complete_download_left_by_a_crash_is_not_fetched_again(holders, dest):
    part_path(dest, META.digest).write_bytes(DATA)
    path = fetch_package("etl", META, [holders[0].address], dest, ONE_STREAM)
    assert fetched(path) == DATA
    assert holders[0].recorder.ranges() == []


def test_a_damaged_partial_download_is_fetched_again_from_the_start(holders, dest):
    part_path(dest, META.digest).write_bytes(b"x" * 1000)  # not DATA's first bytes
    path = fetch_package("etl", META, [holders[0].address], dest, ONE_STREAM)
    assert fetched(path) == DATA
    assert holders[0].recorder.ranges() == ["bytes=1000-", None]


def test_one_client_fetches_again_on_the_connection_it_kept(holders, dest):
    holder = holders[0]
    client = http_client(ONE_STREAM)
    try:
        for _ in range(2):
            fetched(fetch_package("etl", META, [holder.address], dest, ONE_STREAM, client=client))
            part_path(dest, META.digest).unlink()
    finally:
        client.close()
    first, second = holder.recorder.client_ports
    assert first == second


def test_a_kept_connection_that_the_holder_closed_is_replaced_by_a_new_one(tmp_path, dest):
    store = PackageStore(tmp_path / "holder", max_bytes=64 * MIB)
    assert stored(store, DATA) == META.digest
    client = http_client(ONE_STREAM)
    with code_server(store, keep_alive_secs=1) as server:
        try:
            fetch_package("etl", META, [server.address], dest, ONE_STREAM, client=client)
            part_path(dest, META.digest).unlink()
            time.sleep(1.5)  # the holder closes the idle connection meanwhile
            path = fetch_package("etl", META, [server.address], dest, ONE_STREAM, client=client)
        finally:
            client.close()
        assert fetched(path) == DATA
        first, second = server.recorder.client_ports
        assert first != second


@pytest.fixture
def spliced_bytes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the chunks that went through ``SocketSplicer.move``."""
    sizes: list[int] = []
    move = splice.SocketSplicer.move

    def counted(self: splice.SocketSplicer, fd: int, offset: int, limit: int) -> int:
        n = move(self, fd, offset, limit)
        sizes.append(n)
        return n

    monkeypatch.setattr(splice.SocketSplicer, "move", counted)
    return sizes


@pytest.mark.parametrize("transfer", ["splice"], indirect=True)
def test_with_splice_the_body_bypasses_python_but_the_first_bytes(holders, dest, spliced_bytes):
    fetched(fetch_package("etl", META, [holders[0].address], dest, ONE_STREAM))
    assert META.size_bytes - 64 * 1024 <= sum(spliced_bytes) < META.size_bytes


@pytest.mark.parametrize("transfer", ["splice"], indirect=True)
def test_a_file_that_refuses_splice_gets_the_bytes_copied_from_the_pipe(holders, dest, monkeypatch):
    real_splice = os.splice
    refused: list[int] = []

    def no_splice_into_files(src: int, dst: int, count: int, *args: object, **kw: object) -> int:
        if "offset_dst" in kw:  # into the part file: as a file system without splice_write
            refused.append(count)
            raise OSError(22, "Invalid argument")
        return real_splice(src, dst, count, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "splice", no_splice_into_files)
    path = fetch_package("etl", META, [holders[0].address], dest, ONE_STREAM)
    assert fetched(path) == DATA
    assert len(refused) == 1  # asked once, then copied for the rest of that body


# ------------------------------------------------------------ the check: BLAKE3, else sha256


@pytest.fixture
def fetch_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="stratus.codedist.transfer.fetch")
    return caplog


@pytest.mark.parametrize("settings", [ONE_STREAM, IN_PARTS], ids=["one-stream", "in-parts"])
def test_a_copy_checked_by_blake3_that_is_corrupt_is_detected_and_refetched(
    holders, dest, settings, fetch_log
):
    bad, good = holders[0], holders[1]
    bad.corrupt()
    path = fetch_package("etl", META_B3, [bad.address, good.address], dest, settings)
    assert fetched(path) == DATA
    assert bad.recorder.ranges(), "the corrupt holder was not even asked"
    assert good.recorder.ranges()
    assert "check=blake3" in fetch_log.text
    assert "check=sha256" not in fetch_log.text


def test_a_record_without_blake3_has_its_copy_checked_by_sha256(holders, dest, fetch_log):
    path = fetch_package("etl", META, [holders[0].address], dest, ONE_STREAM)
    assert fetched(path) == DATA
    assert "check=sha256" in fetch_log.text
    assert "check=blake3" not in fetch_log.text


@pytest.mark.parametrize("settings", [ONE_STREAM, IN_PARTS], ids=["one-stream", "in-parts"])
def test_a_copy_is_checked_against_the_recorded_blake3_not_the_sha256(holders, dest, settings):
    wrong = CodeMeta(META.digest, META.size_bytes, blake3.blake3(b"other").hexdigest())
    with pytest.raises(DigestMismatchError, match="blake3"):
        fetch_package("etl", wrong, [h.address for h in holders[:2]], dest, settings)
    assert list(dest.iterdir()) == []


def test_a_resumed_download_is_checked_by_blake3_over_what_both_attempts_wrote(holders, dest):
    holder = holders[0]
    holder.recorder.cuts, holder.recorder.cut_after = 100, MIB // 4
    with pytest.raises(CodeUnavailableError):
        fetch_package("etl", META_B3, [holder.address], dest, ONE_STREAM)
    kept = part_path(dest, META.digest).stat().st_size
    assert 0 < kept < len(DATA)

    holder.recorder.cuts = 0
    path = fetch_package("etl", META_B3, [holder.address], dest, ONE_STREAM)
    assert fetched(path) == DATA
    assert holder.recorder.ranges()[-1] == f"bytes={kept}-"


def test_a_complete_download_that_fails_its_blake3_is_fetched_again(holders, dest):
    damaged = bytearray(DATA)
    damaged[7] ^= 0x01
    part_path(dest, META.digest).write_bytes(bytes(damaged))
    path = fetch_package("etl", META_B3, [holders[0].address], dest, ONE_STREAM)
    assert fetched(path) == DATA
    assert holders[0].recorder.ranges() == [None]
