"""Whether a nimbus may lead: its may-lead hook, and the code of every active pipeline.

A nimbus may lead only when it holds the code of every ACTIVE and INACTIVE pipeline (a
PENDING one, whose code may be on the leader alone, does not count), so that whatever the
leader assigns can be fetched from it. The leadership controller asks three times:

- ``to_queue``: before it queues, from the watched view;
- ``to_lead``: once elected, against ZooKeeper itself (a view that lags must not elect a
  nimbus without the code); unsure is a no;
- ``to_keep_leading``: before every round of duties, while no submit is between its record
  and its upload (that pipeline's code is not missing, it is on its way). A submit whose
  upload hangs is waited for ``settle_timeout_secs`` at most: the check is then skipped for
  this round (logged), so the controller's thread goes on handling its events::

    readiness = CodeReadiness(code_sync, may_lead=hook, read_pipelines=ops.read_all,
                              submits_settled=submitter.settled, settle_timeout_secs=10.0)
    readiness.to_queue()       # None, or "missing_code(etl)"
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

from kazoo.exceptions import KazooException

from stratus.api.records import PipelineRecord
from stratus.codedist.code_sync import CodeSync
from stratus.errors import StratusError

log = logging.getLogger(__name__)


class CodeReadiness:
    """The ``Readiness`` of one nimbus; see the module docstring."""

    def __init__(
        self,
        code: CodeSync,
        *,
        may_lead: Callable[[], bool],
        read_pipelines: Callable[[], Mapping[str, PipelineRecord]],
        submits_settled: Callable[[float], AbstractContextManager[bool]],
        settle_timeout_secs: float,
    ) -> None:
        self._code = code
        self._may_lead = may_lead
        self._read_pipelines = read_pipelines
        self._submits_settled = submits_settled
        self._settle_timeout_secs = settle_timeout_secs

    def to_queue(self) -> str | None:
        if not self._may_lead():
            return "may_lead_hook"
        return _missing(self._code.missing())

    def to_lead(self) -> str | None:
        if not self._may_lead():
            return "may_lead_hook"
        try:
            return _missing(self._code.missing(self._read_pipelines()))
        except (StratusError, KazooException) as exc:
            return f"cannot_read_pipelines({exc!r})"

    def to_keep_leading(self) -> str | None:
        with self._submits_settled(self._settle_timeout_secs) as settled:
            if not settled:
                log.warning(
                    "event=code_check_skipped reason=submit_in_progress waited_secs=%g",
                    self._settle_timeout_secs,
                )
                return None
            return _missing(self._code.missing())

    def fetch_missing(self) -> None:
        self._code.request()


def _missing(names: list[str]) -> str | None:
    return f"missing_code({','.join(names)})" if names else None
