"""The ``stratus://`` tooz backend: tooz's coordinator API over stratus's election library.

Registered as the ``stratus`` entry of tooz's ``tooz.backends``, so an OpenStack-style
service switches by its URL alone::

    coord = tooz.coordination.get_coordinator("stratus://zk1:2181,zk2:2181/app", b"host-a")
    coord.start()
    coord.watch_elected_as_leader(b"scheduler", on_elected)   # event.epoch: the fencing token
    coord.watch_elected_lost(b"scheduler", on_lost)           # stratus only: the term ended
    while True:
        coord.run_watchers()                                  # hooks run here, in order
        leadership = coord.leadership(b"scheduler")           # None unless leading now
        ...

Guarantees beyond tooz's ZooKeeper driver: leadership is a stratus term (``Coordinator``),
so ``is_leader`` turns false as soon as the connection is suspended or this process has not
heard from ZooKeeper for two thirds of the session timeout (a frozen process notices on
waking); the loss reaches the member as ``LeadershipLost`` at its next ``run_watchers``;
every term has an epoch, and ``leadership(group).transaction()`` is refused by ZooKeeper
once a later term exists. A candidate queues again by itself after a lost session.

Groups and members (with capabilities) are znodes under ``<root>/members`` (a member is
ephemeral), locks kazoo's read/write lock recipe under ``<root>/locks``, elections stratus's groups
under ``<root>/groups`` (see ``docs/tooz.md``). Every call completes before it returns; its
result object holds the value or the tooz error that ``get()`` raises. Threads: the
election library's worker and dispatcher only queue events; tooz hooks run on the thread
that calls ``run_watchers``.
"""

from __future__ import annotations

import logging
import posixpath
import queue
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import tooz
from kazoo.client import KazooClient
from kazoo.exceptions import (
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from kazoo.handlers.threading import KazooTimeoutError
from tooz import coordination, utils
from tooz.coordination import (
    Capabilities,
    CoordAsyncResult,
    EventCallback,
    GroupAlreadyExist,
    GroupNotCreated,
    GroupNotEmpty,
    Hooks,
    MemberAlreadyExist,
    MemberNotJoined,
    OperationTimedOut,
    ToozConnectionError,
    WatchCallbackNotFound,
)

from stratus.coordination import Coordinator, Leadership, RevokeReason
from stratus.errors import StratusError
from stratus.integrations.tooz.events import LeadershipLost, StratusLeaderElected
from stratus.integrations.tooz.lock import StratusLock
from stratus.integrations.tooz.names import (
    as_bytes,
    member_bytes,
    member_text,
    node_name,
    raw_id,
)
from stratus.integrations.tooz.url import zk_settings
from stratus.zk.errors import ZooKeeperUnavailableError
from stratus.zk.paths import join
from stratus.zk.session import SessionChange, SessionState, ZkSession, ZkSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

ElectionEvent = StratusLeaderElected | LeadershipLost


class DoneResult(CoordAsyncResult[T], Generic[T]):
    """The outcome of a call that already completed: its value, or the error ``get`` raises."""

    def __init__(self, value: T | None = None, error: BaseException | None = None) -> None:
        self._value = value
        self._error = error

    def get(self, timeout: float | None = None) -> T:
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # None only when T allows it

    def done(self) -> bool:
        return True


class StratusDriver(coordination.CoordinationDriverCachedRunWatchers):
    """tooz's coordinator on stratus's ZooKeeper session and election; see the module."""

    CHARACTERISTICS = (
        coordination.Characteristics.NON_TIMEOUT_BASED,
        coordination.Characteristics.DISTRIBUTED_ACROSS_THREADS,
        coordination.Characteristics.DISTRIBUTED_ACROSS_PROCESSES,
        coordination.Characteristics.DISTRIBUTED_ACROSS_HOSTS,
        coordination.Characteristics.SEQUENTIAL,
    )

    def __init__(self, member_id: bytes, parsed_url: Any, options: dict[str, Any]) -> None:
        super().__init__(as_bytes(member_id), parsed_url, options)
        self.settings: ZkSettings = zk_settings(parsed_url, options)
        self._member = member_text(self._member_id)
        self._coordinator: Coordinator | None = None
        self._hooks_elected_lost: defaultdict[bytes, Hooks] = defaultdict(Hooks)
        self._events: queue.SimpleQueue[ElectionEvent] = queue.SimpleQueue()
        self._connected = threading.Event()  # the running session is connected
        self._renewed = threading.Event()  # a new session replaced an expired one
        self._joined_data: dict[bytes, bytes] = {}  # capabilities of each joined group

    # ----------------------------------------------------------------- life cycle

    def _start(self) -> None:
        self._joined_data.clear()  # tooz forgets the joined groups at start too
        self._renewed.clear()
        try:
            coordinator = self._open()
        except NoNodeError:  # kazoo creates only the last level of a missing chroot
            self._call("create the chroot", create_chroot, self.settings)
            coordinator = self._open()
        self._coordinator = coordinator
        try:
            for path in (self._members_root, self._locks_root):
                self._client_call("create the backend's root znodes", "ensure_path", path)
        except tooz.ToozError:
            coordinator.close()
            self._coordinator = None
            raise

    def _open(self) -> Coordinator:
        """A started coordinator on a new session (the old one, if any, is closed)."""
        session = ZkSession(self.settings)
        session.add_listener(self._on_session)
        coordinator = Coordinator(session, owns_session=True)
        try:
            coordinator.start()
            if session.connected:  # the listener follows every change from here
                self._connected.set()
            return coordinator
        except StratusError as exc:
            raise ToozConnectionError(
                f"could not connect to ZooKeeper at {self.settings.hosts}: {exc}", cause=exc
            ) from exc

    def _stop(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()  # resigns every candidacy; the session's end does the rest
            self._coordinator = None

    @property
    def coordinator(self) -> Coordinator:
        """The election library's coordinator of the running session (stratus's own API)."""
        if self._coordinator is None:
            raise tooz.ToozError("the stratus coordinator is not started: call start() first")
        return self._coordinator

    # ----------------------------------------------------------------- groups and members

    def create_group(self, group_id: bytes) -> DoneResult[None]:
        def create() -> None:
            try:
                self._client_call("create group", "create", self._group_path(group_id))
            except NodeExistsError:
                raise GroupAlreadyExist(group_id) from None

        return self._result(create)

    def get_groups(self) -> DoneResult[list[bytes]]:
        def groups() -> list[bytes]:
            names = self._client_call("list groups", "get_children", self._members_root)
            return [raw_id(name) for name in names]

        return self._result(groups)

    def delete_group(self, group_id: bytes) -> DoneResult[None]:
        def delete() -> None:
            try:
                self._client_call("delete group", "delete", self._group_path(group_id))
            except NoNodeError:
                raise GroupNotCreated(group_id) from None
            except NotEmptyError:
                raise GroupNotEmpty(group_id) from None

        return self._result(delete)

    def join_group(
        self, group_id: bytes, capabilities: Capabilities | None = None
    ) -> DoneResult[None]:
        group_id = as_bytes(group_id)

        def join() -> None:
            path = self._member_path(group_id, self._member_id)
            data = utils.dumps(capabilities)
            try:
                self._client_call("join group", "create", path, data, ephemeral=True)
            except NodeExistsError:
                raise MemberAlreadyExist(group_id, self._member_id) from None
            except NoNodeError:
                raise GroupNotCreated(group_id) from None
            self._joined_groups.add(group_id)
            self._joined_data[group_id] = data

        return self._result(join)

    def leave_group(self, group_id: bytes) -> DoneResult[None]:
        group_id = as_bytes(group_id)

        def leave() -> None:
            path = self._member_path(group_id, self._member_id)
            try:
                self._client_call("leave group", "delete", path)
            except NoNodeError:
                raise MemberNotJoined(group_id, self._member_id) from None
            finally:
                self._joined_groups.discard(group_id)
                self._joined_data.pop(group_id, None)

        return self._result(leave)

    def get_members(self, group_id: bytes) -> DoneResult[set[bytes]]:
        def members() -> set[bytes]:
            try:
                names = self._client_call(
                    "list members", "get_children", self._group_path(group_id)
                )
            except NoNodeError:
                raise GroupNotCreated(group_id) from None
            return {raw_id(name) for name in names}

        return self._result(members)

    def update_capabilities(
        self, group_id: bytes, capabilities: Capabilities | None
    ) -> DoneResult[None]:
        group_id = as_bytes(group_id)

        def update() -> None:
            path = self._member_path(group_id, self._member_id)
            data = utils.dumps(capabilities)
            try:
                self._client_call("update capabilities", "set", path, data)
            except NoNodeError:
                raise MemberNotJoined(group_id, self._member_id) from None
            if group_id in self._joined_data:
                self._joined_data[group_id] = data

        return self._result(update)

    def get_member_capabilities(
        self, group_id: bytes, member_id: bytes
    ) -> DoneResult[Capabilities | None]:
        def capabilities() -> Capabilities | None:
            raw, _ = self._read_member(group_id, member_id)
            return _capabilities(raw)

        return self._result(capabilities)

    def get_members_with_capabilities(
        self, group_id: bytes
    ) -> DoneResult[dict[bytes, Capabilities | None]]:
        def read() -> dict[bytes, Capabilities | None]:
            found: dict[bytes, Capabilities | None] = {}
            for member_id in self.get_members(group_id).get():
                try:
                    raw, _ = self._read_member(group_id, member_id)
                except MemberNotJoined:
                    continue  # left since the listing
                found[member_id] = _capabilities(raw)
            return found

        return self._result(read)

    def get_member_info(self, group_id: bytes, member_id: bytes) -> DoneResult[dict[str, Any]]:
        def info() -> dict[str, Any]:
            raw, stat = self._read_member(group_id, member_id)
            return {
                "capabilities": _capabilities(raw),
                "created_at": utils.millis_to_datetime(stat.ctime),
                "updated_at": utils.millis_to_datetime(stat.mtime),
            }

        return self._result(info)

    def _read_member(self, group_id: bytes, member_id: bytes) -> tuple[bytes, Any]:
        try:
            raw, stat = self._client_call(
                "read member", "get", self._member_path(group_id, member_id)
            )
        except NoNodeError:
            raise MemberNotJoined(group_id, member_id) from None
        return raw, stat

    def heartbeat(self) -> float:
        """One round trip to ZooKeeper, which also renews the session's lease.

        ZooKeeper keeps the session by itself; the beat only proves the connection works.
        Returns the session timeout, as tooz's ZooKeeper driver does.
        """
        session = self.coordinator.session
        self._call("heartbeat", session.renew_lease)
        return session.granted_session_timeout

    # ----------------------------------------------------------------- elections

    def watch_elected_lost(self, group_id: bytes, callback: EventCallback[LeadershipLost]) -> None:
        """Call ``callback(LeadershipLost)`` in ``run_watchers`` when this member stops leading
        ``group_id`` (stratus only: tooz has no such event). Does not itself run for election."""
        self._hooks_elected_lost[as_bytes(group_id)].append(callback)

    def unwatch_elected_lost(
        self, group_id: bytes, callback: EventCallback[LeadershipLost]
    ) -> None:
        group_id = as_bytes(group_id)
        hooks = self._hooks_elected_lost.get(group_id)
        if hooks is None or callback not in hooks:
            raise WatchCallbackNotFound(group_id, callback)
        hooks.remove(callback)
        if not hooks:
            del self._hooks_elected_lost[group_id]

    def leadership(self, group_id: bytes) -> Leadership | None:
        """This member's current term of ``group_id`` (epoch, fenced transactions), or None.

        Never stale: None from the moment the connection is suspended or the session's lease
        ran out, before ``run_watchers`` delivers the ``LeadershipLost``.
        """
        return self.coordinator.leadership(node_name(group_id))

    def is_leader(self, group_id: bytes) -> bool:
        """True while this member leads ``group_id``; see ``leadership``."""
        return self.leadership(group_id) is not None

    def get_leader(self, group_id: bytes) -> DoneResult[bytes]:
        def leader() -> bytes | None:
            self._wait_connected("read the leader")
            member = self._call("read the leader", self.coordinator.get_leader, node_name(group_id))
            return None if member is None else member_bytes(member)

        return self._result(leader)  # type: ignore[arg-type]  # tooz's hint omits None

    def stand_down_group_leader(self, group_id: bytes) -> bool:
        """Leave the election of ``group_id`` now (a leader gives way at once); True if this
        member was a candidate. The next ``run_watchers`` queues it again, at the back, while
        it still watches the group's election.

        A leader's ``LeadershipLost`` is queued before this returns, so the next
        ``run_watchers`` delivers it; the wait for it is bounded by the connection timeout:
        when ZooKeeper cannot be reached that long, this returns without it, and the event
        arrives at a later ``run_watchers`` (the library revokes the term once its deletes
        of the member's nodes end, done or failed)."""
        name = node_name(group_id)
        if not self.coordinator.is_candidate(name):
            return False
        self._call("stand down", self.coordinator.unnominate, name)
        return True

    def run_elect_coordinator(self) -> None:
        """Run for every group watched with ``watch_elected_as_leader``, see at once whether
        this member's turn has come, and run the election hooks of what happened since."""
        self._campaign()
        self._deliver_election_events()

    def run_watchers(self, timeout: float | None = None) -> list[Any]:
        """The election hooks of what happened since the last call, tooz's join and leave
        hooks, then the election: campaign, and run the hooks of what that decided.

        Election events queued before the call are delivered first: a ``LeadershipLost``
        reaches the member even when ZooKeeper cannot answer the rest (which then raises).
        """
        results = self._deliver_election_events()
        self._rejoin_after_renewal()
        results.extend(super().run_watchers(timeout))
        self._campaign(timeout)
        results.extend(self._deliver_election_events())
        return results

    def _campaign(self, timeout: float | None = None) -> None:
        """Nominate this member in every watched election it is not a candidate of, and
        evaluate each candidacy now, so that an election due is decided before returning."""
        coordinator = self.coordinator
        for group_id in list(self._hooks_elected_leader):
            name = node_name(group_id)
            if not coordinator.is_candidate(name):
                self._wait_connected("run for election")
                self._call(
                    "run for election",
                    coordinator.nominate_async,
                    name,
                    self._member,
                    lambda term, group_id=group_id: self._elected(group_id, term),
                    on_revoked=lambda term, reason, group_id=group_id: self._revoked(
                        group_id, term, reason
                    ),
                )
            if not coordinator.refresh(name, timeout):
                log.warning("event=election_not_evaluated group=%s member=%s", name, self._member)

    def _elected(self, group_id: bytes, term: Leadership) -> None:
        """The dispatcher thread: queue the event for ``run_watchers``."""
        self._events.put(StratusLeaderElected(group_id, self._member_id, term))

    def _revoked(self, group_id: bytes, term: Leadership, reason: RevokeReason) -> None:
        """The dispatcher thread: queue the event for ``run_watchers``."""
        self._events.put(LeadershipLost(group_id, self._member_id, term.epoch, reason))

    def _deliver_election_events(self) -> list[Any]:
        """Run the hooks of every queued election event, in order; their results."""
        results: list[Any] = []
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                break
            if isinstance(event, LeadershipLost):
                hooks = self._hooks_elected_lost.get(event.group_id)
            else:
                hooks = self._hooks_elected_leader.get(event.group_id)
            if hooks:
                results.extend(hooks.run(event))
        return results

    # ----------------------------------------------------------------- locks

    def get_lock(self, name: bytes) -> StratusLock:
        name = as_bytes(name)
        path = join(self._locks_root, node_name(name))
        return StratusLock(name, self._client, path, self._member)

    # ----------------------------------------------------------------- helpers

    @property
    def _client(self) -> Any:
        return self.coordinator.session.client

    @property
    def _members_root(self) -> str:
        return join(self.settings.root, "members")

    @property
    def _locks_root(self) -> str:
        return join(self.settings.root, "locks")

    def _group_path(self, group_id: bytes) -> str:
        return posixpath.join(self._members_root, node_name(group_id))

    def _member_path(self, group_id: bytes, member_id: bytes) -> str:
        return posixpath.join(self._group_path(group_id), node_name(member_id))

    def _call(self, what: str, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``func`` with stratus's errors as tooz's."""
        with _as_tooz_errors(what):
            return func(*args, **kwargs)

    def _client_call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """The kazoo client's ``method``, bounded by the connection timeout: retried across a
        dropped connection, and ``OperationTimedOut`` once ZooKeeper has not answered within
        it (kazoo's own calls wait for a reconnection for ever). As with tooz's ZooKeeper
        driver, a write that timed out may still be applied once the connection is back."""
        self._wait_connected(what)
        call = getattr(self._client, f"{method}_async")
        timeout = self.settings.connection_timeout
        return self._call(
            what,
            self.coordinator.session.call,
            what,
            lambda: call(*args, **kwargs).get(timeout=timeout),
        )

    def _wait_connected(self, what: str) -> None:
        """Return once the session is connected; ``OperationTimedOut`` after the timeout."""
        if not self._connected.wait(self.settings.connection_timeout):
            raise OperationTimedOut(
                f"{what}: ZooKeeper at {self.settings.hosts} has not been reachable for "
                f"{self.settings.connection_timeout:g}s (connection_timeout)"
            )

    def _rejoin_after_renewal(self) -> None:
        """After a new session (the old one expired, and its members with it), join again
        every group this member had joined, with its last capabilities; a group deleted
        meanwhile is forgotten. Retried at the next call if ZooKeeper cannot answer now."""
        if not self._renewed.is_set():
            return
        self._renewed.clear()
        try:
            for group_id in list(self._joined_groups):
                path = self._member_path(group_id, self._member_id)
                data = self._joined_data.get(group_id, utils.dumps(None))
                try:
                    self._client_call("join group again", "create", path, data, ephemeral=True)
                    log.info("event=rejoined group=%s member=%s", node_name(group_id), self._member)
                except NodeExistsError:
                    pass  # joined again already (by us, or by a namesake's session)
                except NoNodeError:
                    self._joined_groups.discard(group_id)
                    self._joined_data.pop(group_id, None)
        except tooz.ToozError:
            self._renewed.set()
            raise

    def _on_session(self, change: SessionChange) -> None:
        """kazoo's thread: follow the connection (never blocks)."""
        if change.renewed:
            self._renewed.set()
        if change.state is SessionState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()

    @staticmethod
    def _result(func: Callable[[], T]) -> DoneResult[T]:
        try:
            return DoneResult(func())
        except tooz.ToozError as exc:
            return DoneResult(error=exc)


@contextmanager
def _as_tooz_errors(what: str) -> Iterator[None]:
    """Translate what the session and kazoo raise into tooz's exception classes."""
    try:
        yield
    except tooz.ToozError:
        raise
    except (ZooKeeperUnavailableError, KazooTimeoutError) as exc:
        raise OperationTimedOut(f"{what}: {exc}", cause=exc) from exc
    except (StratusError, KazooException) as exc:
        if isinstance(exc, (NoNodeError, NodeExistsError, NotEmptyError)):
            raise  # the caller's to translate
        raise tooz.ToozError(f"{what} failed: {exc!r}", cause=exc) from exc


def create_chroot(settings: ZkSettings) -> None:
    """Create every level of the connect string's chroot, through a client without it."""
    hosts, _, chroot = settings.hosts.partition("/")
    client = KazooClient(
        hosts=hosts,
        timeout=settings.session_timeout,
        default_acl=settings.auth.acl(),
        **settings.auth.client_options(),
        **settings.tls.client_options(),
    )
    client.start(timeout=settings.connection_timeout)
    try:
        client.ensure_path("/" + chroot)
    finally:
        client.stop()
        client.close()


def _capabilities(raw: bytes) -> Capabilities | None:
    """A member's capabilities as tooz stores them (msgpack); None when it gave none."""
    value: Capabilities | None = utils.loads(raw) if raw else None
    return value
