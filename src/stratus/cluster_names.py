"""What names a cluster: its ZooKeeper root, and that root as a directory name.

A cluster is where it keeps its state: the chroot of ``zookeeper.servers`` joined with
``zookeeper.root``. The operator sets it, reads it in every configuration file, and it
stays the same while ZooKeeper servers are added or replaced; the default directories of
checkpoints, supervisors and nimbuses are named for it (``<tmp>/stratus-<what>.<name>``),
so two clusters on one machine never share one::

    cluster_root("zk1:2181,zk2:2181/team", "/stratus")   # '/team/stratus'
    cluster_dir_name("/stratus")                        # 'stratus'
    cluster_dir_name("/team/stratus")                   # 'team_stratus'
    cluster_dir_name("/odd name")                       # 'odd-name_<12 hex digits>'

Two roots never give one name: a root whose parts are letters, digits and '-' is its parts
joined by '_'; any other root (a '_', a '.', a space, ...) gets its sha256's first 12 hex
digits after a readable form. The name holds no character that a Hadoop path or a URL
would treat specially (no ':', '%', '/'), and no '.', which separates it from the rest of a
directory's name.
"""

from __future__ import annotations

import hashlib
import re

_PLAIN_PART = re.compile(r"[A-Za-z0-9-]+")
_OTHER = re.compile(r"[^A-Za-z0-9-]+")
HASH_DIGITS = 12


def cluster_root(hosts: str, root: str) -> str:
    """The znode of the cluster: the chroot of the connect string ``hosts`` (what follows its
    first '/') joined with ``root``, normalized (``/team/stratus``; ``/`` for none)."""
    _, _, chroot = hosts.partition("/")
    return "/" + "/".join(part for part in f"{chroot}/{root}".split("/") if part)


def cluster_dir_name(root: str) -> str:
    """The directory name of the cluster whose ZooKeeper root is ``root`` (see above)."""
    parts = [part for part in root.split("/") if part]
    if parts and all(_PLAIN_PART.fullmatch(part) for part in parts):
        return "_".join(parts)
    readable = "_".join(_OTHER.sub("-", part) for part in parts) or "root"
    digest = hashlib.sha256(root.encode()).hexdigest()[:HASH_DIGITS]
    return f"{readable}_{digest}"
