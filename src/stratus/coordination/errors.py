"""Errors of the election library.

Two it raises are shared with other layers and defined there: ``NoLeaderError`` (the shared
vocabulary, ``stratus.api.errors``) and ``ZooKeeperUnavailableError`` (the session,
``stratus.zk.errors``); both are importable from here too.
"""

from stratus.api.errors import NoLeaderError
from stratus.errors import StratusError
from stratus.zk.errors import ZooKeeperUnavailableError

__all__ = [
    "CommitOutcomeUnknownError",
    "CoordinationError",
    "ElectionTimeoutError",
    "LeadershipLostError",
    "NoLeaderError",
    "TermMismatchError",
    "TransactionFailedError",
    "ZooKeeperUnavailableError",
]


class CoordinationError(StratusError):
    """Something went wrong while coordinating through ZooKeeper."""


class LeadershipLostError(CoordinationError, RuntimeError):
    """A leader-only action was refused because this member no longer leads.

    Raised by a fenced transaction when the group's epoch has moved past the leader's own
    (someone else was elected since), when the session was lost or suspended, or after the
    member resigned. Nothing of the refused transaction was written.
    """


class CommitOutcomeUnknownError(CoordinationError):
    """The connection dropped while a fenced transaction was in flight.

    ZooKeeper may or may not have applied it: read the state back before retrying.
    """


class TransactionFailedError(CoordinationError):
    """A fenced transaction was refused by ZooKeeper for a reason other than fencing."""


class ElectionTimeoutError(CoordinationError, TimeoutError):
    """A blocking nomination was not elected within its timeout; the candidacy was withdrawn."""


class TermMismatchError(CoordinationError):
    """A term to adopt is not the group's current one, or its leader record names another member.

    ``current_epoch`` is the slot's epoch in ZooKeeper and ``leader`` the member its leader
    record names (None when the slot is vacant), so the caller can tell a stale epoch from a
    foreign one.
    """

    def __init__(self, message: str, *, current_epoch: int, leader: str | None) -> None:
        super().__init__(message)
        self.current_epoch = current_epoch
        self.leader = leader
