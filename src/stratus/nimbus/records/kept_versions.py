"""A pipeline's kept versions: which the record keeps, which one a rollback goes back to, and
the generation that makes the switch restart the worker. Pure functions of the record.

Every version a pipeline runs (its submit's, every update's) is kept in its record
(``PipelineRecord.versions``), in the order they last became its code, the current one
last; the ``pipeline.versions.keep`` that ran most recently are kept, and their packages
stay on every nimbus while they are (``codedist/kept_code.py``). A rollback goes to the
version that ran before the current one. Version numbers are never given twice: an update
after a rollback from 4 to 3 is version 5, and a rollback of 5 goes back to 3::

    versions = with_applied(record, new_version, keep=3)       # the list after an update
    target = rollback_target(record, to_version=None)           # the version that ran before
    offset = offset_for(record, target.version)                 # generation grows by one
    changes = rollback_changes(record, target, "asked by alice", now=now, keep=3)  # all of it
"""

from __future__ import annotations

from typing import Any

from stratus.api.errors import UnknownVersionError
from stratus.api.records import AssignmentReason, KeptVersion, PipelineRecord, PipelineStatus


def current_version(record: PipelineRecord) -> KeptVersion:
    """The version ``record`` runs now, as its kept-versions list holds it."""
    kept = record.kept(record.version)
    if kept is not None and kept.digest == record.digest:
        return kept
    return KeptVersion(
        version=record.version,
        digest=record.digest,
        size_bytes=record.size_bytes,
        blake3=record.blake3,
        conf=record.conf,
        user_keys=record.user_keys,
        applied=record.updated,
    )


def with_applied(record: PipelineRecord, applied: KeptVersion, *, keep: int) -> list[KeptVersion]:
    """The kept versions once ``applied`` (a new version, or a kept one run again) replaces
    the current one: it goes last, and the ``keep`` that ran most recently stay (a record
    older than the list starts it with its current version)."""
    kept = record.versions or [current_version(record)]
    others = [version for version in kept if version.version != applied.version]
    return [*others, applied][-keep:]


def rollback_target(record: PipelineRecord, to_version: int | None) -> KeptVersion:
    """The kept version a rollback of ``record`` goes to: ``to_version``, or the one that
    ran before the current. UnknownVersionError, listing the kept ones, if there is none
    such."""
    if to_version is None:
        before = previous_version(record)
        if before is not None:
            return before
        raise UnknownVersionError(
            f"pipeline {record.name!r} keeps no version that ran before its current version "
            f"{record.version}; {kept_list(record)}"
        )
    if to_version == record.version:
        raise UnknownVersionError(
            f"pipeline {record.name!r} runs version {to_version} already; {kept_list(record)}"
        )
    target = record.kept(to_version)
    if target is None:
        raise UnknownVersionError(
            f"pipeline {record.name!r} does not keep version {to_version}; {kept_list(record)}"
        )
    return target


def previous_version(record: PipelineRecord) -> KeptVersion | None:
    """The kept version that ran before the current one, if one is kept."""
    others = [kept for kept in record.versions if kept.version != record.version]
    return others[-1] if others else None


def kept_list(record: PipelineRecord) -> str:
    """The versions ``record`` keeps, as an error message lists them."""
    if not record.versions:
        return "it keeps no versions to roll back to"
    listed = ", ".join(str(kept.version) for kept in record.versions)
    return f"the versions kept are {listed} (current {record.version})"


def unshifted_generation(record: PipelineRecord, version: int) -> int:
    """The generation ``record`` would have at ``version`` with no ``generation_offset``:
    the lowest it can have there."""
    return record.rebalances + version - 1


def offset_for(record: PipelineRecord, version: int) -> int:
    """The ``generation_offset`` that makes ``record`` at ``version`` one generation newer."""
    offset = record.generation + 1 - unshifted_generation(record, version)
    return max(offset, record.generation_offset + 1)


def rollback_changes(
    record: PipelineRecord,
    target: KeptVersion,
    why: str,
    *,
    now: float,
    keep: int,
    generation: int | None = None,
) -> dict[str, Any]:
    """The changes to ``record`` that run its kept version ``target`` again: its code and
    conf, ACTIVE, off trial, with a new generation and the reason ``rolled back from
    version N to M: <why>``. ``generation``: that one instead of a new one (a held update
    withdrawn: the generation of the assignment that runs ``target`` still); ValueError
    where ``target`` cannot have it."""
    offset = offset_for(record, target.version)
    if generation is not None:
        offset = generation - unshifted_generation(record, target.version)
        if offset < 0:
            raise ValueError(
                f"version {target.version} of pipeline {record.name!r} cannot have "
                f"generation {generation}"
            )
    run_again = target.model_copy(update={"applied": max(now, record.updated)})
    return {
        **runs(target),
        "versions": with_applied(record, run_again, keep=keep),
        "status": PipelineStatus.ACTIVE,
        "reason": f"rolled back from version {record.version} to {target.version}: {why}",
        "on_trial": False,
        "generation_cause": AssignmentReason.ROLLED_BACK.value,
        "generation_offset": offset,
    }


def runs(kept: KeptVersion) -> dict[str, Any]:
    """The fields of a record that name the code and conf of ``kept``."""
    return {
        "digest": kept.digest,
        "size_bytes": kept.size_bytes,
        "blake3": kept.blake3,
        "conf": kept.conf,
        "user_keys": kept.user_keys,
        "version": kept.version,
    }
