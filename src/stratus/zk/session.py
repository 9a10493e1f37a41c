"""One ZooKeeper session: the kazoo client, its connection state, its lease, its retries.

Whoever runs a process owns its session and lends it to the recipes and readers that need
ZooKeeper (as kazoo's recipes take a client); nothing below the owner creates or closes one::

    with ZkSession(ZkSettings("zk1:2181,zk2:2181", root="/stratus")) as session:
        session.add_listener(lambda change: print(change.state))   # kazoo's thread: no blocking
        session.call("read the root", session.client.get_children, session.root)
        session.lease_end(session.session_id)                       # trust the session until then

Guarantees: the connection state is a ``SessionState`` whose transitions are all written in
``next_state``; listeners hear every change in order, one at a time, on kazoo's thread (or
the lease renewer's, or the closing thread's), so they must only record or post work
elsewhere. ``granted_session_timeout`` is what the server granted
(it clamps the request to its own bounds), learned from kazoo's internals
(``kazoo_hooks.py``, the only module that touches them).
A stop's waits on ZooKeeper are bounded (``close_within``).
The lease (see ``lease``) is renewed every ``RENEW_FRACTION`` of that timeout by a thread of
the session's own, and ends at once when the connection is suspended. That thread survives
any failure; if no renewal succeeds for longer than the granted session timeout while kazoo
still says connected, the session reports itself ``SUSPENDED`` (so terms are revoked as on a
real suspension) and ``CONNECTED`` again at the next renewal that succeeds.

With credentials (``ZkSettings.auth``, see ``auth``) the session authenticates every
connection and kazoo creates every znode with stratus's ACL (its ``default_acl``), so no
recipe passes one; the root is created, or tightened, under it at start. A session that can
never connect again (ZooKeeper's history went back behind it, see ``zxid_check``; or the server
refused its credentials) records why in ``failure``, wakes ``wait_failed`` and closes, so
that its owner exits saying so instead of retrying forever.
"""

from __future__ import annotations

import logging
import posixpath
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from types import TracebackType
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    KazooException,
    NoAuthError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError

from stratus.api.clock import Clock
from stratus.errors import StratusError
from stratus.zk.auth import ZkAuth, refusal_message, tighten_tree
from stratus.zk.errors import (
    ZooKeeperAuthError,
    ZooKeeperUnavailableError,
)
from stratus.zk.kazoo_hooks import capture_granted_timeout, fail_waiting_calls
from stratus.zk.lease import LEASE_FRACTION, RENEW_FRACTION, LeaseProbe, SessionLease
from stratus.zk.quorum_probe import Refusals, ensemble_config, voting_members
from stratus.zk.retries import retry_policy
from stratus.zk.tls import ZkTls
from stratus.zk.zxid_check import history_behind_error

log = logging.getLogger(__name__)

_T = TypeVar("_T")

CONNECT_POLL_SECS = 0.05  # how often the first connection's wait looks for a recorded refusal
ZXID_EPOCH_SHIFT = 32  # a zxid is the leader's epoch, then a counter of its transactions


@dataclass(frozen=True)
class ZkSettings:
    """Where the session connects and how long it waits (the ``zookeeper.*`` keys).

    ``hosts`` is a kazoo connect string (it may end in a chroot); ``root`` is the znode under
    which stratus keeps everything; the timeouts are in seconds, ``stop_wait`` the longest an
    owner's stop waits on ZooKeeper (``ZkSession.close_within``); ``auth`` is stratus's
    identity (``zookeeper.auth.*``; anonymous by default); ``tls`` how it connects
    (``zookeeper.ssl.*``; plain by default); ``outage_refusals`` which refused connections a
    proof of an outage trusts (``zookeeper.outage.refusals``, see ``quorum_probe``).
    """

    hosts: str
    root: str = "/stratus"
    session_timeout: float = 10.0
    connection_timeout: float = 15.0
    stop_wait: float = 5.0
    auth: ZkAuth = field(default_factory=ZkAuth)
    tls: ZkTls = field(default_factory=ZkTls)
    outage_refusals: Refusals = Refusals.LOCAL

    def __post_init__(self) -> None:
        if min(self.session_timeout, self.connection_timeout, self.stop_wait) <= 0:
            raise ValueError(
                f"ZooKeeper timeouts must be positive, got session {self.session_timeout:g}s, "
                f"connection {self.connection_timeout:g}s and stop wait {self.stop_wait:g}s"
            )
        object.__setattr__(self, "root", posixpath.normpath("/" + self.root.strip("/")))


class SessionState(Enum):
    """Where the session stands; ``next_state`` holds every transition."""

    NEW = "new"  # not started
    CONNECTED = "connected"
    SUSPENDED = "suspended"  # the connection dropped; the session may survive
    EXPIRED = "expired"  # the session ended; kazoo is opening a new one
    CLOSED = "closed"  # closed by its owner; final


_FROM_KAZOO = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.EXPIRED,
}


def next_state(current: SessionState, kazoo_state: str | None) -> SessionState:
    """The state after kazoo reports ``kazoo_state``, or after ``close`` (None)."""
    if current is SessionState.CLOSED or kazoo_state is None:
        return SessionState.CLOSED
    return _FROM_KAZOO[kazoo_state]


@dataclass(frozen=True)
class SessionChange:
    """One transition of the session, as its listeners hear it."""

    previous: SessionState
    state: SessionState

    @property
    def resumed(self) -> bool:
        """Connected again after a suspension: the same session, its ephemeral nodes kept."""
        return self.state is SessionState.CONNECTED and self.previous is SessionState.SUSPENDED

    @property
    def renewed(self) -> bool:
        """Connected with a new session after the old one expired: its ephemerals are gone."""
        return self.state is SessionState.CONNECTED and self.previous is SessionState.EXPIRED


SessionListener = Callable[[SessionChange], None]


class ZkSession:
    """The ZooKeeper session of one process; see the module docstring."""

    def __init__(self, settings: ZkSettings, *, clock: Clock = time.monotonic) -> None:
        self.settings = settings
        # default_acl: every znode that kazoo or a recipe creates on this session gets
        # stratus's ACL, without any caller passing one.
        self.client = KazooClient(
            hosts=settings.hosts,
            timeout=settings.session_timeout,
            connection_retry=retry_policy(),
            default_acl=settings.auth.acl(),
            **settings.auth.client_options(),
            **settings.tls.client_options(),
        )
        self.clock = clock  # the lease's, and that of every term won on this session
        self._lock = threading.Lock()  # guards the state and the listeners
        self._state = SessionState.NEW
        self._connections = 0  # times the state became CONNECTED
        self._listeners: list[SessionListener] = []
        self._lease = SessionLease(clock)
        self._granted: float | None = None  # seconds, once the server said
        self._closing = threading.Event()
        self._renew_now = threading.Event()
        self._renewer: threading.Thread | None = None
        self._notify_lock = threading.RLock()  # one change and its listeners at a time
        self._renewed_at: float | None = None  # clock time of the last successful renewal
        self._stalled = False  # reported SUSPENDED because no renewal succeeded in time
        self._disconnected_at: float | None = None  # clock time the connection was lost
        self._failure: StratusError | None = None
        self._failed = threading.Event()
        self._down = threading.Event()  # set while not connected
        self._down.set()
        capture_granted_timeout(self.client, self._note_granted, self._note_auth_refused)

    # ------------------------------------------------------------------ what it is

    @property
    def root(self) -> str:
        return self.settings.root

    @property
    def hosts(self) -> str:
        return self.settings.hosts

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def connected(self) -> bool:
        return self._state is SessionState.CONNECTED

    def may_resume(self) -> bool:
        """True while the connection is suspended for less than the granted session timeout:
        the server may still hold the session, and what it holds comes back with it."""
        since = self._disconnected_at
        return (
            self._state is SessionState.SUSPENDED
            and since is not None
            and self.clock() - since < self.granted_session_timeout
        )

    @property
    def connections(self) -> int:
        """How many times the session became connected (its first connection, every
        reconnect, every new session): a different count says it was down in between."""
        return self._connections

    @property
    def session_id(self) -> int | None:
        client_id = self.client.client_id
        return int(client_id[0]) if client_id else None

    @property
    def failure(self) -> StratusError | None:
        """Why this session can never connect again, or None: ZooKeeper's history went back
        (``ZooKeeperHistoryBehindError``) or it refused the credentials (``ZooKeeperAuthError``)."""
        return self._failure

    def wait_failed(self, timeout: float | None = None) -> StratusError | None:
        """Block until the session has failed for good (see ``failure``) or ``timeout`` ends."""
        self._failed.wait(timeout)
        return self._failure

    @property
    def granted_session_timeout(self) -> float:
        """The session timeout ZooKeeper granted (the requested one until it says)."""
        return self._granted or self.settings.session_timeout

    # ------------------------------------------------------------------ life cycle

    def start(self) -> ZkSession:
        """Connect within the connection timeout, create the root, start renewing the lease."""
        self.client.add_listener(self._on_kazoo_state)
        try:
            self._connect()
        except BaseException:
            self.close()
            raise
        self._renewer = threading.Thread(target=self._run_renewer, name="zk-lease", daemon=True)
        self._renewer.start()
        return self

    def _connect(self) -> None:
        try:
            self._start_client()
        except KazooTimeoutError:
            raise ZooKeeperUnavailableError(
                f"no ZooKeeper server answered at {self.hosts} within "
                f"{self.settings.connection_timeout:g}s; is zookeeper.servers right "
                "and is it running?"
            ) from None
        except AuthFailedError:
            raise self._auth_failure() from None
        try:
            self._prepare_root()
        except AuthFailedError:
            # kazoo reports CONNECTED before SASL ends: a refusal fails the first request.
            raise self._auth_failure() from None
        self.renew_lease()

    def _start_client(self) -> None:
        """``client.start``, but a refusal the connection thread records (credentials, a
        Kerberos library that cannot start) ends the wait at once: kazoo's own start waits
        the whole timeout for a connection that its thread has given up on."""
        connected = self.client.start_async()
        deadline = time.monotonic() + self.settings.connection_timeout
        while not connected.wait(CONNECT_POLL_SECS):
            if self._failed.is_set():
                self.client.stop()
                raise AuthFailedError("the connection thread recorded a refusal")
            if time.monotonic() >= deadline:
                self.client.stop()
                raise KazooTimeoutError("Connection time-out")

    def _auth_failure(self) -> StratusError:
        """The refusal the connection thread recorded, else a generic one."""
        if self._failed.wait(self.settings.connection_timeout) and self._failure is not None:
            return self._failure
        return ZooKeeperAuthError(
            f"ZooKeeper at {self.hosts} refused stratus's credentials "
            f"({self.settings.auth.scheme.value}); check zookeeper.auth.*"
        )

    def _prepare_root(self) -> None:
        """Create the root (and its missing parents) under stratus's ACL; tighten an open one."""
        auth = self.settings.auth
        try:
            self.call("create the root znode", self.client.ensure_path, self.root)
            acl = auth.acl()
            if acl is not None:
                self.call("secure the root znode", tighten_tree, self.client, self.root, acl)
        except NoAuthError:
            raise ZooKeeperAuthError(
                f"ZooKeeper denies stratus's identity ({auth.identity}) access to the root "
                f"znode {self.root} or a parent of it: it belongs to another identity. Use "
                "the credentials it was created with, or another zookeeper.root"
            ) from None

    def close(self, *, abandon: bool = False) -> None:
        """End the session: its ephemeral nodes go at once; listeners hear ``CLOSED``.
        Once only: a second call, from any thread, returns at once.

        With ``abandon`` (ZooKeeper out of reach), every call waiting on ZooKeeper fails
        first, at once, rather than when kazoo's connection gives up (a server that froze
        holds it for a whole read timeout)."""
        with self._lock:
            if self._closing.is_set():
                return
            self._closing.set()
        self._renew_now.set()
        self._change(None)
        if abandon:
            fail_waiting_calls(self.client)
        self.client.stop()
        if self._renewer is not None and self._renewer is not threading.current_thread():
            self._renewer.join(timeout=5)
        self.client.close()

    def close_within(self, secs: float | None = None) -> None:
        """Bound its owner's stop: close the session, from a thread of its own, as soon as
        it is not connected, and at the latest ``secs`` (``ZkSettings.stop_wait``) from now.

        What a stop does through ZooKeeper (hand leadership over, write a last heartbeat,
        unregister) takes a connected session, so the owner's stop calls this first and then
        steps through its parts as usual: while ZooKeeper answers, they use it; once it does
        not (or never did, or the time is up), every call waiting on it, and every later one,
        fails at once (``ConnectionClosedError``) instead of waiting for ZooKeeper to come
        back. Nothing unsafe follows: the ephemeral nodes of a session that ZooKeeper did not
        hear closing go when it expires, one session timeout later, as if the process had
        died; a term lapses with its lease before that."""
        if self._closing.is_set() or self._state is SessionState.NEW:
            return  # closed already, or never started: nothing waits on it
        limit = self.settings.stop_wait if secs is None else secs
        threading.Thread(
            target=self._close_when_down, args=(limit,), name="zk-close-within", daemon=True
        ).start()

    def _close_when_down(self, limit: float) -> None:
        down = self._down.wait(limit)
        if self._closing.is_set():
            return
        log.info(
            "event=zookeeper_stop_wait_over reason=%s state=%s secs=%g",
            "not_connected" if down else "time_up",
            self._state.value,
            limit,
        )
        self.close(abandon=True)

    def __enter__(self) -> ZkSession:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ listeners

    def add_listener(self, listener: SessionListener) -> None:
        """Call ``listener(change)`` at every later state change (kazoo's thread, mostly)."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: SessionListener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _on_kazoo_state(self, kazoo_state: str) -> None:
        self._change(kazoo_state)

    def _change(self, kazoo_state: str | None) -> None:
        """Move to the next state, end or renew the lease, tell the listeners (never blocks).

        Kazoo's thread, the renewer and ``close`` may all report changes: one at a time, so
        listeners hear them in the order the state took them.
        """
        with self._notify_lock:
            self._apply_change(kazoo_state)

    def _change_if(self, expected: SessionState, kazoo_state: str) -> bool:
        """``_change`` only if the state is still ``expected`` (checked with the change)."""
        with self._notify_lock:
            if self._state is not expected:
                return False
            self._apply_change(kazoo_state)
            return True

    def _apply_change(self, kazoo_state: str | None) -> None:
        with self._lock:
            previous = self._state
            self._state = next_state(previous, kazoo_state)
            change = SessionChange(previous, self._state)
            listeners = list(self._listeners)
            if self._state is SessionState.CONNECTED and previous is not SessionState.CONNECTED:
                self._connections += 1
        if change.state is previous:
            return
        self._lease.connection_changed(change.state is SessionState.CONNECTED)
        if change.state is not SessionState.CONNECTED:
            self._down.set()
            if self._disconnected_at is None:
                self._disconnected_at = self.clock()
        if change.state is SessionState.CONNECTED:
            self._down.clear()
            self._disconnected_at = None
            self._stalled = False
            self._renewed_at = self.clock()  # the connection itself is a fresh contact
            self._renew_now.set()
        log.info(
            "event=zookeeper_%s previous=%s session=%x",
            change.state.value,
            previous.value,
            self.session_id or 0,
        )
        for listener in listeners:
            try:
                listener(change)
            except Exception:
                log.exception("event=session_listener_failed listener=%r", listener)

    # ------------------------------------------------------------------ calls

    def retry(self) -> KazooRetry:
        """A fresh retry policy: across connection loss until the connection timeout."""
        return retry_policy(deadline=self.settings.connection_timeout)

    def call(self, what: str, func: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``func(*args, **kwargs)`` retried by ``retry()``; ``ZooKeeperUnavailableError``
        once the connection timeout is spent (``what`` says what was being done)."""
        try:
            result: _T = self.retry()(func, *args, **kwargs)  # kazoo is untyped
            return result
        except (RetryFailedError, ConnectionClosedError) as exc:
            if self._failure is not None:
                raise self._failure from None
            raise ZooKeeperUnavailableError(
                f"ZooKeeper at {self.hosts} did not answer while trying to {what} "
                f"({type(exc).__name__}); it is retried for zookeeper.connection.timeout.secs"
            ) from None

    # ------------------------------------------------------------------ the lease

    def lease_probe(self) -> LeaseProbe:
        """Note the time before a request whose success will renew the lease."""
        return self._lease.probe()

    def confirm_contact(self, probe: LeaseProbe) -> None:
        """A request probed by ``probe`` succeeded: extend the lease of the current session."""
        length = self.granted_session_timeout * LEASE_FRACTION
        self._lease.confirm(probe, self.session_id, length)

    def renew_lease(self) -> None:
        """One round trip to ZooKeeper; its reply proves the session alive when it was sent."""
        if not self.connected:
            return
        probe = self.lease_probe()
        self.client.exists(self.root)
        self.confirm_contact(probe)
        self._renewed_at = self.clock()

    def zookeeper_epoch(self) -> int | None:
        """ZooKeeper's leader epoch now: the high 32 bits of the zxid of a transaction of this
        session's own, a version check of the root that changes nothing; None from a
        standalone server (its ``/zookeeper/config`` names no voting member), which has no
        elections and whose restarts keep the epoch.

        Every election of a ZooKeeper leader starts a new epoch, and a leader that loses its
        quorum never serves again in its own. A read would not do: its reply carries the zxid
        of the last write applied, which after an election is still of the old epoch until
        someone writes. ``ZooKeeperUnavailableError`` once the connection timeout is spent.
        """

        def learn() -> int | None:
            transaction = self.client.transaction()
            transaction.check(self.root, -1)  # any version: a transaction that changes nothing
            results = transaction.commit()
            if results != [True]:
                raise ZooKeeperUnavailableError(
                    f"ZooKeeper at {self.hosts} refused a version check of {self.root}: {results!r}"
                )
            epoch = int(self.client.last_zxid or 0) >> ZXID_EPOCH_SHIFT
            config = ensemble_config(self.client, self.settings.connection_timeout)
            return epoch if voting_members(config) else None

        return self.call("learn ZooKeeper's leader epoch", learn)

    def lease_end(self, session_id: int | None) -> float:
        """The clock's time until which the lease vouches for ``session_id`` (0: none)."""
        return self._lease.end(session_id)

    def _run_renewer(self) -> None:
        """Renew the lease until closed; no failure ends this thread (it is the only one)."""
        while not self._closing.is_set():
            self._renew_now.wait(self.granted_session_timeout * RENEW_FRACTION)
            self._renew_now.clear()
            if self._closing.is_set():
                return
            try:
                self._renew_or_recover()
            except KazooException as exc:
                # The lease lapses by itself; the next state change says what happened.
                log.debug("event=lease_renewal_failed error=%r", exc)
            except Exception:
                log.exception("event=lease_renewal_failed")
            self._report_stall()
            self._check_history()
            if self._failure is not None:
                self.close()  # the renewer's own thread: close does not wait for it
                return

    def _renew_or_recover(self) -> None:
        """Renew the lease; after a stall, one round trip proves the connection back."""
        if not self._stalled:
            self.renew_lease()
            return
        self.client.exists(self.root)
        if self.client.state == KazooState.CONNECTED and self._change_if(
            SessionState.SUSPENDED, KazooState.CONNECTED
        ):  # resumed: terms check their slots again
            log.info("event=lease_renewal_recovered session=%x", self.session_id or 0)

    def _report_stall(self) -> None:
        """Report SUSPENDED once no renewal succeeded for longer than the session timeout.

        Kazoo still says connected, yet the lease cannot be trusted: whoever leads on this
        session must hear it, as on a real suspension, rather than hold on doing nothing.
        """
        renewed_at = self._renewed_at
        if self._stalled or not self.connected or renewed_at is None:
            return
        stalled_for = self.clock() - renewed_at
        if stalled_for <= self.granted_session_timeout:
            return
        with self._notify_lock:
            if not self._change_if(SessionState.CONNECTED, KazooState.SUSPENDED):
                return
            self._stalled = True
        log.error(
            "event=lease_renewal_stalled session=%x secs=%.1f", self.session_id or 0, stalled_for
        )

    def _check_history(self) -> None:
        """Fail for good if, disconnected for a session timeout, every server is behind us.

        A server whose history is older than what this client has seen (wiped, or restored
        from an old backup) refuses the session; kazoo would retry it forever. Once every
        server that answers ``srvr`` (asked over TLS when the session connects with it) is
        behind, the session records the failure, wakes
        ``wait_failed`` and closes, so that its owner exits with a message saying what to do.
        """
        since = self._disconnected_at
        if since is None or self._failure is not None or self._state is SessionState.CLOSED:
            return
        if self.clock() - since < self.granted_session_timeout:
            return
        seen = int(self.client.last_zxid or 0)
        error = history_behind_error(self.hosts, seen, self.settings.tls)
        if error is not None:
            self._fail(error)

    def _note_auth_refused(self, exc: Exception) -> None:
        """Kazoo's connection thread: the server refused the credentials (it then stops)."""
        self._fail(ZooKeeperAuthError(refusal_message(self.settings.auth, self.hosts, exc)))

    def _fail(self, error: StratusError) -> None:
        """Record why the session can never work again; the renewer then closes it."""
        with self._lock:
            if self._failure is not None:
                return
            self._failure = error
        log.error("event=zookeeper_session_failed error=%r", str(error))
        self._failed.set()
        self._renew_now.set()

    def _note_granted(self, seconds: float) -> None:
        self._granted = seconds
