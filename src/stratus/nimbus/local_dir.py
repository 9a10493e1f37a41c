"""The nimbus's default local directory (``nimbus.local.dir`` unset): which one, and the
cluster it serves.

The default is ``<tmp>/stratus-nimbus-<host>-<port>.<cluster>``, one per cluster of the
machine; a directory of 0.2.0 or earlier (no cluster in its name) is kept while it holds
no other cluster's ``cluster.json``, so that a nimbus upgraded in place keeps its packages.
A directory the nimbus makes is marked with the cluster it serves::

    local_dir = default_local_dir(settings.local_dir, "n1", 6627)
    mark_cluster(local_dir, settings.local_dir.cluster)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pydantic import ValidationError

from stratus.api.records import ClusterIdentity
from stratus.files import write_atomically
from stratus.nimbus.settings import LocalDirSettings

CLUSTER_FILE = "cluster.json"  # in a default nimbus.local.dir: the cluster it serves
LEGACY_LOCAL_DIR_PREFIX = "stratus-nimbus-"  # <tmp>/<this><host>-<port>: the default up to 0.2.0


def default_local_dir(settings: LocalDirSettings, host: str, port: int) -> Path:
    """``<tmp>/stratus-nimbus-<host>-<port>.<cluster>`` (``LocalDirSettings.default``); but
    the default of 0.2.0 and earlier, ``<tmp>/stratus-nimbus-<host>-<port>``, shared by
    every cluster of the machine, while the new one does not exist and the old one holds no
    other cluster's ``cluster.json``: a nimbus upgraded in place keeps its packages."""
    directory = settings.default(host, port)
    legacy = Path(tempfile.gettempdir()) / f"{LEGACY_LOCAL_DIR_PREFIX}{host}-{port}"
    if directory.exists() or not legacy.is_dir():
        return directory
    try:
        marked = ClusterIdentity.model_validate_json((legacy / CLUSTER_FILE).read_bytes())
    except FileNotFoundError:
        return legacy  # written by 0.2.0 or earlier, which served one cluster: this one
    except (OSError, ValidationError):
        return directory
    return legacy if marked.same(settings.cluster) else directory


def mark_cluster(local_dir: Path, cluster: ClusterIdentity) -> None:
    """Record in a default local directory the cluster it serves (``cluster.json``)."""
    write_atomically(local_dir / CLUSTER_FILE, cluster.model_dump_json().encode())
