"""Where the code of an update waits for its replication: a code key of its own.

A nimbus holds one package per code key (``<root>/code/<key>/<host:port>``), and the key of
a pipeline's running code is its name. An update's new code must reach the minimum
replication while the old code keeps running and keeps every nimbus able to lead, so it is
held under ``<name>.update`` until the leader switches the pipeline's record to it; then
each nimbus registers the same bytes under the name (no second fetch: the store is
content-addressed) and drops the staged key. A ``.`` is never part of a pipeline's name,
so a staged key cannot be a pipeline's::

    staged_key("etl")            # "etl.update"
    staged_pipeline("etl.update")   # "etl"
    staged_pipeline("etl")          # None
"""

from __future__ import annotations

STAGED_SUFFIX = ".update"


def staged_key(pipeline: str) -> str:
    """The code key of ``pipeline``'s update in progress."""
    return f"{pipeline}{STAGED_SUFFIX}"


def staged_pipeline(key: str) -> str | None:
    """The pipeline whose update ``key`` holds, or None when ``key`` is a pipeline's name."""
    return key.removesuffix(STAGED_SUFFIX) if key.endswith(STAGED_SUFFIX) else None
