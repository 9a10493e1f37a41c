"""Leader elections of many groups over one ZooKeeper session: the library's facade.

Guarantees: at most N leaders per group at any time (each holds an ephemeral slot node that
ZooKeeper lets only one session create); every term won bumps the slot's epoch, so writes of a
deposed leader are refused (see ``leadership``); ``is_leader`` turns false as soon as the
connection is suspended, and after a reconnect or a new session every candidate queues again
by itself::

    with Coordinator.standalone("zk1:2181,zk2:2181", session_timeout=10) as coord:
        leadership = coord.nominate("scheduler", "host-a:6627")      # blocks until elected
        with leadership.transaction() as tx:                          # fenced by the epoch
            tx.set_data("/app/state", b"...")
        coord.get_leader("scheduler")                                 # "host-a:6627"

A process that already owns a session passes it: ``Coordinator(session)``; the coordinator
then leaves the session open when it closes. Threads: the session's listener (kazoo's event
thread) only posts to this coordinator's worker, which owns every candidacy
(``candidacy``) and subscription (``subscriptions``) and makes all the ZooKeeper calls. User
callbacks run in order on a dispatcher thread, so a slow callback delays other callbacks but
never the election itself.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from kazoo.exceptions import KazooException, NoNodeError

from stratus.api.clock import Clock
from stratus.coordination.candidacy import (
    Candidacies,
    Candidacy,
    ElectedCallback,
    RevokedCallback,
    prepare_group,
)
from stratus.coordination.errors import (
    CoordinationError,
    ElectionTimeoutError,
    TermMismatchError,
)
from stratus.coordination.leadership import Leadership
from stratus.coordination.reads import read_candidates, read_leaders
from stratus.coordination.records import FencedWrite, Leader, SlotRecord
from stratus.coordination.serial import SerialThread
from stratus.coordination.subscriptions import (
    ChangeCallback,
    ConnectionEvents,
    ErrorCallback,
    LeaderChanges,
)
from stratus.zk.paths import GroupPaths, check_group_name
from stratus.zk.session import SessionChange, SessionState, ZkSession, ZkSettings

log = logging.getLogger(__name__)


class Coordinator:
    """Leader elections by group over one ZooKeeper session; see the module docstring."""

    def __init__(
        self,
        session: ZkSession,
        *,
        owns_session: bool = False,
        on_fence_refused: Callable[[], None] | None = None,
        on_fenced_write: Callable[[FencedWrite], None] | None = None,
    ) -> None:
        """``on_fence_refused`` hears of every fenced transaction of a term of this
        coordinator that ZooKeeper refused because the epoch had moved (a deposed leader's
        write): a daemon counts them. ``on_fenced_write`` hears of every one ZooKeeper
        applied, on the committing thread (a daemon records it in its history): the one
        place every leader write passes through."""
        self.session = session
        self._on_fence_refused = on_fence_refused or _nothing
        self._on_fenced_write = on_fenced_write
        self.root = session.root
        self._owns_session = owns_session
        self._worker = SerialThread("coordinator-worker", on_error=_worker_failed)
        self._dispatcher = SerialThread("coordinator-dispatcher", on_error=_callback_failed)
        self._candidacies = Candidacies(
            session,
            post=self._worker.post,
            dispatch=self._dispatch,
            on_fence_refused=self._on_fence_refused,
            on_fenced_write=self._on_fenced_write,
        )
        self._leader_changes = LeaderChanges(
            session, post=self._worker.post, dispatch=self._dispatch
        )
        self._connection_events = ConnectionEvents(self._dispatch)
        self._stopping = threading.Event()

    @classmethod
    def standalone(
        cls,
        hosts: str,
        *,
        root: str = "/stratus",
        session_timeout: float = 10.0,
        connection_timeout: float = 15.0,
        clock: Clock = time.monotonic,
    ) -> Coordinator:
        """A coordinator with a session of its own, opened by ``start`` and closed by ``close``."""
        settings = ZkSettings(hosts, root, session_timeout, connection_timeout)
        return cls(ZkSession(settings, clock=clock), owns_session=True)

    # ----------------------------------------------------------------- life cycle

    @property
    def closed(self) -> bool:
        return self._stopping.is_set()

    def start(self) -> Coordinator:
        """Start the worker threads (and the session, if this coordinator owns it)."""
        self._worker.start()
        self._dispatcher.start()
        self.session.add_listener(self._on_session)
        if self._owns_session:
            try:
                self.session.start()
            except BaseException:
                self._stop_threads()
                raise
        return self

    def close(self) -> None:
        """Resign every candidacy and stop; an owned session closes (its ephemerals go at once)."""
        if self._stopping.is_set():
            return
        for group in self._candidacies.groups():
            try:
                self.unnominate(group)
            except CoordinationError as exc:
                log.warning("event=resign_failed group=%s error=%s", group, exc)
        self._stopping.set()
        self.session.remove_listener(self._on_session)
        if self._owns_session:
            self.session.close()  # before joining: unblocks a worker waiting on ZooKeeper
        self._stop_threads()

    def _stop_threads(self) -> None:
        self._worker.stop()  # the worker ends after the tasks posted before this
        self._dispatcher.stop()  # the dispatcher ends after the callbacks posted before this

    def __enter__(self) -> Coordinator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ----------------------------------------------------------------- nominations

    def nominate(
        self,
        group: str,
        member_id: str,
        timeout: float | None = None,
        leaders: int = 1,
        *,
        data: bytes = b"",
        on_revoked: RevokedCallback | None = None,
    ) -> Leadership:
        """Queue for leadership of ``group`` and block until elected.

        On timeout the candidacy is withdrawn and ``ElectionTimeoutError`` raised.
        """
        elected: queue.SimpleQueue[Leadership] = queue.SimpleQueue()
        self.nominate_async(
            group, member_id, elected.put, leaders=leaders, data=data, on_revoked=on_revoked
        )
        try:
            return elected.get(timeout=timeout)
        except queue.Empty:
            self.unnominate(group)
            raise ElectionTimeoutError(
                f"{member_id} was not elected leader of group {group!r} within {timeout:g}s"
            ) from None

    def nominate_async(
        self,
        group: str,
        member_id: str,
        on_elected: ElectedCallback,
        leaders: int = 1,
        *,
        data: bytes = b"",
        on_revoked: RevokedCallback | None = None,
    ) -> None:
        """Queue for leadership of ``group``; ``on_elected(leadership)`` runs when elected.

        ``on_revoked(leadership, reason)`` runs when the term stops (suspended, lost, resigned).
        A suspended term either resumes (``on_elected`` again, same leadership and epoch) or
        ends (``on_revoked`` again with ``SESSION_LOST`` or ``DEPOSED``). The candidate stays
        queued, and queues again after a lost session, until ``unnominate(group)``.

        Returns once the group's nodes exist: while ZooKeeper is unreachable it waits and
        retries, and raises ``ZooKeeperUnavailableError`` once the connection timeout is spent.
        """
        check_group_name(group)
        if leaders < 1:
            raise ValueError(f"leaders must be at least 1, got {leaders}")
        if self.is_candidate(group):
            raise CoordinationError(
                f"this coordinator is already a candidate in group {group!r}; "
                "unnominate it first (one candidacy per group per session)"
            )
        paths = GroupPaths(self.root, group)
        self.session.call(f"prepare group {group!r}", prepare_group, self.session, paths, leaders)
        candidacy = Candidacy(group, member_id, data, leaders, on_elected, on_revoked, paths=paths)
        self._candidacies.add(candidacy)
        self._worker.post(lambda: self._candidacies.evaluate(group))

    def unnominate(self, group: str) -> None:
        """Leave the election of ``group``; a leader stops leading at once and gives way.

        On return its ``on_revoked`` has run (called from a callback, it runs after that
        callback), unless ZooKeeper could not be reached within the connection timeout: the
        wait ends there, and ``on_revoked`` runs later, once the worker's deletes end.
        """
        candidacy = self._candidacies.get(group)
        if candidacy is None:
            return
        self._candidacies.resign_now(candidacy)  # is_leader is false from here on
        done = threading.Event()
        from_callback = self._dispatcher.is_current()

        def resign() -> None:
            try:
                self._candidacies.resign(candidacy)
            finally:
                if from_callback:
                    done.set()
                else:
                    self._dispatcher.post(done.set)  # after the on_revoked resign posted

        self._worker.post(resign)
        # While disconnected there is nothing to hand over now: the worker deletes the nodes
        # on reconnection, or ZooKeeper does when the session ends.
        deadline = time.monotonic() + self.session.settings.connection_timeout
        while not done.wait(0.05):
            if not self.session.connected or time.monotonic() > deadline:
                log.warning("event=resign_pending group=%s member=%s", group, candidacy.member_id)
                return

    def refresh(self, group: str, timeout: float | None = None) -> bool:
        """Evaluate ``group``'s candidacy now, and wait until that evaluation and the
        callbacks it caused (``on_elected``) have run; False if ``timeout`` (default: the
        connection timeout) ran out first.

        Watches elect a candidate by themselves; this is for callers that poll (tooz's
        ``run_watchers``), who must know on return whether their turn has come.
        """
        done = threading.Event()

        def evaluate() -> None:
            try:
                self._candidacies.evaluate(group)
            finally:
                self._dispatcher.post(done.set)  # after the callbacks the evaluation posted

        self._worker.post(evaluate)
        return done.wait(self.session.settings.connection_timeout if timeout is None else timeout)

    def is_candidate(self, group: str) -> bool:
        """True while this coordinator is nominated in ``group`` (leading or queued)."""
        return self._candidacies.get(group) is not None

    def is_leader(self, group: str) -> bool:
        return self.leadership(group) is not None

    def leadership(self, group: str) -> Leadership | None:
        """The current term of this coordinator's candidacy in ``group``, if it leads."""
        candidacy = self._candidacies.get(group)
        term = candidacy.term if candidacy else None
        return term if term is not None and term.is_leader else None

    def adopt_term(
        self,
        group: str,
        member_id: str,
        epoch: int,
        *,
        holds: Callable[[Leadership], bool],
        slot: int = 0,
    ) -> Leadership:
        """A term of ``group`` won on ``member_id``'s behalf by another session, to act under.

        A failover controller campaigns in its service's name and hands the service the epoch
        it won; the service adopts that term here. ZooKeeper is read first: the slot's epoch
        must be ``epoch`` and its leader record must name ``member_id`` at that epoch, else
        ``TermMismatchError``. The term's fenced transactions check that epoch like any other;
        it holds while ``holds(term)`` says so and this session's lease vouches for it.
        """
        paths = GroupPaths(self.root, group)
        client = self.session.client

        def read() -> tuple[int, SlotRecord | None]:
            _, epoch_stat = client.get(paths.epoch(slot))
            try:
                raw, _ = client.get(paths.slot(slot))
            except NoNodeError:
                return epoch_stat.version, None
            return epoch_stat.version, SlotRecord.decode(raw)

        try:
            current, record = self.session.call(f"read the term of group {group!r}", read)
        except NoNodeError:
            raise TermMismatchError(
                f"group {group!r} has no slot {slot}: nobody was ever elected there",
                current_epoch=0,
                leader=None,
            ) from None
        leader = record.member_id if record is not None else None
        if current != epoch or record is None or record.epoch != epoch or leader != member_id:
            raise TermMismatchError(
                f"epoch {epoch} of group {group!r} is not {member_id}'s current term: the "
                f"group is at epoch {current} and its leader record names {leader or 'nobody'}",
                current_epoch=current,
                leader=leader,
            )
        session_id = self.session.session_id
        return Leadership(
            group=group,
            member_id=member_id,
            slot=slot,
            epoch=epoch,
            epoch_path=paths.epoch(slot),
            slot_path=paths.slot(slot),
            _client=client,
            _holds=holds,
            _lease_end=lambda: self.session.lease_end(session_id),
            _clock=self.session.clock,
            _on_refused=self._on_fence_refused,
            _on_committed=self._on_fenced_write,
        )

    # ----------------------------------------------------------------- who leads

    def get_leader(self, group: str) -> str | None:
        """The member id of the group's (first) leader, or ``None`` when nobody leads."""
        leaders = self.get_leaders(group)
        return leaders[0].member_id if leaders else None

    def get_leaders(self, group: str) -> list[Leader]:
        """Every current leader of the group, by slot. Any client may ask."""
        paths = GroupPaths(self.root, group)
        return self.session.call(
            f"read the leaders of group {group!r}", read_leaders, self.session.client, paths
        )

    def get_candidates(self, group: str) -> list[str]:
        """The member ids of every candidate of the group, leaders included, in queue order."""
        paths = GroupPaths(self.root, group)
        return self.session.call(
            f"read the candidates of group {group!r}", read_candidates, self.session.client, paths
        )

    # ----------------------------------------------------------------- subscriptions

    def subscribe_leader_changes(self, group: str, callback: ChangeCallback) -> None:
        """Call ``callback(change)`` for every later change of the group's leadership, in order.

        Each term won is reported (``member_id`` set); a slot falling vacant is reported when
        observed (``member_id`` None). Works for non-participants too.
        """
        paths = GroupPaths(self.root, group)
        for path in (paths.terms, paths.slots):
            self.session.call(f"prepare group {group!r}", self.session.client.ensure_path, path)
        primed = threading.Event()

        def subscribe() -> None:
            try:
                self._leader_changes.add(group, paths, callback)
            finally:
                primed.set()

        self._worker.post(subscribe)
        primed.wait(self.session.settings.connection_timeout)

    def unsubscribe_leader_changes(self, group: str, callback: ChangeCallback) -> None:
        self._worker.post(lambda: self._leader_changes.remove(group, callback))

    def subscribe_errors(self, group: str, callback: ErrorCallback) -> None:
        """Call ``callback(event)`` on connection suspension, session expiry and recovery."""
        self._connection_events.add(group, callback)

    def unsubscribe_errors(self, group: str, callback: ErrorCallback) -> None:
        self._connection_events.remove(group, callback)

    # ----------------------------------------------------------------- session changes

    def _on_session(self, change: SessionChange) -> None:
        """kazoo's event thread: never block, hand the change over to the worker."""
        self._worker.post(lambda: self._session_changed(change))

    def _session_changed(self, change: SessionChange) -> None:
        """The worker: terms first (suspend, end, resume), then subscribers, then the queue."""
        if change.state is not SessionState.CONNECTED:
            self._candidacies.on_session(change)
            self._connection_events.on_session(change)
            return
        self.session.renew_lease()  # a resumed term must hold before its on_elected runs
        self._connection_events.on_session(change)
        self._candidacies.on_session(change)
        self._leader_changes.on_session(change)

    def _dispatch(self, callback: Callable[..., None], *args: Any) -> None:
        self._dispatcher.post(lambda: callback(*args))


def _worker_failed(exc: Exception) -> None:
    if isinstance(exc, KazooException):
        # The session listener re-runs every evaluation once connected again.
        log.info("event=zookeeper_call_failed error=%s", type(exc).__name__)
    else:
        log.error("event=coordinator_task_failed error=%r", exc, exc_info=exc)


def _callback_failed(exc: Exception) -> None:
    log.error("event=user_callback_failed error=%r", exc, exc_info=exc)


def _nothing() -> None:
    """The default listener of refused fenced transactions."""
