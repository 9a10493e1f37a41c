"""``epoch``: succeed at once, for a service whose every write its election's epoch fences."""

from __future__ import annotations

from stratus.ha.fencing.protocol import (
    Fence,
    FenceTarget,
    FencingContext,
    Usage,
    refuse_argument,
)


class EpochFence:
    """Succeeds: the service's writes are refused once a newer epoch exists (a nimbus's are)."""

    def fence(self, target: FenceTarget) -> bool:
        return True


class EpochMethod:
    name = "epoch"
    usages = (
        Usage(
            "epoch",
            "succeeds at once. It declares that the service fences itself: every write a "
            "stratus nimbus makes is a ZooKeeper transaction checked against its term's "
            "epoch, so a stale active cannot write after a new term began. Only for "
            "services that do that",
        ),
    )
    not_for_supervisors = "an epoch stops no worker that runs already"

    def check_argument(self, argument: str | None, entry: str, key: str) -> None:
        refuse_argument(self.name, argument, entry, key)

    def create(self, argument: str | None, context: FencingContext) -> Fence:
        return EpochFence()


METHOD = EpochMethod()
