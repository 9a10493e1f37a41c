"""A standby worker's promotion, written: one fenced transaction per pipeline.

Guarantees: a promotion (``promotion_plan.Promotion``) is written whole or not at all, in the
leader's term: the pipeline's assignment is set to the standby worker's supervisor (checking the
version the plan read; created where a drain or a new generation deleted it, which fails if one
was created since), its placement is deleted (checking that version too) and its
``standby_promoted`` change goes into its history, all in one transaction with the check of the
leader's epoch. A plan made from a stale read (a round or the failover lane wrote either znode
since) writes nothing and says so; the next plan, from a fresh read, tries again. A committed
promotion is logged (``event=worker_promoted``) and handed to ``on_promoted`` (the nimbus
records it in its trail as ``worker_promoted``)::

    promoter = Promoter(client, ClusterPaths("/stratus"), on_promoted=trail_note)
    promoter.promote(term, promotion, silent_secs=1.1, floor_secs=1.02)
    # True: committed; False: a version moved
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kazoo.client import KazooClient

from stratus.coordination.errors import TransactionFailedError
from stratus.coordination.leadership import Leadership
from stratus.nimbus.failover.promotion_plan import Promotion
from stratus.nimbus.records.assignment_history import AssignmentHistoryLog
from stratus.nimbus.scheduling.assignments import VersionedWrite
from stratus.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

# A committed promotion's note: (term, promotion, silent_secs, floor_secs).
OnPromoted = Callable[[Leadership, Promotion, float, float], None]


class Promoter:
    """Writes promotions in the term's fenced transactions; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        *,
        history: AssignmentHistoryLog | None = None,
        on_promoted: OnPromoted = lambda _term, _promotion, _silent, _floor: None,
    ) -> None:
        self._paths = paths
        self._history = history or AssignmentHistoryLog(client, paths)
        self._on_promoted = on_promoted

    def promote(
        self, term: Leadership, promotion: Promotion, *, silent_secs: float, floor_secs: float
    ) -> bool:
        """Commit ``promotion``, made on a silence of ``silent_secs`` against a floor of
        ``floor_secs``; False when a version it checks moved (nothing written).
        ``LeadershipLostError`` when the term is over, ``CommitOutcomeUnknownError`` when the
        connection broke during the commit (read back before trying again)."""
        name = promotion.pipeline
        existing = self._history.existing([name])[name]
        tx = term.transaction()
        VersionedWrite(
            name,
            self._paths.assignment(name),
            promotion.assignment.encode(),
            promotion.assignment_version,
        ).add_to(tx)
        VersionedWrite(
            name, self._paths.standby_worker(name), None, promotion.placement_version
        ).add_to(tx)
        self._history.add_change(tx, name, promotion.change, existing)
        try:
            tx.commit()
        except TransactionFailedError as exc:
            log.info(
                "event=promotion_not_written pipeline=%s epoch=%d from=%s to=%s "
                "reason=version_moved action=retried_from_a_new_read error=%s",
                name,
                term.epoch,
                promotion.from_supervisor,
                promotion.to_supervisor,
                exc,
            )
            return False
        log.warning(
            "event=worker_promoted pipeline=%s epoch=%d from=%s to=%s how=%s silent_secs=%.3f "
            "floor_secs=%.3f",
            name,
            term.epoch,
            promotion.from_supervisor,
            promotion.to_supervisor,
            promotion.how.value,
            silent_secs,
            floor_secs,
        )
        self._on_promoted(term, promotion, silent_secs, floor_secs)
        return True
