"""The pieces of the code transfer alone: the copy check, the fetch plan, the serving decision,
and a supervisor's use of the same check.

The fetch over real HTTP servers is ``test_code_fetch.py``; these tests need no server.
"""

from __future__ import annotations

import hashlib
import io
import random
from pathlib import Path

import blake3
import pytest

from stratus.codedist.distributor import CodeMeta
from stratus.codedist.package_check import PackageLimits
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.check import Algorithm, copy_check, hash_file
from stratus.codedist.transfer.plan import (
    HolderError,
    PartHolders,
    sent_wrong_bytes,
    split_ranges,
    wrong_bytes,
)
from stratus.codedist.transfer.serve import PackageFile, Refusal, locate
from stratus.supervisor.code_cache import (
    CodeCache,
    CodeFailed,
    CodePending,
    CodeState,
    PipelineCode,
)
from tests.harness.package_factory import valid_package
from tests.harness.zkfixtures import wait_until

DATA = random.Random(1).randbytes(100_000)  # fixed: test ids name its digest
SHA = hashlib.sha256(DATA).hexdigest()
B3 = blake3.blake3(DATA).hexdigest()


# ---------------------------------------------------------------------- the copy check


def test_a_record_with_a_blake3_has_its_copies_checked_by_blake3():
    check = copy_check(CodeMeta(SHA, len(DATA), B3))
    assert (check.algorithm, check.expected) == (Algorithm.BLAKE3, B3)


def test_a_record_without_a_blake3_has_its_copies_checked_by_sha256():
    check = copy_check(CodeMeta(SHA, len(DATA)))
    assert (check.algorithm, check.expected) == (Algorithm.SHA256, SHA)


def test_the_blake3_is_not_part_of_a_packages_identity():
    assert CodeMeta(SHA, len(DATA), B3) == CodeMeta(SHA, len(DATA))
    assert hash(CodeMeta(SHA, len(DATA), B3)) == hash(CodeMeta(SHA, len(DATA)))


@pytest.mark.parametrize("blake", [B3, None], ids=["blake3", "sha256"])
def test_a_file_matches_only_with_the_recorded_bytes(tmp_path: Path, blake: str | None):
    check = copy_check(CodeMeta(SHA, len(DATA), blake))
    path = tmp_path / "copy"
    path.write_bytes(DATA)
    assert check.file_matches(path)
    damaged = bytearray(DATA)
    damaged[len(DATA) // 2] ^= 0x01
    path.write_bytes(bytes(damaged))
    assert not check.file_matches(path)
    path.write_bytes(DATA[:-1])
    assert not check.file_matches(path)
    assert not check.file_matches(tmp_path / "missing")


def test_the_check_is_by_the_recorded_blake3_not_the_sha256(tmp_path: Path):
    path = tmp_path / "copy"
    path.write_bytes(DATA)
    wrong = blake3.blake3(b"other bytes").hexdigest()
    assert not copy_check(CodeMeta(SHA, len(DATA), wrong)).file_matches(path)


def test_hash_file_gives_either_digest_and_the_size(tmp_path: Path):
    path = tmp_path / "copy"
    path.write_bytes(DATA)
    assert hash_file(path) == (SHA, len(DATA))
    assert hash_file(path, Algorithm.BLAKE3) == (B3, len(DATA))


# ---------------------------------------------------------------------- the fetch plan


@pytest.mark.parametrize(
    ("size", "parts", "expected"),
    [
        (10, 3, [(0, 4), (4, 8), (8, 10)]),
        (9, 3, [(0, 3), (3, 6), (6, 9)]),
        (2, 4, [(0, 1), (1, 2)]),
        (1, 1, [(0, 1)]),
    ],
)
def test_split_ranges_covers_the_package_in_contiguous_ranges(size, parts, expected):
    assert split_ranges(size, parts) == expected


def test_each_part_starts_with_its_own_holder_then_tries_the_others():
    holders = PartHolders(["a", "b", "c"])
    assert [holders.order_for(i) for i in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]


def test_a_holder_that_failed_is_given_no_other_part_and_keeps_its_first_reason():
    holders = PartHolders(["a", "b"])
    holders.fail("a", "refused")
    holders.fail("a", "later")
    assert not holders.usable("a")
    assert holders.usable("b")
    assert holders.failed == {"a": "refused"}


def test_wrong_bytes_are_told_apart_from_a_failure():
    assert sent_wrong_bytes(wrong_bytes("hash differs").reason)
    assert not sent_wrong_bytes(HolderError("connection refused").reason)


# ---------------------------------------------------------------------- the serving decision


@pytest.fixture
def store(tmp_path: Path) -> PackageStore:
    store = PackageStore(tmp_path / "store", max_bytes=1 << 20)
    received = store.receive(io.BytesIO(DATA))
    assert received.blake3 == B3  # the upload's BLAKE3, for the record
    store.adopt(received.path)
    return store


@pytest.mark.parametrize(
    ("header", "span", "partial"),
    [
        (None, (0, len(DATA)), False),
        ("bytes=10-19", (10, 20), True),
        ("bytes=99990-", (99_990, len(DATA)), True),
        ("bytes=-5", (len(DATA) - 5, len(DATA)), True),
    ],
)
def test_a_stored_package_is_located_whole_or_in_one_range(store, header, span, partial):
    answer = locate(store, SHA, header)
    assert isinstance(answer, PackageFile)
    assert (answer.start, answer.end, answer.partial) == (*span, partial)
    assert answer.path == store.path(SHA)
    assert answer.etag == f'"{SHA}"'


@pytest.mark.parametrize(
    ("digest", "header", "status", "error"),
    [
        ("not-a-digest", None, 422, "invalid_request"),
        ("0" * 64, None, 404, "unknown_code"),
        (SHA, "bytes=5-2", 422, "invalid_request"),
        (SHA, "bytes=0-1,4-5", 422, "invalid_request"),
        (SHA, f"bytes={len(DATA)}-", 416, "range_not_satisfiable"),
    ],
)
def test_what_cannot_be_served_is_refused_with_the_apis_error(store, digest, header, status, error):
    answer = locate(store, digest, header)
    assert isinstance(answer, Refusal)
    assert (answer.status, answer.error, answer.body().error) == (status, error, error)
    if status == 416:
        assert answer.headers == {"Content-Range": f"bytes */{len(DATA)}"}


# ---------------------------------------------------------------------- a supervisor's copy


class _WritingDistributor:
    """A distributor whose download writes the bytes it was given, checked or not."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.downloads = 0

    def download(self, dest: Path, pipeline: str, meta: CodeMeta) -> list[Path]:
        self.downloads += 1
        target = dest / f"{meta.digest}.pkg"
        target.write_bytes(self.data)
        return [target]


def _settled(cache: CodeCache, meta: CodeMeta) -> CodeState:
    state: list[CodeState] = []

    def done() -> bool:
        state[:] = [cache.get("etl", meta)]
        return not isinstance(state[0], CodePending)

    wait_until(done, 10, "the code fetch")
    return state[0]


@pytest.mark.parametrize("recorded", [True, False], ids=["blake3", "sha256"])
def test_a_supervisor_checks_its_copy_as_the_record_says(tmp_path: Path, recorded: bool):
    data = valid_package("etl")
    sha = hashlib.sha256(data).hexdigest()
    meta = CodeMeta(sha, len(data), blake3.blake3(data).hexdigest() if recorded else None)
    limits = PackageLimits(
        max_bytes=1 << 20, max_unpacked_bytes=1 << 20, max_ratio=200, max_entries=100
    )
    dist = _WritingDistributor(data)
    cache = CodeCache(dist, tmp_path / "code", limits, backoff_secs=1.0)  # type: ignore[arg-type]
    try:
        assert isinstance(_settled(cache, meta), PipelineCode)
    finally:
        cache.close()


def test_a_supervisors_copy_that_fails_the_recorded_blake3_is_refused(tmp_path: Path):
    data = valid_package("etl")
    other = blake3.blake3(b"other bytes").hexdigest()
    meta = CodeMeta(hashlib.sha256(data).hexdigest(), len(data), other)
    limits = PackageLimits(
        max_bytes=1 << 20, max_unpacked_bytes=1 << 20, max_ratio=200, max_entries=100
    )
    cache = CodeCache(_WritingDistributor(data), tmp_path / "code", limits, backoff_secs=1.0)  # type: ignore[arg-type]
    try:
        failed = _settled(cache, meta)
        assert isinstance(failed, CodeFailed)
        assert "hashes to" in failed.error
        assert "blake3" in failed.error
        assert not (tmp_path / "code" / f"{meta.digest}.pkg").exists()
        assert not (tmp_path / "code" / meta.digest).exists()
    finally:
        cache.close()
