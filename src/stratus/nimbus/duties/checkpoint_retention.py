"""The leader's duty of deleting kept checkpoints once the operator's retention is over.

A kill without ``purge`` keeps a pipeline's checkpoints (``<root>/<pipeline>``) so that a
submit of the same name resumes; its record's removal leaves ``kept-checkpoints/<pipeline>``
(``PipelineOps.remove_due``). With ``pipeline.checkpoint.retention.secs`` above 0, this duty
looks at those markers (at most every ``SCAN_SECS``, or the retention if shorter: one
ZooKeeper listing, not one per round) and deletes the checkpoints of each whose retention is
over: only the pipeline's own directory, only under the root it was kept under (a marker of
another root is dropped, its checkpoints left alone), checked to be inside that root right
before the deletion (``remove_checkpoints``), and never for a pipeline submitted again
meanwhile (its submit deleted the marker). 0, the default, keeps them until removed by hand::

    duty = ExpireKeptCheckpoints(ops, checkpoint_root="/ck", retention_secs=7 * 86400)
    duty.run(term)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from stratus.api.clock import Clock
from stratus.coordination.leadership import Leadership
from stratus.errors import StratusError
from stratus.nimbus.pipeline_ops import KeptCheckpoints, PipelineOps
from stratus.worker.checkpoints import pipeline_directory, remove_checkpoints

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
        remove: Callable[[str, str], object] = remove_checkpoints,
    ) -> None:
        self._ops = ops
        self._root = checkpoint_root  # pipeline.checkpoint.root
        self._retention = retention_secs  # pipeline.checkpoint.retention.secs; 0: forever
        self._wall = wall  # the markers' times are wall-clock times, as kill times are
        self._clock = clock
        self._remove = remove
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
            self._ops.expire_kept(term, name, kept, lambda: None)
            return
        self._ops.expire_kept(term, name, kept, lambda: self._delete(name))

    def _delete(self, name: str) -> None:
        """Delete ``<root>/<name>``; a failure is logged, not tried again (the marker is gone)."""
        location = pipeline_directory(self._root, name)
        try:
            self._remove(self._root, name)
        except (OSError, StratusError) as exc:
            log.warning(
                "event=kept_checkpoints_not_deleted pipeline=%s checkpoints=%s error=%r action=%r",
                name,
                location,
                exc,
                "remove them by hand",
            )
