"""Where the packages of a pipeline's kept versions are held: a code key per version.

A pipeline record keeps its last ``pipeline.versions.keep`` versions (``KeptVersion``), to
roll back to or to run again after it FAILED or FINISHED. Their packages are held under
``<name>.v<version>``, on every nimbus, for as long as the record keeps the version and is
not KILLED; the bytes are the same as under the pipeline's name (the store is
content-addressed), so the current version costs no second copy. A ``.`` is never part of
a pipeline's name, so a kept key cannot be a pipeline's::

    kept_key("etl", 3)            # "etl.v3"
    kept_pipeline("etl.v3")       # ("etl", 3)
    kept_pipeline("etl")          # None
"""

from __future__ import annotations

import re

_KEPT = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9_-]*)\.v(?P<version>[0-9]+)")


def kept_key(pipeline: str, version: int) -> str:
    """The code key of ``pipeline``'s kept ``version``."""
    return f"{pipeline}.v{version}"


def kept_pipeline(key: str) -> tuple[str, int] | None:
    """(pipeline, version) of a kept key, or None when ``key`` is not one."""
    match = _KEPT.fullmatch(key)
    if match is None:
        return None
    return match["name"], int(match["version"])
