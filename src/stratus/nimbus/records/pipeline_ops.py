"""The leader-only operations on pipelines, each one fenced transaction in ZooKeeper.

Every operation takes the ``Leadership`` of the term it acts for: the epoch flows through the
call, so a request that started under an old term cannot write under a new one. A record is
read, changed, and written back with a check of both the leader's epoch and the record's
version, so two requests racing on one pipeline cannot lose an update (``pipeline_records.py``,
which also refuses a record over ``nimbus.max.record.bytes``)::

    ops = PipelineOps(client, ClusterPaths("/stratus"), wall=time.time)
    conf = {"spark.sql.shuffle.partitions": 4}
    policy = ReplicationPolicy(required=2, wait_secs=60)
    record, created = ops.submit(term, "etl", conf, "r1", pkg, replication=policy)
    ops.note_replication(term, "etl", holders=2)     # PENDING -> ACTIVE
    ops.deactivate(term, "etl")
    ops.stage_update(  # the new code waits for its replication
        term, "etl", "r2", new_pkg, manifest_conf=new_conf, update_conf={}, replication=policy
    )
    ops.note_update_replication(term, "etl", holders=2)   # switched: version 2, new digest
    ops.roll_back(term, "etl", to_version=None, why="asked by alice")   # version 1 again
    ops.restart(term, "etl")   # a FAILED or FINISHED pipeline ACTIVE again; a new generation
    ops.kill(term, "etl", wait_secs=30)   # KILLED now, removed by remove_due() after 30 s
    ops.remove_due(term, killed, kept_root="/ck")   # + kept-checkpoints/etl, or purges/etl
    ops.expire_kept(term, "etl", kept)   # retention over: marker deleted, purges/etl recorded

A removal deletes the pipeline's assignment history (``assignment_history.py``) in the same
transaction as its record, and writes in it either ``kept-checkpoints/<name>`` (a kill
without ``purge``) or ``purges/<name>``; a submit of the name deletes the first, and is
refused while the second exists (``kept_checkpoints.py``): its transaction creates and
deletes ``purges/<name>``, which fails atomically if the order exists, so no submit can slip
past a purge being recorded.

A record remembers which keys of its conf the user set (``user_keys``: at submit, by
rebalances and updates); an update waits in the record for its code's replication, then
lays them over the new package's manifest conf (``staged_updates.py``), so a value the user
chose survives new code and a default the user never touched follows the manifest.

Every operation is idempotent (a submit through its request id), which is what lets a
client retry any of them after a failover or a lost connection.

Every version a pipeline runs is kept in its record (``kept_versions.py``), the newest
``versions_keep`` (``pipeline.versions.keep``); a rollback goes back to one of them, in one
fenced write, with a new generation. An update's version is on trial (``on_trial``) until
its worker commits a batch: the leader's scheduling duty rolls back one that fails before
(``update_trial.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from stratus.api.clock import Clock
from stratus.api.errors import (
    InvalidTransitionError,
    PipelineExistsError,
    UnavailableError,
)
from stratus.api.locations import CHECKPOINT_ROOT_KEY
from stratus.api.names import check_pipeline_name
from stratus.api.pipeline_conf import validate_pipeline_conf
from stratus.api.purges import PurgeCause, PurgeOrder, PurgeStatus
from stratus.api.records import (
    AssignmentReason,
    PendingUpdate,
    PipelineRecord,
    PipelineStatus,
)
from stratus.api.redaction import restore_redacted
from stratus.codedist.package_store import StoredPackage
from stratus.coordination.errors import (
    TransactionFailedError,
)
from stratus.coordination.leadership import Leadership
from stratus.nimbus.records.assignment_history import AssignmentHistoryLog
from stratus.nimbus.records.kept_checkpoints import KeptCheckpoints, KeptCheckpointStore
from stratus.nimbus.records.kept_versions import current_version, rollback_changes, rollback_target
from stratus.nimbus.records.pipeline_records import (
    DEFAULT_MAX_RECORD_BYTES,
    VERSION_RACE_RETRIES,
    PipelineRecords,
    zookeeper_errors,
)
from stratus.nimbus.records.refusals import (
    refuse_if_killed,
    refuse_if_not_rerunnable,
    refuse_if_update_waits,
)
from stratus.nimbus.records.replication_policy import ReplicationPolicy
from stratus.nimbus.records.staged_updates import (
    Apply,
    applied,
    is_retry,
    replication_step,
    staged_update,
)
from stratus.security.access import Caller
from stratus.zk.paths import ClusterPaths

__all__ = ["DEFAULT_VERSIONS_KEEP", "REMEMBERED_REQUESTS", "PipelineOps"]

log = logging.getLogger(__name__)

REMEMBERED_REQUESTS = 16  # request ids of updates and rebalances kept in a record
DEFAULT_VERSIONS_KEEP = 3  # pipeline.versions.keep


class PipelineOps(PipelineRecords):
    """Submit, update, kill, activate, deactivate, rebalance and the removal of killed
    pipelines."""

    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        *,
        wall: Clock,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        versions_keep: int = DEFAULT_VERSIONS_KEEP,
    ) -> None:
        super().__init__(client, paths, wall=wall, max_record_bytes=max_record_bytes)
        self._versions_keep = versions_keep
        self._history = AssignmentHistoryLog(client, paths)
        self._kept = KeptCheckpointStore(client, paths, wall=wall)

    def submit(
        self,
        term: Leadership,
        name: str,
        conf: Mapping[str, Any],
        request_id: str,
        package: StoredPackage,
        *,
        replication: ReplicationPolicy,
        user_keys: Collection[str] | None = None,
        caller: Caller | None = None,
    ) -> tuple[PipelineRecord, bool]:
        """Create the pipeline; returns (record, created). A replayed request is found.

        The pipeline starts ACTIVE when one copy (the leader's) is enough, else PENDING
        until ``note_replication`` activates it. ``user_keys``: the keys of ``conf`` the
        user gave (the rest is the manifest's); None counts every key as the user's.
        ``caller``: the submitter (None without a token file), who owns the pipeline; a
        name whose kept checkpoints were another's is refused to it (ForbiddenError) unless it
        is an admin.
        """
        owner = caller.principal if caller is not None else None
        checked = validate_pipeline_conf(conf)
        now = self._wall()
        pending = replication.required > 1
        record = PipelineRecord(
            name=check_pipeline_name(name),
            status=PipelineStatus.PENDING if pending else PipelineStatus.ACTIVE,
            digest=package.digest,
            size_bytes=package.size_bytes,
            blake3=package.blake3,
            conf=checked,
            user_keys=None if user_keys is None else sorted(set(user_keys) & set(checked)),
            submitted=now,
            updated=now,
            epoch=term.epoch,
            request_id=request_id,
            replication=1,
            replication_required=replication.required,
            replication_deadline=replication.deadline(now) if pending else None,
            owner=owner,
        )
        record = record.model_copy(update={"versions": [current_version(record)]})
        data = self._encode(record)
        path = self._paths.pipeline(name)
        purge = self._paths.purge(name)
        with zookeeper_errors(term), self._kept.lock(name):
            for _ in range(VERSION_RACE_RETRIES):
                self._kept.refuse_if_purging(name)
                kept = self._client.exists(self._paths.kept_checkpoint(name))
                if kept is not None:
                    self._kept.check_heir(name, caller)
                # created and deleted again: fails the whole transaction if a purge of the
                # name is recorded (ZooKeeper has no "check that it does not exist")
                transaction = term.transaction().create(path, data).create(purge).delete(purge)
                if kept is not None:  # its checkpoints are this pipeline's again
                    transaction.delete(self._paths.kept_checkpoint(name), version=kept.version)
                try:
                    transaction.commit()
                    break
                except TransactionFailedError:
                    if self._client.exists(path) is not None:
                        return self._existing_submit(name, request_id), False
                    # a purge or the kept marker changed meanwhile: look again
            else:
                raise UnavailableError(
                    f"submit of {name!r}: its kept-checkpoints marker or a purge of the name "
                    "kept changing; retry"
                )
        log.info(
            "event=submitted pipeline=%s epoch=%d digest=%s status=%s owner=%s",
            name,
            term.epoch,
            record.digest,
            record.status.value,
            owner or "-",
        )
        return record, True

    def purge_order(self, name: str) -> PurgeOrder | None:
        """The purge recorded for ``name``'s checkpoints (``KeptCheckpointStore.purge_order``)."""
        return self._kept.purge_order(name)

    def purge_status(self, name: str) -> PurgeStatus:
        """The record's status, then the purge order, each read from ZooKeeper after a sync."""
        self._client.sync(self._paths.pipeline(name))
        record = self.read(name)
        return PurgeStatus(
            pipeline=name,
            record=None if record is None else record.status,
            record_purge=record is not None and record.purge,
            purge=self.purge_order(name),
        )

    def note_replication(self, term: Leadership, name: str, holders: int) -> PipelineRecord:
        """A PENDING pipeline's code is on ``holders`` nimbuses: record it, activate if enough.

        Past its ``replication_deadline`` the pipeline is activated anyway, with a reason
        that says how many copies it has; never with no copy at all (the lost-code rule
        fails it instead).
        """

        def noted(record: PipelineRecord) -> PipelineRecord | None:
            if record.status is not PipelineStatus.PENDING:
                return None
            now = self._wall()
            if holders >= record.replication_required:
                return self._changed(
                    record, term, status=PipelineStatus.ACTIVE, replication=holders
                )
            deadline = record.replication_deadline
            if deadline is not None and now >= deadline and holders > 0:
                reason = (
                    f"activated at the replication wait limit with the code on {holders} of "
                    f"the {record.replication_required} nimbuses required"
                )
                return self._changed(
                    record, term, status=PipelineStatus.ACTIVE, replication=holders, reason=reason
                )
            if holders == record.replication:
                return None
            return self._changed(record, term, replication=holders)

        return self._update(term, name, "replicated", noted)

    def fail(self, term: Leadership, name: str, reason: str) -> PipelineRecord:
        """Mark a pipeline FAILED (its code is lost, its worker cannot run), unless it is
        KILLED, FAILED or FINISHED already."""

        def failed(record: PipelineRecord) -> PipelineRecord | None:
            if not record.status.needs_code:
                return None
            return self._changed(record, term, status=PipelineStatus.FAILED, reason=reason)

        return self._update(term, name, "failed", failed)

    def finish(self, term: Leadership, name: str) -> PipelineRecord:
        """Mark an ACTIVE pipeline FINISHED: its batch function returned."""

        def finished(record: PipelineRecord) -> PipelineRecord | None:
            if record.status is not PipelineStatus.ACTIVE:
                return None
            return self._changed(record, term, status=PipelineStatus.FINISHED)

        return self._update(term, name, "finished", finished)

    def kill(
        self, term: Leadership, name: str, wait_secs: float, *, purge: bool = False
    ) -> PipelineRecord:
        """Mark KILLED, removed after ``wait_secs``; a later kill may shorten the wait only,
        or add ``purge`` (its checkpoints are deleted with the record; else they are kept)."""

        def to_killed(record: PipelineRecord) -> PipelineRecord | None:
            kill_at = self._wall() + wait_secs
            if record.status is PipelineStatus.KILLED:
                if (record.kill_at or 0) <= kill_at and (record.purge or not purge):
                    return None
                kill_at = min(kill_at, record.kill_at or kill_at)
            return self._changed(
                record,
                term,
                status=PipelineStatus.KILLED,
                kill_at=kill_at,
                purge=record.purge or purge,
            )

        return self._update(term, name, "kill", to_killed)

    def activate(self, term: Leadership, name: str) -> PipelineRecord:
        return self._update(term, name, "activate", self._to_status(term, PipelineStatus.ACTIVE))

    def deactivate(self, term: Leadership, name: str) -> PipelineRecord:
        return self._update(
            term, name, "deactivate", self._to_status(term, PipelineStatus.INACTIVE)
        )

    def rebalance(
        self, term: Leadership, name: str, conf: Mapping[str, Any], request_id: str = ""
    ) -> PipelineRecord:
        """Merge ``conf`` into the pipeline's; a retry with a ``request_id`` the record
        remembers changes nothing."""

        def rebalanced(record: PipelineRecord) -> PipelineRecord | None:
            if request_id and request_id in record.requests:
                return None  # a retry of a rebalance that did land
            refuse_if_killed(record, "rebalance")
            kept = {k: v for k, v in record.conf.items() if k != CHECKPOINT_ROOT_KEY}  # retired
            # a secret sent back as the API showed it ("***", "...&password=***") keeps the
            # stored value
            merged = validate_pipeline_conf({**kept, **restore_redacted(conf, record.conf)})
            chosen = record.user_keys
            return self._changed(
                record,
                term,
                conf=merged,
                user_keys=None if chosen is None else sorted({*chosen, *conf} & set(merged)),
                rebalances=record.rebalances + 1,
                requests=_remembered(record.requests, request_id),
                generation_cause=AssignmentReason.REBALANCED.value,
            )

        validate_pipeline_conf(conf)
        return self._update(term, name, "rebalance", rebalanced)

    def stage_update(
        self,
        term: Leadership,
        name: str,
        request_id: str,
        package: StoredPackage,
        *,
        manifest_conf: Mapping[str, Any],
        update_conf: Mapping[str, Any],
        replication: ReplicationPolicy,
    ) -> tuple[PipelineRecord, bool]:
        """Record new code for ``name``; (record, staged now).

        The update's conf is ``updated_conf``: the new package's ``manifest_conf``, the
        values the user set (at submit, by rebalances and earlier updates) over it, and
        this update's ``update_conf`` over both. ``replication`` (the cluster's) is taken
        from that conf where it has its keys. The pipeline runs its current code until
        ``note_update_replication`` applies the update. A retry (the same ``request_id``)
        finds the update waiting or applied and changes nothing. Refused for a pipeline
        that runs no code (PENDING, KILLED, FAILED, FINISHED), and while another update
        waits (``UpdateInProgressError``).
        """
        validate_pipeline_conf(update_conf)
        staged_now = False

        def staged(record: PipelineRecord) -> PipelineRecord | None:
            nonlocal staged_now
            staged_now = False
            if is_retry(record, request_id):
                return None  # a retry of an update that did land
            refuse_if_killed(record, "update")
            update = staged_update(
                record,
                package,
                request_id,
                manifest_conf=manifest_conf,
                update_conf=update_conf,
                replication=replication,
                now=self._wall(),
            )
            staged_now = True
            return self._changed(record, term, update=update)

        record = self._update(term, name, "update_staged", staged)
        return record, staged_now

    def note_update_replication(self, term: Leadership, name: str, holders: int) -> PipelineRecord:
        """``name``'s update has its code on ``holders`` nimbuses: record it, and apply the
        update once enough do, or past its deadline with at least one copy.

        Applying is one fenced write: the record names the new code and conf, its version
        and generation grow by one (which restarts its worker), the update's request id is
        remembered. A pipeline killed meanwhile keeps its update unapplied.
        """

        def noted(record: PipelineRecord) -> PipelineRecord | None:
            update = record.update
            if update is None or not record.status.needs_code:
                return None
            if record.status is PipelineStatus.PENDING:
                return None
            step = replication_step(record, update, holders, now=self._wall())
            if isinstance(step, Apply):
                return self._applied(record, term, update, holders, reason=step.reason)
            return None if step is None else self._changed(record, term, update=step)

        return self._update(term, name, "update_replicated", noted)

    def _applied(
        self,
        record: PipelineRecord,
        term: Leadership,
        update: PendingUpdate,
        holders: int,
        *,
        reason: str | None,
    ) -> PipelineRecord:
        changes = applied(
            record, update, holders, reason=reason, now=self._wall(), keep=self._versions_keep
        )
        log.info(
            "event=update_applied pipeline=%s epoch=%d version=%d digest=%s replaced=%s",
            record.name,
            term.epoch,
            changes["version"],
            update.digest,
            record.digest,
        )
        requests = _remembered(record.requests, update.request_id)
        return self._changed(record, term, **changes, requests=requests)

    def roll_back(
        self,
        term: Leadership,
        name: str,
        *,
        to_version: int | None,
        why: str,
        request_id: str = "",
        generation: int | None = None,
        as_generation: int | None = None,
    ) -> PipelineRecord:
        """Run a kept version of ``name`` again: ``to_version``, or the one before the
        current. One fenced write: the record names the kept version's code and conf, a new
        generation, and the reason ``rolled back from version N to M: <why>``. Refused for
        a pipeline KILLED or waiting for replication, or while an update waits; a version
        not kept is UnknownVersionError (nothing changes). ``generation``: only if the
        record is still at that generation (the leader's automatic rollback of what it
        judged); ``as_generation``: with that generation rather than a new one (a held
        update withdrawn, ``update_withdrawal``); a retry with a remembered ``request_id``
        changes nothing."""

        def rolled_back(record: PipelineRecord) -> PipelineRecord | None:
            if request_id and request_id in record.requests:
                return None
            if generation is not None and record.generation != generation:
                return None  # changed since it was judged
            refuse_if_not_rerunnable(record, "roll back")
            refuse_if_update_waits(record, "roll back")
            target = rollback_target(record, to_version)
            try:
                changes = rollback_changes(
                    record,
                    target,
                    why,
                    now=self._wall(),
                    keep=self._versions_keep,
                    generation=as_generation,
                )
            except ValueError as exc:
                raise InvalidTransitionError(f"cannot roll back pipeline {name!r}: {exc}") from exc
            requests = _remembered(record.requests, request_id)
            return self._changed(record, term, **changes, requests=requests)

        return self._update(term, name, "rolled_back", rolled_back)

    def restart(self, term: Leadership, name: str, request_id: str = "") -> PipelineRecord:
        """Run ``name`` again with its current version and its checkpoint: a FAILED or
        FINISHED pipeline becomes ACTIVE, an ACTIVE one's worker restarts; either way with
        a new generation. Refused for a pipeline KILLED, INACTIVE or waiting for
        replication; a retry with a remembered ``request_id`` changes nothing."""

        def restarted(record: PipelineRecord) -> PipelineRecord | None:
            if request_id and request_id in record.requests:
                return None
            refuse_if_not_rerunnable(record, "restart")
            if record.status is PipelineStatus.INACTIVE:
                raise InvalidTransitionError(
                    f"cannot restart pipeline {name!r}: it is INACTIVE; activate it to run it"
                )
            return self._changed(
                record,
                term,
                status=PipelineStatus.ACTIVE,
                reason=None,
                on_trial=False,
                requests=_remembered(record.requests, request_id),
                generation_cause=AssignmentReason.RESTARTED.value,
                generation_offset=record.generation_offset + 1,
            )

        return self._update(term, name, "restarted", restarted)

    def prove(self, term: Leadership, name: str, generation: int) -> PipelineRecord:
        """``name``'s version on trial committed its first batch (or finished) at
        ``generation``: no failure of it rolls it back any more."""

        def proven(record: PipelineRecord) -> PipelineRecord | None:
            if not record.on_trial or record.generation != generation:
                return None
            return self._changed(record, term, on_trial=False)

        return self._update(term, name, "version_proven", proven)

    def remove_due(
        self,
        term: Leadership,
        killed: Mapping[str, PipelineRecord],
        *,
        kept_root: str | None = None,
    ) -> dict[str, PipelineRecord]:
        """Delete the KILLED records among ``killed`` whose wait is over; each as it was
        when deleted (a later kill may have added ``purge`` to what ``killed`` shows).
        ``kept_root``: the checkpoint root; a record removed without ``purge`` leaves its
        ``kept-checkpoints/<name>`` under it (None: none is written)."""
        now = self._wall()
        removed = {}
        for name, seen in killed.items():
            if seen.status is PipelineStatus.KILLED and (seen.kill_at or 0) <= now:
                with zookeeper_errors(term):
                    deleted = self._remove_if_still_killed(term, name, kept_root)
                    if deleted is not None:
                        removed[name] = deleted
        return removed

    def kept_checkpoints(self) -> dict[str, KeptCheckpoints]:
        """Every removed pipeline's kept checkpoints, read from ZooKeeper itself."""
        return self._kept.read_all()

    def expire_kept(
        self, term: Leadership, name: str, kept: KeptCheckpoints, *, purge: bool = True
    ) -> bool:
        """The retention of ``name``'s kept checkpoints is over: delete its marker (fenced,
        as read) and, with ``purge``, record in the same transaction the purge of
        ``<kept.root>/<name>`` (``PurgeOrder``), unless the pipeline was submitted again
        meanwhile (its marker then only goes, if still there) or a purge of the name is
        recorded already. Whether a purge was recorded."""
        with zookeeper_errors(term):
            return self._kept.expire(term, name, kept, purge=purge)

    def _remove_if_still_killed(
        self, term: Leadership, name: str, kept_root: str | None
    ) -> PipelineRecord | None:
        path = self._paths.pipeline(name)
        try:
            raw, stat = self._client.get(path)
        except NoNodeError:
            return None
        record = PipelineRecord.model_validate_json(raw)
        if record.status is not PipelineStatus.KILLED:
            return None
        transaction = term.transaction().delete(path, version=stat.version)
        self._history.add_removal(transaction, name)
        if kept_root is not None and record.purge:
            self._kept.add_purge(transaction, term, name, kept_root, PurgeCause.KILL)
        if kept_root is not None and not record.purge:
            self._kept.add_marker(transaction, name, record, kept_root)
        try:
            transaction.commit()
        except TransactionFailedError:
            return None  # changed or gone meanwhile; the next round looks again
        log.info("event=removed pipeline=%s epoch=%d purge=%s", name, term.epoch, record.purge)
        return record

    def _to_status(
        self, term: Leadership, status: PipelineStatus
    ) -> Callable[[PipelineRecord], PipelineRecord | None]:
        def change(record: PipelineRecord) -> PipelineRecord | None:
            refuse_if_killed(
                record, "activate" if status is PipelineStatus.ACTIVE else "deactivate"
            )
            return None if record.status is status else self._changed(record, term, status=status)

        return change

    def _existing_submit(self, name: str, request_id: str) -> PipelineRecord:
        record, _ = self._read(name)
        if request_id and record.request_id == request_id:
            return record  # a retry of a submit that did land
        raise PipelineExistsError(
            f"a pipeline named {name!r} exists already (status {record.status.value}); "
            "kill it or choose another name"
        )


def _remembered(requests: list[str], request_id: str) -> list[str]:
    """``requests`` with ``request_id`` appended (if any), the newest few kept."""
    if not request_id:
        return requests
    return [*requests, request_id][-REMEMBERED_REQUESTS:]
