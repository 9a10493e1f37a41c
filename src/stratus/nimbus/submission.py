"""A submit or an update on the leader: the package received, checked, recorded, handed over.

The package is received into a temporary file in the incoming store and checked
(``check_package``) before anything is stored; the pipeline's record is created in the
term's fenced transaction, and only then is the package handed to the code distributor. A
pipeline between its record and its upload looks, to a code check, as if its code were
missing: ``settled()`` holds such submits off while a leader checks its code, waiting for
one in progress at most ``timeout`` seconds (an upload to an unreachable store may hang).

An update is checked exactly as a submit is, and a package refused changes nothing: the
pipeline runs its current code. It is recorded as waiting in the pipeline's record, its
code handed to the distributor under the update's staged key (``codedist/staged.py``),
and applied at once when this nimbus's copy is replication enough, else by the leader's
replication duty once the standbys have fetched it::

    submitter = Submitter(ops, incoming, distributor, settings)
    record, created = submitter.submit(term, "etl", {"spark.x": 1}, "r1", upload)
    record, staged = submitter.update(term, "etl", {}, "r2", new_upload)  # same checks

An update's conf is the new manifest's conf with the values the user set over it
(``staged_updates.updated_conf``): what a submit's, a rebalance's or an update's conf set
is kept, the rest follows the new manifest.
    with submitter.settled(timeout=10.0) as settled:
        if settled:
            code_sync.missing()
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from stratus.api.errors import InvalidConfError, PackageRejectedError, UnavailableError
from stratus.api.pipeline_conf import validate_pipeline_conf
from stratus.api.records import PipelineRecord
from stratus.api.redaction import restore_redacted
from stratus.codedist.distributor import CodeDistributor, CodeMeta
from stratus.codedist.errors import InvalidPackageError
from stratus.codedist.manifest import standby_problem
from stratus.codedist.package_check import CheckedPackage, check_package
from stratus.codedist.package_store import PackageStore, Received, StoredPackage
from stratus.codedist.staged import staged_key
from stratus.coordination.leadership import Leadership
from stratus.errors import StratusError
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.settings import SubmitSettings
from stratus.security.access import Caller


class Submitter:
    """Submits on one nimbus; see the module docstring."""

    def __init__(
        self,
        ops: PipelineOps,
        incoming: PackageStore,
        distributor: CodeDistributor,
        settings: SubmitSettings,
    ) -> None:
        self._ops = ops
        self.incoming = incoming
        self._distributor = distributor
        self._settings = settings
        self._lock = threading.Lock()  # held from a submit's record to its upload

    def settled(self, timeout: float) -> AbstractContextManager[bool]:
        """Inside with True: no submit is between its record and its upload. False: one
        still was after ``timeout`` seconds."""
        return held_within(self._lock, timeout)

    def submit(
        self,
        term: Leadership,
        name: str,
        submit_conf: Mapping[str, Any],
        request_id: str,
        package: BinaryIO,
        *,
        caller: Caller | None = None,
    ) -> tuple[PipelineRecord, bool]:
        """Check and store the package, create the pipeline owned by ``caller``; (record,
        created).

        ``name`` defaults to the manifest's; ``submit_conf`` overrides the manifest's conf.
        """
        received = self.incoming.receive(package)
        try:
            manifest_name, conf, stored = self._package_conf(received, submit_conf)
            name = name or manifest_name
            with self._lock:
                record, created = self._ops.submit(
                    term,
                    name,
                    conf,
                    request_id,
                    stored,
                    replication=self._settings.replication.of(conf),
                    user_keys=submit_conf.keys(),
                    caller=caller,
                )
                if record.digest == received.digest:
                    self._hand_over(received.path, name)
        finally:
            received.path.unlink(missing_ok=True)
        return record, created

    def update(
        self,
        term: Leadership,
        name: str,
        update_conf: Mapping[str, Any],
        request_id: str,
        package: BinaryIO,
    ) -> tuple[PipelineRecord, bool]:
        """Check and store ``name``'s new package; (record, staged now). The pipeline's conf
        becomes the new manifest's, with the values the user set over it and
        ``update_conf`` over both (``staged_updates.updated_conf``)."""
        received = self.incoming.receive(package)
        try:
            _, manifest_conf, stored = self._package_conf(received, {}, then=update_conf)
            self._settings.locations.check({**manifest_conf, **update_conf})
            with self._lock:
                record, staged_now = self._ops.stage_update(
                    term,
                    name,
                    request_id,
                    stored,
                    manifest_conf=manifest_conf,
                    update_conf=update_conf,
                    replication=self._settings.replication,
                )
                waiting = record.update
                if waiting is not None and waiting.digest == received.digest:
                    self._hand_over(received.path, staged_key(name), action="update")
                    holders = self._distributor.replication_count(
                        staged_key(name), CodeMeta(waiting.digest, waiting.size_bytes)
                    )
                    replaced = record.digest
                    record = self._ops.note_update_replication(term, name, holders)
                    if record.digest != replaced and replaced not in self._ops.digests_in_use():
                        self._distributor.purge(replaced)  # applied: the old code goes
        finally:
            received.path.unlink(missing_ok=True)
        return record, staged_now

    def _hand_over(self, package: Path, name: str, *, action: str = "submit") -> None:
        """Give the checked package to the distributor; a failure there is worth a retry.

        The record exists already: a retry with the same request id finds it and uploads
        again, so an unwritable disk or an unreachable shared store loses nothing.
        """
        try:
            self._distributor.upload(package, name)
        except (OSError, StratusError) as exc:
            raise UnavailableError(
                f"pipeline {name!r} is recorded but its package could not be stored ({exc}); "
                f"retry the {action} with the same request id"
            ) from None

    def _package_conf(
        self,
        received: Received,
        given: Mapping[str, Any],
        *,
        then: Mapping[str, Any] | None = None,
    ) -> tuple[str, dict[str, Any], StoredPackage]:
        """Check a received package; (its manifest's name, the manifest's conf with ``given``
        over it, validated and within the allowed locations, the package as stored). ``then``:
        an update's conf, which must fit the package's kind too."""
        manifest = self._checked(received.path).manifest
        from_manifest = manifest.pipeline_conf()
        # a secret sent as the API shows it ("***", "...&password=***") keeps the manifest's
        # value; with none to keep (nor a marker in the manifest itself) the conf is refused
        # naming the key
        merged = {**from_manifest, **restore_redacted(given, from_manifest)}
        conf = validate_pipeline_conf(restore_redacted(merged, {}))
        self._settings.locations.check(conf)
        problem = standby_problem(manifest.kind, {**conf, **(then or {})})
        if problem is not None:
            raise InvalidConfError(problem)
        stored = StoredPackage(received.digest, received.size_bytes, received.blake3)
        return manifest.name, conf, stored

    def _checked(self, path: Path) -> CheckedPackage:
        try:
            return check_package(path, self._settings.limits)
        except InvalidPackageError as exc:
            raise PackageRejectedError(str(exc)) from None


@contextmanager
def held_within(lock: threading.Lock, timeout: float) -> Iterator[bool]:
    """Hold ``lock`` if it comes within ``timeout`` seconds; yields whether it is held."""
    acquired = lock.acquire(timeout=timeout)
    try:
        yield acquired
    finally:
        if acquired:
            lock.release()
