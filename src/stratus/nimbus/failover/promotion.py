"""A standby worker's promotion, written: one fenced transaction per pipeline.

Guarantees: a promotion (``promotion_plan.Promotion``) is written whole or not at all, in the
leader's term: the pipeline's assignment is set to the standby worker's supervisor (checking
the version the plan read), its placement is deleted (checking that version too) and its
``standby_promoted`` change goes into its history, all in one transaction with the check of
the leader's epoch. A plan made from a stale read (a round or the failover lane wrote either
znode since) writes nothing and says so; the next plan, from a fresh read, tries again::

    promoter = Promoter(client, ClusterPaths("/stratus"))
    promoter.promote(term, promotion)      # True: committed; False: a version moved
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient

from stratus.coordination.errors import TransactionFailedError
from stratus.coordination.leadership import Leadership
from stratus.nimbus.failover.promotion_plan import Promotion
from stratus.nimbus.records.assignment_history import AssignmentHistoryLog
from stratus.nimbus.scheduling.assignments import VersionedWrite
from stratus.zk.paths import ClusterPaths

log = logging.getLogger(__name__)


class Promoter:
    """Writes promotions in the term's fenced transactions; see the module docstring."""

    def __init__(
        self, client: KazooClient, paths: ClusterPaths, history: AssignmentHistoryLog | None = None
    ) -> None:
        self._paths = paths
        self._history = history or AssignmentHistoryLog(client, paths)

    def promote(self, term: Leadership, promotion: Promotion) -> bool:
        """Commit ``promotion``; False when a version it checks moved (nothing written).
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
        return True
