"""Errors of the client that no nimbus sends: they say that no nimbus could answer."""

from __future__ import annotations

from stratus.api.errors import NoLeaderError
from stratus.errors import StratusError

__all__ = ["NimbusUnreachableError", "NoLeaderError", "PurgeFailedError", "PurgeWaitTimeoutError"]


class NimbusUnreachableError(StratusError):
    """No nimbus answered (refused, reset or timed out) before the retry deadline passed."""


class PurgeFailedError(StratusError):
    """The purge of a killed pipeline's checkpoints failed: everyone who could delete them
    tried and failed (the reasons are in the message). The purge stays recorded and is tried
    again; the name cannot be submitted until it is done."""


class PurgeWaitTimeoutError(StratusError):
    """A wait for a pipeline's removal and the purge of its checkpoints ran out of time; the
    kill and the purge go on."""
