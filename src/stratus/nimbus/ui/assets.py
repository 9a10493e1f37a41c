"""Every file a browser loads from a nimbus's pages, served by the nimbus itself: a cluster
without internet shows the same pages as one with it.

The UI's own script and style are in ``static/`` beside this module; Swagger UI (the API's
``/api/v1/docs`` page) comes from the ``fastapi-offline`` package, which ships Swagger UI's
bundle, style and a favicon (Swagger UI is Apache-2.0, the package MIT)::

    app.mount(ASSETS_PATH, assets_app(), name="ui-assets")
    swagger_page("/api/v1/openapi.json", "stratus nimbus")
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

ASSETS_PATH = "/ui"  # every asset of the pages is under it
OWN_DIR = Path(__file__).parent / "static"
SWAGGER_DIR = Path(fastapi_offline.__file__).parent / "static"
OWN_PATH = f"{ASSETS_PATH}/static"
SWAGGER_PATH = f"{ASSETS_PATH}/swagger"


def assets_routes() -> list[Mount]:
    """The mounts that serve the UI's files and Swagger UI's."""
    return [
        Mount(OWN_PATH, StaticFiles(directory=OWN_DIR), name="ui-static"),
        Mount(SWAGGER_PATH, StaticFiles(directory=SWAGGER_DIR), name="ui-swagger"),
    ]


def swagger_page(openapi_url: str, title: str) -> HTMLResponse:
    """The Swagger UI page of the API, every asset from this nimbus."""
    return get_swagger_ui_html(
        openapi_url=openapi_url,
        title=f"{title} - API",
        swagger_js_url=f"{SWAGGER_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{SWAGGER_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{SWAGGER_PATH}/favicon.png",
    )
