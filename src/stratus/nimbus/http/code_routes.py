"""``GET`` and ``HEAD /api/v1/code/{digest}``: a nimbus serves the packages of its store.

Any nimbus answers, leader or not: this is how nimbuses (and supervisors) copy code from
each other. The body is the stored file, read in large chunks; one byte range may be asked
for (``Range: bytes=first-last``, ``bytes=first-`` or ``bytes=-suffix``), which a download
uses to resume or to fetch parts from several nimbuses at once::

    add_code_routes(app, store)
    # GET /api/v1/code/<sha256>                      200, the whole package
    # GET /api/v1/code/<sha256>  Range: bytes=10-    206, Content-Range: bytes 10-N/N+1
    # GET /api/v1/code/<sha256>  Range: bytes=N+1-   416 range_not_satisfiable
    # GET /api/v1/code/<not stored>                  404 unknown_code
    # GET /api/v1/code/<not 64 hex digits>           422 invalid_request

What to answer is decided by ``codedist.transfer.serve.locate``, as for the package server;
errors have the API's body, ``{"error", "message", "leader"}``, whether or not the app
registers the API's error handlers.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, Header, Path
from fastapi.responses import FileResponse, JSONResponse, Response

from stratus.api.records import ErrorBody
from stratus.codedist.package_store import PackageStore
from stratus.codedist.transfer.ranges import DIGEST, RANGE_RULE
from stratus.codedist.transfer.serve import Refusal, locate

CODE_PATH = "/api/v1/code/{digest}"
# Bytes read from the file per body message. Measured serving 100 MB on loopback, the
# nimbus's CPU: 4 MiB 40 ms; 1 MiB 49 ms; 256 KiB 59 ms; 16 MiB 58 ms.
SERVE_CHUNK = 4 << 20

_DOC_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the package",
        "content": {"application/octet-stream": {"schema": {"type": "string"}}},
    },
    206: {
        "description": "the byte range asked for (Content-Range names it)",
        "content": {"application/octet-stream": {"schema": {"type": "string"}}},
    },
    404: {"model": ErrorBody, "description": "unknown_code: this nimbus does not hold it"},
    416: {"model": ErrorBody, "description": "range_not_satisfiable: past the package's end"},
    422: {"model": ErrorBody, "description": "invalid_request: not a digest, or a bad Range"},
}
Digest = Annotated[
    str,
    Path(
        description="the package's sha256, 64 lowercase hex digits",
        json_schema_extra={"pattern": f"^{DIGEST.pattern}$"},
    ),
]

RangeHeader = Annotated[
    str | None,
    Header(alias="Range", description=f"{RANGE_RULE}: answered with 206 and Content-Range"),
]


class PackageResponse(FileResponse):
    """A stored package, read ``SERVE_CHUNK`` bytes at a time (Starlette reads 64 KiB)."""

    chunk_size = SERVE_CHUNK


def add_code_routes(app: FastAPI, store: PackageStore) -> None:
    """Serve ``store``'s packages at ``/api/v1/code/{digest}`` (GET, and HEAD for the size)."""

    async def package(digest: Digest, byte_range: RangeHeader = None) -> Response:
        """A package this nimbus holds, whole or one byte range of it (any nimbus)."""
        return _serve(store, digest, byte_range)

    app.add_api_route(
        CODE_PATH,
        package,
        methods=["GET"],
        tags=["any nimbus"],
        response_class=PackageResponse,
        responses=_DOC_RESPONSES,
    )
    app.add_api_route(CODE_PATH, package, methods=["HEAD"], include_in_schema=False)


def _serve(store: PackageStore, digest: str, range_header: str | None) -> Response:
    answer = locate(store, digest, range_header)
    if isinstance(answer, Refusal):
        return JSONResponse(
            answer.body().model_dump(), status_code=answer.status, headers=answer.headers
        )
    # Starlette reads the same Range header to the same span (see ranges.parse_range).
    return PackageResponse(
        answer.path,
        stat_result=answer.stat,
        media_type="application/octet-stream",
        headers={"etag": answer.etag},
    )
