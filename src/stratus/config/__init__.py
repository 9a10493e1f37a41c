"""Typed configuration: defaults, a YAML file, and ``-c key=value`` overrides, validated once.

Keys are flat and dotted, as in Storm's ``storm.yaml`` (``zookeeper.servers``,
``nimbus.seeds``); "topology" in Storm's vocabulary is spelled "pipeline" here. Precedence,
lowest first: built-in defaults, the file named by ``--config`` (or ``STRATUS_CONF``), then each
``-c key=value``. An unknown key is an error that names it and the closest valid key; a bad value
names the key and the type it expects::

    conf = load_config(path="stratus.yaml", overrides=["zookeeper.session.timeout.secs=4"])
    conf.zookeeper_session_timeout_secs  # 4.0

The keys of one prefix are one section (``zookeeper.py``, ``nimbus.py``, ...: a pydantic
model each); ``model.py`` composes them into ``StratusConfig``, ``checks.py`` holds the rules
between keys of several sections, ``loading.py`` reads files and overrides, and
``reference.py`` writes docs/configuration.md's tables from the sections (``make docs``).
"""

from stratus.config.checks import UNSPECIFIED_HOSTS, url_scheme
from stratus.config.loading import CONFIG_ENV_VAR, config_from_mapping, load_config, valid_keys
from stratus.config.model import StratusConfig
from stratus.config.pipeline import LEGACY_CHECKPOINT_DIR
from stratus.config.supervisor import SUPERVISOR_ID_PATTERN

__all__ = [
    "CONFIG_ENV_VAR",
    "LEGACY_CHECKPOINT_DIR",
    "SUPERVISOR_ID_PATTERN",
    "UNSPECIFIED_HOSTS",
    "StratusConfig",
    "config_from_mapping",
    "load_config",
    "url_scheme",
    "valid_keys",
]
