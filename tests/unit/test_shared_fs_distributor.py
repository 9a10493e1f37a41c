"""The shared-storage code distributor against a real file:// directory and fsspec's memory://."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import fsspec
import pytest

from stratus.codedist.distributor import CodeDistributor, CodeMeta
from stratus.codedist.errors import CodeStoreError, CodeUnavailableError, DigestMismatchError
from stratus.codedist.shared_fs import SharedStorageDistributor

MIB = 1 << 20
DATA = bytes(range(256)) * (3 * MIB // 256) + b"tail"  # several 1 MiB chunks and a short one


@dataclass
class Store:
    url: str
    fs: Any
    packages: str  # the packages directory, as a path of ``fs``
    dist: SharedStorageDistributor
    live: list[int]

    def object(self, digest: str) -> str:
        return f"{self.packages}/{digest}.pkg"

    def names(self) -> list[str]:
        return sorted(p.rsplit("/", 1)[-1] for p in self.fs.ls(self.packages, detail=False))


@pytest.fixture(params=["file", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "file":
        url = (tmp_path / "shared").as_uri()
    else:
        url = f"memory://stratus-test-{uuid.uuid4().hex}"
    fs, root = fsspec.core.url_to_fs(url)
    live = [3]
    dist = SharedStorageDistributor(url, live_nimbuses=lambda: live[0])
    dist.prepare()
    yield Store(url, fs, f"{root}/packages", dist, live)
    dist.close()
    with contextlib.suppress(FileNotFoundError):
        fs.rm(root, recursive=True)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    path = tmp_path / "etl.zip"
    path.write_bytes(DATA)
    return path


def meta_of(data: bytes) -> CodeMeta:
    return CodeMeta(hashlib.sha256(data).hexdigest(), len(data))


def identity(store: Store, path: str) -> object:
    """What changes if the object is written again: inode and mtime, or the memory file."""
    if store.url.startswith("file:"):
        st = os.stat(path)
        return (st.st_ino, st.st_mtime_ns)
    return store.fs.store[path]


def test_it_is_a_code_distributor(store: Store) -> None:
    dist: CodeDistributor = store.dist
    assert dist.held() == {}


def test_upload_is_held_by_every_live_nimbus(store: Store, package: Path) -> None:
    meta = store.dist.upload(package, "etl")

    assert meta == meta_of(DATA)
    assert store.fs.cat_file(store.object(meta.digest)) == DATA
    assert store.dist.replication_count("etl", meta) == 3
    store.live[0] = 2
    assert store.dist.replication_count("etl", meta) == 2
    assert store.dist.holds("etl", meta)
    store.dist.replicate("etl", meta)
    assert store.dist.verify(meta)
    assert store.names() == [f"{meta.digest}.pkg"]


def test_a_retried_upload_does_not_rewrite_the_object(store: Store, package: Path) -> None:
    meta = store.dist.upload(package, "etl")
    before = identity(store, store.object(meta.digest))

    again = store.dist.upload(package, "etl")
    shared = store.dist.upload(package, "etl-copy")

    assert again == shared == meta
    assert identity(store, store.object(meta.digest)) == before
    assert store.names() == [f"{meta.digest}.pkg"]  # one object, no temporary left


def test_an_upload_over_a_corrupt_object_repairs_it(store: Store, package: Path) -> None:
    meta = meta_of(DATA)
    store.fs.pipe_file(store.object(meta.digest), b"x" * len(DATA))
    assert not store.dist.verify(meta)

    assert store.dist.upload(package, "etl") == meta

    assert store.dist.verify(meta)
    assert store.names() == [f"{meta.digest}.pkg"]


def test_download_writes_a_verified_copy(store: Store, package: Path, tmp_path: Path) -> None:
    meta = store.dist.upload(package, "etl")
    dest = tmp_path / "dest"

    written = store.dist.download(dest, "etl", meta)

    assert written == [dest / f"{meta.digest}.pkg"]
    assert written[0].read_bytes() == DATA
    assert sorted(dest.iterdir()) == written  # no temporary file left


def test_a_download_is_checked_against_the_recorded_blake3(
    store: Store, package: Path, tmp_path: Path
) -> None:
    meta = store.dist.upload(package, "etl")
    recorded = CodeMeta(meta.digest, meta.size_bytes, blake3.blake3(DATA).hexdigest())
    assert store.dist.download(tmp_path / "good", "etl", recorded)[0].read_bytes() == DATA

    other = CodeMeta(meta.digest, meta.size_bytes, blake3.blake3(b"other").hexdigest())
    with pytest.raises(DigestMismatchError, match="blake3"):
        store.dist.download(tmp_path / "bad", "etl", other)
    assert list((tmp_path / "bad").iterdir()) == []


def test_a_corrupt_object_is_refused_and_reported_but_kept(
    store: Store, package: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    meta = store.dist.upload(package, "etl")
    store.fs.pipe_file(store.object(meta.digest), DATA[:-1] + b"?")  # same size, other bytes
    dest = tmp_path / "dest"

    with pytest.raises(DigestMismatchError):
        store.dist.download(dest, "etl", meta)
    assert list(dest.iterdir()) == []

    with caplog.at_level(logging.ERROR, logger="stratus.codedist.shared_fs"):
        assert not store.dist.verify(meta, pipeline="etl")
    assert f"event=shared_code_corrupt pipeline=etl digest={meta.digest}" in caplog.text
    assert store.fs.exists(store.object(meta.digest))  # the only copy is not deleted


@pytest.mark.parametrize("stored", [None, DATA[:-1], DATA + b"!"], ids=["missing", "short", "long"])
def test_code_missing_or_of_the_wrong_size_is_unavailable(
    store: Store, stored: bytes | None, tmp_path: Path
) -> None:
    meta = meta_of(DATA)
    if stored is not None:
        store.fs.pipe_file(store.object(meta.digest), stored)
    dest = tmp_path / "dest"

    assert store.dist.replication_count("etl", meta) == 0
    assert not store.dist.holds("etl", meta)
    with pytest.raises(CodeUnavailableError, match=meta.digest):
        store.dist.replicate("etl", meta)
    with pytest.raises(CodeUnavailableError):
        store.dist.download(dest, "etl", meta)
    assert list(dest.iterdir()) == []
    assert not store.dist.verify(meta)


def test_purge_removes_the_object(store: Store, package: Path) -> None:
    meta = store.dist.upload(package, "etl")

    store.dist.purge(meta.digest)

    assert not store.fs.exists(store.object(meta.digest))
    assert store.dist.replication_count("etl", meta) == 0
    store.dist.purge(meta.digest)  # already gone: fine


def test_cleanup_keeps_the_shared_object(store: Store, package: Path) -> None:
    meta = store.dist.upload(package, "etl")

    store.dist.cleanup("etl")

    assert store.dist.holds("etl", meta)
    assert store.dist.held() == {}


class FailingWriter:
    """A writable object that loses its connection after ``limit`` bytes."""

    def __init__(self, inner: Any, limit: int) -> None:
        self.inner = inner
        self.left = limit

    def write(self, data: bytes) -> int:
        if len(data) > self.left:
            self.inner.write(data[: self.left])
            raise ConnectionResetError("connection to the store lost")
        self.left -= len(data)
        return int(self.inner.write(data))

    def __enter__(self) -> FailingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.inner.close()


def test_an_interrupted_upload_leaves_nothing_under_the_final_name(
    store: Store, package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = store.fs.open

    def failing_open(path: str, mode: str = "rb", **kwargs: Any) -> Any:
        f = real_open(path, mode, **kwargs)
        return FailingWriter(f, MIB + 10) if "w" in mode else f

    monkeypatch.setattr(store.fs, "open", failing_open)
    with pytest.raises(CodeStoreError, match="connection to the store lost"):
        store.dist.upload(package, "etl")

    assert store.names() == []  # neither the final object nor the temporary one
    assert not store.dist.holds("etl", meta_of(DATA))
    monkeypatch.undo()
    assert store.dist.upload(package, "etl") == meta_of(DATA)  # the retry succeeds


def test_an_object_corrupted_by_the_move_is_removed(
    store: Store, package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_mv = store.fs.mv

    def corrupting_mv(path1: str, path2: str, **kwargs: Any) -> None:
        real_mv(path1, path2, **kwargs)
        store.fs.pipe_file(path2, b"?" * len(DATA))

    monkeypatch.setattr(store.fs, "mv", corrupting_mv)
    with pytest.raises(DigestMismatchError):
        store.dist.upload(package, "etl")

    assert store.names() == []


def test_an_unknown_protocol_is_a_clear_error() -> None:
    dist = SharedStorageDistributor("nope://bucket/stratus", live_nimbuses=lambda: 1)

    with pytest.raises(CodeStoreError, match=r"nope://bucket/stratus.*Protocol not known: nope"):
        dist.prepare()


def test_an_unusable_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    url = (blocker / "stratus").as_uri()
    dist = SharedStorageDistributor(url, live_nimbuses=lambda: 1)

    with pytest.raises(CodeStoreError) as caught:
        dist.prepare()
    assert url in str(caught.value)
