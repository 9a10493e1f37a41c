"""Errors shared by every part of stratus."""


class StratusError(Exception):
    """Base of every error stratus raises on purpose; its message is meant for the user."""


class ConfigError(StratusError):
    """The configuration is invalid: an unknown key, a bad value, an unreadable file."""


class PipelineStartError(StratusError):
    """A pipeline did not (re)start as followed: its new worker FAILED, or a step took too long."""


class CheckpointLocationError(StratusError):
    """A pipeline's checkpoint location would leave the operator's checkpoint root: a bad
    ``pipeline.checkpoint.subpath``, or a directory that resolves outside the root."""
