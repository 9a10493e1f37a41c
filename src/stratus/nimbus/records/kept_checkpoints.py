"""A removed pipeline's kept checkpoints and the purges of checkpoints, as the leader records
them in ZooKeeper for ``PipelineOps``: the ``kept-checkpoints/<name>`` marker, the
``purges/<name>`` order, and the lock between a name's submit and the expiry of its marker.

A removal that keeps the checkpoints (a kill without ``purge``) writes, in the same
transaction, ``kept-checkpoints/<name>`` (when, under which root, whose: ``add_marker``); a
submit of the name deletes it in its own transaction, so checkpoints a new pipeline resumes
from are never expired. ``expire`` and a submit of one name hold one lock of this leader's
(one of ``KEPT_LOCKS``, by the name's hash), so a submit cannot slip between the check that
no record exists and the recording of the purge.

A removal with ``purge`` (and an expiry) records ``purges/<name>`` (``PurgeOrder``:
``add_purge``) in the same transaction: the checkpoints go once whoever can write them did it
(``duties/purges.py``). While the order exists a submit of the name is refused
(``refuse_if_purging``, ``PurgePendingError``)::

    kept = KeptCheckpointStore(client, ClusterPaths("/stratus"), wall=time.time)
    with kept.lock("etl"):
        kept.refuse_if_purging("etl")
        kept.check_heir("etl", caller)   # ForbiddenError: the checkpoints were another's
    for name, marker in kept.read_all().items():
        kept.expire(term, name, marker, purge=True)   # marker deleted, purges/<name> recorded
"""

from __future__ import annotations

import logging
import threading
import zlib

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from pydantic import BaseModel, ConfigDict, ValidationError

from stratus.api.clock import Clock
from stratus.api.errors import ForbiddenError, PurgePendingError
from stratus.api.purges import PurgeCause, PurgeOrder, PurgeState
from stratus.api.records import PipelineRecord
from stratus.coordination.errors import TransactionFailedError
from stratus.coordination.leadership import FencedTransaction, Leadership
from stratus.security.access import Caller
from stratus.security.authorizer import PipelineAccess
from stratus.security.roles import Role
from stratus.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

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


class KeptCheckpointStore:
    """The kept-checkpoints markers and the purge orders of one leader's ``PipelineOps``."""

    def __init__(self, client: KazooClient, paths: ClusterPaths, *, wall: Clock) -> None:
        self._client = client
        self._paths = paths
        self._wall = wall
        self._locks = [threading.Lock() for _ in range(KEPT_LOCKS)]

    def lock(self, name: str) -> threading.Lock:
        """The lock a submit of ``name`` and the expiry of its marker hold."""
        return self._locks[zlib.crc32(name.encode()) % KEPT_LOCKS]

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

    def refuse_if_purging(self, name: str) -> None:
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

    def check_heir(self, name: str, caller: Caller | None) -> None:
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

    def read_all(self) -> dict[str, KeptCheckpoints]:
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

    def expire(self, term: Leadership, name: str, kept: KeptCheckpoints, *, purge: bool) -> bool:
        """Delete ``name``'s marker (fenced, as read) and, with ``purge``, record the purge of
        its checkpoints in the same transaction, unless the pipeline was submitted again
        meanwhile or a purge of the name is recorded already. Whether a purge was recorded."""
        path = self._paths.kept_checkpoint(name)
        with self.lock(name):
            resubmitted = self._client.exists(self._paths.pipeline(name)) is not None
            transaction = term.transaction().delete(path, version=kept.version)
            ordered = purge and not resubmitted
            if ordered:
                ordered = self.add_purge(transaction, term, name, kept.root, PurgeCause.RETENTION)
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

    def add_marker(
        self, transaction: FencedTransaction, name: str, record: PipelineRecord, root: str
    ) -> None:
        """Add the writing of ``kept-checkpoints/<name>`` to ``transaction``: ``record``'s
        pipeline is removed now, its checkpoints kept under ``root``."""
        marker = KeptCheckpoints(
            root=root,
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

    def add_purge(
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
