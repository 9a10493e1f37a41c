"""The supervisor's code cache (``supervisor/code_cache.py``): fetched, checked and unpacked
once; retried after a backoff; a package that fails its check is never unpacked."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

from stratus.codedist.distributor import CodeMeta
from stratus.codedist.errors import CodeUnavailableError
from stratus.codedist.package_check import PackageLimits
from stratus.codedist.transfer.check import hash_file
from stratus.supervisor.code_cache import (
    CodeCache,
    CodeFailed,
    CodePending,
    CodeState,
    PipelineCode,
)
from tests.harness.package_factory import valid_package
from tests.harness.supervisor_fakes import FakeClock
from tests.harness.zkfixtures import wait_until


class CopyDistributor:
    """A distributor that 'downloads' by writing the bytes it was given."""

    def __init__(self, data: bytes | None) -> None:
        self.data = data
        self.downloads = 0

    def download(self, dest: Path, pipeline: str, meta: CodeMeta) -> list[Path]:
        self.downloads += 1
        if self.data is None:
            raise CodeUnavailableError(f"no holder of {pipeline}")
        target = dest / f"{meta.digest}.pkg"
        target.write_bytes(self.data)
        return [target]


LIMITS = PackageLimits(
    max_bytes=1 << 20, max_unpacked_bytes=1 << 20, max_ratio=200, max_entries=100
)


def fetch(cache: CodeCache, meta: CodeMeta) -> CodeState:
    state: list[CodeState] = []

    def done() -> bool:
        state[:] = [cache.get("etl", meta)]
        return not isinstance(state[0], CodePending)

    wait_until(done, 10, "the fetch")
    return state[0]


def test_code_is_fetched_checked_and_unpacked_once(tmp_path) -> None:
    data = valid_package("etl")
    (tmp_path / "p").write_bytes(data)
    meta = CodeMeta(hash_file(tmp_path / "p")[0], len(data))
    dist = CopyDistributor(data)
    cache = CodeCache(dist, tmp_path / "code", LIMITS, backoff_secs=1.0)  # type: ignore[arg-type]
    try:
        ready = fetch(cache, meta)
        assert isinstance(ready, PipelineCode)
        assert ready.directory == tmp_path / "code" / meta.digest
        assert (ready.directory / "pipeline_main.py").is_file()
        assert ready.manifest.entrypoint == "pipeline_main:run"
        assert cache.get("etl", meta) == ready
        assert dist.downloads == 1
        cache.retain(set())
        assert not (tmp_path / "code" / meta.digest).exists()
    finally:
        cache.close()


def test_code_that_is_unavailable_or_wrong_is_retried_after_a_backoff(tmp_path) -> None:
    clock = FakeClock()
    data = valid_package("etl")
    meta = CodeMeta("b" * 64, len(data))  # not the digest of these bytes
    dist = CopyDistributor(None)
    cache = CodeCache(dist, tmp_path / "code", LIMITS, backoff_secs=1.0, clock=clock)  # type: ignore[arg-type]
    try:
        first = fetch(cache, meta)
        assert isinstance(first, CodeFailed)
        assert "no holder of etl" in first.error
        assert cache.get("etl", meta) == first  # not before the backoff
        clock.advance(1.0)
        dist.data = data
        second = fetch(cache, meta)
        assert isinstance(second, CodeFailed)
        assert "hashes to" in second.error
        assert second.failures == 2
        assert second.retry_at == clock() + 2.0
        assert not (tmp_path / "code" / f"{meta.digest}.pkg").exists()
    finally:
        cache.close()


def test_a_package_that_fails_its_check_is_never_unpacked(tmp_path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("../evil.py", "x = 1\n")
    data = buffer.getvalue()
    (tmp_path / "p").write_bytes(data)
    meta = CodeMeta(hash_file(tmp_path / "p")[0], len(data))
    cache = CodeCache(CopyDistributor(data), tmp_path / "code", LIMITS, backoff_secs=1.0)  # type: ignore[arg-type]
    try:
        failed = fetch(cache, meta)
        assert isinstance(failed, CodeFailed)
        assert "fails its check" in failed.error
        assert not (tmp_path / "evil.py").exists()
        assert sorted(p.name for p in (tmp_path / "code").iterdir()) == ["packages"]
        assert list((tmp_path / "code" / "packages").iterdir()) == []  # the download is gone
    finally:
        cache.close()
