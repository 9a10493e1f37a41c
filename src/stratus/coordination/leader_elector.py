"""Storm's ``ILeaderElector`` on top of the group election.

A nimbus queues once it holds the code of every active pipeline, and checks ``is_leader()``
before any leader-only action; every leader-only write goes through ``leadership``'s fenced
transaction::

    elector = LeaderElector(Coordinator(session), "nimbus-1:6627", group="nimbus")
    elector.add_to_leader_lock_queue()
    if elector.is_leader():
        ...
    elector.get_leader_address()       # "nimbus-1:6627", or NoLeaderError
"""

from __future__ import annotations

from collections.abc import Callable

from stratus.coordination.coordinator import Coordinator
from stratus.coordination.errors import NoLeaderError
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import RevokeReason


class LeaderElector:
    """One nimbus's place in the leader lock queue of ``group``; addresses are ``host:port``."""

    def __init__(
        self,
        coordinator: Coordinator,
        address: str,
        *,
        group: str = "nimbus",
        on_gain: Callable[[Leadership], None] | None = None,
        on_loss: Callable[[Leadership, RevokeReason], None] | None = None,
    ) -> None:
        self._coordinator = coordinator
        self.address = address
        self.group = group
        self._on_gain = on_gain
        self._on_loss = on_loss

    def add_to_leader_lock_queue(self) -> None:
        """Queue up for the leader lock; returns at once. Queuing twice is a no-op."""
        if self._coordinator.is_candidate(self.group):
            return
        self._coordinator.nominate_async(
            self.group, self.address, self._gained, on_revoked=self._lost
        )

    def remove_from_leader_lock_queue(self) -> None:
        """Leave the queue; a leader releases the lock at once."""
        self._coordinator.unnominate(self.group)

    def is_leader(self) -> bool:
        return self._coordinator.is_leader(self.group)

    @property
    def leadership(self) -> Leadership | None:
        """The current term (epoch and fenced transactions) while this nimbus leads."""
        return self._coordinator.leadership(self.group)

    def get_leader_address(self) -> str:
        leader = self._coordinator.get_leader(self.group)
        if leader is None:
            raise NoLeaderError(f"no nimbus holds the leader lock of group {self.group!r}")
        return leader

    def get_all_nimbus_addresses(self) -> list[str]:
        """Every nimbus in the queue, the leader included, leader first."""
        candidates = self._coordinator.get_candidates(self.group)
        leader = self._coordinator.get_leader(self.group)
        if leader in candidates:
            candidates.remove(leader)
            candidates.insert(0, leader)
        return candidates

    def _gained(self, leadership: Leadership) -> None:
        if self._on_gain is not None:
            self._on_gain(leadership)

    def _lost(self, leadership: Leadership, reason: RevokeReason) -> None:
        if self._on_loss is not None:
            self._on_loss(leadership, reason)
