"""The assignments in ZooKeeper: read by anyone, written only in the leader's fenced transactions.

``<root>/assignments/<pipeline>`` holds the ``Assignment`` that names the supervisor running the
pipeline. The leader applies a scheduling ``Plan`` in fenced transactions of at most
``OPS_PER_TRANSACTION`` operations, each write checking the version it read, so a plan made
from a stale read writes nothing. The change of each pipeline that the plan notes
(``plan.changes``) goes into the transaction that writes its assignment
(``assignment_history.py``): a refused write records nothing::

    assignments = AssignmentTable(client, ClusterPaths("/stratus"))
    current = assignments.read_all()              # {pipeline: (Assignment, version)}
    assignments.apply(term, plan, current)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from pydantic import ValidationError

from stratus.api.records import Assignment, AssignmentChange
from stratus.coordination.leadership import FencedTransaction, Leadership
from stratus.nimbus.records.assignment_history import AssignmentHistoryLog
from stratus.nimbus.scheduling.scheduler import Plan
from stratus.zk.paths import ClusterPaths, join

log = logging.getLogger(__name__)

OPS_PER_TRANSACTION = 100  # well inside ZooKeeper's 1 MB request limit (a soft bound: one
# pipeline's writes are never split, and its history may add a few operations past it)

Versioned = Mapping[str, tuple[Assignment, int]]


class AssignmentTable:
    """Read every assignment; apply a plan of the leader's, fenced by its term."""

    def __init__(
        self, client: KazooClient, paths: ClusterPaths, history: AssignmentHistoryLog | None = None
    ) -> None:
        self._client = client
        self._paths = paths
        self._history = history or AssignmentHistoryLog(client, paths)

    def read(self, pipeline: str) -> Assignment | None:
        """One pipeline's assignment, or None if it has none."""
        try:
            raw, _ = self._client.get(self._paths.assignment(pipeline))
        except NoNodeError:
            return None
        return Assignment.model_validate_json(raw)

    def read_all(self) -> dict[str, tuple[Assignment, int]]:
        """Every assignment with its znode version, from ZooKeeper itself (reads pipelined)."""
        found: dict[str, tuple[Assignment, int]] = {}
        for name, (raw, version) in read_children(self._client, self._paths.assignments).items():
            try:
                found[name] = (Assignment.model_validate_json(raw), version)
            except ValidationError as exc:
                error = exc.errors(include_input=False)[0]  # the input may hold secrets
                log.warning("event=bad_assignment pipeline=%s error=%s", name, error)
        return found

    def apply(self, term: Leadership, plan: Plan, current: Versioned) -> None:
        """Write the plan: creates, replacements and deletions, each against the version read,
        each with its change in the pipeline's history in the same transaction."""
        writes = [*self._writes(plan.assign, current), *self._deletes(plan.unassign, current)]
        existing = self._history.existing(w.pipeline for w in writes if w.pipeline in plan.changes)

        def with_its_change(tx: FencedTransaction, write: VersionedWrite) -> int:
            change = plan.changes.get(write.pipeline)
            if change is None:
                return 0
            self._history.add_change(tx, write.pipeline, change, existing[write.pipeline])
            return _HISTORY_OPS

        commit_in_batches(term, writes, with_its_change)
        for name, (source, target) in plan.moved.items():
            log.info(
                "event=pipeline_moved pipeline=%s epoch=%d from=%s to=%s",
                name,
                term.epoch,
                source,
                target or "-",
            )

    def _writes(
        self, assign: Mapping[str, Assignment], current: Versioned
    ) -> Iterator[VersionedWrite]:
        for name, assignment in assign.items():
            version = current[name][1] if name in current else None
            yield VersionedWrite(name, self._paths.assignment(name), assignment.encode(), version)

    def _deletes(self, names: Iterable[str], current: Versioned) -> Iterator[VersionedWrite]:
        for name in names:
            if name in current:
                yield VersionedWrite(name, self._paths.assignment(name), None, current[name][1])

    def history(self, pipeline: str) -> list[AssignmentChange]:
        """``pipeline``'s assignment changes, newest first, read from ZooKeeper itself."""
        return self._history.read(pipeline)

    def newest_changes(self, pipelines: Iterable[str]) -> dict[str, AssignmentChange]:
        """The newest change of each of ``pipelines`` that has one (pipelined reads)."""
        return self._history.newest(pipelines)


_HISTORY_OPS = 3  # a change's usual operations: the record's check, the create, a trim


@dataclass(frozen=True)
class VersionedWrite:
    """One pipeline's znode written by the leader (its assignment, its standby worker's
    placement): data None deletes; version None creates; else a set of the version read."""

    pipeline: str
    path: str
    data: bytes | None
    version: int | None

    def add_to(self, tx: FencedTransaction) -> None:
        if self.data is None:
            assert self.version is not None
            tx.delete(self.path, self.version)
        elif self.version is None:
            tx.create(self.path, self.data)
        else:
            tx.set_data(self.path, self.data, self.version)


def read_children(client: KazooClient, parent: str) -> dict[str, tuple[bytes, int]]:
    """Every child of ``parent`` with its data and znode version, from ZooKeeper itself: one
    listing, then the reads of what it lists, pipelined; one deleted since the listing is
    left out. ``NoNodeError`` when ``parent`` is missing."""
    names = client.get_children(parent)
    pending = {name: client.get_async(join(parent, name)) for name in names}
    found: dict[str, tuple[bytes, int]] = {}
    for name, result in pending.items():
        try:
            raw, stat = result.get()
        except NoNodeError:
            continue  # deleted since the listing
        found[name] = (raw, stat.version)
    return found


def commit_in_batches(
    term: Leadership,
    writes: Iterable[VersionedWrite],
    with_each: Callable[[FencedTransaction, VersionedWrite], int] = lambda _tx, _write: 0,
) -> None:
    """Commit ``writes`` in the term's fenced transactions of about ``OPS_PER_TRANSACTION``
    operations; ``with_each`` adds what goes with a write into its transaction (its change
    in the history) and says how many operations that took. A write whose version no
    longer holds refuses its whole transaction (``TransactionFailedError``)."""
    tx, ops = term.transaction(), 0
    for write in writes:
        write.add_to(tx)
        ops += 1 + with_each(tx, write)
        if ops >= OPS_PER_TRANSACTION:
            tx.commit()
            tx, ops = term.transaction(), 0
    if ops:
        tx.commit()
