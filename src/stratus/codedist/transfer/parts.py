"""A package in byte ranges from several holders at once, written in place, then checked.

The part file is preallocated; each range (``plan.split_ranges``) is fetched on a thread of
its own, from its own first holder and then from the others (``plan.PartHolders``), and
written where it belongs as it comes. Once every range is in, the whole file is hashed
(``CopyCheck``): bytes from several holders can only be checked together::

    outcome = fetch_in_parts(client, digest, copy_check(meta), holders, part, parts=4)
    outcome.verified        # True: ``part`` holds the package
    outcome.failed          # holder -> what went wrong
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from stratus.codedist.transfer.check import CopyCheck, hash_file
from stratus.codedist.transfer.client import CodeClient, TransferError, describe_status
from stratus.codedist.transfer.plan import (
    MAX_RETRIES_PER_HOLDER,
    Cursor,
    HolderError,
    PartHolders,
    split_ranges,
    wrong_bytes,
)
from stratus.files import PRIVATE_FILE_MODE


@dataclass
class PartsOutcome:
    """What a download in parts gave: every range, and whether together they check."""

    ranges: int
    complete: bool = False  # every range arrived
    found: str | None = None  # the digest of the whole file, once complete
    verified: bool = False
    failed: dict[str, str] = field(default_factory=dict)  # holder -> what went wrong
    served: list[str] = field(default_factory=list)  # the holders that sent a range


def fetch_in_parts(
    client: CodeClient,
    digest: str,
    check: CopyCheck,
    holders: list[str],
    part: Path,
    *,
    parts: int,
) -> PartsOutcome:
    """Fetch ``parts`` ranges at once into ``part``; unless verified, ``part`` is deleted."""
    ranges = split_ranges(check.size_bytes, parts)
    state = PartHolders(holders)
    outcome = PartsOutcome(len(ranges))
    fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    os.fchmod(fd, PRIVATE_FILE_MODE)  # a file left by an earlier try keeps its mode otherwise
    try:
        _preallocate(fd, check.size_bytes)
        writer = _RangeWriter(client, digest, check.size_bytes, fd, state)
        with ThreadPoolExecutor(len(ranges), thread_name_prefix="code-fetch") as pool:
            jobs = [pool.submit(writer.fetch, Cursor(*span), i) for i, span in enumerate(ranges)]
            outcome.complete = all([job.result() for job in jobs])
    except BaseException:
        part.unlink(missing_ok=True)  # its holes would pass for a download to resume
        raise
    finally:
        os.close(fd)
    outcome.failed = dict(state.failed)
    outcome.served = sorted(state.served)
    if outcome.complete:
        outcome.found, _ = hash_file(part, check.algorithm)
        outcome.verified = check.matches(outcome.found)
    if not outcome.verified:
        part.unlink(missing_ok=True)
    return outcome


def _preallocate(fd: int, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:  # a file system without fallocate: a sparse file does as well
        os.ftruncate(fd, size)


@dataclass(frozen=True)
class _RangeWriter:
    """Fetches byte ranges of one package into its part file ``fd``, each where it belongs."""

    client: CodeClient
    digest: str
    size: int
    fd: int
    holders: PartHolders

    def fetch(self, cursor: Cursor, index: int) -> bool:
        """Bytes [cursor.offset, cursor.end) from the first holder that sends them."""
        for holder in self.holders.order_for(index):
            retries = 0
            while not cursor.done and self.holders.usable(holder):
                try:
                    self._request(holder, cursor)
                except HolderError as exc:
                    if not exc.retry or retries >= MAX_RETRIES_PER_HOLDER:
                        self.holders.fail(holder, exc.reason)
                    retries += 1
            if cursor.done:
                self.holders.note_served(holder)
                return True
        return False

    def _request(self, holder: str, cursor: Cursor) -> None:
        """One GET of bytes [cursor.offset, cursor.end), written in place as they come."""
        start, last = cursor.offset, cursor.end - 1
        expected = f"bytes {start}-{last}/{self.size}"
        try:
            with self.client.get(holder, self.digest, f"bytes={start}-{last}") as body:
                if body.status != 206:
                    raise HolderError(describe_status(body))
                if body.header("content-range") != expected:
                    got = body.header("content-range")
                    raise wrong_bytes(f"answered Range with {got!r}, not {expected!r}")
                while n := body.move_into(self.fd, cursor.offset, cursor.end - cursor.offset):
                    cursor.offset += n
        except TransferError as exc:
            raise HolderError(exc.reason, retry=cursor.offset > start) from None
        if not cursor.done:
            raise HolderError(
                f"the body of bytes {start}-{last} ended at byte {cursor.offset}",
                retry=cursor.offset > start,
            )
