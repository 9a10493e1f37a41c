"""The leader's duty of activating pipelines, and applying updates, whose code is replicated.

A submitted pipeline that needs more than one copy of its code waits PENDING; each round
notes how many nimbuses hold its code, and ``PipelineOps.note_replication`` activates it
once enough do (or its wait limit passed). An update waiting in a pipeline's record is
counted the same way, under its staged key, and ``PipelineOps.note_update_replication``
applies it; the old code is then purged where no record names it any more (the shared
store; each nimbus's own disk is cleaned by its code sync)::

    duty = ActivateReplicated(view.pipelines, distributor, ops)
    duty.run(term)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.codedist.distributor import CodeDistributor, CodeMeta
from stratus.codedist.staged import staged_key
from stratus.coordination.leadership import Leadership
from stratus.nimbus.records.pipeline_ops import PipelineOps


class ActivateReplicated:
    """Note the replication of PENDING pipelines; activate those with enough copies."""

    name = "replication"

    def __init__(
        self,
        pipelines: Callable[[], Mapping[str, PipelineRecord]],
        distributor: CodeDistributor,
        ops: PipelineOps,
    ) -> None:
        self._pipelines = pipelines
        self._distributor = distributor
        self._ops = ops

    def run(self, term: Leadership) -> None:
        for name, record in self._pipelines().items():
            if record.update is not None:
                self._note_update(term, record)
            if record.status is not PipelineStatus.PENDING:
                continue
            holders = self._distributor.replication_count(
                name, CodeMeta(record.digest, record.size_bytes)
            )
            self._ops.note_replication(term, name, holders)

    def _note_update(self, term: Leadership, record: PipelineRecord) -> None:
        update = record.update
        if update is None or record.status is PipelineStatus.PENDING:
            return
        holders = self._distributor.replication_count(
            staged_key(record.name), CodeMeta(update.digest, update.size_bytes)
        )
        noted = self._ops.note_update_replication(term, record.name, holders)
        if noted.version > record.version and noted.digest != record.digest:
            self._purge_if_unused(record.digest)

    def _purge_if_unused(self, digest: str) -> None:
        if digest not in self._ops.digests_in_use():
            self._distributor.purge(digest)
