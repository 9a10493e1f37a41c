"""A package from one holder in one stream, resumed where it stopped, checked as it is written.

The part file is hashed (``CopyCheck``: BLAKE3 if recorded, else sha256) from its own pages,
mapped ``HASH_WINDOW`` at a time right behind the writes, while they are still in the CPU's
caches: the digest checked is that of what the file holds, not of a buffer on its way there.
What an earlier attempt left in the part file counts; a holder that ignores ``Range`` (a
200) or names another range starts the file again::

    fetch_whole(client, digest, copy_check(meta), "host-a:40123", part)   # or HolderError
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from stratus.codedist.transfer.check import CopyCheck
from stratus.codedist.transfer.client import Body, CodeClient, TransferError, describe_status
from stratus.codedist.transfer.plan import MAX_RETRIES_PER_HOLDER, HolderError, wrong_bytes
from stratus.files import PRIVATE_FILE_MODE

HASH_WINDOW = 4 << 20  # a download is hashed from the page cache (mmap) this much at a time


class PartFile:
    """The part file of a single-stream download, hashed as it is written."""

    def __init__(self, part: Path, check: CopyCheck) -> None:
        self.fd = os.open(part, os.O_RDWR | os.O_CREAT, PRIVATE_FILE_MODE)
        os.fchmod(self.fd, PRIVATE_FILE_MODE)  # a part resumed keeps its mode otherwise
        self.size = check.size_bytes
        self.check = check
        self.hasher = check.hasher()
        self.have = 0  # bytes in the file
        self.hashed = 0  # of which hashed
        self._resume()

    def _resume(self) -> None:
        """What an earlier attempt left counts (hashed later); a file too long starts again."""
        length = os.fstat(self.fd).st_size
        if length >= self.size:
            os.ftruncate(self.fd, 0)
            return
        self.have = length

    def restart(self) -> None:
        os.ftruncate(self.fd, 0)
        self.hasher = self.check.hasher()
        self.have = self.hashed = 0

    def take(self, body: Body) -> int:
        """The next bytes of ``body`` into the file (no more than the package's size)."""
        n = body.move_into(self.fd, self.have, self.size - self.have)
        self.have += n
        if self.have - self.hashed >= HASH_WINDOW:
            self._hash_written()
        return n

    def digest(self) -> str:
        """The digest of everything written (by the check's algorithm)."""
        self._hash_written()
        return self.hasher.hexdigest()

    def _hash_written(self) -> None:
        """Hash the bytes written since the last call, from the file's pages."""
        while self.hashed < self.have:
            base = self.hashed - self.hashed % mmap.ALLOCATIONGRANULARITY
            end = min(self.have, base + HASH_WINDOW)
            with (
                mmap.mmap(self.fd, end - base, offset=base, prot=mmap.PROT_READ) as window,
                memoryview(window) as view,
            ):
                self.hasher.update(view[self.hashed - base :])
            self.hashed = end

    def close(self) -> None:
        os.close(self.fd)


def fetch_whole(client: CodeClient, digest: str, check: CopyCheck, holder: str, part: Path) -> None:
    """The package from one holder into ``part``, resumed where it stopped; verified.

    HolderError if the holder failed (``retry`` spent) or sent other bytes.
    """
    stream = PartFile(part, check)
    try:
        resumed = stream.have > 0
        retries = 0
        while True:
            try:
                _request_rest(client, holder, digest, stream)
            except HolderError as exc:
                if not exc.retry or retries >= MAX_RETRIES_PER_HOLDER:
                    raise
                retries += 1
                continue
            found = stream.digest()
            if check.matches(found):
                return
            stream.restart()
            if not resumed:
                raise wrong_bytes(f"sent bytes that hash to {check.describe(found)}")
            resumed = False  # the part file was to blame, maybe: once more from the start
    except BaseException:
        if stream.have == 0:
            part.unlink(missing_ok=True)
        raise
    finally:
        stream.close()


def _request_rest(client: CodeClient, holder: str, digest: str, stream: PartFile) -> None:
    """One GET of what ``stream`` lacks; HolderError unless the body completes it."""
    start = stream.have
    try:
        with client.get(holder, digest, f"bytes={start}-" if start else None) as body:
            _accept_rest(body, stream, start)
            while stream.have < stream.size and stream.take(body):
                pass
            if stream.have == stream.size and not body.finished():
                raise wrong_bytes(f"more than the {stream.size} bytes expected")
    except TransferError as exc:
        raise HolderError(exc.reason, retry=stream.have > start) from None
    if stream.have < stream.size:
        raise HolderError(
            f"the body ended at byte {stream.have} of {stream.size}", retry=stream.have > start
        )


def _accept_rest(body: Body, stream: PartFile, start: int) -> None:
    """Check the answer to a request from byte ``start``; a 200 starts the file again."""
    size = stream.size
    if body.status == 200:
        if start:
            stream.restart()  # the holder ignored the Range: its body is the whole file
        length = body.header("content-length")
        if length is not None and length != str(size):
            raise wrong_bytes(f"its copy is {length} bytes, not {size}")
        return
    if body.status == 206 and start:
        expected = f"bytes {start}-{size - 1}/{size}"
        got = body.header("content-range")
        if got != expected:
            stream.restart()
            raise HolderError(
                f"answered Range with {got!r}, not {expected!r}",
                retry=True,  # once more, from the start
            )
        return
    raise HolderError(describe_status(body))
