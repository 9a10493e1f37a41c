"""stratus: a highly available control plane for PySpark data pipelines."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("stratus-ha")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"
