"""A supervisor's registration: the ephemeral ``<root>/supervisors/<id>``, one owner per id.

Guarantees: ``claim`` creates the node atomically or fails with
``DuplicateSupervisorError`` when another *live* supervisor holds it. A node left by a dead
supervisor (a kill -9 moments ago: its session lives until it times out) is waited for,
up to the session timeout; a supervisor whose heartbeat changes meanwhile is alive, and the
claim fails at once. A node held by ``dead_session``, the session a previous supervisor of
this local directory recorded (``SessionRecord``), is deleted and claimed at once: the
caller proved that supervisor dead (it holds the directory's lock), so it need not wait
out a session that nobody will use again. Once claimed, the node is re-created after every
session expiry (``EphemeralNodes``) and its ``used`` count can change; ``close`` deletes it::

    registration = SupervisorRegistration(client, paths, summary, board=board, wait_secs=12)
    registration.claim()                 # else DuplicateSupervisorError
    registration.update_used(3)
    registration.update_warm(pool.memory)   # the warm workers' memory, when it changed
    registration.close()
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat
from pydantic import ValidationError

from stratus.api.clock import Clock
from stratus.api.records import SupervisorHeartbeat, SupervisorSummary, WarmMemory
from stratus.errors import StratusError
from stratus.files import write_atomically
from stratus.supervisor.errors import DuplicateSupervisorError
from stratus.zk.ephemeral import EphemeralNodes
from stratus.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

POLL_SECS = 0.2
UPDATE_DEADLINE_SECS = 1.0  # an update while ZooKeeper is slow is left to the nodes' thread
WARM_USE_STEP_MB = 64  # a change of the warm workers' use this large is written


class SessionRecord:
    """``<local>/session``: the ZooKeeper session a supervisor registered with, so that the
    next supervisor of the same local directory can tell its node from a live twin's."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> int | None:
        try:
            return int(self.path.read_text().strip(), 16)
        except (OSError, ValueError):
            return None

    def write(self, session_id: int | None) -> None:
        if session_id is None:
            return
        try:
            write_atomically(self.path, f"{session_id:x}\n".encode())
        except OSError as exc:  # the next start waits the session out, as without it
            log.warning("event=session_not_recorded path=%s error=%r", self.path, exc)


class SupervisorRegistration:
    """One supervisor's ephemeral registration; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        summary: SupervisorSummary,
        *,
        heartbeats: Callable[[], dict[str, SupervisorHeartbeat]],
        wait_secs: float,
        dead_session: int | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._client = client
        self.path = paths.supervisor(summary.id)
        self.summary = summary
        self._heartbeats = heartbeats
        self._wait_secs = wait_secs
        self._dead_session = dead_session
        self._clock = clock
        self._nodes = EphemeralNodes(client, name=f"registration {summary.id}")
        self._claimed = False

    def claim(self) -> None:
        """Create the node, waiting out one a dead supervisor left; see the module docstring."""
        deadline = self._clock() + self._wait_secs
        first_beat: float | None = None
        while not self._create():
            holder = self._holder()
            if holder is None:
                continue  # gone since: create it again
            data, stat = holder
            if self._is_ours(stat):
                break
            if self._dead_session is not None and stat.owner_session_id == self._dead_session:
                self._delete_dead(stat)
                continue
            beat = self._beat_time()
            if first_beat is None:
                first_beat = beat if beat is not None else -1.0
            elif beat is not None and beat != first_beat:
                raise self._duplicate(data, stat, "its heartbeat is changing")
            if self._clock() >= deadline:
                raise self._duplicate(data, stat, f"its session outlived {self._wait_secs:g}s")
            time.sleep(POLL_SECS)
        self._nodes.start()
        self._nodes.add(self.path, self.summary.encode(), deadline=None)  # ours: kept from now
        self._claimed = True
        log.info(
            "event=supervisor_registered supervisor=%s path=%s slots=%d",
            self.summary.id,
            self.path,
            self.summary.slots,
        )

    def update_used(self, used: int) -> None:
        """Record how many slots are in use (later, by the nodes' thread, if ZooKeeper is slow)."""
        self._update(used=used)

    def update_outage(self, mode: Literal["ride", "fence"], unavailable: str | None) -> None:
        """Record what the supervisor does through an outage of ZooKeeper now, and why it
        fences though told to ride (``SupervisorSummary.ride_unavailable``)."""
        self._update(zookeeper_outage=mode, ride_unavailable=unavailable)

    def _update(self, **changes: object) -> None:
        current = {name: getattr(self.summary, name) for name in changes}
        if not self._claimed or current == changes:
            return
        self.summary = self.summary.model_copy(update=changes)
        self._nodes.add(self.path, self.summary.encode(), deadline=UPDATE_DEADLINE_SECS)

    def update_warm(self, warm: WarmMemory) -> None:
        """Record the warm workers' memory when what it shows changed: their number, the
        budget, why they are held back, or their use by ``WARM_USE_STEP_MB`` or more
        (resident memory drifts: not a write per drift)."""
        if not self._claimed or _shows_the_same(self.summary.warm, warm):
            return
        self.summary = self.summary.model_copy(update={"warm": warm})
        self._nodes.add(self.path, self.summary.encode(), deadline=UPDATE_DEADLINE_SECS)

    def close(self) -> None:
        """Delete the node (the session's end would too) and stop re-creating it."""
        if self._claimed:
            self._nodes.close()
            self._claimed = False
            log.info("event=supervisor_unregistered supervisor=%s", self.summary.id)

    # ------------------------------------------------------------------ parts

    def _create(self) -> bool:
        try:
            self._client.create(self.path, self.summary.encode(), ephemeral=True, makepath=True)
        except NodeExistsError:
            return False
        return True

    def _delete_dead(self, stat: ZnodeStat) -> None:
        """Delete the node of a session whose supervisor is proven dead (that version only)."""
        with contextlib.suppress(NoNodeError, BadVersionError):
            self._client.delete(self.path, version=stat.version)
        log.info(
            "event=dead_registration_deleted supervisor=%s session=0x%x",
            self.summary.id,
            stat.owner_session_id,
        )

    def _holder(self) -> tuple[bytes, ZnodeStat] | None:
        try:
            data, stat = self._client.get(self.path)
        except NoNodeError:
            return None
        return data, stat

    def _is_ours(self, stat: ZnodeStat) -> bool:
        client_id = self._client.client_id
        return client_id is not None and bool(stat.owner_session_id == client_id[0])

    def _beat_time(self) -> float | None:
        """The time in the other supervisor's last heartbeat, if the store answers."""
        try:
            beat = self._heartbeats().get(self.summary.id)
        except StratusError:
            return None
        return beat.time if beat is not None else None

    def _duplicate(self, data: bytes, stat: ZnodeStat, why: str) -> DuplicateSupervisorError:
        try:
            other = SupervisorSummary.model_validate_json(data)
            who = (
                f"host {other.host or '?'}, {other.slots} slots, started "
                f"{datetime.fromtimestamp(other.started, UTC):%Y-%m-%d %H:%M:%S} UTC"
            )
        except ValidationError:
            who = "unreadable registration"
        return DuplicateSupervisorError(
            f"supervisor id {self.summary.id!r} is registered by another live supervisor "
            f"({who}; ZooKeeper session 0x{stat.owner_session_id:x} holds {self.path}, and "
            f"{why}); give this supervisor another id (--id NAME or -c supervisor.id=NAME), "
            "or stop the other one first"
        )


def _shows_the_same(shown: WarmMemory | None, now: WarmMemory) -> bool:
    """Whether the registration's ``shown`` still tells what ``now`` does."""
    if shown is None:
        return False
    drift = abs(shown.used_mb - now.used_mb) < WARM_USE_STEP_MB
    return drift and shown.model_copy(update={"used_mb": now.used_mb}) == now
