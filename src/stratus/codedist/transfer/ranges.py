"""Package digests and HTTP byte ranges, as both package servers and the fetch read them."""

from __future__ import annotations

import re

from stratus.api.echo import echo

DIGEST = re.compile(r"[0-9a-f]{64}")
RANGE_RULE = "one byte range: bytes=first-last, bytes=first- or bytes=-suffix"
_RANGE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", re.IGNORECASE)


class UnsatisfiableRangeError(Exception):
    """A byte range that starts past the end of the package (answered with 416)."""


def parse_range(header: str, size: int) -> tuple[int, int]:
    """The [start, end) of a ``Range`` header on a file of ``size`` bytes.

    ValueError unless it is ``RANGE_RULE``; UnsatisfiableRangeError if it starts past the end.
    Starlette's FileResponse reads such a header to the same range.
    """
    match = _RANGE.fullmatch(header)
    if match is None or match.group(1) + match.group(2) == "":
        raise ValueError(f"{echo(header)} is not {RANGE_RULE}")
    first, last = match.group(1), match.group(2)
    if not first:
        suffix = int(last)
        if suffix == 0 or size == 0:
            raise UnsatisfiableRangeError()
        return max(size - suffix, 0), size
    start = int(first)
    if last and int(last) < start:
        raise ValueError(f"{echo(header)} ends before it starts")
    if start >= size:
        raise UnsatisfiableRangeError()
    return start, min(int(last) + 1, size) if last else size
