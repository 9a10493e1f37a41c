"""A nimbus's trail as leader: each term won and lost, and every fenced write it made.

The lines the reliability oracle reads to prove that no deposed leader's write was
accepted (``stratus.trail``). Every leader write is a fenced transaction of the election
library, whose ``on_fenced_write`` listener is ``wrote``: one place, not one per duty::

    trail = LeaderTrail(TrailRecorder.open(path, Actor("nimbus", "n1:6627")))
    Coordinator(session, on_fenced_write=trail.wrote)
    trail.won(term); trail.lost(term, RevokeReason.SESSION_LOST)
"""

from __future__ import annotations

from stratus.coordination.leadership import Leadership
from stratus.coordination.records import FencedWrite, RevokeReason
from stratus.trail import LEADER_LOST, LEADER_WON, LEADER_WRITE, TrailRecorder


class LeaderTrail:
    """Records one nimbus's terms and writes."""

    def __init__(self, recorder: TrailRecorder) -> None:
        self._recorder = recorder

    def won(self, term: Leadership) -> None:
        """The elector granted (or resumed) ``term``: ZooKeeper's epoch is ``term.epoch``."""
        self._recorder.record(LEADER_WON, group=term.group, epoch=term.epoch)

    def lost(self, term: Leadership, reason: RevokeReason) -> None:
        """``term`` is over or suspended: this nimbus acts no more for it."""
        self._recorder.record(LEADER_LOST, group=term.group, epoch=term.epoch, reason=reason.value)

    def wrote(self, write: FencedWrite) -> None:
        """ZooKeeper applied a fenced transaction of the term at ``write.epoch``."""
        self._recorder.record(
            LEADER_WRITE,
            group=write.group,
            epoch=write.epoch,
            began_wall=write.began_wall,
            began_mono=write.began_mono,
            ops=[f"{op} {path}" for op, path in write.ops],
        )

    def close(self) -> None:
        self._recorder.close()
