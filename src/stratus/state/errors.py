"""Errors of the cluster state store."""

from __future__ import annotations

from stratus.errors import StratusError


class StateStoreUnavailableError(StratusError):
    """The cluster state store could not be reached (or did not answer in time) for one call.

    Nothing is known about a write that failed this way: it may or may not have landed.
    Heartbeats are written again at their next period and read again at the next round, so
    the caller logs it and carries on; it never needs to undo anything.
    """

    def __init__(self, store: str, path: str, reason: str) -> None:
        super().__init__(
            f"the {store} cluster state store is unavailable at {path}: {reason}; "
            "the call may be retried once it is reachable again"
        )
        self.store = store
        self.path = path
        self.reason = reason
