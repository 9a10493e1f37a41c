"""The leader's duty of deleting kept checkpoints once the operator's retention is over.

A kill without ``purge`` keeps a pipeline's checkpoints (``<root>/<pipeline>``) so that a
submit of the same name resumes; its record's removal leaves ``kept-checkpoints/<pipeline>``
(``PipelineOps.remove_due``). With ``pipeline.checkpoint.retention.secs`` above 0, this duty
looks at those markers (at most every ``SCAN_SECS``, or the retention if shorter: one
ZooKeeper listing, not one per round) and, for each whose retention is over, deletes the
marker and records the purge of the pipeline's own directory in the same fenced transaction
(``purges/<pipeline>``): the purge is then carried out as a kill --purge's is, by whoever
can write the root (``purges``), since the leader may not be able to. Only under the root
the checkpoints were kept under (a marker of another root is dropped, its checkpoints left
alone), and never for a pipeline submitted again meanwhile (its submit deleted the marker).
0, the default, keeps them until removed by hand::

    duty = ExpireKeptCheckpoints(ops, checkpoint_root="/ck", retention_secs=7 * 86400)
    duty.run(term)
"""

from __future__ import annotations

import logging
import time

from stratus.api.clock import Clock
from stratus.coordination.leadership import Leadership
from stratus.nimbus.records.kept_checkpoints import KeptCheckpoints
from stratus.nimbus.records.pipeline_ops import PipelineOps

log = logging.getLogger(__name__)

SCAN_SECS = 60.0  # at most this long between two looks at the kept checkpoints


class ExpireKeptCheckpoints:
    """Delete kept checkpoints past their retention; see the module docstring."""

    name = "expire_kept_checkpoints"

    def __init__(
        self,
        ops: PipelineOps,
        *,
        checkpoint_root: str,
        retention_secs: float,
        wall: Clock = time.time,
        clock: Clock = time.monotonic,
    ) -> None:
        self._ops = ops
        self._root = checkpoint_root  # pipeline.checkpoint.root
        self._retention = retention_secs  # pipeline.checkpoint.retention.secs; 0: forever
        self._wall = wall  # the markers' times are wall-clock times, as kill times are
        self._clock = clock
        self._next_scan: float | None = None

    def run(self, term: Leadership) -> None:
        if self._retention <= 0:
            return
        now = self._clock()
        if self._next_scan is not None and now < self._next_scan:
            return
        self._next_scan = now + min(SCAN_SECS, self._retention)
        wall = self._wall()
        for name, kept in self._ops.kept_checkpoints().items():
            if wall - kept.removed >= self._retention:
                self._expire(term, name, kept)

    def _expire(self, term: Leadership, name: str, kept: KeptCheckpoints) -> None:
        if kept.root != self._root:
            log.warning(
                "event=kept_checkpoints_dropped pipeline=%s epoch=%d root=%s current_root=%s "
                "reason=%r",
                name,
                term.epoch,
                kept.root,
                self._root,
                "kept under another checkpoint root: not deleted, remove them by hand",
            )
            self._ops.expire_kept(term, name, kept, purge=False)
            return
        self._ops.expire_kept(term, name, kept)
