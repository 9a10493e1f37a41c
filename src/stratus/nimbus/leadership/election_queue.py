"""The leader lock of a self-elected nimbus: its place in the nimbus group's election queue.

In ``nimbus.ha.mode: self`` (the default) the leadership controller queues through the
``LeaderElector`` itself; this is the ``LeaderLock`` it sees in that mode (the other one,
for a nimbus under a failover controller, is ``granted_lock``)::

    queue = ElectionQueue(build_elector(coordinator, "n1:6627", on_gain, on_loss), coordinator)
    queue.join()       # queue for leadership; the elector's on_gain says when it is won
"""

from __future__ import annotations

from collections.abc import Callable

from stratus.coordination.coordinator import Coordinator
from stratus.coordination.leader_elector import LeaderElector
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import RevokeReason
from stratus.zk.paths import NIMBUS_GROUP


def build_elector(
    coordinator: Coordinator,
    address: str,
    on_gain: Callable[[Leadership], None],
    on_loss: Callable[[Leadership, RevokeReason], None],
) -> LeaderElector:
    """This nimbus's place in the nimbus group's election."""
    return LeaderElector(coordinator, address, group=NIMBUS_GROUP, on_gain=on_gain, on_loss=on_loss)


class ElectionQueue:
    """The nimbus group's leader lock queue, as the leadership controller uses it."""

    def __init__(self, elector: LeaderElector, coordinator: Coordinator) -> None:
        self._elector = elector
        self._coordinator = coordinator

    def join(self) -> None:
        self._elector.add_to_leader_lock_queue()

    def leave(self) -> None:
        self._elector.remove_from_leader_lock_queue()

    def in_queue(self) -> bool:
        return self._coordinator.is_candidate(self._elector.group)
