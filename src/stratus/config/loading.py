"""Reading a configuration: the YAML file, ``-c key=value`` overrides, and errors that name
the key at fault.

Precedence, lowest first: built-in defaults, the file named by ``--config`` (or
``STRATUS_CONF``), then each ``-c key=value``::

    conf = load_config(path="stratus.yaml", overrides=["zookeeper.session.timeout.secs=4"])
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from stratus.config.model import StratusConfig
from stratus.errors import ConfigError

CONFIG_ENV_VAR = "STRATUS_CONF"
_LIST_KEYS = frozenset(  # `a,b` splits at commas, in a file as with `-c key=a,b`
    {
        "zookeeper.servers",
        "nimbus.seeds",
        "pacemaker.servers",
        "pipeline.checkpoint.schemes",
        "pipeline.spark.masters",
        "supervisor.worker.env",
        "supervisor.worker.users",
        "supervisor.deps.find.links",
    }
)


def valid_keys() -> list[str]:
    """Every dotted key that a configuration may set."""
    return [str(field.alias) for field in StratusConfig.model_fields.values()]


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Iterable[str] = (),
    *,
    environ: Mapping[str, str] | None = None,
) -> StratusConfig:
    """Build the configuration from defaults, a YAML file and ``key=value`` overrides."""
    environ = os.environ if environ is None else environ
    if path is None and environ.get(CONFIG_ENV_VAR):
        path = environ[CONFIG_ENV_VAR]
    values: dict[str, Any] = {}
    if path is not None:
        values.update(_read_file(Path(path)))
    for item in overrides:
        key, value = _parse_override(item)
        values[key] = value
    return config_from_mapping(values)


def config_from_mapping(values: Mapping[str, Any]) -> StratusConfig:
    """Validate a mapping of dotted keys, with errors that name the key at fault. A list
    key given as one string is the comma-separated list that ZooKeeper's connection strings
    taught users (``zookeeper.servers: zk1:2181,zk2:2181``), wherever it comes from."""
    _reject_unknown_keys(values)
    values = {key: _split_list(key, value) for key, value in values.items()}
    try:
        return StratusConfig.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"configuration file {path} is not valid YAML: {detail}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"configuration file {path} must be a mapping of dotted keys to values, "
            f"not a {type(data).__name__}"
        )
    return {str(key): value for key, value in data.items()}


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r} is not of the form key=value")
    # YAML parsing gives `4` an int, `a,b` stays a string, `[a, b]` a list.
    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def _split_list(key: str, value: Any) -> Any:
    """A list key's string value as the list of its comma-separated items."""
    if key in _LIST_KEYS and isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


def _reject_unknown_keys(values: Mapping[str, Any]) -> None:
    known = valid_keys()
    for key in values:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown configuration key {key!r}{hint}")


def _describe(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "configuration"
        got = error.get("input")
        problems.append(f"{key}: {error['msg']} (got {got!r})" if error["loc"] else error["msg"])
    return "invalid configuration: " + "; ".join(problems)
