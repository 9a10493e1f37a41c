"""The package store on a real directory: receive, adopt, verify (and its cache), leftovers."""

from __future__ import annotations

import hashlib
import io
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stratus.api.errors import InvalidRequestError, PackageTooLargeError
from stratus.codedist import package_store
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.check import hash_file

DATA = os.urandom(3 * package_store.CHUNK + 17)
DIGEST = hashlib.sha256(DATA).hexdigest()
AN_HOUR_AGO_NS = time.time_ns() - 3600 * 10**9


@pytest.fixture
def store(tmp_path: Path) -> PackageStore:
    return PackageStore(tmp_path / "packages", max_bytes=len(DATA) + 1)


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file the store hashes, in order."""
    hashed: list[Path] = []
    real: Callable[[Path], tuple[str, int]] = hash_file

    def counting(path: Path) -> tuple[str, int]:
        hashed.append(path)
        return real(path)

    monkeypatch.setattr(package_store, "hash_file", counting)
    return hashed


def names(store: PackageStore) -> list[str]:
    return sorted(p.name for p in store.directory.iterdir())


def backdate(path: Path) -> None:
    """Make a file look last modified an hour ago (past the store's racy window)."""
    os.utime(path, ns=(AN_HOUR_AGO_NS, AN_HOUR_AGO_NS))


def flip_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_a_received_upload_is_hashed_once_and_adopted_under_its_digest(store, hashes):
    received = store.receive(io.BytesIO(DATA))
    assert received.digest == DIGEST
    assert received.size_bytes == len(DATA)
    assert received.path.parent == store.directory
    assert received.path.name.startswith(".upload-")
    assert received.path.read_bytes() == DATA

    stored = store.adopt(received.path)

    assert (stored.digest, stored.size_bytes) == (DIGEST, len(DATA))
    assert hashes == [], "adopt hashed the upload again"
    assert names(store) == [f"{DIGEST}.pkg"]
    assert store.path(DIGEST).read_bytes() == DATA


def test_adopt_hashes_a_file_it_did_not_receive(store, hashes):
    path = store.directory / "validated.zip"
    path.write_bytes(DATA)
    assert store.adopt(path).digest == DIGEST
    assert hashes == [path]
    assert names(store) == [f"{DIGEST}.pkg"]


def test_the_same_bytes_stored_twice_are_one_file(store):
    assert store.put(io.BytesIO(DATA)).digest == DIGEST
    assert store.put(io.BytesIO(DATA)).digest == DIGEST
    assert names(store) == [f"{DIGEST}.pkg"]
    assert store.digests() == {DIGEST}


def test_adopting_good_bytes_replaces_a_corrupt_stored_copy(store):
    store.put(io.BytesIO(DATA))
    flip_byte(store.path(DIGEST), 5)
    store.put(io.BytesIO(DATA))
    assert store.path(DIGEST).read_bytes() == DATA


@pytest.mark.parametrize("put", [PackageStore.receive, PackageStore.put])
def test_an_upload_past_max_bytes_leaves_nothing(tmp_path, put):
    small = PackageStore(tmp_path / "packages", max_bytes=len(DATA) - 1)
    with pytest.raises(PackageTooLargeError, match=str(len(DATA) - 1)):
        put(small, io.BytesIO(DATA))
    assert names(small) == []


def test_an_empty_upload_is_refused(store):
    with pytest.raises(InvalidRequestError, match="empty"):
        store.receive(io.BytesIO(b""))
    assert names(store) == []


def test_a_stored_package_is_not_hashed_again_by_verify(store, hashes):
    store.put(io.BytesIO(DATA))
    assert store.verify(DIGEST)
    assert store.verify(DIGEST)
    assert hashes == []
    age_ns = time.time_ns() - store.path(DIGEST).stat().st_mtime_ns
    assert age_ns > package_store.RACY_WHOLE_SECONDS_SECS * 1e9, "not dated back"


def test_a_write_right_after_storing_is_seen_by_verify(store):
    """The write comes within the file system clock's resolution of the store's own."""
    store.put(io.BytesIO(DATA))
    flip_byte(store.path(DIGEST), 3)
    assert not store.verify(DIGEST)
    assert not store.has(DIGEST)


def test_verify_does_not_hash_an_unchanged_file_again(store, hashes):
    store.put(io.BytesIO(DATA))
    backdate(store.path(DIGEST))  # changed since stored: hashed once, then known intact
    assert store.verify(DIGEST)
    assert store.verify(DIGEST)
    assert store.verify(DIGEST)
    assert hashes == [store.path(DIGEST)]


def an_hour_ahead() -> int:
    return time.time_ns() + 3600 * 10**9


def the_last_whole_second() -> int:
    return (time.time_ns() // 10**9 - 1) * 10**9


@pytest.mark.parametrize(
    "stamp",
    [an_hour_ahead, the_last_whole_second],
    ids=["stamped-in-the-future", "whole-second-mtime-a-second-ago"],
)
def test_verify_hashes_every_time_a_file_that_a_write_could_change_unseen(store, hashes, stamp):
    """Modified at the check's time, to the file system clock's resolution: no cached verdict."""
    store.put(io.BytesIO(DATA))
    mtime_ns = stamp()  # taken now, not when the tests were collected
    os.utime(store.path(DIGEST), ns=(mtime_ns, mtime_ns))
    assert store.verify(DIGEST)
    assert store.verify(DIGEST)
    assert hashes == [store.path(DIGEST)] * 2


def test_verify_finds_changed_bytes_and_deletes_the_file(store, hashes):
    store.put(io.BytesIO(DATA))
    path = store.path(DIGEST)
    backdate(path)
    assert store.verify(DIGEST)

    flip_byte(path, len(DATA) // 2)  # same size and inode; the write stamps a new mtime

    assert not store.verify(DIGEST)
    assert not path.exists()
    assert not store.has(DIGEST)
    assert not store.verify(DIGEST)
    assert len(hashes) == 2


def test_verify_finds_a_file_replaced_by_another_with_the_same_size_and_mtime(store):
    store.put(io.BytesIO(DATA))
    path = store.path(DIGEST)
    backdate(path)
    assert store.verify(DIGEST)
    other = store.directory / "other"
    other.write_bytes(DATA[:-1] + bytes([DATA[-1] ^ 0xFF]))  # always other bytes
    backdate(other)
    other.replace(path)  # a new inode
    assert not store.verify(DIGEST)
    assert not path.exists()


def test_verify_of_a_package_not_stored_is_false(store):
    assert not store.verify(DIGEST)


def test_leftover_uploads_are_removed_and_partial_downloads_kept(store):
    received = store.receive(io.BytesIO(DATA))
    part = store.download_path(DIGEST)
    part.write_bytes(DATA[:100])
    store.put(io.BytesIO(b"kept"))

    store.remove_leftovers()

    assert not received.path.exists()
    assert part.read_bytes() == DATA[:100]
    assert names(store) == sorted([part.name, f"{hashlib.sha256(b'kept').hexdigest()}.pkg"])


def test_a_good_copy_stored_while_a_corrupt_one_is_hashed_is_kept(store, monkeypatch):
    """Another thread replaces the corrupt copy (a fetch) while this one hashes it."""
    store.put(io.BytesIO(DATA))
    path = store.path(DIGEST)
    flip_byte(path, 9)
    real = hash_file
    replaced: list[bool] = []

    def hash_then_replace(hashed: Path) -> tuple[str, int]:
        result = real(hashed)
        if not replaced:
            good = store.directory / "fetched"
            good.write_bytes(DATA)
            good.replace(path)
            replaced.append(True)
        return result

    monkeypatch.setattr(package_store, "hash_file", hash_then_replace)
    assert store.verify(DIGEST)
    assert path.read_bytes() == DATA


def test_a_package_written_to_while_it_is_adopted_is_hashed_again(
    store: PackageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    received = store.receive(io.BytesIO(DATA))
    final = store.path(received.digest)

    def another_writer_meanwhile(directory: Path) -> None:  # right after the rename
        final.write_bytes(bytes(len(DATA)))

    monkeypatch.setattr(package_store, "_fsync_directory", another_writer_meanwhile)
    store.adopt(received.path)

    assert not store.verify(received.digest)  # hashed, found corrupt, deleted
    assert not final.exists()
