"""Checking a copy of a package against its record: by BLAKE3 when recorded, else by sha256.

The sha256 names a package: it is the content address in the pipeline record, in every file
name and URL. The leader also records the package's BLAKE3 at submit, computed in the same
pass as the sha256 over the upload it checks (``package_store.receive``). Every later copy
(a standby's fetch, a resumed or multi-holder fetch, a supervisor's download, a copy read
from the shared store) is checked against that BLAKE3, several times cheaper than sha256
on one CPU; a record written before BLAKE3 was recorded has none, and its copies are
checked against the sha256 as before. A copy that matches neither is discarded::

    check = copy_check(meta)                 # BLAKE3 if meta.blake3, else sha256
    hasher = check.hasher()
    hasher.update(data)
    check.matches(hasher.hexdigest())        # True for the recorded bytes
    check.file_matches(path)                 # hashes a whole file the same way
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

import blake3

from stratus.codedist.distributor import CodeMeta

READ_CHUNK = 4 << 20  # a file is hashed this much at a time, read into one reused buffer


class Algorithm(StrEnum):
    SHA256 = "sha256"
    BLAKE3 = "blake3"


class Hasher(Protocol):
    """What ``hashlib``'s and ``blake3``'s hashers have in common."""

    def update(self, data: bytes | memoryview, /) -> object: ...

    def hexdigest(self) -> str: ...


def new_hasher(algorithm: Algorithm) -> Hasher:
    """A fresh hasher (BLAKE3 on one thread: the other CPUs are busy copying)."""
    if algorithm is Algorithm.BLAKE3:
        return blake3.blake3()
    return hashlib.sha256()


@dataclass(frozen=True)
class CopyCheck:
    """The digest a copy must hash to, and by which algorithm."""

    algorithm: Algorithm
    expected: str
    size_bytes: int

    def hasher(self) -> Hasher:
        return new_hasher(self.algorithm)

    def matches(self, found: str) -> bool:
        return found == self.expected

    def describe(self, found: str) -> str:
        """How a copy that hashed to ``found`` differs, for error messages."""
        return f"{self.algorithm} {found}, not {self.expected}"

    def file_matches(self, path: Path) -> bool:
        """Whether ``path`` holds exactly the recorded bytes (its size, then its digest)."""
        try:
            if path.stat().st_size != self.size_bytes:
                return False
            found, _ = hash_file(path, self.algorithm)
        except FileNotFoundError:
            return False
        return self.matches(found)


def copy_check(meta: CodeMeta) -> CopyCheck:
    """The check of a copy of ``meta``'s package: its BLAKE3 if recorded, else its sha256."""
    if meta.blake3:
        return CopyCheck(Algorithm.BLAKE3, meta.blake3, meta.size_bytes)
    return CopyCheck(Algorithm.SHA256, meta.digest, meta.size_bytes)


def hash_file(path: Path, algorithm: Algorithm = Algorithm.SHA256) -> tuple[str, int]:
    """The digest (hex) and size of a file, read ``READ_CHUNK`` at a time into one buffer."""
    hasher = new_hasher(algorithm)
    size = 0
    buffer = bytearray(READ_CHUNK)
    view = memoryview(buffer)
    with path.open("rb", buffering=0) as src:
        while n := src.readinto(buffer):
            hasher.update(view[:n])
            size += n
    return hasher.hexdigest(), size
