"""Errors of the tooz backend: tooz's own exception classes, so tooz callers catch them."""

from __future__ import annotations

import tooz

from stratus.errors import StratusError


class ToozNameError(StratusError, tooz.ToozError):
    """A tooz id cannot be stored as a znode name (too long)."""

    def __init__(self, message: str) -> None:
        StratusError.__init__(self, message)
        self.cause = None


class ToozUrlError(StratusError, tooz.ToozError, ValueError):
    """A ``stratus://`` URL or one of its options is not valid."""

    def __init__(self, message: str) -> None:
        StratusError.__init__(self, message)
        self.cause = None
