"""The JSON error answer of every stratus HTTP server: ``{"error", "message", "leader"}``."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from stratus.api.errors import ApiError, NotLeaderError
from stratus.api.records import ErrorBody

RETRY_AFTER_SECS = 1  # the Retry-After of a 503: the server is busy, not the client wrong


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The API's error body for ``error``, with its status."""
    leader = error.leader if isinstance(error, NotLeaderError) else None
    body = ErrorBody(error=error.code, message=str(error), leader=leader)
    return JSONResponse(body.model_dump(), status_code=error.status, headers=headers)
