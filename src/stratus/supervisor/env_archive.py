"""The archive of an environment's requirements, shipped to a Spark cluster's executors.

Guarantees: ``pack_environment(env_dir)`` leaves ``<env_dir>/stratus-deps.tar.gz``, a gzip
tar of the environment's own site-packages: the requirements pip installed there, not the
supervisor's packages that the environment sees through its ``.pth`` (stratus, pyspark,
pyarrow: an executor's Python has its own, as Spark requires). The archive appears whole or
not at all (written beside, then renamed), and a second call finds it and returns it. The
worker ships it with ``SparkContext.addArchive`` and puts its unpacked directory on the
executors' ``PYTHONPATH`` (``stratus.worker.spark_app``), so an executor's Python imports
the pipeline's requirements first, as the driver does. Wheels with compiled code work when
the executors' platform and Python version are the supervisor's (the version has to match
for PySpark anyway)::

    archive = pack_environment(Path("/var/lib/stratus/envs/py311-0f3a..."), exclude)
    archive_of(env_dir)   # the archive if packed, else None
"""

from __future__ import annotations

import os
import sys
import tarfile
from pathlib import Path

DEPS_ARCHIVE = "stratus-deps.tar.gz"
COMPRESS_LEVEL = 6  # gzip's default trade-off; 9 costs much more CPU for little gain


def site_packages(env_dir: Path) -> Path:
    """The environment's own site-packages (it was made from this interpreter)."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return env_dir / "lib" / version / "site-packages"


def archive_of(env_dir: Path) -> Path | None:
    """The environment's archive, or None if it was not packed."""
    archive = env_dir / DEPS_ARCHIVE
    return archive if archive.is_file() else None


def pack_environment(env_dir: Path, exclude: frozenset[str] = frozenset()) -> Path:
    """Pack ``env_dir``'s site-packages into its archive unless done; the archive.
    ``exclude``: top-level names that make no sense on an executor (the ``.pth`` of the
    supervisor's own site directories, whose paths are the supervisor host's)."""
    archive = env_dir / DEPS_ARCHIVE
    if archive.is_file():
        return archive
    source = site_packages(env_dir)
    if not source.is_dir():
        raise FileNotFoundError(f"the environment {env_dir} has no {source.name} to pack")
    temp = archive.with_name(f".{archive.name}.{os.getpid()}.tmp")
    try:
        with tarfile.open(temp, "w:gz", compresslevel=COMPRESS_LEVEL) as tar:
            for entry in sorted(source.iterdir()):
                if entry.name not in exclude:
                    tar.add(entry, arcname=entry.name)
        os.replace(temp, archive)
    finally:
        temp.unlink(missing_ok=True)
    return archive
