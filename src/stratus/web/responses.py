"""The JSON error answer of every stratus HTTP server: ``{"error", "message", "leader"}``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fastapi.responses import JSONResponse

from stratus.api.echo import MAX_ECHO_CHARS, clip
from stratus.api.errors import ApiError, NotLeaderError
from stratus.api.records import ErrorBody

RETRY_AFTER_SECS = 1  # the Retry-After of a 503: the server is busy, not the client wrong


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The API's error body for ``error``, with its status."""
    leader = error.leader if isinstance(error, NotLeaderError) else None
    body = ErrorBody(error=error.code, message=str(error), leader=leader)
    return JSONResponse(body.model_dump(), status_code=error.status, headers=headers)


def describe_validation(errors: Sequence[Mapping[str, Any]], most: int = 5) -> str:
    """A request's validation errors (pydantic's), the first ``most`` each ``where: what``;
    never the input, which may be huge."""
    problems = []
    for error in errors[:most]:
        where = clip(".".join(str(part) for part in error.get("loc", ())), MAX_ECHO_CHARS)
        problems.append(f"{where}: {clip(str(error.get('msg', 'invalid')))}")
    more = f"; and {len(errors) - most} more" if len(errors) > most else ""
    return "invalid request: " + "; ".join(problems) + more
