"""A pipeline's staged update: new code recorded beside the code it runs, applied once that
code is on enough nimbuses. Pure functions of the record; ``PipelineOps`` writes what they
give in its fenced transactions (``stage_update``, ``note_update_replication``).

An update waits in the record (``PipelineRecord.update``) until its code reaches its
``replication_required`` nimbuses, or its deadline passes with at least one copy; applying
it names the new code and conf, and its version and generation grow by one (which restarts
the worker). One update waits at a time (``UpdateInProgressError``), and a rollback waits
for it too. The update's conf is ``updated_conf``: the new manifest's, the values the user
set over it, this update's over both::

    update = staged_update(
        record, package, "r2", manifest_conf=conf, update_conf={}, replication=policy, now=now
    )
    step = replication_step(record, update, holders=2, now=now)   # Apply(reason=None)
    changes = applied(record, update, holders=2, reason=None, now=now, keep=3)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stratus.api.errors import UpdateInProgressError
from stratus.api.locations import CHECKPOINT_ROOT_KEY
from stratus.api.pipeline_conf import validate_pipeline_conf
from stratus.api.records import AssignmentReason, KeptVersion, PendingUpdate, PipelineRecord
from stratus.api.redaction import restore_redacted
from stratus.codedist.package_store import StoredPackage
from stratus.nimbus.records.kept_versions import with_applied
from stratus.nimbus.records.replication_policy import ReplicationPolicy


@dataclass(frozen=True)
class Apply:
    """The update's code is on enough nimbuses (or on one, past its deadline): apply it,
    with ``reason`` (None, or why it applies short of the replication asked for)."""

    reason: str | None


def is_retry(record: PipelineRecord, request_id: str) -> bool:
    """Whether an update with ``request_id`` landed already: waiting, or applied."""
    waiting = record.update
    return bool(request_id) and (
        request_id in record.requests or (waiting is not None and waiting.request_id == request_id)
    )


def staged_update(
    record: PipelineRecord,
    package: StoredPackage,
    request_id: str,
    *,
    manifest_conf: Mapping[str, Any],
    update_conf: Mapping[str, Any],
    replication: ReplicationPolicy,
    now: float,
) -> PendingUpdate:
    """The update that gives ``record`` ``package``, its conf ``updated_conf`` and its
    replication ``replication`` where that conf does not set it; UpdateInProgressError
    while another update waits."""
    waiting = record.update
    if waiting is not None:
        raise UpdateInProgressError(
            f"pipeline {record.name!r} has an update waiting for its code to reach "
            f"{waiting.replication_required} nimbuses (request "
            f"{waiting.request_id or '-'}, on {waiting.replication} so far); wait "
            "until it applies (stratus status shows the version), then update again"
        )
    merged, user_keys = updated_conf(record.conf, record.user_keys, manifest_conf, update_conf)
    policy = replication.of(merged)
    return PendingUpdate(
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


def replication_step(
    record: PipelineRecord, update: PendingUpdate, holders: int, *, now: float
) -> Apply | PendingUpdate | None:
    """What ``update``'s code on ``holders`` nimbuses does: ``Apply`` it, note the count
    (the update with it), or nothing (None: the count is noted already)."""
    if holders >= update.replication_required:
        return Apply(reason=None)
    deadline = update.replication_deadline
    if deadline is not None and now >= deadline and holders > 0:
        return Apply(
            reason=f"version {record.version + 1} applied at the replication wait limit with "
            f"its code on {holders} of the {update.replication_required} nimbuses required"
        )
    if holders == update.replication:
        return None
    return update.model_copy(update={"replication": holders})


def applied(
    record: PipelineRecord,
    update: PendingUpdate,
    holders: int,
    *,
    reason: str | None,
    now: float,
    keep: int,
) -> dict[str, Any]:
    """The changes to ``record`` that apply ``update``: its code and conf, the next version
    (kept, with the ``keep`` newest), on trial, with a new generation."""
    version = record.newest_version + 1
    kept = KeptVersion(
        version=version,
        digest=update.digest,
        size_bytes=update.size_bytes,
        blake3=update.blake3,
        conf=update.conf,
        user_keys=update.user_keys,
        applied=max(now, record.updated),
    )
    return {
        "digest": update.digest,
        "size_bytes": update.size_bytes,
        "blake3": update.blake3,
        "conf": update.conf,
        "user_keys": update.user_keys,
        "version": version,
        "versions": with_applied(record, kept, keep=keep),
        "update": None,
        "replication": holders,
        "replication_required": update.replication_required,
        "reason": reason,
        "on_trial": True,
        "generation_cause": AssignmentReason.UPDATED.value,
    }


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
