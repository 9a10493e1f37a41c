"""The settings of a worker's SparkSession, and which of them are static (pyspark-free).

A cold worker's session gets stratus's ``SPARK_DEFAULTS``, the pipeline's ``spark.*`` conf
and the master. A warm worker's session (``warm_settings``) starts before its pipeline is
known, with the defaults, the app name ``stratus-warm`` and the cluster's master. A
pipeline can run in it only if every *static* key of its conf (one Spark reads once, when
the session starts) has the warm session's value: its runtime keys are set on the session
at the hand-over. Static keys are Spark's own core settings (every key under one of
``SPARK_CORE_PREFIXES``: ``spark.executor.memory``, ``spark.jars.packages``,
``spark.app.name``, ...) and Spark's static SQL conf (``STATIC_SQL_PREFIXES``). Runtime keys
are the other SQL keys (``spark.sql.shuffle.partitions``) and a pipeline's own keys outside
Spark's namespaces (``spark.stratus.example.input``), which a running session takes::

    is_runtime_key("spark.sql.shuffle.partitions")   # True: set at the hand-over
    is_runtime_key("spark.myjob.input")              # True: the pipeline's own key
    is_runtime_key("spark.sql.extensions")           # False: a static SQL key
    static_mismatch({"spark.driver.memory": "2g"}, "local[*]")   # 'spark.driver.memory'

On a cluster master with an archive of requirements, an app's session and an sdp run's
settings alike get ``with_deps_first``: the unpacked archive first on the executors'
``PYTHONPATH``.

The supervisor uses this to choose a warm or a cold start without asking a JVM; importing
it does not import pyspark.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

# Settings a pipeline's conf may override; chosen for a worker whose output goes to a log file.
SPARK_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",  # one UI per worker would need a port each; set it to see it
    "spark.ui.showConsoleProgress": "false",  # progress bars fill log files with \r lines
    "spark.log.level": "WARN",  # Spark's INFO lines drown the pipeline's own
}
WARM_APP_NAME = "stratus-warm"

# Spark's StaticSQLConf (and the Hive metastore's): spark.sql.* keys read once per session.
STATIC_SQL_PREFIXES = (
    "spark.sql.warehouse.dir",
    "spark.sql.catalogImplementation",
    "spark.sql.globalTempDatabase",
    "spark.sql.extensions",
    "spark.sql.queryExecutionListeners",
    "spark.sql.streaming.streamingQueryListeners",
    "spark.sql.streaming.ui.",
    "spark.sql.ui.",
    "spark.sql.event.truncate.length",
    "spark.sql.cache.serializer",
    "spark.sql.legacy.sessionInitWithConfigDefaults",
    "spark.sql.broadcastExchange.maxThreadThreshold",
    "spark.sql.subquery.maxThreadThreshold",
    "spark.sql.resultQueryStage.maxThreadThreshold",
    "spark.sql.defaultUrlStreamHandlerFactory.enabled",
    "spark.sql.sources.disabledJdbcConnProviderList",
    "spark.sql.metadataCacheTTLSeconds",
    "spark.sql.hive.",
    "spark.sql.catalog.",
    "spark.sql.connect.",
    "spark.sql.artifact.",
    "spark.sql.scriptTransformation.exitTimeoutInSeconds",
)


# Spark's own (core) settings, read when the session starts; a running session refuses them.
SPARK_CORE_PREFIXES = tuple(
    f"spark.{name}"
    for name in (
        "app.",
        "archives",
        "barrier.",
        "blockManager.",
        "broadcast.",
        "buffer.",
        "checkpoint.",
        "cleaner.",
        "connect.",
        "cores.",
        "decommission.",
        "default.",
        "deploy.",
        "driver.",
        "dynamicAllocation.",
        "eventLog.",
        "excludeOnFailure.",
        "executor.",
        "executorEnv.",
        "extraListeners",
        "files",
        "hadoop.",
        "history.",
        "io.",
        "jars",
        "kryo",
        "kryoserializer.",
        "kubernetes.",
        "local.",
        "locality.",
        "log.",
        "logConf",
        "master",
        "memory.",
        "metrics.",
        "network.",
        "plugins",
        "port.",
        "pyspark.",
        "python.",
        "rdd.",
        "redaction.",
        "reducer.",
        "remote",
        "resources.",
        "rpc.",
        "scheduler.",
        "serializer",
        "shuffle.",
        "speculation",
        "ssl.",
        "stage.",
        "standalone.",
        "storage.",
        "submit.",
        "task.",
        "ui.",
        "unsafe.",
        "worker.",
        "yarn.",
        "authenticate",
        "acls.",
        "admin.",
        "modify.",
        "user.",
        "ui",
        "hive.",
        "security.",
        "appStateStore.",
        "excludeOnFailure",
        "dynamicAllocation",
        "api.",
        "profile.",
    )
)


# The directory, in an executor's working directory, where the archive of the pipeline's
# requirements is unpacked; first on the PYTHONPATH of the executor's Python workers.
DEPS_DIR = "stratus-deps"
EXECUTOR_PYTHONPATH = "spark.executorEnv.PYTHONPATH"


def with_deps_first(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with ``DEPS_DIR`` first on the executors' PYTHONPATH (before the
    pipeline's own value of it): a relative path, since an executor's Python workers start
    in its working directory, where Spark unpacks the archive of the requirements."""
    own = settings.get(EXECUTOR_PYTHONPATH)
    return {**settings, EXECUTOR_PYTHONPATH: os.pathsep.join([DEPS_DIR, *filter(None, [own])])}


def spark_conf(conf: Mapping[str, Any]) -> dict[str, str]:
    """The ``spark.*`` keys of a pipeline's conf, as the strings Spark expects."""
    return {key: conf_value(value) for key, value in conf.items() if key.startswith("spark.")}


def conf_value(value: Any) -> str:
    """A conf value as Spark reads it: booleans in lower case, everything else as str()."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def warm_settings(master: str) -> dict[str, str]:
    """Every setting of a warm worker's session: what a cold worker of a pipeline whose conf
    sets no ``spark.*`` key gets, but for the app name, which no pipeline is known for yet."""
    return {**SPARK_DEFAULTS, "spark.app.name": WARM_APP_NAME, "spark.master": master}


def is_runtime_key(key: str) -> bool:
    """Whether Spark lets a running session change ``key`` (see the module docstring)."""
    if key.startswith("spark.sql."):
        return not key.startswith(STATIC_SQL_PREFIXES)
    return not key.startswith(SPARK_CORE_PREFIXES)


def static_mismatch(conf: Mapping[str, Any], master: str) -> str | None:
    """The first static ``spark.*`` key of ``conf`` whose value is not the warm session's of
    ``master`` (``spark.master`` itself is compared by the caller); None if all match."""
    warm = warm_settings(master)
    for key, value in sorted(spark_conf(conf).items()):
        if key == "spark.master" or is_runtime_key(key):
            continue
        if warm.get(key) != value:
            return key
    return None
