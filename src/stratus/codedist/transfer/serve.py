"""What a nimbus answers to ``GET /api/v1/code/<digest>``: one decision for every server.

Both the API route (``nimbus/http/code_routes.py``) and the package server (``server.py``) ask
``locate`` and only send what it decided, so they answer alike: a stored package whole
(200) or one byte range of it (206, ``RANGE_RULE``), or a refusal with the API's error
body: 422 for what is not a sha256 or a malformed ``Range``, 404 for a digest the store
does not hold, 416 (with ``Content-Range: bytes */<size>``) for a range past the end::

    answer = locate(store, digest, request.headers.get("Range"))
    if isinstance(answer, Refusal):
        send(answer.status, answer.headers, answer.body())
    else:
        send_file(answer.path, answer.start, answer.end)   # 206 if answer.partial
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from stratus.api.echo import echo
from stratus.api.errors import ApiError, InvalidRequestError, UnknownCodeError
from stratus.api.records import ErrorBody
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.ranges import DIGEST, UnsatisfiableRangeError, parse_range

log = logging.getLogger(__name__)

RANGE_NOT_SATISFIABLE = 416


@dataclass(frozen=True)
class PackageFile:
    """A stored package to send: bytes [start, end) of ``path``, a range if ``partial``."""

    digest: str
    path: Path
    stat: os.stat_result
    start: int
    end: int
    partial: bool

    @property
    def size(self) -> int:
        return self.stat.st_size

    @property
    def content_range(self) -> str:
        return f"bytes {self.start}-{self.end - 1}/{self.size}"

    @property
    def etag(self) -> str:
        return f'"{self.digest}"'  # content-addressed: the digest is the version


@dataclass(frozen=True)
class Refusal:
    """An error answer: its status, the API's error code and message, extra headers."""

    status: int
    error: str
    message: str
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, error: ApiError) -> Refusal:
        return cls(error.status, error.code, str(error))

    def body(self) -> ErrorBody:
        return ErrorBody(error=self.error, message=self.message)


def locate(store: PackageStore, digest: str, range_header: str | None) -> PackageFile | Refusal:
    """What to answer to a GET of ``digest`` with ``range_header`` (None: no ``Range``)."""
    if not DIGEST.fullmatch(digest):
        message = f"invalid request: {echo(digest)} is not a sha256 digest"
        return Refusal.of(InvalidRequestError(message))
    path = store.path(digest)
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        log.debug("event=code_not_served digest=%s reason=unknown", digest)
        return Refusal.of(UnknownCodeError(f"this nimbus holds no package {digest}"))
    if range_header is None:
        return PackageFile(digest, path, stat, 0, stat.st_size, partial=False)
    try:
        start, end = parse_range(range_header, stat.st_size)
    except ValueError as exc:
        return Refusal.of(InvalidRequestError(f"invalid request: Range {exc}"))
    except UnsatisfiableRangeError:
        return Refusal(
            RANGE_NOT_SATISFIABLE,
            "range_not_satisfiable",
            f"Range {echo(range_header)} starts past the end of package {digest} "
            f"({stat.st_size} bytes)",
            {"Content-Range": f"bytes */{stat.st_size}"},
        )
    return PackageFile(digest, path, stat, start, end, partial=True)
