"""A client request's arguments checked before any network call, so a bad one fails here with
the API's error: a body against the API's own model, a pipeline's conf as a JSON object, a
pipeline's name in its path::

    body = validated(KillRequest, InvalidRequestError, wait_secs=30.0, purge=False)
    fields = {"conf": conf_json({"spark.sql.shuffle.partitions": 4})}
    path = pipeline_path("wordcount", "kill")   # /api/v1/pipelines/wordcount/kill
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, ValidationError

from stratus.api.errors import ApiError, InvalidConfError
from stratus.api.names import check_pipeline_name
from stratus.client.routing import API

M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], error: type[ApiError], **fields: Any) -> dict[str, Any]:
    """A request body checked against the shared model here, before any network call."""
    try:
        return model(**fields).model_dump(mode="json")
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise error(f"{where}: {problem['msg']} (got {problem.get('input')!r})") from None


def conf_json(conf: Mapping[str, Any]) -> str:
    """``conf`` as a JSON object, refused here when it cannot be one."""
    try:
        return json.dumps(dict(conf), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidConfError(f"pipeline conf must be a JSON object: {exc}") from None


def pipeline_path(name: str, action: str | None = None) -> str:
    check_pipeline_name(name)
    path = f"{API}/pipelines/{quote(name, safe='')}"
    return f"{path}/{action}" if action else path
