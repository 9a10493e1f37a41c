"""How the nimbus API answers a request that fails: always the API's JSON error body,
``{"error": code, "message": ...}``, with the status of the error's class (``errors.py``).

An ``ApiError`` is its own answer; a request that does not validate, or whose body cannot
be parsed, is ``422 invalid_request`` naming the first problems (never the input, which may
be huge); another error of Starlette's (404, 405 with an ``Allow`` that names every method
of the path) keeps its status; any other exception is a bug: ``500 internal`` (logged)::

    app = FastAPI()
    add_error_handlers(app)
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Scope

from stratus.api.echo import MAX_ECHO_CHARS, clip
from stratus.api.errors import ApiError, InvalidRequestError
from stratus.api.records import ErrorBody
from stratus.web.responses import describe_validation, error_response


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        # a bug, not the client's fault: the API's JSON body even so (the error is logged)
        return error_response(ApiError(f"internal error ({type(exc).__name__}); retry later"))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(InvalidRequestError(describe_validation(exc.errors())))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:  # a body FastAPI could not parse (not UTF-8, broken form)
            return error_response(InvalidRequestError(f"invalid request: {clip(str(exc.detail))}"))
        code = clip(str(exc.detail), MAX_ECHO_CHARS).lower().replace(" ", "_")
        body = ErrorBody(error=code, message=clip(str(exc.detail)))
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # Allow names every method of the path (RFC 9110)
            headers["Allow"] = _allowed_methods(app, request.scope)
        return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=headers)


def _allowed_methods(app: FastAPI, scope: Scope) -> str:
    """The methods of every route at the request's path; Starlette names the first route's only."""
    methods: set[str] = set()
    for route in app.router.routes:
        if route.matches(scope)[0] is not Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))
