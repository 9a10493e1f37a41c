"""The user's settings for the daemons that ``stratus local`` starts: its ``--config``,
``-c`` and ``--log-level``, on top of the local cluster's own.

Every child (nimbus, supervisor, pacemaker, zkfc) reads them, lowest first: the defaults,
the local cluster's tuning (seconds-long timeouts, ``local[1]``), the user's settings, then
the keys the local cluster keeps for itself (``LOCAL_KEYS``: its addresses, ports,
directories and ZooKeeper, its security, its HA mode and state store), which no user setting
changes: a user's value for one is left out, and ``ignored`` names it so that the command
can say so. The settings reach the children in a private file, never on their command
lines, and that file is always given, so a ``STRATUS_CONF`` in the environment does not
reach them unfiltered either::

    user = UserSettings.of(conf)                    # the keys the user set
    user.ignored                                    # the ones the local cluster keeps
    path = user.write(workdir / "user.yaml")        # mode 0600
    options = user.options(path, local_options)     # --config path, the local -c the user left
    user.check(path, options)                       # ConfigError now, not in a child's log
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from stratus.config import StratusConfig, load_config
from stratus.errors import ConfigError

PRIVATE_FILE_MODE = 0o600  # the user's settings may name secrets' files
# Keys (exact, or a prefix ending with ".") whose value is the local cluster's own.
LOCAL_KEYS = (
    "zookeeper.servers",
    "zookeeper.root",
    "zookeeper.server.",  # the local cluster runs its own ZooKeeper server
    "zookeeper.auth.",  # security: stratus local --secure, or none
    "zookeeper.ssl.",
    "nimbus.host",
    "nimbus.port",
    "nimbus.bind.host",
    "nimbus.seeds",
    "nimbus.local.dir",
    "nimbus.code.port",
    "nimbus.ha.mode",  # stratus local --ha
    "nimbus.auth.",
    "nimbus.tls.",
    "client.auth.",
    "client.tls.",
    "cluster.state.store",  # stratus local --state-store
    "pacemaker.servers",
    "pacemaker.host",
    "pacemaker.port",
    "supervisor.id",
    "supervisor.host",
    "supervisor.slots",
    "supervisor.local.dir",
    "supervisor.http.port",
    "supervisor.http.bind.host",
    "pipeline.checkpoint.root",
    "ha.zkfc.target",
    "ha.zkfc.port",
)


def is_local_key(key: str) -> bool:
    """Whether the local cluster keeps ``key`` for itself (see ``LOCAL_KEYS``)."""
    return any(key.startswith(own) if own.endswith(".") else key == own for own in LOCAL_KEYS)


@dataclass(frozen=True)
class UserSettings:
    """The keys the user set, as dotted keys and plain values, and the ones left out."""

    values: Mapping[str, Any] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()

    @classmethod
    def of(cls, conf: StratusConfig) -> UserSettings:
        """The keys set in ``conf`` (by a file, ``-c`` or ``--log-level``), defaults left out."""
        given = conf.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return cls(
            values={key: value for key, value in given.items() if not is_local_key(key)},
            ignored=tuple(sorted(key for key in given if is_local_key(key))),
        )

    def write(self, path: Path) -> Path:
        """The settings as a YAML configuration file at ``path`` (replaced), mode 0600."""
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            yaml.safe_dump(dict(self.values), file, sort_keys=True)
        return path

    def beneath(self, options: Sequence[str]) -> list[str]:
        """``options`` without the ``-c key=value`` pairs of the keys the user set: the
        user's value is the one that counts (the file cannot win over a ``-c``)."""
        kept: list[str] = []
        items = iter(options)
        for item in items:
            if item == "-c":
                pair = next(items)
                if pair.partition("=")[0].strip() not in self.values:
                    kept += [item, pair]
            else:
                kept.append(item)
        return kept

    def options(self, path: Path, options: Sequence[str]) -> list[str]:
        """A child's options: ``--config path`` (written by ``write``), then ``options``
        without the keys the user set."""
        return ["--config", str(path), *self.beneath(options)]

    def check(self, path: Path, options: Sequence[str]) -> None:
        """Load what a child given ``options`` (from ``self.options``) would, so that a
        combination the configuration refuses stops the local cluster before it starts."""
        overrides = [pair for item, pair in itertools.pairwise(options) if item == "-c"]
        try:
            load_config(path, overrides, environ={})
        except ConfigError as exc:
            raise ConfigError(
                f"your settings do not fit the local cluster's: {exc}; change or leave out "
                "the key it names"
            ) from None
