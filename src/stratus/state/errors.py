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


class BadRoundError(StratusError):
    """A pacemaker pulse that should hold a supervisor's round does not: not a map of
    heartbeats, or one that names another supervisor. The reader skips that round and logs
    it; the supervisor's heartbeats then read as missing, as a torn heartbeat would."""

    def __init__(self, owner: str, reason: str) -> None:
        super().__init__(
            f"the heartbeat round of supervisor {owner!r} is not readable: {reason}; it is "
            "skipped (is that supervisor of another stratus version?)"
        )
        self.owner = owner
        self.reason = reason


class BadBeatError(StratusError):
    """A pacemaker pulse under ``/beats`` is not a beat of a format this release reads: not
    msgpack, another version, a field of the wrong kind, or above the size of any beat. The
    reader skips it and logs it; that supervisor's beats then read as missing."""

    def __init__(self, supervisor: str, reason: str) -> None:
        super().__init__(
            f"the beat of supervisor {supervisor!r} is not readable: {reason}; it is skipped "
            "(is that supervisor of another stratus version?)"
        )
        self.supervisor = supervisor
        self.reason = reason
