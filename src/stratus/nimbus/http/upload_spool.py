"""A submit's package is spooled into the package store's own directory while it arrives.

Starlette's form parser spools each uploaded file in memory and then in the system's
temporary directory, often a RAM-backed ``/tmp``, outside the store that ``nimbus.local.dir``
sizes. The submit route reads its form with ``SpoolingRequest`` instead: every file part
goes into an unnamed temporary file in the store's directory from its first byte, on the
disk that holds the packages, and is gone when the request ends (or the process dies)::

    router = APIRouter(route_class=spooling_route(store.directory))
    @router.post("/api/v1/pipelines")
    def submit(package: UploadFile = File()) -> ...: ...

It relies on Starlette's form parsing hooks (``Request._get_form``, the multipart parser's
part callbacks); ``tests/cluster/test_nimbus_limits.py`` fails if they change under it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Coroutine
from contextlib import aclosing
from pathlib import Path
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.datastructures import FormData, Headers
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.types import Receive, Scope

from stratus.codedist.package_store import UPLOAD_PREFIX, UPLOAD_SUFFIX

MULTIPART = b"multipart/form-data"


class _StoreSpoolingParser(MultiPartParser):
    """Starlette's multipart parser, but file parts are written to ``spool_dir`` at once."""

    def __init__(self, headers: Headers, stream: Any, *, spool_dir: Path, **limits: Any) -> None:
        super().__init__(headers, stream, **limits)
        self.spool_dir = spool_dir

    def on_headers_finished(self) -> None:
        super().on_headers_finished()
        upload = self._current_part.file
        if upload is None:
            return
        spooled = upload.file
        # unnamed where supported, so never left behind; the form closes it with the request
        upload.file = tempfile.TemporaryFile(  # noqa: SIM115
            dir=self.spool_dir, prefix=UPLOAD_PREFIX, suffix=UPLOAD_SUFFIX
        )
        self._files_to_close_on_error.remove(spooled)  # type: ignore[arg-type]
        self._files_to_close_on_error.append(upload.file)  # type: ignore[arg-type]
        spooled.close()


class SpoolingRequest(Request):
    """A request whose multipart form spools files into ``spool_dir``."""

    def __init__(self, scope: Scope, receive: Receive, spool_dir: Path) -> None:
        super().__init__(scope, receive)
        self.spool_dir = spool_dir

    async def _get_form(
        self,
        *,
        max_files: int | float = 1000,
        max_fields: int | float = 1000,
        max_part_size: int = 1024 * 1024,
    ) -> FormData:
        content_type = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        if self._form is not None or content_type.encode() != MULTIPART:
            return await super()._get_form(
                max_files=max_files, max_fields=max_fields, max_part_size=max_part_size
            )
        try:
            async with aclosing(self.stream()) as stream:
                parser = _StoreSpoolingParser(
                    self.headers,
                    stream,
                    spool_dir=self.spool_dir,
                    max_files=max_files,
                    max_fields=max_fields,
                    max_part_size=max_part_size,
                )
                self._form = await parser.parse()
        except MultiPartException as exc:
            raise HTTPException(status_code=400, detail=exc.message) from None
        return self._form


def spooling_route(spool_dir: Path) -> type[APIRoute]:
    """A route class whose requests spool uploaded files into ``spool_dir``."""

    class SpoolingRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def spooling_handler(request: Request) -> Response:
                return await handler(SpoolingRequest(request.scope, request.receive, spool_dir))

            return spooling_handler

    return SpoolingRoute
