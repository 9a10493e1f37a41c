"""Where a pipeline's checkpoints live, and their removal when the pipeline is killed.

Every pipeline checkpoints under ``<pipeline.checkpoint.root>/<pipeline>``: the pipeline's own
``pipeline.checkpoint.root`` if its conf sets one, else the cluster's, which the caller passes
as a value (this module does not read the configuration). The root is a directory or any URL
that fsspec (and Spark) reach, so a pipeline moved to another node resumes from the same place::

    checkpoint_location("/tmp/stratus-checkpoints", record.conf, "etl")
    # '/tmp/stratus-checkpoints/etl', unless record.conf sets pipeline.checkpoint.root
    remove_checkpoints('/tmp/stratus-checkpoints/etl')
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import fsspec

log = logging.getLogger(__name__)


def checkpoint_location(cluster_root: str, pipeline_conf: Mapping[str, Any], name: str) -> str:
    """``<root>/<name>``, the root being the pipeline's ``pipeline.checkpoint.root`` or
    ``cluster_root`` (the cluster's)."""
    root = str(pipeline_conf.get("pipeline.checkpoint.root") or cluster_root)
    return f"{root.rstrip('/')}/{name}"


def remove_checkpoints(location: str) -> bool:
    """Delete a killed pipeline's checkpoints and everything below; whether any were there."""
    fs, path = fsspec.core.url_to_fs(location)
    if not fs.exists(path):
        return False
    fs.rm(path, recursive=True)
    log.info("event=checkpoints_removed location=%s", location)
    return True
