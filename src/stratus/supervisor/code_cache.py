"""A supervisor's copies of pipeline code: fetched, checked and unpacked once per digest.

Guarantees: ``<local>/code/<digest>/`` exists only once the package, fetched through the
code distributor to ``<local>/code/packages/<digest>.pkg``, matched its record (``copy_check``: its
BLAKE3, else its sha256), passed ``check_package`` again (cheap, and a supervisor trusts no
one) and was unpacked completely (unpacked into a temporary directory, then renamed); a
failed fetch is tried again after a backoff that doubles up to 30 times
``supervisor.worker.restart.backoff.secs``. Fetches run on a small pool of their own, so the
control loop never waits on the network; ``get`` is called from that one loop only::

    cache = CodeCache(distributor, Path("/var/lib/stratus/code"), limits, backoff_secs=1.0)
    cache.get("etl", CodeMeta(digest, size))   # CodePending, then PipelineCode(...)
    cache.retain({digest})                      # drop the code of other digests
    cache.close()

The supervisor fetches as a consumer: it never registers as a holder of any code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
import zipfile
from collections.abc import Set
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from stratus.api.clock import Clock
from stratus.codedist.distributor import CodeDistributor, CodeMeta
from stratus.codedist.manifest import MANIFEST_NAME, Manifest, parse_manifest
from stratus.codedist.package_check import PackageLimits, check_package, normal_name
from stratus.codedist.package_store import SUFFIX
from stratus.codedist.transfer.check import copy_check, hash_file
from stratus.errors import StratusError
from stratus.files import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, private_dirs
from stratus.supervisor.errors import CodeNotReadyError
from stratus.supervisor.restart_policy import backoff_delay
from stratus.supervisor.worker_access import TRAVERSE_DIR_MODE

log = logging.getLogger(__name__)

FETCHERS = 2  # packages fetched at once
COPY_CHUNK = 1 << 20
UNPACK_PREFIX = ".unpack-"
CODE_DIR_MODE = 0o755
CODE_FILE_MODE = 0o644
PACKAGES_DIR = "packages"  # the downloads, beside the unpacked code of each digest
LEFTOVERS = (f"{UNPACK_PREFIX}*", ".download-*")  # temporary files a crash can leave behind


@dataclass(frozen=True)
class PipelineCode:
    """A pipeline's unpacked package and its manifest, and the interpreter of the
    environment of its requirements once built (None: the supervisor's own)."""

    digest: str
    directory: Path
    manifest: Manifest
    python: Path | None = None
    deps_archive: Path | None = None  # its requirements packed for a cluster's executors


@dataclass(frozen=True)
class CodePending:
    """The code is being fetched."""


@dataclass(frozen=True)
class CodeFailed:
    """The last fetch failed with ``error``; the next is not tried before ``retry_at``."""

    error: str
    retry_at: float
    failures: int


CodeState = PipelineCode | CodePending | CodeFailed


@dataclass
class _Failure:
    count: int
    error: str
    retry_at: float


class CodeCache:
    """Unpacked pipeline code by digest; see the module docstring."""

    def __init__(
        self,
        distributor: CodeDistributor,
        directory: Path,
        limits: PackageLimits,
        *,
        backoff_secs: float,
        clock: Clock = time.monotonic,
        workers_pass: bool = False,
    ) -> None:
        """``workers_pass``: workers run as other users, who must pass through the cache to
        their code (never list it); else the cache is private to the supervisor's user."""
        self._distributor = distributor
        self.directory = directory
        self._limits = limits
        self._backoff_secs = backoff_secs
        self._clock = clock
        self._workers_pass = workers_pass
        self._packages = directory / PACKAGES_DIR
        private_dirs(self._packages)  # the downloads, private whatever the workers' users
        if workers_pass:
            directory.chmod(TRAVERSE_DIR_MODE)
        self._remove_leftovers()
        self._pool = ThreadPoolExecutor(max_workers=FETCHERS, thread_name_prefix="code-fetch")
        self._ready: dict[str, PipelineCode] = {}
        self._fetching: dict[str, Future[PipelineCode]] = {}
        self._failures: dict[str, _Failure] = {}

    def get(self, pipeline: str, meta: CodeMeta) -> CodeState:
        """The code of ``meta.digest`` if ready; else start (or keep waiting on) its fetch."""
        digest = meta.digest
        if digest in self._ready:
            return self._ready[digest]
        future = self._fetching.get(digest)
        if future is not None:
            if not future.done():
                return CodePending()
            del self._fetching[digest]
            return self._collect(pipeline, digest, future)
        failure = self._failures.get(digest)
        if failure is not None and self._clock() < failure.retry_at:
            return CodeFailed(failure.error, failure.retry_at, failure.count)
        self._fetching[digest] = self._pool.submit(self._prepare, pipeline, meta)
        return CodePending()

    def retain(self, digests: Set[str]) -> None:
        """Delete the code of every digest but ``digests`` (and those being fetched)."""
        keep = set(digests) | set(self._fetching)
        for digest in [d for d in self._ready if d not in keep]:
            del self._ready[digest]
        for digest in [d for d in self._failures if d not in keep]:
            del self._failures[digest]
        for path in [*self.directory.iterdir(), *self._packages.iterdir()]:
            name = path.name.removesuffix(SUFFIX)
            if name.startswith(".") or name in keep or path == self._packages:
                continue
            _remove(path)
            log.info("event=code_removed digest=%s path=%s", name, path)

    def close(self) -> None:
        """Stop fetching; a fetch under way finishes on its own thread."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ the owner's side

    def _collect(self, pipeline: str, digest: str, future: Future[PipelineCode]) -> CodeState:
        try:
            code = future.result()
        except Exception as exc:  # a fetch failing in any way is retried later
            return self._failed(pipeline, digest, exc)
        self._failures.pop(digest, None)
        self._ready[digest] = code
        return code

    def _failed(self, pipeline: str, digest: str, exc: Exception) -> CodeFailed:
        previous = self._failures.get(digest)
        count = 1 if previous is None else previous.count + 1
        delay = backoff_delay(self._backoff_secs, count)
        error = str(exc) if isinstance(exc, StratusError) else f"{type(exc).__name__}: {exc}"
        failure = _Failure(count, error, self._clock() + delay)
        self._failures[digest] = failure
        log.warning(
            "event=code_fetch_failed pipeline=%s digest=%s failures=%d retry_in_secs=%g error=%s",
            pipeline,
            digest,
            count,
            delay,
            error,
        )
        return CodeFailed(failure.error, failure.retry_at, count)

    # ------------------------------------------------------------------ the fetchers' side

    def _prepare(self, pipeline: str, meta: CodeMeta) -> PipelineCode:
        """Fetch, check and unpack (on a fetcher thread)."""
        target = self.directory / meta.digest
        if target.is_dir():  # unpacked whole by an earlier life of this supervisor
            if self._workers_pass:  # which may have kept its workers' code private
                _read_only_for_all(target)
            return PipelineCode(meta.digest, target, _read_manifest(target))
        package = self._fetch(pipeline, meta)
        try:
            checked = check_package(package, self._limits)
        except StratusError as exc:
            package.unlink(missing_ok=True)
            raise CodeNotReadyError(
                f"the package of pipeline {pipeline} (digest {meta.digest}) fails its check "
                f"on this supervisor: {exc}"
            ) from None
        _unpack(package, target, shared=self._workers_pass)
        package.unlink(missing_ok=True)  # the unpacked directory is what runs
        log.info(
            "event=code_ready pipeline=%s digest=%s kind=%s dir=%s",
            pipeline,
            meta.digest,
            checked.manifest.kind,
            target,
        )
        return PipelineCode(meta.digest, target, checked.manifest)

    def _fetch(self, pipeline: str, meta: CodeMeta) -> Path:
        """``<dir>/packages/<digest>.pkg``, downloaded unless a copy that checks is there already.

        The distributor's download checks the copy against the record; so does the cache,
        with the same check (``copy_check``), against a distributor that broke its word.
        """
        check = copy_check(meta)
        package = self._packages / f"{meta.digest}{SUFFIX}"
        if not check.file_matches(package):
            try:
                self._distributor.download(self._packages, pipeline, meta)
            except StratusError as exc:
                raise CodeNotReadyError(
                    f"cannot fetch the code of pipeline {pipeline} (digest {meta.digest}): "
                    f"{exc}; no nimbus holding it (or the shared store) answered, and it is "
                    "tried again later"
                ) from None
            if not check.file_matches(package):
                found = hash_file(package, check.algorithm)[0] if package.exists() else "nothing"
                package.unlink(missing_ok=True)
                raise CodeNotReadyError(
                    f"the code fetched for pipeline {pipeline} hashes to {found} "
                    f"({check.algorithm}), not its record's {check.expected}; it is fetched "
                    "again later"
                )
        return package

    def _remove_leftovers(self) -> None:
        """Temporary files of fetches and unpacks that a crash interrupted."""
        for pattern in LEFTOVERS:
            for leftover in [*self.directory.glob(pattern), *self._packages.glob(pattern)]:
                _remove(leftover)


def _read_manifest(directory: Path) -> Manifest:
    path = directory / MANIFEST_NAME
    return parse_manifest(path.read_text(encoding="utf-8"), where=str(path))


def _unpack(package: Path, target: Path, *, shared: bool) -> None:
    """Unpack a checked package into ``target``, whole or not at all; ``shared``: readable
    by the workers' users (else private, as everything of the cache)."""
    temp = target.with_name(f"{UNPACK_PREFIX}{target.name}-{uuid.uuid4().hex[:8]}")
    temp.mkdir(mode=PRIVATE_DIR_MODE)
    os.chmod(temp, PRIVATE_DIR_MODE)
    try:
        with zipfile.ZipFile(package) as archive:
            for info in archive.infolist():
                _extract(archive, info, temp)
        if shared:
            _read_only_for_all(temp)
        if target.exists():  # another fetch of the same bytes won the race
            _remove(temp)
            return
        temp.rename(target)
    except BaseException:
        _remove(temp)
        raise


def _read_only_for_all(root: Path) -> None:
    """Code is read by workers that may run as other users (``worker_access``), and written
    by nobody once unpacked: directories 0755, files 0644, whatever the umask."""
    root.chmod(CODE_DIR_MODE)
    for path in root.rglob("*"):
        if not path.is_symlink():
            path.chmod(CODE_DIR_MODE if path.is_dir() else CODE_FILE_MODE)


def _extract(archive: zipfile.ZipFile, info: zipfile.ZipInfo, root: Path) -> None:
    """One entry, at most its declared size, never outside ``root`` (checked twice)."""
    name = normal_name(info.orig_filename)
    dest = root / name
    if not dest.resolve().is_relative_to(root.resolve()):
        raise CodeNotReadyError(f"package entry {info.orig_filename!r} leaves its directory")
    if info.is_dir():
        private_dirs(dest)
        return
    private_dirs(dest.parent)
    left = info.file_size
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, PRIVATE_FILE_MODE)
    os.fchmod(fd, PRIVATE_FILE_MODE)
    with archive.open(info) as src, os.fdopen(fd, "wb") as out:
        while left > 0 and (chunk := src.read(min(COPY_CHUNK, left))):
            out.write(chunk)
            left -= len(chunk)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
