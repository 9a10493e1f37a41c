"""Validation of a pipeline's conf: Spark settings plus the pipeline keys stratus knows.

A pipeline's conf is a flat mapping. ``spark.*`` keys go to Spark unchanged and take any
scalar value; ``pipeline.*`` keys are stratus's own and are typed; ``pipeline.env.NAME``
sets the environment variable NAME of the pipeline's worker; anything else is refused
with the closest valid key, so a typo never goes unnoticed. Paths, hosts and URLs are the
operator's (``stratus.api.locations``): the checkpoint root and the Spark settings that
name the operator's files or hosts are refused::

    validate_pipeline_conf({"spark.sql.shuffle.partitions": 4})     # returns it, checked
    validate_pipeline_conf({"pipeline.min.replicaton.count": 2})    # InvalidConfError
    validate_pipeline_conf({"pipeline.env.REGION": "eu-west-1"})    # REGION in the worker
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from stratus.api.echo import echo
from stratus.api.errors import InvalidConfError
from stratus.api.locations import CHECKPOINT_SUBPATH_KEY, SUBPATH_RULE, check_operator_keys
from stratus.api.names import PRINCIPAL_RULE, is_principal
from stratus.api.standby_workers import STANDBY_CONF_KEY, STANDBY_MODES

MAX_KEYS = 1000
MAX_KEY_LENGTH = 256
MAX_VALUE_LENGTH = 64 * 1024
ENV_PREFIX = "pipeline.env."
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
ENV_NAME_RULE = "a letter or '_', then letters, digits and '_' (at most 128)"


# A key is printable ASCII without spaces: what Spark and environment names use, and what
# every log line, shell and JVM shows as it is.
KEY = re.compile(r"[!-~]+")
KEY_RULE = "printable ASCII without spaces"
# Integers are Java longs on their way to Spark; stratus's own counts and times have sane ends.
MIN_LONG, MAX_LONG = -(2**63), 2**63 - 1
MAX_REPLICATION = 1000
MAX_WAIT_SECS = 365 * 86_400
# Control characters but tab, newline and carriage return: a NUL cuts an environment
# variable or an argument, an escape sequence rewrites a terminal that shows the conf.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _int_between(lowest: int, highest: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lowest <= v <= highest


def _positive_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0 < value <= MAX_WAIT_SECS
    )


def _text(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_VALUE_LENGTH


OWNERS_KEY = "pipeline.owners"  # principals who may change the pipeline, besides its submitter
READERS_KEY = "pipeline.readers"  # principals who may read its logs
# The submitter, set by the leader in the assignment's conf (never in a record's): what a
# supervisor knows of who owns a pipeline whose log it serves.
OWNER_KEY = "pipeline.owner"
MAX_PRINCIPALS = 100


def principal_list(value: Any) -> list[str]:
    """The principals of a ``pipeline.owners`` or ``pipeline.readers`` value: a string of
    comma-separated names (spaces around them ignored); [] for anything else."""
    if not isinstance(value, str):
        return []
    return [part.strip() for part in value.split(",") if part.strip()]


def _principals(value: Any) -> bool:
    names = principal_list(value)
    return (
        isinstance(value, str)
        and 0 < len(names) <= MAX_PRINCIPALS
        and all(is_principal(name) for name in names)
    )


# key -> (check, what the check expects)
PIPELINE_KEYS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "pipeline.min.replication.count": (
        _int_between(1, MAX_REPLICATION),
        f"an integer >= 1, at most {MAX_REPLICATION}",
    ),
    "pipeline.max.replication.wait.time.sec": (
        _int_between(-1, MAX_WAIT_SECS),
        f"an integer >= -1, at most {MAX_WAIT_SECS}",
    ),
    CHECKPOINT_SUBPATH_KEY: (_text, SUBPATH_RULE),
    "pipeline.trigger.interval.secs": (_positive_number, f"a number > 0, at most {MAX_WAIT_SECS}"),
    "pipeline.spark.master": (_text, "a Spark master URL"),
    "pipeline.update.rollback": (lambda value: isinstance(value, bool), "true or false"),
    STANDBY_CONF_KEY: (
        lambda value: value in STANDBY_MODES,
        " or ".join(STANDBY_MODES) + " (hot: a standby worker waits on another supervisor)",
    ),
    OWNERS_KEY: (
        _principals,
        f"comma-separated principals (at most {MAX_PRINCIPALS}), each {PRINCIPAL_RULE}",
    ),
    READERS_KEY: (
        _principals,
        f"comma-separated principals (at most {MAX_PRINCIPALS}), each {PRINCIPAL_RULE}",
    ),
}


def validate_pipeline_conf(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``conf`` as a dict if every key and value is valid, else raise InvalidConfError."""
    if len(conf) > MAX_KEYS:
        raise InvalidConfError(f"pipeline conf has {len(conf)} keys; at most {MAX_KEYS} allowed")
    for key, value in conf.items():
        _check_entry(key, value)
    return dict(conf)


def _check_entry(key: Any, value: Any) -> None:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidConfError(f"invalid pipeline conf key {echo(key)}")
    if not KEY.fullmatch(key):
        raise InvalidConfError(f"invalid pipeline conf key {echo(key)}: use {KEY_RULE}")
    if isinstance(value, float) and not math.isfinite(value):
        # JSON has no NaN nor Infinity; Python's parser accepts them, Spark and JSON readers not
        raise InvalidConfError(f"pipeline conf {key}: {value} is not a finite number")
    if isinstance(value, int) and not isinstance(value, bool) and not MIN_LONG <= value <= MAX_LONG:
        raise InvalidConfError(
            f"pipeline conf {key}: {echo(value)} is out of range: integers are 64-bit "
            f"({MIN_LONG} to {MAX_LONG})"
        )
    if isinstance(value, str):
        _check_text_value(key, value)
    check_operator_keys(key, value)
    if key == OWNER_KEY:
        raise InvalidConfError(
            f"pipeline conf {OWNER_KEY}: the submitter owns a pipeline, as the nimbus records "
            f"it; name other owners with {OWNERS_KEY}"
        )
    if key.startswith("spark."):
        _check_spark_value(key, value)
    elif key.startswith(ENV_PREFIX):
        _check_env_entry(key, value)
    elif key in PIPELINE_KEYS:
        check, expected = PIPELINE_KEYS[key]
        if not check(value):
            raise InvalidConfError(f"pipeline conf {key}: expected {expected}, got {echo(value)}")
    else:
        close = difflib.get_close_matches(key, list(PIPELINE_KEYS), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InvalidConfError(
            f"unknown pipeline conf key {echo(key)}: keys are spark.* or one of "
            f"{', '.join(PIPELINE_KEYS)}, {ENV_PREFIX}NAME{hint}"
        )


def _check_text_value(key: str, value: str) -> None:
    """Refuse control characters and text that is not Unicode; the value is never quoted
    (it may be a secret), only where the problem is."""
    control = _CONTROL.search(value)
    if control is not None:
        raise InvalidConfError(
            f"pipeline conf {key}: the value holds a control character "
            f"(U+{ord(control.group()):04X}{' NUL' if control.group() == chr(0) else ''} at "
            f"character {control.start()}); only tab, "
            "newline and carriage return are allowed"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidConfError(
            f"pipeline conf {key}: the value is not valid Unicode (a lone surrogate at "
            f"character {exc.start})"
        ) from None


def _check_env_entry(key: str, value: Any) -> None:
    name = key.removeprefix(ENV_PREFIX)
    if not ENV_NAME.fullmatch(name):
        raise InvalidConfError(
            f"pipeline conf {key}: {name!r} cannot be an environment variable's name; "
            f"expected {ENV_NAME_RULE}"
        )
    if not isinstance(value, str | int | float | bool) or "\x00" in str(value):
        raise InvalidConfError(
            f"pipeline conf {key}: expected a string, number or boolean without NUL, "
            f"got a {type(value).__name__}"  # not the value itself: it may be a secret
        )
    if len(str(value)) > MAX_VALUE_LENGTH:
        raise InvalidConfError(f"pipeline conf {key}: value longer than {MAX_VALUE_LENGTH}")


def env_entries(conf: Mapping[str, Any]) -> dict[str, str]:
    """The worker environment's variables that ``conf`` sets (``pipeline.env.NAME``), as
    text (``True`` is ``"true"``, as Spark writes booleans)."""
    return {
        key.removeprefix(ENV_PREFIX): _env_text(value)
        for key, value in conf.items()
        if key.startswith(ENV_PREFIX)
    }


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _check_spark_value(key: str, value: Any) -> None:
    if isinstance(value, str) and len(value) > MAX_VALUE_LENGTH:
        raise InvalidConfError(f"pipeline conf {key}: value longer than {MAX_VALUE_LENGTH}")
    if not isinstance(value, str | int | float | bool):
        raise InvalidConfError(
            f"pipeline conf {key}: Spark settings take a string, number or boolean, "
            f"got {type(value).__name__}"
        )
