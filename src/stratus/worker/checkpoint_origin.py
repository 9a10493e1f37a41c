"""Whose checkpoints a location holds: another pipeline's or another cluster's are refused.

Guarantees: before a worker claims its checkpoint location (``checkpoint_owner``), and so
before Spark reads anything there, it reads the location's origin, the file
``<location>/_stratus_owners/origin.json`` that the location's last owner wrote (its
cluster, pipeline and era). A location whose origin names another pipeline, or another
cluster, is refused. The origin is this cluster's when its era is this worker's (the
``assignments`` znode's creation time: one cluster's tokens alone carry it, however each
supervisor names the ZooKeeper servers: a proxy, a load balancer, a host name or an
address), or else when ``ClusterIdentity.same`` says so (the same root, a server in
common: a cluster whose ZooKeeper was set up again under the same names). Another is
refused: the worker writes no claim there and ends FAILED, not restarted, with an error
that names the location and the ways out. A location with no origin (new, or written by a
release before origins) is taken as it is, and its origin written once this worker owns it.
So is an empty origin: a write cut short by the death of a worker of a release that wrote it
in place (stratus never writes an empty one; on a local disk it now writes a temporary file
and renames it over the origin, so that a reader sees the old origin or the new one, never
a part)::

    problem = check_origin(spec.checkpoint_location, cluster, "etl", token.era)  # None: ours
    ...claim...
    record_origin(spec.checkpoint_location, CheckpointOrigin.now(cluster, "etl", token.era))

What is not detected before Spark runs: a query of the same pipeline whose sources changed
since its checkpoint was written (Spark knows a query's sources only from its plan, at
``start()``); Spark itself refuses some of those changes at start (another number of
sources), which ends the run FAILED with Spark's error.

The default root of 0.2.0 and earlier, ``<tmp>/stratus-checkpoints``, was shared by every
cluster of the machine. ``adopt_legacy`` moves a pipeline's location from there to the
cluster's own default root, once, when the new location is empty and the highest claim in
the old one is of this cluster's era (the ``assignments`` znode's creation time, which only
this cluster's tokens carry): its checkpoints, and no one else's::

    adopt_legacy("/tmp/stratus-checkpoints/etl", spec.checkpoint_location, spec.token)
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stratus.api.records import ClusterIdentity, FencingToken
from stratus.files import private_dirs, write_atomically
from stratus.worker.checkpoint_owner import OWNERS_DIR, token_of

log = logging.getLogger(__name__)

ORIGIN_FILE = "origin.json"


class CheckpointOrigin(BaseModel):
    """``origin.json``: the cluster and pipeline whose checkpoints a location holds."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    cluster: ClusterIdentity
    pipeline: str
    era: int = Field(ge=0, description="the era of the last owner's fencing token")
    written: float = Field(description="wall-clock time of the last owner's claim")

    @classmethod
    def now(cls, cluster: ClusterIdentity, pipeline: str, era: int) -> CheckpointOrigin:
        return cls(cluster=cluster, pipeline=pipeline, era=era, written=time.time())


def origin_path(location: str) -> str:
    return f"{location.rstrip('/')}/{OWNERS_DIR}/{ORIGIN_FILE}"


def origin_problem(
    origin: CheckpointOrigin, cluster: ClusterIdentity, pipeline: str, era: int
) -> str | None:
    """Why ``origin``'s checkpoints are not pipeline ``pipeline``'s of ``cluster`` (whose
    tokens carry ``era``); None if they are. Pure."""
    other_pipeline = origin.pipeline != pipeline
    other_cluster = origin.era != era and not origin.cluster.same(cluster)
    if not other_pipeline and not other_cluster:
        return None
    whose = f"pipeline {origin.pipeline!r} of the cluster at {origin.cluster}"
    ours = f"pipeline {pipeline!r} of the cluster at {cluster}"
    return f"they are the checkpoints of {whose}, not of {ours}"


def refusal(location: str, pipeline: str, problem: str) -> str:
    """The FAILED error of a refused location: what, where, and the ways out."""
    return (
        f"the checkpoint location {location} is refused: {problem}; nothing ran and "
        "nothing was written there. To start this pipeline afresh in a directory of its "
        f"own, set a new subpath (`stratus rebalance {pipeline} --conf "
        "pipeline.checkpoint.subpath=NEW`), or give its cluster a checkpoint root of its "
        "own (pipeline.checkpoint.root, or its own zookeeper.root with the default root); "
        f"if those checkpoints are no one's any more, `stratus kill --purge {pipeline}` and "
        f"submit it again; if they are this pipeline's (its cluster's ZooKeeper moved), "
        f"delete {origin_path(location)} and rebalance it"
    )


def check_origin(
    location: str,
    cluster: ClusterIdentity,
    pipeline: str,
    era: int,
    *,
    denied_is_unknown: bool = False,
) -> str | None:
    """The refusal of ``location`` if its origin names another pipeline or cluster (or
    cannot be read); None if it is this pipeline's of this cluster (whose tokens carry
    ``era``), or has no origin. With ``denied_is_unknown`` an origin this process may not
    read is no refusal either (None): a standby worker's, whose user gets the location only
    at its promotion, where the promoted worker checks it again."""
    fs, root = fsspec.core.url_to_fs(location)
    path = origin_path(root)
    try:
        raw = fs.cat_file(path)
    except FileNotFoundError:
        return None
    except PermissionError as exc:
        if denied_is_unknown:
            return None
        return refusal(location, pipeline, f"its origin {path} cannot be read ({exc})")
    except OSError as exc:
        return refusal(location, pipeline, f"its origin {path} cannot be read ({exc})")
    if not raw:
        log.warning(
            "event=checkpoint_origin_empty path=%s action=taken_as_none reason=%r",
            path,
            "a write of it was cut short",
        )
        return None
    try:
        origin = CheckpointOrigin.model_validate_json(raw)
    except ValidationError as exc:
        reason = f"its origin {path} is not one stratus wrote ({exc.error_count()} errors)"
        return refusal(location, pipeline, reason)
    problem = origin_problem(origin, cluster, pipeline, era)
    return None if problem is None else refusal(location, pipeline, problem)


def record_origin(location: str, origin: CheckpointOrigin) -> None:
    """Write ``origin.json`` (the owner does, right after its claim succeeded): on a local
    disk through a temporary file renamed over it, since a worker may be stopped at any
    moment of its start; elsewhere in one write of the store (an object store's put
    replaces an object whole)."""
    fs, path = fsspec.core.url_to_fs(location)
    target = origin_path(path)
    data = origin.model_dump_json().encode()
    if isinstance(fs, LocalFileSystem):
        write_atomically(Path(target), data)
    else:
        fs.pipe_file(target, data)


def adopt_legacy(legacy: str, location: str, token: FencingToken) -> str | None:
    """Move this pipeline's checkpoints from ``legacy`` (its location under the default
    root of 0.2.0 and earlier) to ``location``, if they are this cluster's (see the module
    docstring); an error if the move failed (None: moved, or nothing to move)."""
    old, new = Path(legacy), Path(location)
    if not _empty(new) or not old.is_dir() or old.is_symlink():
        return None
    era = _highest_era(old / OWNERS_DIR)
    if era != token.era:
        if era is not None:
            log.warning(
                "event=legacy_checkpoints_left legacy=%s era=%s own_era=%d reason=%r",
                legacy,
                era,
                token.era,
                "another cluster's claims are the highest there",
            )
        return None
    try:
        private_dirs(new.parent)
        os.replace(old, new)  # an empty directory at ``new`` is replaced
    except OSError as exc:
        return (
            f"the checkpoints of this pipeline at {legacy} (the default root of 0.2.0 and "
            f"earlier) could not be moved to {location}: {exc}; move the directory by hand, "
            "then rebalance the pipeline"
        )
    log.info("event=legacy_checkpoints_moved legacy=%s location=%s", legacy, location)
    return None


def _empty(path: Path) -> bool:
    """Whether ``path`` does not exist, or is an empty directory."""
    if not os.path.lexists(path):
        return True
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def _highest_era(owners: Path) -> int | None:
    try:
        names = os.listdir(owners)
    except OSError:
        return None
    tokens = [token for name in names if (token := token_of(name)) is not None]
    highest = max(tokens, key=FencingToken.key, default=None)
    return None if highest is None else highest.era
