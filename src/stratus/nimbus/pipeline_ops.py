"""The leader-only operations on pipelines, each one fenced transaction in ZooKeeper.

Every operation takes the ``Leadership`` of the term it acts for: the epoch flows through the
call, so a request that started under an old term cannot write under a new one. A record is
read, changed, and written back with a check of both the leader's epoch and the record's
version, so two requests racing on one pipeline cannot lose an update::

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
transaction as its record. A removal that keeps the checkpoints (a kill without ``purge``)
writes, in the same transaction, ``kept-checkpoints/<name>`` (when, under which root); a
submit of the name deletes it in its own transaction, so checkpoints a new pipeline resumes
from are never expired. ``expire_kept`` and ``submit`` of one name hold one lock of this
leader's (one of ``KEPT_LOCKS``, by the name's hash), so a submit cannot slip between the
check that no record exists and the recording of the purge.

A removal with ``purge`` (and an expiry) records ``purges/<name>`` (``PurgeOrder``) in the
same transaction: the checkpoints go once whoever can write them did it
(``duties/purges.py``). While the order exists a submit of the name is refused
(``PurgePendingError``): its transaction creates and deletes ``purges/<name>``, which fails
atomically if the order exists, so no submit can slip past a purge being recorded.

A record remembers which keys of its conf the user set (``user_keys``: at submit, by
rebalances and updates); an update lays them over the new package's manifest conf
(``updated_conf``), so a value the user chose survives new code and a default the user
never touched follows the manifest.

Every operation is idempotent (a submit through its request id), which is what lets a
client retry any of them after a failover or a lost connection.

Every version a pipeline runs is kept in its record (``kept_versions.py``), the newest
``versions_keep`` (``pipeline.versions.keep``); a rollback goes back to one of them, in one
fenced write, with a new generation. An update's version is on trial (``on_trial``) until
its worker commits a batch: the leader's scheduling duty rolls back one that fails before
(``update_trial.py``).

A record is at most ``max_record_bytes`` (``nimbus.max.record.bytes``), below ZooKeeper's
``jute.maxbuffer``: ZooKeeper answers a larger write by closing the session's connection,
which would look like a lost leadership and be retried forever. Such a change is refused
before it is sent, as ``RecordTooLargeError`` (413).
"""

from __future__ import annotations

import logging
import threading
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from pydantic import BaseModel, ConfigDict, ValidationError

from stratus.api.clock import Clock
from stratus.api.errors import (
    ForbiddenError,
    InvalidTransitionError,
    NotLeaderError,
    PipelineExistsError,
    PurgePendingError,
    RecordTooLargeError,
    UnavailableError,
    UnknownPipelineError,
    UpdateInProgressError,
)
from stratus.api.locations import CHECKPOINT_ROOT_KEY
from stratus.api.names import check_pipeline_name
from stratus.api.pipeline_conf import validate_pipeline_conf
from stratus.api.purges import PurgeCause, PurgeOrder, PurgeState, PurgeStatus
from stratus.api.records import (
    AssignmentReason,
    KeptVersion,
    PendingUpdate,
    PipelineRecord,
    PipelineStatus,
)
from stratus.api.redaction import restore_redacted
from stratus.codedist.package_store import StoredPackage
from stratus.coordination.errors import (
    CommitOutcomeUnknownError,
    LeadershipLostError,
    TransactionFailedError,
    ZooKeeperUnavailableError,
)
from stratus.coordination.leadership import FencedTransaction, Leadership
from stratus.nimbus.assignment_history import AssignmentHistoryLog
from stratus.nimbus.kept_versions import current_version, offset_for, rollback_target, with_applied
from stratus.security.access import Caller
from stratus.security.authorizer import PipelineAccess
from stratus.security.roles import Role
from stratus.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

REMEMBERED_REQUESTS = 16  # request ids of updates and rebalances kept in a record
VERSION_RACE_RETRIES = 5  # another request changed the record between our read and write
DEFAULT_MAX_RECORD_BYTES = 512 * 1024  # nimbus.max.record.bytes
DEFAULT_VERSIONS_KEEP = 3  # pipeline.versions.keep
KEPT_LOCKS = 64  # locks between a name's submit and the expiry of its kept checkpoints


class KeptCheckpoints(BaseModel):
    """A removed pipeline's kept checkpoints: under which root, since when (wall clock), and
    whose they were."""

    model_config = ConfigDict(frozen=True)

    root: str  # pipeline.checkpoint.root when the record was removed
    removed: float
    # the pipeline's owners then (its submitter first): only they, or an admin, may submit
    # the name again and resume from them; [] (no owner, or an older marker): anyone
    owners: list[str] = []
    version: int = -1  # the marker znode's version when read (not stored)


class PipelineOps:
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
        self._client = client
        self._paths = paths
        self._wall = wall  # wall clock: kill times must mean the same on every nimbus
        self._max_record_bytes = max_record_bytes
        self._versions_keep = versions_keep
        self._history = AssignmentHistoryLog(client, paths)
        # a submit against the expiry of the same name's kept checkpoints (see the docstring)
        self._kept_locks = [threading.Lock() for _ in range(KEPT_LOCKS)]

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
        with _zookeeper_errors(term), self._kept_lock(name):
            for _ in range(VERSION_RACE_RETRIES):
                self._refuse_if_purging(name)
                kept = self._client.exists(self._paths.kept_checkpoint(name))
                if kept is not None:
                    self._check_heir(name, caller)
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
        """The purge recorded for ``name``'s checkpoints, read from ZooKeeper itself (after a
        sync, so any nimbus answers as the leader would); None if there is none."""
        path = self._paths.purge(name)
        self._client.sync(path)
        try:
            raw, _ = self._client.get(path)
        except NoNodeError:
            return None
        return PurgeOrder.model_validate_json(raw)

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

    def _refuse_if_purging(self, name: str) -> None:
        """PurgePendingError if a purge of ``name``'s checkpoints is recorded."""
        try:
            order = self.purge_order(name)
        except ValidationError:
            raise PurgePendingError(
                f"cannot submit pipeline {name!r}: a purge of its checkpoints is recorded "
                f"but cannot be read ({self._paths.purge(name)}); submit it once it is done"
            ) from None
        if order is not None:
            raise PurgePendingError(purge_pending_message(order))

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
            _refuse_if_killed(record, "rebalance")
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
            waiting = record.update
            if request_id and (
                request_id in record.requests
                or (waiting is not None and waiting.request_id == request_id)
            ):
                return None  # a retry of an update that did land
            _refuse_if_killed(record, "update")
            if waiting is not None:
                raise UpdateInProgressError(
                    f"pipeline {name!r} has an update waiting for its code to reach "
                    f"{waiting.replication_required} nimbuses (request "
                    f"{waiting.request_id or '-'}, on {waiting.replication} so far); wait "
                    "until it applies (stratus status shows the version), then update again"
                )
            now = self._wall()
            merged, user_keys = updated_conf(
                record.conf, record.user_keys, manifest_conf, update_conf
            )
            policy = replication.of(merged)
            update = PendingUpdate(
                digest=package.digest,
                size_bytes=package.size_bytes,
                blake3=package.blake3,
                conf=merged,
                user_keys=user_keys,
                request_id=request_id,
                requested=now,
                replication_required=policy.required,
                replication_deadline=policy.deadline(now),
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
            if holders >= update.replication_required:
                return self._applied(record, term, update, holders, reason=None)
            deadline = update.replication_deadline
            if deadline is not None and self._wall() >= deadline and holders > 0:
                reason = (
                    f"version {record.version + 1} applied at the replication wait limit with "
                    f"its code on {holders} of the {update.replication_required} nimbuses "
                    "required"
                )
                return self._applied(record, term, update, holders, reason=reason)
            if holders == update.replication:
                return None
            noted_update = update.model_copy(update={"replication": holders})
            return self._changed(record, term, update=noted_update)

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
        version = record.newest_version + 1
        log.info(
            "event=update_applied pipeline=%s epoch=%d version=%d digest=%s replaced=%s",
            record.name,
            term.epoch,
            version,
            update.digest,
            record.digest,
        )
        applied = KeptVersion(
            version=version,
            digest=update.digest,
            size_bytes=update.size_bytes,
            blake3=update.blake3,
            conf=update.conf,
            user_keys=update.user_keys,
            applied=max(self._wall(), record.updated),
        )
        return self._changed(
            record,
            term,
            digest=update.digest,
            size_bytes=update.size_bytes,
            blake3=update.blake3,
            conf=update.conf,
            user_keys=update.user_keys,
            version=version,
            versions=with_applied(record, applied, keep=self._versions_keep),
            update=None,
            requests=_remembered(record.requests, update.request_id),
            replication=holders,
            replication_required=update.replication_required,
            reason=reason,
            on_trial=True,
            generation_cause=AssignmentReason.UPDATED.value,
        )

    def roll_back(
        self,
        term: Leadership,
        name: str,
        *,
        to_version: int | None,
        why: str,
        request_id: str = "",
        generation: int | None = None,
    ) -> PipelineRecord:
        """Run a kept version of ``name`` again: ``to_version``, or the one before the
        current. One fenced write: the record names the kept version's code and conf, a new
        generation, and the reason ``rolled back from version N to M: <why>``. Refused for
        a pipeline KILLED or waiting for replication, or while an update waits; a version
        not kept is UnknownVersionError (nothing changes). ``generation``: only if the
        record is still at that generation (the leader's automatic rollback of what it
        judged); a retry with a remembered ``request_id`` changes nothing."""

        def rolled_back(record: PipelineRecord) -> PipelineRecord | None:
            if request_id and request_id in record.requests:
                return None
            if generation is not None and record.generation != generation:
                return None  # changed since it was judged
            _refuse_if_not_rerunnable(record, "roll back")
            _refuse_if_update_waits(record, "roll back")
            target = rollback_target(record, to_version)
            run_again = target.model_copy(update={"applied": max(self._wall(), record.updated)})
            return self._changed(
                record,
                term,
                **_runs(target),
                versions=with_applied(record, run_again, keep=self._versions_keep),
                status=PipelineStatus.ACTIVE,
                reason=f"rolled back from version {record.version} to {target.version}: {why}",
                on_trial=False,
                requests=_remembered(record.requests, request_id),
                generation_cause=AssignmentReason.ROLLED_BACK.value,
                generation_offset=offset_for(record, target.version),
            )

        return self._update(term, name, "rolled_back", rolled_back)

    def restart(self, term: Leadership, name: str, request_id: str = "") -> PipelineRecord:
        """Run ``name`` again with its current version and its checkpoint: a FAILED or
        FINISHED pipeline becomes ACTIVE, an ACTIVE one's worker restarts; either way with
        a new generation. Refused for a pipeline KILLED, INACTIVE or waiting for
        replication; a retry with a remembered ``request_id`` changes nothing."""

        def restarted(record: PipelineRecord) -> PipelineRecord | None:
            if request_id and request_id in record.requests:
                return None
            _refuse_if_not_rerunnable(record, "restart")
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
                with _zookeeper_errors(term):
                    deleted = self._remove_if_still_killed(term, name, kept_root)
                    if deleted is not None:
                        removed[name] = deleted
        return removed

    def digests_in_use(self) -> set[str]:
        """The package digests that some pipeline record names (its code, a kept version's,
        or its update's waiting), read from ZooKeeper itself."""
        in_use = set()
        for record in self.read_all().values():
            in_use.add(record.digest)
            in_use.update(kept.digest for kept in record.versions)
            if record.update is not None:
                in_use.add(record.update.digest)
        return in_use

    def read(self, name: str) -> PipelineRecord | None:
        """One pipeline's record read from ZooKeeper itself, or None if there is none."""
        try:
            raw, _ = self._client.get(self._paths.pipeline(name))
        except NoNodeError:
            return None
        return PipelineRecord.model_validate_json(raw)

    def current(self, term: Leadership, name: str) -> PipelineRecord:
        """One pipeline's record read from ZooKeeper itself, for a decision of the leader;
        UnknownPipelineError if there is none, the API's retryable errors if ZooKeeper fails."""
        check_pipeline_name(name)
        with _zookeeper_errors(term):
            return self._read(name)[0]

    def read_all(self) -> dict[str, PipelineRecord]:
        """Every valid pipeline record, read from ZooKeeper itself (not a view), pipelined.

        A record that does not decode is logged, naming the pipeline, and left out, as the
        watched view leaves it out: one bad record must not make every read of the whole
        set fail (a nimbus that cannot read them cannot lead).
        """
        names = self._client.get_children(self._paths.pipelines)
        pending = {name: self._client.get_async(self._paths.pipeline(name)) for name in names}
        records = {}
        for name, result in pending.items():
            try:
                raw, _ = result.get()
            except NoNodeError:
                continue  # removed since the listing
            try:
                records[name] = PipelineRecord.model_validate_json(raw)
            except ValidationError as exc:
                error = exc.errors(include_input=False)[0]  # the input may hold secrets
                log.warning("event=bad_record pipeline=%s error=%s", name, error)
        return records

    def kept_checkpoints(self) -> dict[str, KeptCheckpoints]:
        """Every removed pipeline's kept checkpoints, read from ZooKeeper itself."""
        kept: dict[str, KeptCheckpoints] = {}
        try:
            names = self._client.get_children(self._paths.kept_checkpoints)
        except NoNodeError:
            return kept  # a cluster whose leader has not created the parent yet
        for name in names:
            try:
                raw, stat = self._client.get(self._paths.kept_checkpoint(name))
            except NoNodeError:
                continue  # a submit or another expiry took it since the listing
            try:
                marker = KeptCheckpoints.model_validate_json(raw)
            except ValidationError:
                log.warning("event=bad_kept_checkpoints pipeline=%s", name)
                continue
            kept[name] = marker.model_copy(update={"version": stat.version})
        return kept

    def expire_kept(
        self, term: Leadership, name: str, kept: KeptCheckpoints, *, purge: bool = True
    ) -> bool:
        """The retention of ``name``'s kept checkpoints is over: delete its marker (fenced,
        as read) and, with ``purge``, record in the same transaction the purge of
        ``<kept.root>/<name>`` (``PurgeOrder``), unless the pipeline was submitted again
        meanwhile (its marker then only goes, if still there) or a purge of the name is
        recorded already. Whether a purge was recorded."""
        path = self._paths.kept_checkpoint(name)
        with _zookeeper_errors(term), self._kept_lock(name):
            resubmitted = self._client.exists(self._paths.pipeline(name)) is not None
            transaction = term.transaction().delete(path, version=kept.version)
            ordered = purge and not resubmitted
            if ordered:
                ordered = self._add_purge(transaction, term, name, kept.root, PurgeCause.RETENTION)
            try:
                transaction.commit()
            except TransactionFailedError:
                return False  # changed or gone meanwhile; the next scan looks again
            if ordered:
                log.info(
                    "event=kept_checkpoints_expired pipeline=%s epoch=%d removed_at=%.3f "
                    "action=purge_recorded",
                    name,
                    term.epoch,
                    kept.removed,
                )
            return ordered

    def _check_heir(self, name: str, caller: Caller | None) -> None:
        """ForbiddenError unless ``caller`` may resume from ``name``'s kept checkpoints: an
        owner of the pipeline they were kept from, or an admin (or anyone, on a cluster
        without a token file or for a marker that names no owner)."""
        if caller is None or caller.role is Role.ADMIN:
            return
        try:
            raw, _ = self._client.get(self._paths.kept_checkpoint(name))
            owners = KeptCheckpoints.model_validate_json(raw).owners
        except (NoNodeError, ValidationError):
            return  # gone since, or not readable: nothing to inherit from it here
        if owners and caller.principal not in owners:
            raise ForbiddenError(
                f"{caller.principal} may not submit pipeline {name!r}: the checkpoints kept "
                f"from its last life are {', '.join(owners)}'s; one of them or an admin may "
                "submit the name (or purge them), or choose another name"
            )

    def _kept_lock(self, name: str) -> threading.Lock:
        return self._kept_locks[zlib.crc32(name.encode()) % KEPT_LOCKS]

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
            self._add_purge(transaction, term, name, kept_root, PurgeCause.KILL)
        if kept_root is not None and not record.purge:
            marker = KeptCheckpoints(
                root=kept_root,
                removed=self._wall(),
                owners=PipelineAccess.of(record.owner, record.conf).all_owners(),
            )
            data = marker.model_dump_json(exclude={"version"}).encode()
            kept_path = self._paths.kept_checkpoint(name)
            kept = self._client.exists(kept_path)
            if kept is None:
                transaction.create(kept_path, data)
            else:  # kept from an earlier life of the name: the retention starts again
                transaction.set_data(kept_path, data, version=kept.version)
        try:
            transaction.commit()
        except TransactionFailedError:
            return None  # changed or gone meanwhile; the next round looks again
        log.info("event=removed pipeline=%s epoch=%d purge=%s", name, term.epoch, record.purge)
        return record

    def _add_purge(
        self,
        transaction: FencedTransaction,
        term: Leadership,
        name: str,
        root: str,
        cause: PurgeCause,
    ) -> bool:
        """Add the creation of ``purges/<name>`` to ``transaction``; False (nothing added)
        when one is recorded already: it deletes the same directory."""
        if self._client.exists(self._paths.purge(name)) is not None:
            return False
        order = PurgeOrder(
            pipeline=name, root=root, cause=cause, requested=self._wall(), epoch=term.epoch
        )
        transaction.create(self._paths.purge(name), order.encode())
        return True

    def _changed(self, record: PipelineRecord, term: Leadership, **changes: Any) -> PipelineRecord:
        updated = max(self._wall(), record.updated)
        return record.model_copy(update={**changes, "epoch": term.epoch, "updated": updated})

    def _to_status(
        self, term: Leadership, status: PipelineStatus
    ) -> Callable[[PipelineRecord], PipelineRecord | None]:
        def change(record: PipelineRecord) -> PipelineRecord | None:
            _refuse_if_killed(
                record, "activate" if status is PipelineStatus.ACTIVE else "deactivate"
            )
            return None if record.status is status else self._changed(record, term, status=status)

        return change

    def _update(
        self,
        term: Leadership,
        name: str,
        action: str,
        change: Callable[[PipelineRecord], PipelineRecord | None],
    ) -> PipelineRecord:
        """Read the record, apply ``change`` (None: nothing to do), write it back fenced."""
        check_pipeline_name(name)
        path = self._paths.pipeline(name)
        with _zookeeper_errors(term):
            for _ in range(VERSION_RACE_RETRIES):
                record, version = self._read(name)
                updated = change(record)
                if updated is None:
                    return record
                data = self._encode(updated)
                try:
                    term.transaction().set_data(path, data, version).commit()
                except TransactionFailedError:
                    continue  # changed by a concurrent request, or removed: read again
                log.info(
                    "event=%s pipeline=%s epoch=%d status=%s",
                    action,
                    name,
                    term.epoch,
                    updated.status.value,
                )
                return updated
        raise UnavailableError(f"pipeline {name!r} kept changing under {action}; retry")

    def _encode(self, record: PipelineRecord) -> bytes:
        """The record's bytes; RecordTooLargeError past ``max_record_bytes``."""
        data = record.encode()
        if len(data) > self._max_record_bytes:
            raise RecordTooLargeError(
                f"pipeline {record.name}'s record would be {len(data)} bytes, over "
                f"nimbus.max.record.bytes ({self._max_record_bytes}); make its conf smaller"
            )
        return data

    def _read(self, name: str) -> tuple[PipelineRecord, int]:
        try:
            raw, stat = self._client.get(self._paths.pipeline(name))
        except NoNodeError:
            raise UnknownPipelineError(f"unknown pipeline {name!r}") from None
        return PipelineRecord.model_validate_json(raw), stat.version

    def _existing_submit(self, name: str, request_id: str) -> PipelineRecord:
        record, _ = self._read(name)
        if request_id and record.request_id == request_id:
            return record  # a retry of a submit that did land
        raise PipelineExistsError(
            f"a pipeline named {name!r} exists already (status {record.status.value}); "
            "kill it or choose another name"
        )


def purge_pending_message(order: PurgeOrder) -> str:
    """Why a submit of ``order``'s pipeline is refused while the purge is recorded."""
    why = "kill --purge" if order.cause is PurgeCause.KILL else "their retention ended"
    state = "pending" if order.state is PurgeState.PENDING else "failed, and tried again"
    if order.reason:
        state += f" ({order.reason})"
    return (
        f"cannot submit pipeline {order.pipeline!r}: a purge of its checkpoints "
        f"({order.root.rstrip('/')}/{order.pipeline}, {why}) is {state}; a pipeline of the "
        "name would resume from checkpoints being deleted. Submit it once the purge is done "
        f"(GET /api/v1/pipelines/{order.pipeline}/purge shows it), or choose another name"
    )


def updated_conf(
    current: Mapping[str, Any],
    user_keys: Sequence[str] | None,
    manifest_conf: Mapping[str, Any],
    update_conf: Mapping[str, Any],
) -> tuple[dict[str, Any], list[str]]:
    """The conf of a pipeline updated to a package whose manifest has ``manifest_conf``,
    and the keys of it the user set: (conf, user keys).

    The new manifest's conf, then the values of the pipeline's ``current`` conf under
    ``user_keys`` (None, a record older than this rule: every key of it), then
    ``update_conf``. So a value the user chose is kept, a default the user never set
    follows the new manifest, and a key the new manifest drops is gone unless the user set
    it. A secret sent as the API shows it ("***") keeps the pipeline's value, else the new
    manifest's. The retired checkpoint-root key is dropped.
    """
    kept = {k: v for k, v in current.items() if k != CHECKPOINT_ROOT_KEY}
    chosen = set(kept) if user_keys is None else set(user_keys) & set(kept)
    given = restore_redacted(update_conf, {**manifest_conf, **kept})
    users = {k: v for k, v in kept.items() if k in chosen}
    conf = validate_pipeline_conf({**manifest_conf, **users, **given})
    return conf, sorted((chosen | set(given)) & set(conf))


def _remembered(requests: list[str], request_id: str) -> list[str]:
    """``requests`` with ``request_id`` appended (if any), the newest few kept."""
    if not request_id:
        return requests
    return [*requests, request_id][-REMEMBERED_REQUESTS:]


def _refuse_if_killed(record: PipelineRecord, action: str) -> None:
    """Only kill applies to a pipeline that is KILLED, FAILED or waiting for replication."""
    why = _REFUSALS.get(record.status)
    if why is not None:
        raise InvalidTransitionError(f"cannot {action} pipeline {record.name!r}: {why}")


def _refuse_if_not_rerunnable(record: PipelineRecord, action: str) -> None:
    """A KILLED pipeline, or one waiting for replication, neither restarts nor rolls back."""
    if record.status in (PipelineStatus.KILLED, PipelineStatus.PENDING):
        raise InvalidTransitionError(
            f"cannot {action} pipeline {record.name!r}: {_REFUSALS[record.status]}"
        )


def _refuse_if_update_waits(record: PipelineRecord, action: str) -> None:
    waiting = record.update
    if waiting is not None:
        raise UpdateInProgressError(
            f"cannot {action} pipeline {record.name!r}: an update waits for its code to reach "
            f"{waiting.replication_required} nimbuses (request {waiting.request_id or '-'}); "
            "wait until it applies, then roll back"
        )


def _runs(kept: KeptVersion) -> dict[str, Any]:
    """The fields of a record that name the code and conf of ``kept``."""
    return {
        "digest": kept.digest,
        "size_bytes": kept.size_bytes,
        "blake3": kept.blake3,
        "conf": kept.conf,
        "user_keys": kept.user_keys,
        "version": kept.version,
    }


_REFUSALS = {
    PipelineStatus.KILLED: "it is KILLED and will be removed",
    PipelineStatus.FAILED: "it is FAILED; restart it (stratus restart), or kill it",
    PipelineStatus.FINISHED: "it is FINISHED; restart it to run it again (stratus restart)",
    PipelineStatus.PENDING: "it is PENDING until its code reaches pipeline.min.replication.count "
    "nimbuses",
}


@dataclass(frozen=True)
class ReplicationPolicy:
    """``pipeline.min.replication.count`` and ``pipeline.max.replication.wait.time.sec``."""

    required: int
    wait_secs: int  # -1: forever

    def of(self, conf: Mapping[str, Any]) -> ReplicationPolicy:
        """The pipeline's own settings where its conf has them, else these (the cluster's)."""
        return ReplicationPolicy(
            required=conf.get("pipeline.min.replication.count", self.required),
            wait_secs=conf.get("pipeline.max.replication.wait.time.sec", self.wait_secs),
        )

    def deadline(self, now: float) -> float | None:
        return None if self.wait_secs < 0 else now + self.wait_secs


@contextmanager
def _zookeeper_errors(term: Leadership) -> Iterator[None]:
    """Turn coordination and kazoo failures into the API's retryable errors."""
    try:
        yield
    except LeadershipLostError as exc:
        raise NotLeaderError(f"this nimbus stopped leading (epoch {term.epoch}): {exc}") from None
    except CommitOutcomeUnknownError as exc:
        raise UnavailableError(f"{exc}; the operation is safe to retry") from None
    except (ZooKeeperUnavailableError, KazooException) as exc:
        raise UnavailableError(f"ZooKeeper is unreachable ({type(exc).__name__}); retry") from None
