"""stratus: a highly available control plane for PySpark data pipelines."""

from __future__ import annotations

import os
import sys

DISTRIBUTION = "stratus-ha"


def __getattr__(name: str) -> str:
    """``stratus.__version__``, read from the installed package's metadata when first asked
    for, so that importing stratus reads no file."""
    if name != "__version__":
        raise AttributeError(f"module 'stratus' has no attribute {name!r}")
    found = installed_version()
    globals()["__version__"] = found
    return found


def installed_version() -> str:
    """The ``Version:`` of the first ``stratus_ha-*.dist-info`` on ``sys.path``: what
    ``importlib.metadata.version("stratus-ha")`` answers, without importing it and the email
    parser it loads (which would double the time of ``stratus --version``); ``0.0.0`` in a
    source tree that was not installed."""
    prefix = DISTRIBUTION.replace("-", "_") + "-"
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:
            continue
        for info in (n for n in names if n.startswith(prefix) and n.endswith(".dist-info")):
            version = _metadata_version(os.path.join(entry or ".", info, "METADATA"))
            if version is not None:
                return version
    return "0.0.0"


def _metadata_version(path: str) -> str | None:
    """The ``Version:`` header of a METADATA file (headers end at the first blank line)."""
    try:
        with open(path, encoding="utf-8") as metadata:
            for line in metadata:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key == "Version":
                    return value.strip()
    except OSError:
        pass
    return None
