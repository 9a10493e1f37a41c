"""One ZooKeeper session that runs the elections of many groups (the seed-004 API).

Guarantees: at most N leaders per group at any time (each holds an ephemeral slot node that
ZooKeeper lets only one session create); every term won bumps the slot's epoch, so writes of a
deposed leader are refused (see ``leadership``); ``is_leader`` turns false as soon as the
connection is suspended, and after a reconnect or a new session every candidate queues again
by itself::

    with Coordinator("zk1:2181,zk2:2181", session_timeout=10) as coord:
        leadership = coord.nominate("scheduler", "host-a:6627")      # blocks until elected
        with leadership.transaction() as tx:                          # fenced by the epoch
            tx.set_data("/app/state", b"...")
        coord.get_leader("scheduler")                                 # "host-a:6627"

Threads: kazoo calls its listeners and watches on its own event thread, which must never block;
they only post messages to this coordinator's worker thread, which owns every candidacy's state
machine and makes all the ZooKeeper calls. User callbacks run in order on a dispatcher thread,
so a slow callback delays other callbacks but never the election itself.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import posixpath
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from types import TracebackType
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError

from stratus.coordination.errors import (
    CoordinationError,
    ElectionTimeoutError,
    ZooKeeperUnavailableError,
)
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import (
    CandidateRecord,
    CoordinationEvent,
    ErrorKind,
    Leader,
    LeaderChange,
    RevokeReason,
    SlotRecord,
)
from stratus.zk.paths import GroupPaths, check_group_name, sequence_of

log = logging.getLogger(__name__)

ElectedCallback = Callable[[Leadership], None]
RevokedCallback = Callable[[Leadership, RevokeReason], None]
ChangeCallback = Callable[[LeaderChange], None]
ErrorCallback = Callable[[CoordinationEvent], None]
_T = TypeVar("_T")

LEASE_FRACTION = 2 / 3  # of the session timeout: how long one confirmed contact vouches for us
RENEW_FRACTION = 1 / 6  # of the session timeout: how often the lease is renewed
TERMS_KEPT = 100  # term entries kept per group for leader-change subscribers that lag


class CandidateState(Enum):
    QUEUED = "queued"  # in the queue (or re-queuing), not leading
    LEADING = "leading"
    SUSPENDED = "suspended"  # was leading when the connection dropped; may resume
    RESIGNED = "resigned"  # unnominated; being removed


@dataclass(eq=False)
class _Candidacy:
    group: str
    member_id: str
    data: bytes
    leaders: int
    on_elected: ElectedCallback
    on_revoked: RevokedCallback | None
    paths: GroupPaths
    node: str | None = None
    term: Leadership | None = None
    state: CandidateState = CandidateState.QUEUED
    claim_unknown: bool = False  # a claim was in flight when the connection dropped


@dataclass(eq=False)
class _Subscription:
    group: str
    paths: GroupPaths
    callbacks: list[ChangeCallback] = field(default_factory=list)
    last_term: int = -1
    holders: dict[int, tuple[str, int] | None] = field(default_factory=dict)
    primed: bool = False


class Coordinator:
    """Leader elections by group over one ZooKeeper session; see the module docstring."""

    def __init__(
        self,
        hosts: str,
        *,
        root: str = "/stratus",
        session_timeout: float = 10.0,
        connection_timeout: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hosts = hosts
        self.root = posixpath.normpath("/" + root.strip("/"))
        self.session_timeout = session_timeout
        self.connection_timeout = connection_timeout
        self._clock = clock
        self._client = KazooClient(
            hosts=hosts,
            timeout=session_timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=0.5),
        )
        self._lock = threading.Lock()
        self._connected = False
        self._generation = 0  # bumped at every connection state change
        self._lease_session: int | None = None  # the session the lease vouches for
        self._lease_until = 0.0
        self._granted_timeout: float | None = None  # what ZooKeeper granted, in seconds
        self._retry = KazooRetry(
            max_tries=-1, delay=0.05, max_delay=0.5, deadline=connection_timeout
        )
        self._capture_granted_timeout()
        self._last_state: str | None = None  # None until the first connection
        self._candidacies: dict[str, _Candidacy] = {}
        self._subscriptions: dict[str, _Subscription] = {}
        self._error_callbacks: dict[str, list[ErrorCallback]] = defaultdict(list)
        self._watchers: dict[tuple[str, str], Callable[[Any], None]] = {}
        self._orphans: set[str] = set()  # our ephemeral nodes to delete once reconnected
        self._tasks: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._callbacks: queue.SimpleQueue[tuple[Callable[..., None], tuple[Any, ...]] | None] = (
            queue.SimpleQueue()
        )
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    # ----------------------------------------------------------------- life cycle

    @property
    def client(self) -> KazooClient:
        """The underlying kazoo client, for reads and for the paths fenced writes touch."""
        return self._client

    @property
    def session_id(self) -> int | None:
        client_id = self._client.client_id
        return int(client_id[0]) if client_id else None

    @property
    def granted_session_timeout(self) -> float:
        """The session timeout ZooKeeper granted (it clamps requests to its own bounds)."""
        return self._granted_timeout or self.session_timeout

    def _capture_granted_timeout(self) -> None:
        """Learn the session timeout the server granted; kazoo 2.11 only logs it.

        Its connection handler's ``_connect`` returns (read timeout, connect timeout) in ms,
        the read timeout being two thirds of the granted session timeout.
        """
        handler = getattr(self._client, "_connection", None)
        connect = getattr(handler, "_connect", None)
        if connect is None:
            log.warning("event=granted_timeout_unknown using=requested")
            return

        def capture(*args: Any) -> tuple[float, float]:
            read_timeout, connect_timeout = connect(*args)
            self._granted_timeout = read_timeout * 1.5 / 1000.0
            return read_timeout, connect_timeout

        handler._connect = capture  # type: ignore[union-attr]

    def _call(self, what: str, func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """A ZooKeeper call from a user's thread, retried across connection loss until the
        connection timeout, then ``ZooKeeperUnavailableError``."""
        try:
            result: _T = self._retry.copy()(func, *args, **kwargs)  # kazoo is untyped
            return result
        except (RetryFailedError, ConnectionClosedError) as exc:
            raise ZooKeeperUnavailableError(
                f"ZooKeeper at {self.hosts} did not answer while trying to {what} "
                f"({type(exc).__name__}); it is retried for zookeeper.connection.timeout.secs"
            ) from None

    @property
    def closed(self) -> bool:
        return self._stopping.is_set()

    def start(self) -> Coordinator:
        """Connect to ZooKeeper (within ``connection_timeout``) and start the worker threads."""
        self._client.add_listener(self._on_kazoo_state)
        try:
            self._client.start(timeout=self.connection_timeout)
        except KazooTimeoutError:
            self._client.close()
            raise ZooKeeperUnavailableError(
                f"no ZooKeeper server answered at {self.hosts} within "
                f"{self.connection_timeout:g}s; is zookeeper.servers right and is it running?"
            ) from None
        self._call("create the root znode", self._client.ensure_path, self.root)
        for name, target in (
            ("worker", self._run_worker),
            ("dispatcher", self._run_dispatcher),
            ("lease", self._run_lease_keeper),
        ):
            thread = threading.Thread(target=target, name=f"coordinator-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._renew_lease()
        return self

    def close(self) -> None:
        """Resign every candidacy, close the session (its ephemeral nodes go at once), stop."""
        if self._stopping.is_set():
            return
        for group in list(self._candidacies):
            try:
                self.unnominate(group)
            except CoordinationError as exc:
                log.warning("event=resign_failed group=%s error=%s", group, exc)
        self._stopping.set()
        self._tasks.put(None)  # the worker ends after the tasks queued before this
        self._client.stop()  # unblocks a worker waiting on ZooKeeper
        worker, dispatcher, lease = self._threads or (None, None, None)
        self._join(worker)
        self._callbacks.put(None)  # the dispatcher ends after the callbacks queued before this
        self._join(dispatcher)
        self._join(lease)
        self._client.close()

    @staticmethod
    def _join(thread: threading.Thread | None) -> None:
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def __enter__(self) -> Coordinator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ----------------------------------------------------------------- the seed-004 API

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
        if group in self._candidacies:
            raise CoordinationError(
                f"this coordinator is already a candidate in group {group!r}; "
                "unnominate it first (one candidacy per group per session)"
            )
        paths = GroupPaths(self.root, group)
        self._call(f"prepare group {group!r}", self._prepare_group, paths, leaders)
        candidacy = _Candidacy(group, member_id, data, leaders, on_elected, on_revoked, paths=paths)
        self._candidacies[group] = candidacy
        self._submit(lambda: self._evaluate(group))

    def unnominate(self, group: str) -> None:
        """Leave the election of ``group``; a leader stops leading at once and gives way."""
        candidacy = self._candidacies.get(group)
        if candidacy is None:
            return
        candidacy.state = CandidateState.RESIGNED  # is_leader is false from here on
        done = threading.Event()

        def resign() -> None:
            try:
                self._resign(candidacy)
            finally:
                done.set()

        self._submit(resign)
        # While disconnected there is nothing to hand over now: the worker deletes the nodes
        # on reconnection, or ZooKeeper does when the session ends.
        deadline = time.monotonic() + self.connection_timeout
        while not done.wait(0.05):
            if not self._connected or time.monotonic() > deadline:
                log.warning("event=resign_pending group=%s member=%s", group, candidacy.member_id)
                return

    def get_leader(self, group: str) -> str | None:
        """The member id of the group's (first) leader, or ``None`` when nobody leads."""
        leaders = self.get_leaders(group)
        return leaders[0].member_id if leaders else None

    def get_leaders(self, group: str) -> list[Leader]:
        """Every current leader of the group, by slot. Any client may ask."""
        return self._call(f"read the leaders of group {group!r}", self._read_leaders, group)

    def get_candidates(self, group: str) -> list[str]:
        """The member ids of every candidate of the group, leaders included, in queue order."""
        candidates = GroupPaths(self.root, group).candidates
        raws = self._call(
            f"read the candidates of group {group!r}", self._children_data, candidates, sequence_of
        )
        return [CandidateRecord.decode(raw).member_id for raw in raws]

    def _read_leaders(self, group: str) -> list[Leader]:
        slots = GroupPaths(self.root, group).slots
        return [SlotRecord.decode(raw).as_leader() for raw in self._children_data(slots, int)]

    def _children_data(self, parent: str, order: Callable[[str], int]) -> list[bytes]:
        """The data of ``parent``'s children, ordered by ``order`` of their names.

        Plain ZooKeeper calls: the worker uses it as it is, users' threads through ``_call``.
        """
        try:
            names = self._client.get_children(parent)
        except NoNodeError:
            return []
        found = []
        for name in sorted(names, key=order):
            try:
                raw, _ = self._client.get(posixpath.join(parent, name))
            except NoNodeError:
                continue  # gone since the listing
            found.append(raw)
        return found

    def subscribe_leader_changes(self, group: str, callback: ChangeCallback) -> None:
        """Call ``callback(change)`` for every later change of the group's leadership, in order.

        Each term won is reported (``member_id`` set); a slot falling vacant is reported when
        observed (``member_id`` None). Works for non-participants too.
        """
        paths = GroupPaths(self.root, group)
        for path in (paths.terms, paths.slots):
            self._call(f"prepare group {group!r}", self._client.ensure_path, path)
        primed = threading.Event()

        def subscribe() -> None:
            try:
                sub = self._subscriptions.setdefault(group, _Subscription(group, paths))
                sub.callbacks.append(callback)
                self._refresh_subscription(group)
            finally:
                primed.set()

        self._submit(subscribe)
        primed.wait(self.connection_timeout)

    def unsubscribe_leader_changes(self, group: str, callback: ChangeCallback) -> None:
        def unsubscribe() -> None:
            sub = self._subscriptions.get(group)
            if sub and callback in sub.callbacks:
                sub.callbacks.remove(callback)
                if not sub.callbacks:
                    del self._subscriptions[group]

        self._submit(unsubscribe)

    def subscribe_errors(self, group: str, callback: ErrorCallback) -> None:
        """Call ``callback(event)`` on connection suspension, session expiry and recovery."""
        with self._lock:
            self._error_callbacks[group].append(callback)

    def unsubscribe_errors(self, group: str, callback: ErrorCallback) -> None:
        with self._lock:
            if callback in self._error_callbacks.get(group, []):
                self._error_callbacks[group].remove(callback)

    def is_candidate(self, group: str) -> bool:
        """True while this coordinator is nominated in ``group`` (leading or queued)."""
        return group in self._candidacies

    def is_leader(self, group: str) -> bool:
        return self.leadership(group) is not None

    def leadership(self, group: str) -> Leadership | None:
        """The current term of this coordinator's candidacy in ``group``, if it leads."""
        candidacy = self._candidacies.get(group)
        term = candidacy.term if candidacy else None
        return term if term is not None and term.is_leader else None

    # ----------------------------------------------------------------- kazoo's thread

    def _on_kazoo_state(self, state: str) -> None:
        """Runs on kazoo's event thread: record the state, never block, hand over to the worker."""
        with self._lock:
            self._generation += 1
            self._connected = state == KazooState.CONNECTED
            if not self._connected:
                self._lease_until = 0.0  # every term's is_leader turns false right now
        self._submit(lambda: self._on_state(state))

    def _watcher(self, kind: str, group: str) -> Callable[[Any], None]:
        """One stable watch function per (kind, group), so kazoo does not stack duplicates."""
        key = (kind, group)
        if key not in self._watchers:
            action = self._evaluate if kind == "candidacy" else self._refresh_subscription
            self._watchers[key] = lambda _event: self._submit(lambda: action(group))
        return self._watchers[key]

    # ----------------------------------------------------------------- the worker's state machine

    def _submit(self, task: Callable[[], None]) -> None:
        self._tasks.put(task)

    def _run_worker(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                task()
            except KazooException as exc:
                # The connection listener re-runs every evaluation once connected again.
                log.info("event=zookeeper_call_failed error=%s", type(exc).__name__)
            except Exception:
                log.exception("event=coordinator_task_failed")

    def _on_state(self, state: str) -> None:
        previous, self._last_state = self._last_state, state
        if state == KazooState.SUSPENDED:
            self._suspend_all()
            self._notify_errors(ErrorKind.CONNECTION_SUSPENDED, "connection to ZooKeeper lost")
        elif state == KazooState.LOST:
            self._end_all_terms(RevokeReason.SESSION_LOST)
            self._notify_errors(ErrorKind.SESSION_EXPIRED, "ZooKeeper session expired")
        elif state == KazooState.CONNECTED:
            self._renew_lease()
            if previous == KazooState.SUSPENDED:
                self._notify_errors(ErrorKind.CONNECTION_RESTORED, "reconnected, same session")
            elif previous == KazooState.LOST:
                self._notify_errors(ErrorKind.CONNECTION_RESTORED, "reconnected, new session")
            self._resume_suspended()
            self._delete_orphans()
            for group in list(self._candidacies):
                self._evaluate(group)
            for group in list(self._subscriptions):
                self._refresh_subscription(group)

    def _suspend_all(self) -> None:
        for candidacy in self._candidacies.values():
            if candidacy.state is CandidateState.LEADING and candidacy.term:
                candidacy.state = CandidateState.SUSPENDED
                self._log_term("suspended", candidacy.term)
                self._revoke(candidacy, candidacy.term, RevokeReason.SUSPENDED)

    def _end_all_terms(self, reason: RevokeReason) -> None:
        for candidacy in self._candidacies.values():
            term = candidacy.term
            if term is not None and candidacy.state is not CandidateState.RESIGNED:
                candidacy.state = CandidateState.QUEUED
                self._log_term("lost", term)
                self._revoke(candidacy, term, reason)
            candidacy.term = None
            candidacy.node = None
            candidacy.claim_unknown = False

    def _resume_suspended(self) -> None:
        """After a reconnect: a suspended term resumes only if its slot is still ours."""
        for candidacy in self._candidacies.values():
            term = candidacy.term
            if candidacy.state is not CandidateState.SUSPENDED or term is None:
                continue
            if self._holds_slot(term):
                candidacy.state = CandidateState.LEADING
                self._log_term("resumed", term)
                self._dispatch(candidacy.on_elected, term)
            else:
                candidacy.state = CandidateState.QUEUED
                candidacy.term = None
                self._log_term("deposed", term)
                self._revoke(candidacy, term, RevokeReason.DEPOSED)

    def _holds_slot(self, term: Leadership) -> bool:
        try:
            raw, stat = self._client.get(term.slot_path)
        except NoNodeError:
            return False
        record = SlotRecord.decode(raw)
        return stat.ephemeralOwner == self.session_id and record.epoch == term.epoch

    def _evaluate(self, group: str) -> None:
        """Queue this candidate if needed and claim a free slot when its turn has come."""
        candidacy = self._candidacies.get(group)
        if candidacy is None or candidacy.state is not CandidateState.QUEUED:
            return
        if not self._connected:
            return
        paths = candidacy.paths
        watch = self._watcher("candidacy", group)
        queue_names = self._client.get_children(paths.candidates, watch=watch)
        if candidacy.node is None or posixpath.basename(candidacy.node) not in queue_names:
            candidacy.node = self._client.create(
                paths.candidate_prefix,
                CandidateRecord(candidacy.member_id, candidacy.data).encode(),
                ephemeral=True,
                sequence=True,
            )
            queue_names.append(posixpath.basename(candidacy.node))
            log.info(
                "event=queued group=%s member=%s node=%s",
                group,
                candidacy.member_id,
                candidacy.node,
            )
        queue_names.sort(key=sequence_of)
        position = queue_names.index(posixpath.basename(candidacy.node))
        if position >= candidacy.leaders:
            return  # the candidates watch wakes us when someone ahead leaves
        taken = set(self._client.get_children(paths.slots, watch=watch))
        if candidacy.claim_unknown and self._adopt_claimed_slot(candidacy, taken):
            return
        for slot in range(candidacy.leaders):
            if str(slot) not in taken and self._claim(candidacy, slot):
                return

    def _claim(self, candidacy: _Candidacy, slot: int) -> bool:
        """Take ``slot`` and bump its epoch in one transaction; False if someone was faster."""
        paths = candidacy.paths
        assert candidacy.node is not None
        _, epoch_stat = self._client.get(paths.epoch(slot))
        record = SlotRecord(
            candidacy.member_id,
            epoch_stat.version + 1,
            slot,
            posixpath.basename(candidacy.node),
            candidacy.data,
        )
        tx = self._client.transaction()
        tx.check(candidacy.node, -1)
        tx.create(paths.slot(slot), record.encode(), ephemeral=True)
        tx.set_data(paths.epoch(slot), record.encode(), version=epoch_stat.version)
        tx.create(paths.term_prefix, record.encode(), sequence=True)
        generation, sent = self._generation, self._clock()
        candidacy.claim_unknown = True
        results = tx.commit()
        candidacy.claim_unknown = False
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            self._note_contact(sent, generation)
            self._grant(candidacy, record)
            if sequence_of(results[3]) % TERMS_KEPT == 0:
                self._trim_terms(paths)
            return True
        if isinstance(results[0], NoNodeError):
            candidacy.node = None  # our queue node vanished; queue again
        if isinstance(results[0], NoNodeError) or isinstance(results[2], BadVersionError):
            self._submit(lambda: self._evaluate(candidacy.group))
        elif not isinstance(results[1], NodeExistsError):
            log.warning(
                "event=claim_refused group=%s slot=%d results=%s", candidacy.group, slot, results
            )
        return False

    def _adopt_claimed_slot(self, candidacy: _Candidacy, taken: set[str]) -> bool:
        """A claim whose reply was lost may have succeeded: look for a slot our session holds."""
        candidacy.claim_unknown = False
        for name in taken:
            try:
                raw, stat = self._client.get(candidacy.paths.slot(int(name)))
            except NoNodeError:
                continue
            if stat.ephemeralOwner == self.session_id:
                self._grant(candidacy, SlotRecord.decode(raw))
                return True
        return False

    def _grant(self, candidacy: _Candidacy, record: SlotRecord) -> None:
        paths = candidacy.paths
        term = Leadership(
            group=candidacy.group,
            member_id=candidacy.member_id,
            slot=record.slot,
            epoch=record.epoch,
            epoch_path=paths.epoch(record.slot),
            slot_path=paths.slot(record.slot),
            _client=self._client,
            _holds=lambda t: candidacy.term is t and candidacy.state is CandidateState.LEADING,
            _lease_end=functools.partial(self._lease_end, self.session_id),
        )
        candidacy.term = term
        candidacy.state = CandidateState.LEADING
        self._log_term("elected", term)
        self._dispatch(candidacy.on_elected, term)

    def _resign(self, candidacy: _Candidacy) -> None:
        term = candidacy.term
        if self._candidacies.get(candidacy.group) is candidacy:
            del self._candidacies[candidacy.group]
        paths = [term.slot_path] if term else []
        if candidacy.node:
            paths.append(candidacy.node)
        self._orphans.update(paths)
        self._delete_orphans()
        candidacy.term = None
        if term is not None:
            self._log_term("resigned", term)
            self._revoke(candidacy, term, RevokeReason.RESIGNED)

    def _delete_orphans(self) -> None:
        """Delete our own leftover ephemeral nodes (never another session's)."""
        if not self._connected:
            return
        for path in sorted(self._orphans, key=lambda p: "/slots/" not in p):
            try:
                stat = self._client.exists(path)
                if stat is not None and stat.ephemeralOwner == self.session_id:
                    self._client.delete(path)
            except NoNodeError:
                pass
            self._orphans.discard(path)

    def _prepare_group(self, paths: GroupPaths, leaders: int) -> None:
        """Create the group's nodes once; refuse a leader count that differs from the group's."""
        try:
            self._client.create(paths.base, str(leaders).encode(), makepath=True)
        except NodeExistsError:
            raw, _ = self._client.get(paths.base)
            existing = int(raw.decode() or leaders)
            if existing != leaders:
                raise CoordinationError(
                    f"group {paths.group!r} elects {existing} leader(s); "
                    f"nominate with leaders={existing}"
                ) from None
        for path in (paths.candidates, paths.slots, paths.terms, paths.epochs):
            self._client.ensure_path(path)
        for slot in range(leaders):
            with contextlib.suppress(NodeExistsError):
                self._client.create(paths.epoch(slot), b"")

    def _trim_terms(self, paths: GroupPaths) -> None:
        names = self._client.get_children(paths.terms)
        if len(names) <= 2 * TERMS_KEPT:
            return
        for name in sorted(names, key=sequence_of)[:-TERMS_KEPT]:
            with contextlib.suppress(NoNodeError):
                self._client.delete(posixpath.join(paths.terms, name))

    # ----------------------------------------------------------------- leader-change subscribers

    def _refresh_subscription(self, group: str) -> None:
        sub = self._subscriptions.get(group)
        if sub is None or not self._connected:
            return
        watch = self._watcher("subscription", group)
        names = sorted(self._client.get_children(sub.paths.terms, watch=watch), key=sequence_of)
        if not sub.primed:
            sub.last_term = sequence_of(names[-1]) if names else -1
            for leader in self._read_leaders(group):
                sub.holders[leader.slot] = (leader.member_id, leader.epoch)
            sub.primed = True
        for name in names:
            if sequence_of(name) <= sub.last_term:
                continue
            sub.last_term = sequence_of(name)
            try:
                raw, _ = self._client.get(posixpath.join(sub.paths.terms, name))
            except NoNodeError:
                continue
            record = SlotRecord.decode(raw)
            sub.holders[record.slot] = (record.member_id, record.epoch)
            self._announce(sub, LeaderChange(group, record.slot, record.member_id, record.epoch))
        occupied = set(self._client.get_children(sub.paths.slots, watch=watch))
        for slot, holder in sub.holders.items():
            if holder is not None and str(slot) not in occupied:
                sub.holders[slot] = None
                self._announce(sub, LeaderChange(group, slot, None, holder[1]))

    def _announce(self, sub: _Subscription, change: LeaderChange) -> None:
        for callback in list(sub.callbacks):
            self._dispatch(callback, change)

    # ----------------------------------------------------------------- the lease

    def _run_lease_keeper(self) -> None:
        while not self._stopping.wait(self.granted_session_timeout * RENEW_FRACTION):
            # On failure the lease lapses by itself; the connection listener does the rest.
            with contextlib.suppress(KazooException):
                self._renew_lease()

    def _renew_lease(self) -> None:
        """One round trip to ZooKeeper; a reply proves the session alive when it was sent."""
        if not self._connected:
            return
        generation, sent = self._generation, self._clock()
        self._client.exists(self.root)
        self._note_contact(sent, generation)

    def _note_contact(self, sent: float, generation: int) -> None:
        """ZooKeeper answered a request sent at ``sent``: extend the lease of this session."""
        until = sent + self.granted_session_timeout * LEASE_FRACTION
        session = self.session_id
        with self._lock:
            if not self._connected or generation != self._generation:
                return
            if session != self._lease_session:
                self._lease_session, self._lease_until = session, until
            else:
                self._lease_until = max(self._lease_until, until)

    def _lease_end(self, session: int | None) -> float:
        """Until when the lease vouches for ``session``; a term of an older session has none."""
        with self._lock:
            return self._lease_until if session == self._lease_session else 0.0

    # ----------------------------------------------------------------- user callbacks

    def _dispatch(self, callback: Callable[..., None], *args: Any) -> None:
        self._callbacks.put((callback, args))

    def _run_dispatcher(self) -> None:
        while (item := self._callbacks.get()) is not None:
            callback, args = item
            try:
                callback(*args)
            except Exception:
                log.exception("event=user_callback_failed callback=%r", callback)

    def _revoke(self, candidacy: _Candidacy, term: Leadership, reason: RevokeReason) -> None:
        if candidacy.on_revoked is not None:
            self._dispatch(candidacy.on_revoked, term, reason)

    def _notify_errors(self, kind: ErrorKind, detail: str) -> None:
        with self._lock:
            targets = [(g, list(cbs)) for g, cbs in self._error_callbacks.items()]
        for group, callbacks in targets:
            for callback in callbacks:
                self._dispatch(callback, CoordinationEvent(group, kind, detail))

    @staticmethod
    def _log_term(event: str, term: Leadership) -> None:
        log.info(
            "event=%s group=%s member=%s slot=%d epoch=%d",
            event,
            term.group,
            term.member_id,
            term.slot,
            term.epoch,
        )
