"""The errors of the failover controller and its parts."""

from __future__ import annotations

from stratus.errors import ConfigError, StratusError


class FencingConfigError(ConfigError):
    """``ha.fencing.methods`` names a method that does not exist or is written wrongly."""


class ZkfcConfigError(ConfigError):
    """The zkfc cannot run with this configuration (no target, a bad address)."""


class ZkfcFatalError(StratusError):
    """The failover controller cannot go on (its health monitor or its elector failed)."""
