"""The leader's duty of failing pipelines whose code is on no live nimbus any more.

``CodeSync.lost`` names the pipelines whose code has been on no live nimbus for
``nimbus.code.lost.fail.secs``; they no longer keep any nimbus from leading, and the leader
marks them FAILED, so that their users see why (Storm waits for such code forever)::

    duty = FailLostCode(code_sync.lost, ops)
    duty.run(term)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from stratus.coordination.leadership import Leadership
from stratus.nimbus.records.pipeline_ops import PipelineOps


class FailLostCode:
    """Mark FAILED the pipelines whose code has been on no live nimbus for too long."""

    name = "lost_code"

    def __init__(self, lost: Callable[[], Mapping[str, float]], ops: PipelineOps) -> None:
        self._lost = lost
        self._ops = ops

    def run(self, term: Leadership) -> None:
        for name, seconds in self._lost().items():
            reason = (
                f"its code is on no live nimbus (lost for {seconds:.0f} s, past "
                "nimbus.code.lost.fail.secs); kill it and submit it again"
            )
            self._ops.fail(term, name, reason)
