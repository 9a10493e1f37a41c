"""Where a pipeline's conf may point: paths, hosts and URLs belong to the operator.

The checkpoint root, the URL schemes it may use and the Spark masters a pipeline may run on
are the daemons' configuration. A pipeline chooses at most a relative subpath below its own
checkpoint directory (``pipeline.checkpoint.subpath``) and one of the Spark masters the
operator allows; the Spark settings that name a file, a directory, a host or a URL on the
operator's machines are not a pipeline's to set, nor any of the families of settings that
shape the JVMs and interpreters a worker starts (``OPERATOR_SPARK_FAMILIES``, an allow-list:
a key of a family is refused unless the family names it)::

    subpath_problem("v2/orders")        # None: fine
    subpath_problem("../../etc")        # "must not contain '..' ..."
    policy = LocationPolicy(spark_masters=frozenset({"yarn"}))
    policy.check({"spark.master": "spark://elsewhere:7077"})   # InvalidConfError

Every check here is pure (no I/O); the clean-up that deletes under the root checks again,
on the file system, right before it deletes (``stratus.checkpoints``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stratus.api.echo import echo
from stratus.api.errors import InvalidConfError
from stratus.api.redaction import redact_text

CHECKPOINT_ROOT_KEY = "pipeline.checkpoint.root"
CHECKPOINT_SUBPATH_KEY = "pipeline.checkpoint.subpath"
MAX_SUBPATH_LENGTH = 255
SUBPATH_RULE = (
    "a relative path of at most 255 characters whose '/'-separated parts are letters, "
    "digits, '.', '_' and '-' (no '..', no scheme, no leading '/')"
)
_SEGMENT = re.compile(r"[A-Za-z0-9._-]+")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")

# The keys a pipeline's conf may use to choose where Spark runs: checked against the
# operator's list (LocationPolicy).
MASTER_KEYS = ("spark.master", "pipeline.spark.master", "spark.remote")
_LOCAL_MASTER = re.compile(r"local(\[(\*|[1-9][0-9]*)(,[0-9]+)?\])?")

# Spark settings that name a path, a host or a URL of the operator's machines (where the
# driver reads code, writes logs, or finds a metastore): set them in Spark's own
# spark-defaults.conf (SPARK_CONF_DIR), never in a pipeline's conf.
OPERATOR_SPARK_KEYS = frozenset(
    {
        "spark.sql.warehouse.dir",
        "spark.sql.streaming.checkpointLocation",
        "spark.checkpoint.dir",
        "spark.eventLog.dir",
        "spark.local.dir",
        "spark.jars",
        "spark.jars.packages",
        "spark.jars.repositories",
        "spark.jars.ivy",
        "spark.jars.ivySettings",
        "spark.files",
        "spark.archives",
        "spark.submit.pyFiles",
        "spark.driver.host",
        "spark.driver.bindAddress",
        "spark.hadoop.fs.defaultFS",
        "spark.hadoop.javax.jdo.option.ConnectionURL",
        "spark.hadoop.hive.metastore.uris",
    }
)


@dataclass(frozen=True)
class SparkFamily:
    """Spark settings that shape the JVMs and interpreters a worker starts: every key that
    ``pattern`` matches (in lower case) is the operator's, unless ``allowed`` names it."""

    what: str  # what the keys choose, for the error
    pattern: re.Pattern[str]
    allowed: frozenset[str] = frozenset()


# An allow-list: a key of these families is refused unless its family allows it, so a key
# that a new Spark version adds to a family is the operator's until stratus says otherwise.
# None of the JVMs' options, class paths, library paths, environments, plugins, listeners
# or interpreters is a pipeline's: the operator sets them in spark-defaults.conf.
OPERATOR_SPARK_FAMILIES = (
    SparkFamily("options of a JVM's command line", re.compile(r"javaopt")),
    SparkFamily("a JVM's class path", re.compile(r"classpath|(^|\.)jars(\.|$)")),
    SparkFamily(
        "files shipped to the Spark processes (Python's path among them)",
        re.compile(r"(^|\.)(files|archives?|pyfiles)$"),
    ),
    SparkFamily("a native library path", re.compile(r"librarypath")),
    SparkFamily(
        "the environment of a Spark process", re.compile(r"^spark\.([a-z0-9]+\.)*[a-z0-9]*env\.")
    ),
    SparkFamily(
        "the Python interpreter or its worker module",
        re.compile(r"^spark\.(pyspark|python)\."),
        allowed=frozenset(
            {
                "spark.python.worker.reuse",
                "spark.python.worker.memory",
                "spark.python.task.killTimeout",
                "spark.python.use.daemon",
            }
        ),
    ),
    SparkFamily("the R interpreter", re.compile(r"^spark\.(sparkr\.)?r\..*command$")),
    SparkFamily(
        "classes loaded into Spark (plugins, listeners, extensions)",
        re.compile(r"plugin|listeners?$|(^|\.)extensions$"),
    ),
    SparkFamily("a script Spark runs", re.compile(r"script$")),
    SparkFamily(
        "the container image or pod template of a Spark process",
        re.compile(r"^spark\.kubernetes\..*(image|podtemplatefile|podtemplatecontainername)$"),
    ),
    SparkFamily("what Spark redacts from its logs and UI", re.compile(r"(^|\.)redaction\.")),
)


def operator_spark_family(key: str) -> SparkFamily | None:
    """The family of JVM and interpreter settings ``key`` belongs to and that does not allow
    it (the key is the operator's), or None."""
    if not key.startswith("spark."):
        return None
    lowered = key.lower()
    for family in OPERATOR_SPARK_FAMILIES:
        if family.pattern.search(lowered) and key not in family.allowed:
            return family
    return None


def subpath_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a checkpoint subpath, or None if it can."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > MAX_SUBPATH_LENGTH:
        return f"is {len(value)} characters long; at most {MAX_SUBPATH_LENGTH} allowed"
    if "\x00" in value:
        return "must not contain a NUL character"
    if "\\" in value:
        return "must not contain a backslash"
    if _SCHEME.match(value):
        return "must not have a URL scheme: the operator's checkpoint root sets where it is"
    if value.startswith("/"):
        return "must be relative, not absolute"
    for segment in value.split("/"):
        if segment in ("", ".", ".."):
            return "must not contain '..', '.' or empty parts"
        if not _SEGMENT.fullmatch(segment):
            return f"has the part {segment!r}: only letters, digits, '.', '_' and '-' allowed"
    return None


def check_operator_keys(key: str, value: Any) -> None:
    """InvalidConfError if ``key`` is one a pipeline's conf may not set at all, or a
    checkpoint subpath that breaks the rule."""
    if key == CHECKPOINT_ROOT_KEY:
        raise InvalidConfError(
            f"pipeline conf {key}: the checkpoint root is the operator's setting (in the "
            f"daemons' configuration); a pipeline may choose {CHECKPOINT_SUBPATH_KEY}, "
            f"{SUBPATH_RULE}"
        )
    if key == CHECKPOINT_SUBPATH_KEY:
        problem = subpath_problem(value)
        if problem:
            raise InvalidConfError(f"pipeline conf {key}: {problem}; expected {SUBPATH_RULE}")
    family = operator_spark_family(key)
    if family is not None:
        raise InvalidConfError(
            f"pipeline conf {key}: sets {family.what}, which only the operator may choose; "
            "the operator sets it in Spark's spark-defaults.conf (SPARK_CONF_DIR)"
        )
    if key in OPERATOR_SPARK_KEYS:
        raise InvalidConfError(
            f"pipeline conf {key}: names a path, host or URL of the operator's machines, "
            "which a pipeline may not choose; the operator sets it in Spark's "
            "spark-defaults.conf (SPARK_CONF_DIR)"
        )


def is_local_master(value: str) -> bool:
    """``local``, ``local[N]``, ``local[*]`` or ``local[N,F]``: Spark inside the worker."""
    return _LOCAL_MASTER.fullmatch(value) is not None


@dataclass(frozen=True)
class LocationPolicy:
    """The operator's choices that a pipeline's conf is held to at submit and rebalance.

    ``spark_masters``: the Spark masters a pipeline may name besides a local one (the
    cluster's own ``pipeline.spark.master`` and ``pipeline.spark.masters``).
    """

    spark_masters: frozenset[str] = frozenset()

    def check(self, conf: Mapping[str, Any]) -> None:
        """InvalidConfError naming the key if ``conf`` names a Spark master not allowed."""
        for key in MASTER_KEYS:
            value = conf.get(key)
            if value is None:
                continue
            text = str(value)
            if is_local_master(text) or text in self.spark_masters:
                continue
            # the masters' URLs may hold a password: the message shows them redacted
            allowed = redact_text(", ".join(sorted(self.spark_masters))) or "none"
            raise InvalidConfError(
                f"pipeline conf {key}: {echo(redact_text(text))} is not a Spark master this "
                "cluster allows; a pipeline may use local[...] or one of the operator's "
                f"pipeline.spark.masters ({allowed})"
            )
