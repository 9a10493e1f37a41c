"""Pipeline packages on a nimbus's local disk, content-addressed by sha256.

An upload is written to a temporary file in the store's directory and hashed while it is
written (``receive``: its sha256, which names it, and its BLAKE3, which the pipeline record
keeps for checking copies, in the same pass); once the caller has validated it, it is
renamed to ``<sha256>.pkg`` (``adopt``). A crash mid-upload leaves no half-written package
under a digest name, and storing the same bytes twice keeps one copy. ``verify`` hashes a
stored package again only when its size, mtime or inode changed since it was last found
intact (a stored package is dated a few seconds back, so that any later write shows in its
mtime)::

    store = PackageStore(Path("/var/lib/stratus/packages"), max_bytes=256 << 20)
    received = store.receive(upload_stream)   # Received(path, digest, size_bytes, blake3)
    stored = store.adopt(received.path)       # StoredPackage(digest, size_bytes)
    store.verify(stored.digest)               # True; False (and deleted) if corrupt
    store.path(stored.digest).read_bytes()

Downloads from other nimbuses are written to ``.download-<digest>.part`` (``transfer/``):
those survive a restart, so that an interrupted download resumes; ``remove_leftovers``
removes only the ``.upload-*.tmp`` files, which nobody can finish.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import blake3

from stratus.api.errors import InvalidRequestError, PackageTooLargeError
from stratus.codedist.transfer.check import hash_file
from stratus.files import make_private_file, private_dirs

log = logging.getLogger(__name__)

CHUNK = 1 << 20
SUFFIX = ".pkg"
UPLOAD_PREFIX = ".upload-"
UPLOAD_SUFFIX = ".tmp"
DOWNLOAD_PREFIX = ".download-"
DOWNLOAD_SUFFIX = ".part"
# A verdict is cached only for a file last modified longer ago than this: a file system
# stamps mtimes with a coarse clock, so a write soon after the hash could leave size, mtime
# and inode unchanged (git's "racily clean"). Linux file systems stamp with the kernel's
# tick (10 ms at most); those with whole-second mtimes (ext3, HFS+, FAT: 2 s) need more.
RACY_SECS = 0.1
RACY_WHOLE_SECONDS_SECS = 3.0
SETTLED_AGE_SECS = RACY_WHOLE_SECONDS_SECS + 1  # how far back a stored package is dated
VERIFY_ATTEMPTS = 2  # hashes of a file that changes while it is hashed, before giving up


@dataclass(frozen=True)
class StoredPackage:
    digest: str
    size_bytes: int
    blake3: str | None = None  # known when the bytes were received here, for the record


@dataclass(frozen=True)
class Received:
    """An upload written to a temporary file of the store, not yet adopted."""

    path: Path
    digest: str
    size_bytes: int
    blake3: str  # of the same bytes, for the pipeline record: copies are checked against it


_FileKey = tuple[int, int, int]  # (st_size, st_mtime_ns, st_ino)


class PackageStore:
    """A directory of packages named by their sha256; writes are atomic."""

    def __init__(self, directory: Path, *, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        private_dirs(directory)  # packages hold a pipeline's code and conf
        self._lock = threading.Lock()
        self._received: dict[Path, str] = {}  # temp file -> digest hashed while receiving
        self._verified: dict[str, _FileKey] = {}  # digest -> the file found intact

    def path(self, digest: str) -> Path:
        return self.directory / f"{digest}{SUFFIX}"

    def download_path(self, digest: str) -> Path:
        """Where a download of ``digest`` from another nimbus is written until verified."""
        return self.directory / f"{DOWNLOAD_PREFIX}{digest}{DOWNLOAD_SUFFIX}"

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def digests(self) -> set[str]:
        return {p.name.removesuffix(SUFFIX) for p in self.directory.glob(f"*{SUFFIX}")}

    def receive(self, stream: BinaryIO) -> Received:
        """Write what ``stream`` yields to a temporary file, hashing it; fsync'ed.

        PackageTooLargeError past ``max_bytes`` and InvalidRequestError for an empty
        stream, nothing kept. The caller adopts the file or deletes it.
        """
        fd, tmp_name = tempfile.mkstemp(
            dir=self.directory, prefix=UPLOAD_PREFIX, suffix=UPLOAD_SUFFIX
        )
        tmp = Path(tmp_name)
        try:
            digest, checksum, size = _copy_hashing(stream, fd, self.max_bytes)
            if size == 0:
                raise InvalidRequestError("the package is empty")
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        with self._lock:
            # Forget received files that their caller deleted without adopting them.
            self._received = {p: d for p, d in self._received.items() if p.exists()}
            self._received[tmp] = digest
        return Received(tmp, digest, size, checksum)

    def digest_of(self, path: Path) -> str:
        """The digest of a received file (known already), or of any other file (hashed)."""
        with self._lock:
            remembered = self._received.get(path)
        return remembered or hash_file(path)[0]

    def adopt(self, path: Path, digest: str | None = None) -> StoredPackage:
        """Rename a file of this store's directory to ``<digest>.pkg``; ``path`` is gone after.

        ``digest`` is that of ``receive``, or the one given (the caller checked the bytes),
        else the file is hashed. If an intact copy is stored already, ``path`` is dropped.
        """
        with self._lock:
            remembered = self._received.pop(path, None)
        digest = digest or remembered or hash_file(path)[0]
        size = path.stat().st_size
        if self.verify(digest):
            path.unlink(missing_ok=True)
            return StoredPackage(digest, size)
        final = self.path(digest)
        make_private_file(path)  # whoever wrote it (an upload, a download, a copy)
        settled = _settle(path)  # while no one else knows the file: nothing can write it
        os.replace(path, final)
        _fsync_directory(self.directory)
        if _file_key(final) == settled:  # a write since the rename would have moved its mtime
            with self._lock:
                self._verified[digest] = settled  # hashed as written: no need to hash it again
        log.info("event=package_stored digest=%s size_bytes=%d", digest, size)
        return StoredPackage(digest, size)

    def put(self, stream: BinaryIO) -> StoredPackage:
        """Store what ``stream`` yields; PackageTooLargeError past ``max_bytes``, nothing kept."""
        received = self.receive(stream)
        try:
            return self.adopt(received.path)
        except BaseException:
            self.discard(received.path)
            raise

    def discard(self, path: Path) -> None:
        """Delete a received file that will not be adopted."""
        with self._lock:
            self._received.pop(path, None)
        path.unlink(missing_ok=True)

    def verify(self, digest: str) -> bool:
        """Whether ``<digest>.pkg`` is stored and hashes to ``digest``; a corrupt one is deleted.

        The file is hashed only if its (size, mtime, inode) changed since it was last found
        intact, or if it had been modified just before that check (``_racy``).
        """
        path = self.path(digest)
        for _ in range(VERIFY_ATTEMPTS):
            verdict = self._verify_once(path, digest)
            if verdict is not None:
                return verdict
        return False  # written to all along: not intact as far as can be told (kept)

    def _verify_once(self, path: Path, digest: str) -> bool | None:
        """The verdict, or None if the file changed while it was hashed."""
        try:
            before = _file_key(path)
        except FileNotFoundError:
            return False
        with self._lock:
            if self._verified.get(digest) == before:
                return True
        checked_at = time.time_ns()
        try:
            found, _ = hash_file(path)
            after = _file_key(path)
        except FileNotFoundError:
            return False
        if after != before:
            return None  # replaced (a new copy stored) or written meanwhile
        if found != digest:
            self._drop_corrupt(path, digest, found, after)
            return False
        if not _racy(after[1], checked_at):
            with self._lock:
                self._verified[digest] = after
        return True

    def remove(self, digest: str) -> None:
        with self._lock:
            self._verified.pop(digest, None)
        with contextlib.suppress(FileNotFoundError):
            self.path(digest).unlink()

    def remove_download(self, digest: str) -> None:
        """Delete a partial download of ``digest``, if any."""
        self.download_path(digest).unlink(missing_ok=True)

    def remove_leftovers(self) -> None:
        """Delete temporary files of uploads that a crash interrupted (downloads resume)."""
        for leftover in self.directory.glob(f"{UPLOAD_PREFIX}*{UPLOAD_SUFFIX}"):
            leftover.unlink(missing_ok=True)

    def _drop_corrupt(self, path: Path, digest: str, found: str, key: _FileKey) -> None:
        """Delete the corrupt file hashed, unless another has taken its name since."""
        log.error(
            "event=package_corrupt digest=%s found_digest=%s path=%s action=deleted",
            digest,
            found,
            path,
        )
        with self._lock:
            self._verified.pop(digest, None)
        with contextlib.suppress(FileNotFoundError):
            if _file_key(path) == key:
                path.unlink()


def _settle(path: Path) -> _FileKey:
    """Date a file just hashed ``SETTLED_AGE_SECS`` back: any later write then changes its mtime.

    Without it, a file written moments ago is racy (see ``RACY_SECS``) and every ``verify``
    in the next moments would hash it again.
    """
    st = path.stat()
    settled_ns = time.time_ns() - int(SETTLED_AGE_SECS * 1e9)
    os.utime(path, ns=(st.st_atime_ns, min(st.st_mtime_ns, settled_ns)))
    return _file_key(path)


def _racy(mtime_ns: int, checked_at_ns: int) -> bool:
    """Whether a write after the check could have kept ``mtime_ns`` (then hash every time)."""
    whole_seconds = mtime_ns % 1_000_000_000 == 0
    window = RACY_WHOLE_SECONDS_SECS if whole_seconds else RACY_SECS
    return checked_at_ns - mtime_ns <= window * 1e9


def _file_key(path: Path) -> _FileKey:
    st = path.stat()
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_hashing(stream: BinaryIO, fd: int, limit: int) -> tuple[str, str, int]:
    """Copy ``stream`` into ``fd``: the sha256 and BLAKE3 of what was written, and its size."""
    sha = hashlib.sha256()
    checksum = blake3.blake3()
    size = 0
    with os.fdopen(fd, "wb") as out:
        while chunk := stream.read(CHUNK):
            size += len(chunk)
            if size > limit:
                raise PackageTooLargeError(
                    f"the package is larger than nimbus.max.upload.bytes ({limit} bytes)"
                )
            sha.update(chunk)
            checksum.update(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    return sha.hexdigest(), checksum.hexdigest(), size
