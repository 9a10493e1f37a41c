"""The failover controller: health monitor, elector and fencing around one managed service.

Hadoop's ZKFailoverController. It joins the service's election while the service is healthy
and ready, quits it when the service is not (asking that it be fenced when it may still act
as active), makes the service active with the epoch of the term it won, standby when another
node won, and ends the process when it cannot go on::

    controller = FailoverController(service, fencer, settings, make_elector=...)
    monitor = HealthMonitor(connect, controller, health_settings)
    controller.start(); monitor.start()
    ...
    controller.failure          # a ZkfcFatalError once the controller must exit (else None)

Threads: the health monitor's reports are posted to the controller's own event thread, which
alone joins and quits the election (``plan`` decides, from a snapshot, what to do). The
elector's callbacks run on its dispatcher thread, serialized by the elector's lock. Both take
the controller's lock to read or change its state, and neither holds it while calling the
other, so the order of events is one order and the two locks cannot deadlock.

A service that reports twice in a row a state other than the one it was last given (its
status answered ``active`` while it was made standby, say) has changed behind the
controller's back: the controller quits the election asking to be fenced, and rejoins after
``rejoin_delay`` once the service is healthy again. A service made active that says standby
with ``term_suspended`` has not: it stopped acting while its own ZooKeeper connection is
suspended, and acts again under the same term once its session is back.

A controller given ``kill_unresponsive`` (a supervised nimbus's: its service is its child)
kills a service it made active that stops responding, before it quits the election: the next
active's graceful fence then meets a closed port and fails in milliseconds, instead of
waiting its timeout out on a frozen process, and the frozen one never wakes up as a stale
active.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from stratus.api.clock import Clock
from stratus.coordination.active_standby import ActiveStandbyCallbacks
from stratus.coordination.errors import CoordinationError
from stratus.coordination.serial import SerialThread
from stratus.ha.errors import ZkfcFatalError
from stratus.ha.fencing import FenceTarget
from stratus.ha.health_monitor import HealthState
from stratus.ha.protocol import HAServiceError, HAState, RequestSource, ServiceStatus
from stratus.zk.errors import ZooKeeperUnavailableError

log = logging.getLogger(__name__)

MISMATCHES_TO_QUIT = 2  # reports of a state other than the one given, in a row


class Elector(Protocol):
    """What the controller asks of its elector (``ActiveStandbyElector`` has it)."""

    def join_election(self, app_data: bytes) -> None: ...

    def quit_election(self, need_fence: bool) -> None: ...


class ManagedService(Protocol):
    """The transitions the controller makes (``HAServiceClient`` has them)."""

    address: str

    def transition_to_active(
        self, epoch: int, source: RequestSource = RequestSource.ZKFC
    ) -> ServiceStatus: ...

    def transition_to_standby(
        self, source: RequestSource = RequestSource.ZKFC
    ) -> ServiceStatus: ...


class JoinPolicy(Protocol):
    """The preferred-node rules the controller follows (``Preference`` has them)."""

    def join_delay(self) -> float: ...

    def joined(self) -> None: ...

    def quit(self) -> None: ...


class Action(Enum):
    NONE = "none"
    JOIN = "join"
    QUIT_FENCE = "quit_fence"  # quit; the next active must fence this service
    QUIT_CLEAN = "quit_clean"  # quit; this service is surely not active
    WAIT = "wait"  # would join, but not before the rejoin delay ends


@dataclass(frozen=True)
class Snapshot:
    """What ``plan`` decides from."""

    health: HealthState
    status: ServiceStatus | None
    joined: bool
    given: HAState | None  # the state the controller last made the service take
    now: float
    join_not_before: float


def plan(snap: Snapshot) -> Action:
    """What to do about the election now: join, quit (fencing needed or not), or nothing."""
    if snap.health is HealthState.SERVICE_HEALTHY:
        ready = snap.status is not None and snap.status.ready_to_become_active
        if not ready:
            if not snap.joined or _holds_suspended_term(snap.given, snap.status):
                return Action.NONE
            return Action.QUIT_FENCE if snap.given is HAState.ACTIVE else Action.QUIT_CLEAN
        if snap.joined:
            return Action.NONE
        return Action.WAIT if snap.now < snap.join_not_before else Action.JOIN
    if not snap.joined:
        return Action.NONE
    if snap.health is HealthState.INITIALIZING:
        return Action.QUIT_CLEAN  # it restarted: a starting service is never active
    return Action.QUIT_FENCE  # unhealthy or not responding: it may still act as active


def _holds_suspended_term(given: HAState | None, status: ServiceStatus | None) -> bool:
    """Made active, it says standby only while its own ZooKeeper connection is suspended:
    it holds its term still, and acts under it again once its session is back."""
    return (
        given is HAState.ACTIVE
        and status is not None
        and status.state is HAState.STANDBY
        and status.term_suspended
    )


@dataclass(frozen=True)
class ControllerSettings:
    """``ha.zkfc.rejoin.delay.secs``: the wait before rejoining after a bad reported state."""

    rejoin_delay: float = 1.0


class FailoverController:
    """Health callbacks in, elector callbacks in, one managed service out; see the module doc."""

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        service: ManagedService,
        fence: Callable[[FenceTarget], bool],
        settings: ControllerSettings,
        *,
        make_elector: Callable[[ActiveStandbyCallbacks, str], Elector],
        stand_down: Callable[[], bool] | None = None,
        held_epoch: Callable[[], int | None] = lambda: None,
        join_policy: JoinPolicy | None = None,
        kill_unresponsive: Callable[[], bool] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._service = service
        self._fence = fence
        self.settings = settings
        self._make_elector = make_elector
        self._stand_down = stand_down  # self-fencing after a session expiry (self_fence.py)
        self._held_epoch = held_epoch  # the epoch of the term held now: a resumed one is kept
        self._join_policy = join_policy  # a preferred node (preference.py)
        self._join_deferred = False  # this join already waited the policy's delay
        self._kill_unresponsive = kill_unresponsive  # a supervised service's own fence
        self._clock = clock
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)  # notified when the service goes active
        self._events = SerialThread("failover-controller", on_error=self._event_failed)
        self._elector: Elector | None = None
        self.address: str | None = None  # our member id and breadcrumb data, once known
        self.health = HealthState.INITIALIZING
        self.status: ServiceStatus | None = None
        self.joined = False
        self.given: HAState | None = None
        self.given_epoch: int | None = None  # the epoch of the term that made it active
        self._mismatches = 0
        self._join_not_before = 0.0
        self._recheck: threading.Timer | None = None
        self.failure: ZkfcFatalError | None = None
        self.failed = threading.Event()

    def start(self) -> None:
        self._events.start()

    def stop(self) -> None:
        """Quit the election, asking to be fenced (the service may still be active)."""
        self._events.post(self._quit_for_stop)
        self._events.stop(timeout=30.0)
        if self._recheck is not None:
            self._recheck.cancel()

    def flush(self, timeout: float) -> bool:
        """Wait until the events posted so far were handled; False on timeout."""
        done = threading.Event()
        self._events.post(done.set)
        return done.wait(timeout)

    # ----------------------------------------------------------------- health (monitor thread)

    def enter_health_state(self, state: HealthState) -> None:
        self._events.post(lambda: self._on_health(state))

    def service_status(self, status: ServiceStatus) -> None:
        self._events.post(lambda: self._on_status(status))

    def _on_health(self, state: HealthState) -> None:
        if state is HealthState.HEALTH_MONITOR_FAILED:
            self._fatal("the health monitor failed (see its error above)")
            return
        if state is not HealthState.SERVICE_HEALTHY:
            self._join_deferred = False  # the next join waits the policy's delay again
        with self._lock:
            self.health = state
            if state is HealthState.INITIALIZING:
                self.given = None  # a restarted service starts over: nothing was given to it
        self._recheck_electability()

    def _on_status(self, status: ServiceStatus) -> None:
        with self._lock:
            self.status = status
            if self.address is None:
                self.address = status.address or self._service.address
            bad_state = self._verify_state(status)
        if bad_state:
            self._apply(Action.QUIT_FENCE)
        self._recheck_electability()

    def _verify_state(self, status: ServiceStatus) -> bool:
        """Count a report that differs from the state given (but a suspended term's); True
        when it is the second."""
        reported = status.state
        if (
            self.given is None
            or reported is self.given
            or _holds_suspended_term(self.given, status)
        ):
            self._mismatches = 0
            return False
        self._mismatches += 1
        if self._mismatches < MISMATCHES_TO_QUIT:
            return False  # once may be a transition crossing the status call
        log.error(
            "event=service_state_mismatch service=%s reported=%s expected=%s action=quit",
            self._service.address,
            reported.value,
            self.given.value,
        )
        self._mismatches = 0
        self.given = None
        self._join_not_before = self._clock() + self.settings.rejoin_delay
        return True

    def _recheck_electability(self) -> None:
        with self._lock:
            action = plan(
                Snapshot(
                    self.health,
                    self.status,
                    self.joined,
                    self.given,
                    self._clock(),
                    self._join_not_before,
                )
            )
        if action is Action.WAIT:
            self._schedule_recheck(self._join_not_before - self._clock())
        elif action is Action.JOIN and self._defer_join():
            return
        else:
            self._apply(action)

    def _defer_join(self) -> bool:
        """Wait the join policy's delay once before this join, if it asks for one."""
        if self._join_policy is None or self._join_deferred:
            return False
        delay = self._join_policy.join_delay()
        if delay <= 0:
            return False
        log.info("event=join_deferred service=%s secs=%g why=preferred_node", self.address, delay)
        self._join_deferred = True
        with self._lock:
            self._join_not_before = self._clock() + delay
        self._schedule_recheck(delay)
        return True

    def _schedule_recheck(self, delay: float) -> None:
        if self._recheck is not None:
            self._recheck.cancel()
        self._recheck = threading.Timer(
            max(0.0, delay), lambda: self._events.post(self._recheck_electability)
        )
        self._recheck.daemon = True
        self._recheck.start()

    def _apply(self, action: Action) -> None:
        """Join or quit; on the event thread only, never holding the controller's lock."""
        if action is Action.JOIN:
            elector, address = self._elector_and_address()
            log.info("event=join_election service=%s", address)
            with self._lock:
                self.joined = True
            self._join_deferred = False
            try:
                elector.join_election(address.encode())
                if self._join_policy is not None:
                    self._join_policy.joined()
            except (CoordinationError, ZooKeeperUnavailableError) as exc:  # try again later
                log.warning("event=join_failed service=%s error=%s", address, exc)
                with self._lock:
                    self.joined = False
                self._schedule_recheck(self.settings.rejoin_delay)
        elif action in (Action.QUIT_FENCE, Action.QUIT_CLEAN) and self._elector is not None:
            need_fence = action is Action.QUIT_FENCE
            if need_fence:
                self._kill_if_unresponsive()
            log.warning(
                "event=quit_election service=%s health=%s need_fence=%s",
                self.address,
                self.health.name,
                need_fence,
            )
            with self._lock:
                self.joined = False
                self.given = None  # out of the election its state is not ours to check
                self._mismatches = 0
            self._elector.quit_election(need_fence=need_fence)
            if self._join_policy is not None:
                self._join_policy.quit()

    def _kill_if_unresponsive(self) -> None:
        """Kill the service we made active if it stopped responding (``kill_unresponsive``)."""
        with self._lock:
            active_and_silent = (
                self.given is HAState.ACTIVE and self.health is HealthState.SERVICE_NOT_RESPONDING
            )
        if not active_and_silent or self._kill_unresponsive is None:
            return
        log.warning("event=kill_unresponsive service=%s epoch=%s", self.address, self.given_epoch)
        if not self._kill_unresponsive():
            log.error("event=kill_unresponsive_failed service=%s", self.address)

    def _elector_and_address(self) -> tuple[Elector, str]:
        with self._lock:
            address = self.address or self._service.address
            self.address = address
        if self._elector is None:
            self._elector = self._make_elector(self, address)
        return self._elector, address

    def _quit_for_stop(self) -> None:
        if self._elector is not None and self.joined:
            self._apply(Action.QUIT_FENCE)

    # ----------------------------------------------------------------- elector (its dispatcher)

    def become_active(self, epoch: int) -> None:
        """Make the service active under ``epoch``, the term the elector just won and wrote
        the breadcrumb under; raise if it will not be.

        The epoch comes with the call, not from a later read of the coordinator's current
        term: a term lost and won again in between would otherwise hand the service a newer
        epoch whose old active this elector has not fenced yet.
        """
        with self._lock:
            log.info("event=transition_to_active service=%s epoch=%d", self.address, epoch)
            try:
                status = self._service.transition_to_active(epoch, RequestSource.ZKFC)
            except HAServiceError as exc:
                log.error(
                    "event=transition_to_active_failed service=%s error=%s", self.address, exc
                )
                self.given = None
                raise
            # A quit that crossed this call (it waits for the elector's lock) leaves the
            # service to the next active's fencing: its state is not ours to check then.
            self.given = HAState.ACTIVE if self.joined else None
            self.given_epoch = epoch
            self._mismatches = 0
            self._changed.notify_all()
            log.info(
                "event=service_active service=%s epoch=%d reported=%s",
                self.address,
                epoch,
                status.state.value,
            )

    def become_standby(self) -> None:
        with self._lock:
            try:
                self._service.transition_to_standby(RequestSource.ZKFC)
            except HAServiceError as exc:
                # The new active's controller fences this service anyway.
                log.warning(
                    "event=transition_to_standby_failed service=%s error=%s", self.address, exc
                )
                return
            self.given = HAState.STANDBY if self.joined else None
            self._mismatches = 0
            log.info("event=service_standby service=%s", self.address)

    def enter_neutral_mode(self) -> None:
        """ZooKeeper is in doubt: change nothing (the epoch fences a stale active's writes)."""
        log.warning("event=neutral_mode service=%s", self.address)

    # ----------------------------------------------------------------- failback (preference)

    def cede(self) -> None:
        """A preferred node came back: stand down, quit, and rejoin behind it (no fence)."""
        self._events.post(self._on_cede)

    def _on_cede(self) -> None:
        if self._elector is None or not self.joined:
            return
        self._stand_down_and_quit()
        self._recheck_electability()  # joins again after the policy's delay

    def _stand_down_and_quit(self) -> bool:
        """Make the service standby if we made it active, then quit the election: without
        a fence if it stood down (the breadcrumb goes), else asking to be fenced. True if
        it was active."""
        assert self._elector is not None
        with self._lock:
            was_active = self.given is HAState.ACTIVE
            stood_down = self.given is HAState.STANDBY
            if was_active:
                try:
                    self._service.transition_to_standby(RequestSource.ZKFC)
                    stood_down = True
                except HAServiceError as exc:  # the preferred node's zkfc fences it
                    log.warning("event=cede_standby_failed service=%s error=%s", self.address, exc)
            log.info(
                "event=cede service=%s was_active=%s need_fence=%s",
                self.address,
                was_active,
                not stood_down,
            )
            self.joined = False
            self.given = None
            self._mismatches = 0
        self._elector.quit_election(need_fence=not stood_down)
        if self._join_policy is not None:
            self._join_policy.quit()
        return was_active

    # ----------------------------------------------------------------- manual failover

    def cede_active(self, secs: float, timeout: float) -> bool:
        """Stand down (if active), quit the election, and stay out of it for ``secs``.

        Out of the election already (a cede before), the new ``secs`` replaces the old
        wait: 0 lets the zkfc rejoin at once. Returns whether the service was active; raises
        ``TimeoutError`` if the controller did not handle it within ``timeout``.
        """
        result: list[bool] = []
        done = threading.Event()

        def cede() -> None:
            try:
                result.append(self._on_cede_active(secs))
            finally:
                done.set()

        self._events.post(cede)
        if not done.wait(timeout) or not result:
            raise TimeoutError(f"the zkfc of {self.address} did not cede within {timeout:g} s")
        return result[0]

    def _on_cede_active(self, secs: float) -> bool:
        with self._lock:
            self._join_not_before = self._clock() + secs
        log.info("event=cede_active service=%s secs=%g", self.address, secs)
        was_active = False
        if self._elector is not None and self.joined:
            was_active = self._stand_down_and_quit()
        self._recheck_electability()  # WAIT: a recheck is scheduled for the end of the wait
        return was_active

    def wait_active(self, timeout: float) -> bool:
        """Wait until this controller made its service active; False after ``timeout``."""
        with self._changed:
            return self._changed.wait_for(lambda: self.given is HAState.ACTIVE, timeout)

    # ----------------------------------------------------------------- session (its listener)

    def session_expired(self) -> None:
        """The ZooKeeper session expired: stand the service down if our term made it active."""
        self._events.post(self._on_session_expired)

    def _on_session_expired(self) -> None:
        with self._lock:  # a become_active of a new term waits until the stand-down is done
            if self.given is not HAState.ACTIVE or self._stand_down is None:
                return
            if self.given_epoch is not None and self._held_epoch() == self.given_epoch:
                return  # the term survived (it was resumed, not lost)
            log.warning(
                "event=self_fence service=%s epoch=%s why=session_expired",
                self.address,
                self.given_epoch,
            )
            if self._stand_down():
                self.given = HAState.STANDBY if self.joined else None
                self._mismatches = 0
                log.warning("event=self_fenced service=%s", self.address)
            else:
                log.error(
                    "event=self_fence_failed service=%s: the next active's zkfc must fence it",
                    self.address,
                )

    def fence_old_active(self, data: bytes) -> bool:
        try:
            target = FenceTarget.parse(data)
        except ValueError as exc:
            log.error("event=fence_bad_breadcrumb data=%r error=%s", data, exc)
            return False
        log.warning("event=fence_old_active service=%s old_active=%s", self.address, target.address)
        return self._fence(target)

    def notify_fatal_error(self, message: str) -> None:
        self._fatal(f"the elector failed: {message}")

    # ----------------------------------------------------------------- failure

    def _fatal(self, message: str) -> None:
        log.error("event=zkfc_fatal service=%s error=%s", self.address, message)
        with self._lock:
            if self.failure is None:
                self.failure = ZkfcFatalError(
                    f"the failover controller of {self._service.address} must stop: {message}"
                )
        self.failed.set()

    def _event_failed(self, exc: Exception) -> None:
        log.error("event=controller_event_failed error=%r", exc)
        self._fatal(f"{type(exc).__name__}: {exc}")
