"""Hadoop's ActiveStandbyElector, with breadcrumb fencing, on the group election.

The winner of the group's single slot holds the ephemeral lock. Before it is told to become
active it reads the persistent breadcrumb left by the previous active: if that holds another
node's data, ``fence_old_active(data)`` must succeed first; then it writes its own data there
(a fenced write, checked against the breadcrumb's version) and ``become_active(epoch)`` runs
with the epoch of the term just won, the one the breadcrumb was written under::

    elector = ActiveStandbyElector(coordinator, "nimbus-ha", callbacks, member_id="nn1")
    elector.join_election(b"nn1.example:8020")
    ...
    elector.quit_election(need_fence=False)   # clean exit: delete our breadcrumb first

If fencing fails or ``become_active`` raises, the elector drops the lock, waits
``rejoin_delay`` so another node may try, and rejoins, keeping the breadcrumb so that whoever
becomes active fences this node. All callbacks are serialized by one lock.
"""

from __future__ import annotations

import logging
import threading
from enum import Enum
from typing import Protocol

from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    SessionExpiredError,
)

from stratus.coordination.coordinator import Coordinator
from stratus.coordination.errors import (
    CommitOutcomeUnknownError,
    CoordinationError,
    LeadershipLostError,
)
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import LeaderChange, RevokeReason
from stratus.zk.paths import GroupPaths

log = logging.getLogger(__name__)

# What a read or write of the breadcrumb raises when the connection drops under it.
_CONNECTION_ERRORS = (ConnectionLoss, SessionExpiredError, ConnectionClosedError)


class ActiveStandbyCallbacks(Protocol):
    """What the elector asks of the service it controls (Hadoop's ActiveStandbyElectorCallback)."""

    def become_active(self, epoch: int) -> None:
        """Make the local service active under ``epoch``, the term won; raise to refuse (the
        elector then rejoins later)."""

    def become_standby(self) -> None:
        """Another node is active: make the local service standby."""

    def enter_neutral_mode(self) -> None:
        """The connection to ZooKeeper is in doubt: neither claim nor give up the active role."""

    def fence_old_active(self, data: bytes) -> bool:
        """Make sure the node that left this breadcrumb is not active; True when done."""

    def notify_fatal_error(self, message: str) -> None:
        """The elector cannot go on (the process should abort)."""


class ElectorState(Enum):
    INIT = "init"
    ACTIVE = "active"
    STANDBY = "standby"
    NEUTRAL = "neutral"


class ActiveStandbyElector:
    """Active/standby election with breadcrumb fencing for one service; see the module doc."""

    def __init__(
        self,
        coordinator: Coordinator,
        group: str,
        callbacks: ActiveStandbyCallbacks,
        *,
        member_id: str,
        rejoin_delay: float = 1.0,
    ) -> None:
        self._coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self._callbacks = callbacks
        self._rejoin_delay = rejoin_delay
        self._client = coordinator.session.client  # the breadcrumb's reads and deletes
        self._paths = GroupPaths(coordinator.root, group)
        self._lock = threading.RLock()
        self._app_data = b""
        self._joined = False
        self._subscribed = False
        self.state = ElectorState.INIT

    def join_election(self, app_data: bytes) -> None:
        """Become a candidate for the active role; ``app_data`` identifies us to a fencer."""
        with self._lock:
            self._app_data = app_data
            self._joined = True
            if not self._subscribed:
                self._coordinator.subscribe_leader_changes(self.group, self._leader_changed)
                self._subscribed = True
            self._nominate()
            leader = self._coordinator.get_leader(self.group)
            if leader is not None and leader != self.member_id:
                self._enter(ElectorState.STANDBY)

    def quit_election(self, need_fence: bool) -> None:
        """Leave the election. ``need_fence=False`` deletes our breadcrumb: no one fences us.

        The lock is not held while the candidacy resigns: ``unnominate`` returns once
        ``_revoked`` has run on the coordinator's dispatcher, and ``_revoked`` takes the lock.
        Callbacks that run in between see ``_joined`` false and claim nothing.
        """
        with self._lock:
            self._joined = False
            if not need_fence:
                self._delete_own_breadcrumb()
        self._coordinator.unnominate(self.group)
        with self._lock:
            self.state = ElectorState.INIT

    # ----------------------------------------------------------------- election events

    def _nominate(self) -> None:
        if not self._coordinator.is_candidate(self.group):
            self._coordinator.nominate_async(
                self.group,
                self.member_id,
                self._elected,
                data=self._app_data,
                on_revoked=self._revoked,
            )

    def _elected(self, leadership: Leadership) -> None:
        with self._lock:
            if not self._joined or self.state is ElectorState.ACTIVE:
                return
            try:
                if not self._fence_previous_active():
                    self._drop_and_rejoin("fencing the old active failed")
                    return
                self._write_breadcrumb(leadership)
            except (LeadershipLostError, CommitOutcomeUnknownError, *_CONNECTION_ERRORS) as exc:
                # The connection dropped or the session ended under us: the term is suspended
                # (on_elected runs again when it resumes, and this starts over) or over.
                log.warning(
                    "event=lost_before_active group=%s error=%s: %s",
                    self.group,
                    type(exc).__name__,
                    exc,
                )
                return
            except CoordinationError as exc:
                self._callbacks.notify_fatal_error(f"cannot write the breadcrumb: {exc}")
                return
            try:
                self._callbacks.become_active(leadership.epoch)
            except Exception as exc:
                log.warning("event=become_active_failed group=%s error=%s", self.group, exc)
                self._drop_and_rejoin(f"become_active failed: {exc}")
                return
            self.state = ElectorState.ACTIVE
            log.info(
                "event=active group=%s member=%s epoch=%d",
                self.group,
                self.member_id,
                leadership.epoch,
            )

    def _revoked(self, leadership: Leadership, reason: RevokeReason) -> None:
        with self._lock:
            if reason in (RevokeReason.SUSPENDED, RevokeReason.SESSION_LOST):
                self._enter(ElectorState.NEUTRAL)
            elif reason is RevokeReason.DEPOSED:
                self._enter(ElectorState.STANDBY)

    def _leader_changed(self, change: LeaderChange) -> None:
        with self._lock:
            if self._joined and change.member_id not in (None, self.member_id):
                self._enter(ElectorState.STANDBY)

    def _enter(self, state: ElectorState) -> None:
        if self.state is state:
            return
        self.state = state
        if state is ElectorState.STANDBY:
            self._callbacks.become_standby()
        elif state is ElectorState.NEUTRAL:
            self._callbacks.enter_neutral_mode()

    def _drop_and_rejoin(self, why: str) -> None:
        """Give the lock back (keeping the breadcrumb), then rejoin after ``rejoin_delay``."""
        log.warning("event=drop_lock group=%s member=%s why=%r", self.group, self.member_id, why)
        self._coordinator.unnominate(self.group)
        self.state = ElectorState.INIT
        timer = threading.Timer(self._rejoin_delay, self._rejoin)
        timer.daemon = True
        timer.start()

    def _rejoin(self) -> None:
        with self._lock:
            if self._joined and not self._coordinator.closed:
                self._nominate()

    # ----------------------------------------------------------------- the breadcrumb

    def _fence_previous_active(self) -> bool:
        try:
            data, _ = self._client.get(self._paths.breadcrumb)
        except NoNodeError:
            return True
        if data == self._app_data:
            return True  # the old active was this very node
        log.info("event=fencing group=%s old_active=%r", self.group, data)
        return bool(self._callbacks.fence_old_active(data))

    def _write_breadcrumb(self, leadership: Leadership) -> None:
        stat = self._client.exists(self._paths.breadcrumb)
        with leadership.transaction() as tx:
            if stat is None:
                tx.create(self._paths.breadcrumb, self._app_data)
            else:
                tx.set_data(self._paths.breadcrumb, self._app_data, version=stat.version)

    def _delete_own_breadcrumb(self) -> None:
        """Delete our breadcrumb if it is ours; without ZooKeeper it stays (the next active
        then fences us, needlessly but safely) rather than hold a quit until the session
        comes back or expires."""
        if not self._client.connected:
            log.warning("event=breadcrumb_kept group=%s why=zookeeper_disconnected", self.group)
            return
        try:
            data, stat = self._client.get(self._paths.breadcrumb)
            if data == self._app_data:
                self._client.delete(self._paths.breadcrumb, version=stat.version)
        except (NoNodeError, BadVersionError):
            pass
        except (ConnectionLoss, ConnectionClosedError, SessionExpiredError) as exc:
            log.warning("event=breadcrumb_kept group=%s why=%s", self.group, type(exc).__name__)
