"""Errors shared by every part of stratus."""


class StratusError(Exception):
    """Base of every error stratus raises on purpose; its message is meant for the user."""


class ConfigError(StratusError):
    """The configuration is invalid: an unknown key, a bad value, an unreadable file."""


class PipelineStartError(StratusError):
    """A pipeline did not (re)start as followed: its new worker FAILED, or a step took too long."""
