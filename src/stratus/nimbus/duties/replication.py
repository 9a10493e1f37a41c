"""The leader's duty of activating pipelines whose code reached its replication.

A submitted pipeline that needs more than one copy of its code waits PENDING; each round
notes how many nimbuses hold its code, and ``PipelineOps.note_replication`` activates it
once enough do (or its wait limit passed)::

    duty = ActivateReplicated(view.pipelines, distributor, ops)
    duty.run(term)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from stratus.api.records import PipelineRecord, PipelineStatus
from stratus.codedist.distributor import CodeDistributor, CodeMeta
from stratus.coordination.leadership import Leadership
from stratus.nimbus.pipeline_ops import PipelineOps


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
            if record.status is not PipelineStatus.PENDING:
                continue
            holders = self._distributor.replication_count(
                name, CodeMeta(record.digest, record.size_bytes)
            )
            self._ops.note_replication(term, name, holders)
