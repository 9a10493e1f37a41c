"""Errors shared by every part of stratus."""


class StratusError(Exception):
    """Base of every error stratus raises on purpose; its message is meant for the user."""


class ConfigError(StratusError):
    """The configuration is invalid: an unknown key, a bad value, an unreadable file."""
