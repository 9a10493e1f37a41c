"""Pipeline packages on a nimbus's local disk, content-addressed by sha256.

A package is written to a temporary file in the store's directory, hashed while it is
written, then renamed to ``<sha256>.pkg``: a crash mid-upload leaves no half-written package
under a digest name, and storing the same bytes twice keeps one copy::

    store = PackageStore(Path("/var/lib/stratus/packages"), max_bytes=256 << 20)
    stored = store.put(upload_stream)        # StoredPackage(digest, size_bytes)
    store.path(stored.digest).read_bytes()
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from stratus.nimbus.errors import InvalidRequestError, PackageTooLargeError

CHUNK = 1 << 20
SUFFIX = ".pkg"


@dataclass(frozen=True)
class StoredPackage:
    digest: str
    size_bytes: int


class PackageStore:
    """A directory of packages named by their sha256; writes are atomic."""

    def __init__(self, directory: Path, *, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        directory.mkdir(parents=True, exist_ok=True)

    def path(self, digest: str) -> Path:
        return self.directory / f"{digest}{SUFFIX}"

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def digests(self) -> set[str]:
        return {p.name.removesuffix(SUFFIX) for p in self.directory.glob(f"*{SUFFIX}")}

    def put(self, stream: BinaryIO) -> StoredPackage:
        """Store what ``stream`` yields; PackageTooLargeError past ``max_bytes``, nothing kept."""
        fd, tmp_name = tempfile.mkstemp(dir=self.directory, prefix=".upload-", suffix=".tmp")
        tmp = Path(tmp_name)
        try:
            digest, size = _copy_hashing(stream, fd, self.max_bytes)
            if size == 0:
                raise InvalidRequestError("the package is empty")
            os.replace(tmp, self.path(digest))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return StoredPackage(digest, size)

    def remove(self, digest: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(digest).unlink()

    def remove_leftovers(self) -> None:
        """Delete temporary files of uploads that a crash interrupted."""
        for leftover in self.directory.glob(".upload-*.tmp"):
            leftover.unlink(missing_ok=True)


def _copy_hashing(stream: BinaryIO, fd: int, limit: int) -> tuple[str, int]:
    sha = hashlib.sha256()
    size = 0
    with os.fdopen(fd, "wb") as out:
        while chunk := stream.read(CHUNK):
            size += len(chunk)
            if size > limit:
                raise PackageTooLargeError(
                    f"the package is larger than nimbus.max.upload.bytes ({limit} bytes)"
                )
            sha.update(chunk)
            out.write(chunk)
        out.flush()
        os.fsync(out.fileno())
    return sha.hexdigest(), size
