"""Errors of the client that no nimbus sends: they say that no nimbus could answer."""

from __future__ import annotations

from stratus.api.errors import NoLeaderError
from stratus.errors import StratusError

__all__ = ["NimbusUnreachableError", "NoLeaderError", "PurgeFailedError", "PurgeWaitTimeoutError"]


class NimbusUnreachableError(StratusError):
    """No nimbus answered (refused, reset or timed out) before the retry deadline passed."""


class DrainNoRoomError(StratusError):
    """A drain cannot finish: pipelines of the supervisor found no other supervisor with a
    free slot. The supervisor stays cordoned and the leader keeps trying."""

    def __init__(self, supervisor: str, pipelines: list[str]) -> None:
        super().__init__(
            f"drain of supervisor {supervisor}: no other supervisor has room for "
            f"{', '.join(pipelines)}; they keep running there (cordoned: it takes nothing "
            "new). Add a supervisor or free slots, and the leader moves them"
        )
        self.supervisor = supervisor
        self.pipelines = pipelines


class DrainTimeoutError(StratusError):
    """A drain did not finish within the time the caller gave it."""

    def __init__(self, supervisor: str, left: list[str], timeout: float) -> None:
        super().__init__(
            f"drain of supervisor {supervisor} not done after {timeout:g}s: "
            f"{', '.join(left)} still there or on the way; it goes on (stratus drain again "
            "to follow it)"
        )
        self.supervisor = supervisor
        self.left = left


class PurgeFailedError(StratusError):
    """The purge of a killed pipeline's checkpoints failed: everyone who could delete them
    tried and failed (the reasons are in the message). The purge stays recorded and is tried
    again; the name cannot be submitted until it is done."""


class PurgeWaitTimeoutError(StratusError):
    """A wait for a pipeline's removal and the purge of its checkpoints ran out of time; the
    kill and the purge go on."""


class RolloutFailedError(StratusError):
    """A new generation of a pipeline (an update, a rollback, a restart) did not come to run:
    it was rolled back, refused, or its worker failed; the message has the reason."""


class RolloutTimeoutError(StratusError):
    """A wait for a pipeline's new generation to run ran out of time; the change goes on."""
