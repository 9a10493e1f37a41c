"""The leader's duty of removing killed pipelines once their wait is over.

A killed pipeline keeps its record (KILLED, with ``kill_at``) until its wait is over and no
worker still runs it; then the record goes in a fenced transaction, and with it the package
(unless another pipeline names the same code) and the heartbeats. Its checkpoints
(``<pipeline.checkpoint.root>/<pipeline>``) are kept, so that submitting the same name again
resumes the pipeline (until ``pipeline.checkpoint.retention.secs``, if set, is over:
``checkpoint_retention``); a kill with ``purge`` records their purge in the removal's
transaction instead (``purges/<pipeline>``), which whoever can write the root carries out
(``purges``): the leader does not delete them in passing. A kill
that this leader just made is noted at once (``note_killed``), so its removal does not wait
for the watch to bring it into the view::

    duty = RemoveKilled(view.pipelines, ops, distributor, board, checkpoint_root=root)
    duty.note_killed(record)
    duty.run(term)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from kazoo.exceptions import KazooException

from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.checkpoints import pipeline_directory
from stratus.codedist.distributor import CodeDistributor
from stratus.coordination.leadership import Leadership
from stratus.errors import StratusError
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.state.heartbeats import HeartbeatBoard

log = logging.getLogger(__name__)


class RemoveKilled:
    """Remove the killed pipelines whose wait is over, and their packages."""

    name = "remove_killed"

    def __init__(
        self,
        pipelines: Callable[[], Mapping[str, PipelineRecord]],
        ops: PipelineOps,
        distributor: CodeDistributor,
        board: HeartbeatBoard,
        *,
        checkpoint_root: str,
    ) -> None:
        self._pipelines = pipelines
        self._ops = ops
        self._distributor = distributor
        self._board = board
        self._checkpoint_root = checkpoint_root  # pipeline.checkpoint.root
        self._lock = threading.Lock()
        self._recent_kills: dict[str, PipelineRecord] = {}  # killed, maybe not in the view yet

    def note_killed(self, record: PipelineRecord) -> None:
        """A kill this nimbus just made (from the API's thread)."""
        with self._lock:
            self._recent_kills[record.name] = record

    def run(self, term: Leadership) -> None:
        killed = {
            name: record
            for name, record in self._pipelines().items()
            if record.status is PipelineStatus.KILLED
        }
        with self._lock:
            killed.update(self._recent_kills)
            self._recent_kills.clear()
        killed = {name: r for name, r in killed.items() if name not in self._still_running()}
        if not killed:
            return
        removed = self._ops.remove_due(term, killed, kept_root=self._checkpoint_root)
        self._drop_if_unused({digest for gone in removed.values() for digest in _digests(gone)})
        for gone in removed.values():
            self._clean_up(gone)

    def _still_running(self) -> set[str]:
        """Pipelines with a worker that has not reported its end: their removal (and the
        deletion of their checkpoints) waits for it, or for its supervisor to be judged dead."""
        return {
            name
            for name, beats in self._board.workers().items()
            if any(not beat.state.final for beat in beats.values())
        }

    def _clean_up(self, removed: PipelineRecord) -> None:
        """A removed pipeline's heartbeats go too; a failure is only logged."""
        location = pipeline_directory(self._checkpoint_root, removed.name)
        log.info(
            "event=%s pipeline=%s checkpoints=%s",
            "checkpoints_purge_recorded" if removed.purge else "checkpoints_kept",
            removed.name,
            location,
        )
        try:
            self._board.remove_pipeline(removed.name)
        except (OSError, StratusError) as exc:
            log.warning(
                "event=cleanup_incomplete pipeline=%s checkpoints=%s error=%r",
                removed.name,
                location,
                exc,
            )

    def _drop_if_unused(self, digests: set[str]) -> None:
        """Delete these packages unless a pipeline still names them; keep them if unsure."""
        if not digests:
            return
        try:
            in_use = self._ops.digests_in_use()
        except KazooException as exc:  # never let cleanup hide the error being reported
            log.warning("event=package_cleanup_skipped digests=%s error=%r", sorted(digests), exc)
            return
        for digest in digests - in_use:
            self._distributor.purge(digest)


def _digests(record: PipelineRecord) -> set[str]:
    """The code a record names: its own, and its waiting update's."""
    update = record.update
    return {record.digest} if update is None else {record.digest, update.digest}
