"""Planning a fetch: the byte ranges of a download in parts, which holder sends which, and
what a failed request means for the holder that answered it.

A download in parts splits the package into contiguous ranges (``split_ranges``), one per
thread; each range starts with its own holder (``PartHolders.order_for``), so the parts
spread over the holders, and moves on to the next holder if that one fails. A holder that
failed is given no other part. A request that failed after some bytes arrived may be made
again (``HolderError.retry``), up to ``MAX_RETRIES_PER_HOLDER`` times::

    ranges = split_ranges(size, 4)          # [(0, s), (s, 2s), ...]
    holders = PartHolders(["a:1", "b:2"])
    holders.order_for(1)                    # ["b:2", "a:1"]
    holders.fail("b:2", "refused"); holders.usable("b:2")   # False
"""

from __future__ import annotations

import threading

MAX_RETRIES_PER_HOLDER = 3  # attempts of one holder again after one that made progress
WRONG = "wrong bytes: "  # the reason of a holder whose copy is not the package asked for


class HolderError(Exception):
    """One request to a holder failed; ``retry``: the same holder is worth another request."""

    def __init__(self, reason: str, *, retry: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry = retry


def wrong_bytes(what: str) -> HolderError:
    """The holder's copy is not the package asked for (its digest or size differ)."""
    return HolderError(WRONG + what)


def sent_wrong_bytes(reason: str) -> bool:
    """Whether a failure's reason says the holder sent other bytes (not just failed)."""
    return reason.startswith(WRONG)


def split_ranges(size: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous [start, end) ranges covering ``size`` bytes (fewer if tiny)."""
    step = max(1, -(-size // parts))
    return [(start, min(start + step, size)) for start in range(0, size, step)]


class Cursor:
    """How far the download of one byte range [offset, end) got."""

    def __init__(self, offset: int, end: int) -> None:
        self.offset = offset
        self.end = end

    @property
    def done(self) -> bool:
        return self.offset >= self.end


class PartHolders:
    """The holders of a download in parts; one that fails is given no other part."""

    def __init__(self, holders: list[str]) -> None:
        self.all = holders
        self._lock = threading.Lock()
        self.failed: dict[str, str] = {}
        self.served: dict[str, int] = {}  # holder -> ranges it sent

    def order_for(self, index: int) -> list[str]:
        """Every holder, part ``index``'s own first: the parts spread over the holders."""
        first = index % len(self.all)
        return self.all[first:] + self.all[:first]

    def usable(self, holder: str) -> bool:
        with self._lock:
            return holder not in self.failed

    def fail(self, holder: str, reason: str) -> None:
        with self._lock:
            self.failed.setdefault(holder, reason)

    def note_served(self, holder: str) -> None:
        with self._lock:
            self.served[holder] = self.served.get(holder, 0) + 1
