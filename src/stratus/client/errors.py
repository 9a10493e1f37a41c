"""Errors of the client that no nimbus sends: they say that no nimbus could answer."""

from __future__ import annotations

from stratus.api.errors import UnavailableError
from stratus.errors import StratusError


class NimbusUnreachableError(StratusError):
    """No nimbus answered (refused, reset or timed out) before the retry deadline passed."""


class NoLeaderError(UnavailableError):
    """The nimbuses that answered know no leader: an election is under way, or none can lead."""
