"""The repository's test harnesses, for the benchmarks that build clusters of hosts with them.

Not a benchmark itself (imported as ``_harness``, as ``_report`` is). A benchmark runs as a
script from ``bench/``, where ``tests`` is out of reach: this module puts the repository's
root on ``sys.path`` and hands on what the benchmarks use of ``tests/harness``::

    from _harness import HostsCluster, NetnsHosts, unavailable
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.harness.hosts_cluster import HostsCluster, options
from tests.harness.lifecycle import Started
from tests.harness.netns_hosts import NetnsHosts, unavailable
from tests.harness.pipeline_cluster import cluster_options
from tests.harness.secure_cluster import ADMIN, PEER, SUBMIT, token_file
from tests.harness.spark_defaults import DRIVER_JAVA_OPTIONS, SPARK_CONF_DIR, spark_conf_dir
from tests.harness.zk_acl import secret_file

__all__ = [
    "ADMIN",
    "DRIVER_JAVA_OPTIONS",
    "PEER",
    "SPARK_CONF_DIR",
    "SUBMIT",
    "HostsCluster",
    "NetnsHosts",
    "Started",
    "cluster_options",
    "options",
    "secret_file",
    "spark_conf_dir",
    "token_file",
    "unavailable",
]
