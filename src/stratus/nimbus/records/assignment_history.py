"""Each pipeline's assignment history, kept in ZooKeeper under ``assignment-history/``.

One persistent sequential node per change of a pipeline's assignment
(``assignment-history/<name>/c-0000000007``), holding an ``AssignmentChange``: when, in
which epoch, where from, where to, and why. The leader adds a change to the very fenced
transaction that writes the assignment (``AssignmentTable.apply``), so a deposed leader's
refused write records nothing and the history never disagrees with the assignments; the
same transaction checks that the pipeline's record still exists (a removed pipeline gets
no history back) and trims the history to the newest ``keep`` changes. A pipeline's
removal deletes its history in the removal's own transaction (``PipelineOps``). Every
nimbus reads it for ``GET /api/v1/pipelines/{name}/history``::

    history = AssignmentHistoryLog(client, ClusterPaths("/stratus"))
    existing = history.existing(["etl"])          # one pipelined listing per changed pipeline
    history.add_change(tx, "etl", change, existing["etl"])   # tx: the assignment's
    history.add_removal(tx, "etl")                # with the record's deletion
    history.read("etl")                           # the changes, newest first
    history.newest(["etl"])                       # {"etl": its newest change}

It is the pattern of ``leader_terms.py`` (one node per event, bounded, trimmed by the
writer in its fenced write), with sequential names: a pipeline's changes have no number of
their own, and ZooKeeper's sequence (the parent's child counter) orders them. A scheduling
round that changes nothing costs nothing here: the listing and the writes happen only for
the pipelines whose assignment the round writes or deletes.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from pydantic import ValidationError

from stratus.api.records import AssignmentChange
from stratus.coordination.leadership import FencedTransaction
from stratus.zk.paths import ClusterPaths

CHANGES_KEPT = 50


class AssignmentHistoryLog:
    """Adds changes to the leader's transactions and reads them; see the module docstring."""

    def __init__(self, client: KazooClient, paths: ClusterPaths, *, keep: int = CHANGES_KEPT):
        if keep < 1:
            raise ValueError(f"an assignment history keeps at least one change, not {keep}")
        self._client = client
        self._paths = paths
        self._keep = keep

    def existing(self, names: Iterable[str]) -> dict[str, list[str] | None]:
        """The change nodes each pipeline's history holds (None: it has no history node),
        listed in one pipelined round trip."""
        pending = {
            name: self._client.get_children_async(self._paths.assignment_history(name))
            for name in names
        }
        found: dict[str, list[str] | None] = {}
        for name, result in pending.items():
            try:
                found[name] = sorted(result.get())
            except NoNodeError:
                found[name] = None
        return found

    def add_change(
        self,
        tx: FencedTransaction,
        name: str,
        change: AssignmentChange,
        existing: list[str] | None,
    ) -> None:
        """Add ``change`` to ``tx``: the history node if ``existing`` is None, the change,
        and the deletion of the oldest nodes beyond ``keep``; ``tx`` fails if the pipeline's
        record is gone, or if a node listed in ``existing`` is (it was read too long ago)."""
        parent = self._paths.assignment_history(name)
        tx.check(self._paths.pipeline(name), -1)
        if existing is None:
            tx.create(parent)
        tx.create(self._paths.assignment_change_prefix(name), change.encode(), sequence=True)
        old = existing or []
        for node in old[: max(0, len(old) + 1 - self._keep)]:
            tx.delete(posixpath.join(parent, node))

    def add_removal(self, tx: FencedTransaction, name: str) -> None:
        """Add the deletion of ``name``'s whole history to ``tx`` (the record's removal)."""
        parent = self._paths.assignment_history(name)
        try:
            nodes = self._client.get_children(parent)
        except NoNodeError:
            return
        for node in nodes:
            tx.delete(posixpath.join(parent, node))
        tx.delete(parent)

    def read(self, name: str) -> list[AssignmentChange]:
        """The changes kept for ``name``, newest first (empty if none); a node that vanishes
        meanwhile or does not decode is skipped."""
        parent = self._paths.assignment_history(name)
        try:
            nodes = sorted(self._client.get_children(parent), reverse=True)
        except NoNodeError:
            return []
        pending = [self._client.get_async(posixpath.join(parent, node)) for node in nodes]
        changes = []
        for result in pending:
            try:
                raw, _ = result.get()
                changes.append(AssignmentChange.model_validate_json(raw))
            except (NoNodeError, ValidationError):
                continue
        return changes

    def newest(self, names: Iterable[str]) -> dict[str, AssignmentChange]:
        """The newest change of each of ``names`` that has one: one pipelined listing, then
        one pipelined read of the newest nodes."""
        listed = self.existing(names)
        pending = {
            name: self._client.get_async(
                posixpath.join(self._paths.assignment_history(name), max(nodes))
            )
            for name, nodes in listed.items()
            if nodes
        }
        found = {}
        for name, result in pending.items():
            try:
                raw, _ = result.get()
                found[name] = AssignmentChange.model_validate_json(raw)
            except (NoNodeError, ValidationError):
                continue
        return found
