"""Errors of the client that no nimbus sends: they say that no nimbus could answer."""

from __future__ import annotations

from stratus.api.errors import NoLeaderError
from stratus.errors import StratusError

__all__ = ["NimbusUnreachableError", "NoLeaderError"]


class NimbusUnreachableError(StratusError):
    """No nimbus answered (refused, reset or timed out) before the retry deadline passed."""
