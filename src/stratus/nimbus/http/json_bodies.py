"""JSON request bodies parsed strictly (``stratus.api.strict_json``) on every API route.

FastAPI reads a JSON body with ``json.loads``: the last of two equal keys wins, ``NaN``
passes, and a lone surrogate reaches the handler, then fails when the record is written (a
500). Routes of this class read it with ``loads_strict`` instead, and answer
``422 invalid_request`` naming the problem::

    app.router.route_class = StrictJsonRoute     # before the routes are added
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from stratus.api.errors import InvalidRequestError
from stratus.api.strict_json import loads_strict
from stratus.web.body_limit import RefusedBody


class StrictJsonRequest(Request):
    """A request whose ``json()`` is ``loads_strict`` of its body."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = loads_strict(body)
            except InvalidRequestError as exc:
                raise RefusedBody(exc) from None
        return self._json


class StrictJsonRoute(APIRoute):
    """A route whose JSON body is parsed strictly; see the module docstring."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict_handler
