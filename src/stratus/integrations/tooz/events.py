"""The election events the backend adds to tooz's: the epoch on election, and the loss.

tooz tells a member ``LeaderElected`` and nothing else; a leader whose session expired,
whose connection was suspended, or who was deposed keeps believing it leads. The backend
tells it ``LeaderElected`` as a ``StratusLeaderElected`` (with the term's ``epoch`` and its
``leadership``, through which it writes fenced), and ``LeadershipLost`` when the term stops,
through the hooks of ``StratusDriver.watch_elected_lost``; both run in ``run_watchers``,
in the order they happened, like every tooz hook.
"""

from __future__ import annotations

from tooz.coordination import Event, LeaderElected

from stratus.coordination import Leadership, RevokeReason


class StratusLeaderElected(LeaderElected):
    """``LeaderElected``, with the fencing ``epoch`` of the term won and its ``leadership``.

    A term that resumes after a short suspension is announced again, with the same epoch.
    """

    def __init__(self, group_id: bytes, member_id: bytes, leadership: Leadership) -> None:
        super().__init__(group_id, member_id)
        self.leadership = leadership
        self.epoch = leadership.epoch

    def __repr__(self) -> str:
        return (
            f"<StratusLeaderElected: group {self.group_id!r}: {self.member_id!r} "
            f"epoch {self.epoch}>"
        )


class LeadershipLost(Event):
    """This member stopped leading ``group_id``: the term of ``epoch`` is over, or suspended.

    ``reason`` says why: ``SUSPENDED`` (the connection dropped; the same term may resume,
    announced by a new ``LeaderElected`` with the same epoch), ``SESSION_LOST``, ``DEPOSED``
    (someone else holds the slot now) or ``RESIGNED`` (``stand_down_group_leader``). From the
    moment it happened, a fenced write of that epoch is refused.
    """

    def __init__(self, group_id: bytes, member_id: bytes, epoch: int, reason: RevokeReason) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.epoch = epoch
        self.reason = reason

    def __repr__(self) -> str:
        return (
            f"<LeadershipLost: group {self.group_id!r}: {self.member_id!r} epoch {self.epoch} "
            f"({self.reason.value})>"
        )
