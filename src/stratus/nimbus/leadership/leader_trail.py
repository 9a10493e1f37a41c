"""A nimbus's trail as leader: each term won and lost, and every fenced write it made.

The lines the reliability oracle reads to prove that no deposed leader's write was
accepted (``stratus.trail``). Every leader write is a fenced transaction of the election
library, whose ``on_fenced_write`` listener is ``wrote``: one place, not one per duty::

    trail = LeaderTrail(TrailRecorder.open(path, Actor("nimbus", "n1:6627")))
    Coordinator(session, on_fenced_write=trail.wrote)
    trail.won(term); trail.lost(term, RevokeReason.SESSION_LOST)
    trail.promoted(epoch=7, pipeline="orders", from_supervisor="s1", to_supervisor="s2",
                   how="floor", silent_secs=1.1, floor_secs=1.02)
"""

from __future__ import annotations

from stratus.coordination.leadership import Leadership
from stratus.coordination.records import FencedWrite, RevokeReason
from stratus.trail import LEADER_LOST, LEADER_WON, LEADER_WRITE, WORKER_PROMOTED, TrailRecorder


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

    def promoted(
        self,
        *,
        epoch: int,
        pipeline: str,
        from_supervisor: str,
        to_supervisor: str,
        how: str,
        silent_secs: float,
        floor_secs: float,
        cold_start_fenced: tuple[float, float] | None = None,
    ) -> None:
        """A standby worker's promotion committed in the term at ``epoch``: ``how`` is the
        verdict on ``from_supervisor``, after ``silent_secs`` of silence against its
        ``floor_secs`` (``stratus.nimbus.failover.promotion_plan.How``); after a fence of its
        worker's start in place, cold, asked at ``cold_start_fenced`` (wall, monotonic):
        ``fence_asked_wall`` and ``fence_asked_mono``."""
        asked = {}
        if cold_start_fenced is not None:
            asked = {
                "fence_asked_wall": cold_start_fenced[0],
                "fence_asked_mono": cold_start_fenced[1],
            }
        self._recorder.record(
            WORKER_PROMOTED,
            epoch=epoch,
            pipeline=pipeline,
            from_supervisor=from_supervisor,
            to_supervisor=to_supervisor,
            how=how,
            silent_secs=round(silent_secs, 3),
            floor_secs=round(floor_secs, 3),
            **asked,
        )

    def close(self) -> None:
        self._recorder.close()
