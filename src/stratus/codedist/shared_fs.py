"""The shared-storage code distributor: one fsspec store that every nimbus reads.

Guarantees: a package is stored once, at ``<url>/packages/<sha256>.pkg``, whichever
pipelines use it; an object is published under that name only after a complete copy, and
is read back and hashed after every copy (a failed or corrupted upload leaves nothing under
the final name); a consumer's copy is checked against the pipeline record (its BLAKE3, else
its sha256: ``transfer/check.py``) before it is renamed into place. No ZooKeeper::

    dist = SharedStorageDistributor("file:///mnt/shared/stratus", live_nimbuses=live_count)
    dist.prepare()
    meta = dist.upload(Path("/tmp/etl.zip"), "etl")      # CodeMeta(digest, size_bytes)
    dist.replication_count("etl", meta)                  # live_count(): each can read it
    dist.download(Path("/tmp/etl"), "etl", meta)         # [Path("/tmp/etl/<digest>.pkg")]
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import fsspec
from fsspec.implementations.local import LocalFileSystem

from stratus.codedist.distributor import CodeMeta
from stratus.codedist.errors import CodeStoreError, CodeUnavailableError, DigestMismatchError
from stratus.codedist.package_store import CHUNK, SUFFIX
from stratus.codedist.transfer.check import Algorithm, CopyCheck, Hasher, copy_check, new_hasher
from stratus.codedist.transfer.ranges import DIGEST
from stratus.files import private_dirs

log = logging.getLogger(__name__)

PACKAGES_DIR = "packages"
TMP_PREFIX = ".tmp-"


class SharedStorageDistributor:
    """Pipeline code in one fsspec store (``file://``, ``hdfs://``, ``s3://``...) that every
    nimbus and supervisor reads; the analog of Storm's ``HDFSCodeDistributor``.

    There is no per-host state and no registration: once the package is stored, every live
    nimbus can read it, so ``replication_count`` is ``live_nimbuses()`` (0 while the object
    is missing or has the wrong size). How many copies the store itself keeps (HDFS
    replication, S3's redundancy) is out of stratus's sight, and so is not counted.

    Uploads go to ``packages/.tmp-<uuid>`` and are then moved to the final name. On
    ``file://`` the move is an atomic ``rename``; on object stores (S3, GCS) it is a
    server-side copy and the object appears at once, whole, under its final key (their PUT
    and COPY are atomic); either way the final object is read back and hashed before the
    upload returns. A crash between the copy and the move can leave a ``.tmp-`` object,
    never a wrong object under a digest name.

    ``on_change`` callbacks are kept but never called: the count changes only when the live
    nimbuses change, which the nimbus already watches.
    """

    def __init__(self, url: str, *, live_nimbuses: Callable[[], int]) -> None:
        self.url = url
        self._live_nimbuses = live_nimbuses
        self._fs: Any = None  # an fsspec AbstractFileSystem once prepared
        self._packages = ""
        self._callbacks: list[Callable[[], None]] = []

    def prepare(self) -> None:
        """Open the store and create its packages directory; ``CodeStoreError`` if it can't."""
        try:
            fs, root = fsspec.core.url_to_fs(self.url)
            packages = f"{str(root).rstrip('/')}/{PACKAGES_DIR}"
            fs.makedirs(packages, exist_ok=True)
        except (ValueError, ImportError, OSError) as exc:  # unknown protocol, no driver, I/O
            raise CodeStoreError(self.url, "open the packages directory", exc) from exc
        self._fs, self._packages = fs, packages
        log.info("event=shared_code_store_ready url=%s", self.url)

    def upload(self, package: Path, pipeline: str) -> CodeMeta:
        """Store ``package`` under its digest; an intact object already there is kept as is."""
        fs = self._store()
        tmp = f"{self._packages}/{TMP_PREFIX}{uuid.uuid4().hex}"
        try:
            meta = self._write(fs, package, tmp)
            final = self._object(meta.digest)
            if self._is_intact(fs, final, meta, pipeline):
                log.info(
                    "event=shared_code_present pipeline=%s digest=%s url=%s",
                    pipeline,
                    meta.digest,
                    self.url,
                )
                return meta
            _publish(fs, tmp, final, meta)
        except OSError as exc:
            raise CodeStoreError(self.url, f"store {package} for {pipeline}", exc) from exc
        finally:
            _remove_quietly(fs, tmp)
        log.info(
            "event=shared_code_uploaded pipeline=%s digest=%s size_bytes=%d url=%s",
            pipeline,
            meta.digest,
            meta.size_bytes,
            self.url,
        )
        return meta

    def download(self, dest: Path, pipeline: str, meta: CodeMeta) -> list[Path]:
        """Copy the package to ``dest/<digest>.pkg``, renamed there only once it checks."""
        fs = self._store()
        check = copy_check(meta)
        private_dirs(dest)
        target = dest / f"{meta.digest}{SUFFIX}"
        fd, tmp_name = tempfile.mkstemp(dir=dest, prefix=".download-", suffix=".tmp")
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out, fs.open(self._object(meta.digest), "rb") as src:
                found, size = _copy_hashing(src, out, check.hasher(), limit=meta.size_bytes)
                out.flush()
                os.fsync(out.fileno())
            _check(check, found, size, f"the copy of {pipeline}'s package from {self.url}")
            os.replace(tmp, target)
        except OSError as exc:
            raise CodeUnavailableError(
                f"could not read {pipeline}'s package {meta.digest} from {self.url}: {exc!r}"
            ) from exc
        finally:
            tmp.unlink(missing_ok=True)
        log.info(
            "event=shared_code_downloaded pipeline=%s digest=%s dest=%s",
            pipeline,
            meta.digest,
            dest,
        )
        return [target]

    def replication_count(self, pipeline: str, meta: CodeMeta) -> int:
        """``live_nimbuses()`` once the object is stored with its size, else 0."""
        return self._live_nimbuses() if self.holds(pipeline, meta) else 0

    def holds(self, pipeline: str, meta: CodeMeta) -> bool:
        """Whether the object is stored with ``meta.size_bytes`` (one ``info`` call)."""
        try:
            return self._stored_size(meta.digest) == meta.size_bytes
        except OSError as exc:
            log.warning(
                "event=shared_code_store_unreachable pipeline=%s digest=%s url=%s error=%r",
                pipeline,
                meta.digest,
                self.url,
                exc,
            )
            return False

    def replicate(self, pipeline: str, meta: CodeMeta) -> None:
        """Nothing to fetch; ``CodeUnavailableError`` if the object is missing or the wrong size."""
        try:
            size = self._stored_size(meta.digest)
        except OSError as exc:
            raise CodeUnavailableError(
                f"could not look up {pipeline}'s package {meta.digest} in {self.url}: {exc!r}"
            ) from exc
        if size != meta.size_bytes:
            found = "no such object" if size is None else f"{size} bytes"
            raise CodeUnavailableError(
                f"{pipeline}'s package {meta.digest} ({meta.size_bytes} bytes) is not in "
                f"{self.url} ({found}); submit the pipeline again"
            )

    def held(self) -> dict[str, CodeMeta]:
        """Always empty: no nimbus registers as a holder of shared code."""
        return {}

    def cleanup(self, pipeline: str, digest: str | None = None) -> None:
        """Nothing to do: no per-host copy; the object goes with ``purge``."""

    def purge(self, digest: str) -> None:
        """Delete the object; a missing one is already purged."""
        fs = self._store()
        try:
            fs.rm_file(self._object(digest))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise CodeStoreError(self.url, f"delete package {digest}", exc) from exc
        log.info("event=shared_code_purged digest=%s url=%s", digest, self.url)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Kept, never called: the count follows the live nimbuses, watched by the nimbus."""
        self._callbacks.append(callback)

    def close(self) -> None:
        """Forget the store (fsspec shares filesystem instances: it is not closed)."""
        self._callbacks.clear()
        self._fs = None
        log.info("event=shared_code_store_closed url=%s", self.url)

    def verify(self, meta: CodeMeta, *, pipeline: str | None = None) -> bool:
        """Hash the stored object again; False (and an error log) if it is missing or corrupt.

        A corrupt object is not deleted: it is the only copy, and an operator may want it.
        ``CodeStoreError`` if the store cannot be read (neither verdict can be given).
        """
        fs = self._store()
        try:
            digest, size = _hash_object(fs, self._object(meta.digest))
        except FileNotFoundError:
            log.error(
                "event=shared_code_missing pipeline=%s digest=%s url=%s",
                pipeline or "-",
                meta.digest,
                self.url,
            )
            return False
        except OSError as exc:
            raise CodeStoreError(self.url, f"read package {meta.digest}", exc) from exc
        if digest == meta.digest and size == meta.size_bytes:
            return True
        log.error(
            "event=shared_code_corrupt pipeline=%s digest=%s size_bytes=%d found_digest=%s "
            "found_size_bytes=%d url=%s action=kept",
            pipeline or "-",
            meta.digest,
            meta.size_bytes,
            digest,
            size,
            self.url,
        )
        return False

    def _store(self) -> Any:
        if self._fs is None:
            raise RuntimeError("SharedStorageDistributor: prepare() was not called or close() was")
        return self._fs

    def _object(self, digest: str) -> str:
        if not DIGEST.fullmatch(digest):
            raise ValueError(f"not a sha256 hex digest: {digest!r}")
        return f"{self._packages}/{digest}{SUFFIX}"

    def _stored_size(self, digest: str) -> int | None:
        try:
            return int(self._store().info(self._object(digest))["size"])
        except FileNotFoundError:
            return None

    def _write(self, fs: Any, package: Path, tmp: str) -> CodeMeta:
        """Copy ``package`` to the object ``tmp``, hashing it on the way."""
        with package.open("rb") as src, fs.open(tmp, "wb") as out:
            digest, size = _copy_hashing(src, out, new_hasher(Algorithm.SHA256))
            if isinstance(fs, LocalFileSystem):  # a shared mount: durable before the rename
                out.flush()
                os.fsync(out.fileno())
        return CodeMeta(digest, size)

    def _is_intact(self, fs: Any, final: str, meta: CodeMeta, pipeline: str) -> bool:
        """Whether ``final`` already holds these bytes (a retried submit, shared code)."""
        if self._stored_size(meta.digest) != meta.size_bytes:
            return False
        digest, _ = _hash_object(fs, final)
        if digest != meta.digest:
            log.warning(
                "event=shared_code_corrupt pipeline=%s digest=%s found_digest=%s url=%s "
                "action=rewrite",
                pipeline,
                meta.digest,
                digest,
                self.url,
            )
        return digest == meta.digest


def _publish(fs: Any, tmp: str, final: str, meta: CodeMeta) -> None:
    """Move ``tmp`` to ``final`` and check what ``final`` holds; on failure remove it."""
    try:
        fs.mv(tmp, final)
        digest, size = _hash_object(fs, final)
        _check(_by_sha256(meta), digest, size, f"the stored object {final}")
    except BaseException:
        _remove_quietly(fs, final)
        raise


def _by_sha256(meta: CodeMeta) -> CopyCheck:
    """The check of an object just written: the sha256 its upload was hashed to."""
    return CopyCheck(Algorithm.SHA256, meta.digest, meta.size_bytes)


def _check(check: CopyCheck, found: str, size: int, what: str) -> None:
    if not check.matches(found) or size != check.size_bytes:
        raise DigestMismatchError(
            f"{what} does not match its record: {check.algorithm} {found} ({size} bytes), "
            f"expected {check.expected} ({check.size_bytes} bytes)"
        )


def _hash_object(fs: Any, path: str) -> tuple[str, int]:
    """The sha256 of a stored object and its size."""
    sha = new_hasher(Algorithm.SHA256)
    size = 0
    with fs.open(path, "rb") as src:
        while chunk := src.read(CHUNK):
            sha.update(chunk)
            size += len(chunk)
    return sha.hexdigest(), size


def _copy_hashing(
    src: BinaryIO, out: BinaryIO, hasher: Hasher, limit: int | None = None
) -> tuple[str, int]:
    """Copy in ``CHUNK`` reads, hashing; stop once past ``limit`` bytes (the copy is wrong)."""
    size = 0
    while chunk := src.read(CHUNK):
        hasher.update(chunk)
        out.write(chunk)
        size += len(chunk)
        if limit is not None and size > limit:
            break
    return hasher.hexdigest(), size


def _remove_quietly(fs: Any, path: str) -> None:
    with contextlib.suppress(OSError):
        fs.rm_file(path)
