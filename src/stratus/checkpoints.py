"""Where a pipeline's checkpoints live, and their removal when the pipeline is killed.

Every pipeline checkpoints under ``<root>/<pipeline>``, the root being the operator's
``pipeline.checkpoint.root`` (which the caller passes as a value: this module does not read
the configuration). A pipeline's conf may add a relative ``pipeline.checkpoint.subpath``
below its own directory, never more: ``<root>/<pipeline>/<subpath>``. The root is a
directory or any URL that fsspec (and Spark) reach, so a pipeline moved to another node
resumes from the same place::

    checkpoint_location("/srv/checkpoints", record.conf, "etl")
    # '/srv/checkpoints/etl', or '.../etl/v2' if record.conf sets the subpath 'v2'
    remove_checkpoints("/srv/checkpoints", "etl")

The removal never leaves the root: right before it deletes, it resolves the pipeline's
directory (symbolic links included) and refuses one that is not strictly inside the
resolved root; the deletion itself removes symbolic links below without following them.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from stratus.api.locations import CHECKPOINT_SUBPATH_KEY, subpath_problem
from stratus.api.names import check_pipeline_name
from stratus.errors import CheckpointLocationError

log = logging.getLogger(__name__)


def checkpoint_location(root: str, pipeline_conf: Mapping[str, Any], name: str) -> str:
    """``<root>/<name>``, or ``<root>/<name>/<subpath>`` if the pipeline's conf sets
    ``pipeline.checkpoint.subpath`` (CheckpointLocationError if that breaks the rule)."""
    location = pipeline_directory(root, name)
    subpath = pipeline_conf.get(CHECKPOINT_SUBPATH_KEY)
    if subpath is None:
        return location
    problem = subpath_problem(subpath)
    if problem:
        raise CheckpointLocationError(
            f"pipeline {name!r}: {CHECKPOINT_SUBPATH_KEY} {subpath!r} {problem}; "
            "fix the pipeline's conf (rebalance)"
        )
    return f"{location}/{subpath}"


def pipeline_directory(root: str, name: str) -> str:
    """``<root>/<name>``: everything of the pipeline's below the root, what a kill deletes."""
    check_pipeline_name(name)
    return f"{root.rstrip('/')}/{name}"


def local_pipeline_directory(root: str, name: str) -> Path | None:
    """``<root>/<name>`` as a local path, when the root is on a local or mounted file
    system; None on a remote store (HDFS, S3, ...)."""
    fs, path = fsspec.core.url_to_fs(pipeline_directory(root, name))
    return Path(path) if isinstance(fs, LocalFileSystem) else None


def remove_checkpoints(root: str, name: str) -> bool:
    """Delete pipeline ``name``'s checkpoints (``<root>/<name>``) and everything below;
    whether any were there. CheckpointLocationError if the directory, resolved, is not
    inside the resolved root (a symbolic link pointing out of it, say): nothing is deleted."""
    location = pipeline_directory(root, name)
    fs, path = fsspec.core.url_to_fs(location)
    _, root_path = fsspec.core.url_to_fs(root)
    if isinstance(fs, LocalFileSystem):
        return _remove_local(Path(root_path), Path(path), location)
    if not _inside(posixpath.normpath(root_path), posixpath.normpath(path)):
        raise CheckpointLocationError(
            f"checkpoints of {name!r} at {location} are not inside the root {root}; nothing deleted"
        )
    if not fs.exists(path):
        return False
    fs.rm(path, recursive=True)
    log.info("event=checkpoints_removed pipeline=%s location=%s", name, location)
    return True


def _remove_local(root: Path, path: Path, location: str) -> bool:
    if not os.path.lexists(path):
        return False
    resolved_root = root.resolve()
    resolved = path.resolve()
    if path.is_symlink() or not _inside(str(resolved_root), str(resolved)):
        raise CheckpointLocationError(
            f"checkpoints at {location} resolve to {resolved}, not inside the checkpoint "
            f"root {resolved_root}; nothing deleted (remove it by hand if it is yours)"
        )
    # rmtree unlinks the symbolic links below without following them, and refuses a
    # directory swapped for a link meanwhile (it opens each level without following links).
    shutil.rmtree(resolved)
    log.info("event=checkpoints_removed location=%s", location)
    return True


def _inside(root: str, path: str) -> bool:
    """Whether ``path`` is strictly below ``root`` (both normalized)."""
    root = root.rstrip("/") or "/"
    prefix = root if root.endswith("/") else root + "/"
    return path != root and path.startswith(prefix)
