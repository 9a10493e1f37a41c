"""stratus: a highly available control plane for PySpark data pipelines."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    """``stratus.__version__``, read from the installed package's metadata when first asked
    for: reading it costs ``importlib.metadata``, which ``stratus --help`` does without."""
    if name != "__version__":
        raise AttributeError(f"module 'stratus' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 (fast start)

    try:
        found = version("stratus-ha")
    except PackageNotFoundError:  # running from a source tree that was not installed
        found = "0.0.0"
    globals()["__version__"] = found
    return found
