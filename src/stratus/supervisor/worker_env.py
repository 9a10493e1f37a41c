"""A worker's environment: an allow-list of the supervisor's, plus the pipeline's own.

A worker runs a user's code, so it does not inherit the supervisor's whole environment (which
may hold ``STRATUS_TOKEN``, ZooKeeper credentials, cloud keys): it gets the variables named in
``ALLOWED_NAMES`` (and ``LC_*``), those the operator adds with ``supervisor.worker.env``, then
the pipeline's ``pipeline.env.NAME`` entries, then ``PYTHONUNBUFFERED=1`` (so its log is
written as it goes)::

    env = worker_environment(os.environ, frozenset({"KRB5CCNAME"}), spec.conf)
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from stratus.api.pipeline_conf import env_entries

# What a PySpark driver needs to find its tools, its locale and its cluster's configuration;
# none of these holds a secret by itself.
ALLOWED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "JAVA_HOME",
        "SPARK_HOME",
        "SPARK_CONF_DIR",
        "SPARK_SUBMIT_OPTS",
        "SPARK_LOCAL_IP",
        "SPARK_LOCAL_HOSTNAME",
        "HADOOP_HOME",
        "HADOOP_CONF_DIR",
        "YARN_CONF_DIR",
        "PYSPARK_PYTHON",
        "PYSPARK_DRIVER_PYTHON",
        "PYTHONPATH",
        "VIRTUAL_ENV",
    }
)
ALLOWED_PREFIXES = ("LC_",)
STRATUS_SET = {"PYTHONUNBUFFERED": "1"}


def worker_environment(
    parent: Mapping[str, str], extra_names: Set[str], pipeline_conf: Mapping[str, Any]
) -> dict[str, str]:
    """The environment of a worker of a pipeline with ``pipeline_conf``, started by a
    supervisor whose environment is ``parent``; see the module docstring."""
    inherited = {
        name: value
        for name, value in parent.items()
        if name in ALLOWED_NAMES or name in extra_names or name.startswith(ALLOWED_PREFIXES)
    }
    return {**inherited, **env_entries(pipeline_conf), **STRATUS_SET}
