"""The nimbus's side of the HA service protocol: its state, its health, and its transitions.

Every nimbus answers the four calls of ``stratus.ha.protocol``. Its state is INITIALIZING
until it is registered and its first code-sync round ran, then ACTIVE while its leadership
controller acts for a term, else STANDBY (STOPPING once it shuts down).

In ``nimbus.ha.mode: self`` the nimbus elects itself, and both transitions answer 409
``transition_failed``. In ``zkfc`` mode its leader lock is a ``GrantedLock``, and:

- ``to_active(epoch)`` refuses (409) a nimbus still initializing or missing code, an epoch
  older than one it was given (``stale_epoch``), and an epoch that ZooKeeper says is not
  the nimbus group's current term or whose leader record names another nimbus; else it
  adopts that term (``Coordinator.adopt_term``), grants it, and waits until the controller
  accepted it: every leader write is then fenced by that epoch;
- ``to_active`` for the epoch of a term that is granted but suspended (see below) accepts it
  as it stands, as it would an active one: the same grant, acting again on its own;
- ``to_standby()`` takes the term back at once (it stops holding, so no fenced write
  starts), then waits until the controller's round under way is over;
- a transition asked by an operator (``source: user``) is refused unless forced
  (``user_forced``): automatic failover is on, and only the zkfc steers the nimbus.

A granted term is *suspended* while the nimbus's ZooKeeper connection is down for less than
the session timeout (``may_resume``): the nimbus stops acting at once (its lease ended) and
says ``standby`` with ``term_suspended``, and it acts under the same epoch again as soon as the
session is back. Its failover controller leaves it be meanwhile: ZooKeeper electing a leader
of its own suspends every client for a second or two, which is no reason for a failover.

Transitions are serialized by one lock, and both are idempotent::

    ha = NimbusHAService(settings, address, controller=c, lock=lock, readiness=r, adopt=a,
                         initialized=lambda: True, health=lambda: [])
    ha.to_active(12).state          # HAState.ACTIVE
    ha.to_standby().state           # HAState.STANDBY
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from kazoo.exceptions import KazooException

from stratus.api.clock import Clock
from stratus.api.errors import StaleEpochError
from stratus.coordination.errors import TermMismatchError
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import RevokeReason
from stratus.errors import StratusError
from stratus.ha.protocol import (
    HAState,
    HealthReport,
    RequestSource,
    ServiceStatus,
    TransitionRefusedError,
    UnhealthyServiceError,
)
from stratus.nimbus.leadership.granted_lock import GrantedLock
from stratus.nimbus.leadership.leadership_controller import LeadershipController, Readiness
from stratus.nimbus.settings import HAMode, HASettings

log = logging.getLogger(__name__)

WAIT_STEP_SECS = 0.01  # how often a transition looks at the controller while it waits

Adopt = Callable[[int, Callable[[Leadership], bool]], Leadership]  # (epoch, holds) -> term


class NimbusHAService:
    """One nimbus's HA service; see the module docstring."""

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        settings: HASettings,
        address: str,
        *,
        controller: LeadershipController,
        lock: GrantedLock | None,
        readiness: Readiness,
        adopt: Adopt,
        initialized: Callable[[], bool],
        health: Callable[[], list[str]],
        stopping: Callable[[], bool] = lambda: False,
        may_resume: Callable[[], bool] = lambda: False,
        on_transition: Callable[[HAState], None] = lambda _state: None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.settings = settings
        self.address = address
        self._controller = controller
        self._lock = lock
        self._readiness = readiness
        self._adopt = adopt
        self._initialized = initialized
        self._health = health
        self._stopping = stopping
        self._may_resume = may_resume
        self._on_transition = on_transition
        self._clock = clock
        self._transitions = threading.Lock()
        self.highest_epoch: int | None = None  # the newest epoch a transition was given

    # ------------------------------------------------------------------ reads

    def state(self) -> HAState:
        if self._stopping():
            return HAState.STOPPING
        if not self._initialized():
            return HAState.INITIALIZING
        return HAState.ACTIVE if self._controller.accepted_term() is not None else HAState.STANDBY

    def epoch(self) -> int | None:
        """The epoch this nimbus acts under as leader; None while it does not lead."""
        term = self._controller.accepted_term()
        return term.epoch if term is not None else None

    def suspended_term(self) -> Leadership | None:
        """The term granted to this nimbus that does not hold now only because its ZooKeeper
        connection is suspended (and may resume); None otherwise."""
        term = self._lock.granted if self._lock is not None else None
        if term is None or term.is_leader or not self._may_resume():
            return None
        return term

    def status(self) -> ServiceStatus:
        state = self.state()
        suspended = state is HAState.STANDBY and self.suspended_term() is not None
        reason = self._not_ready(state)
        return ServiceStatus(
            state=state,
            epoch=self.epoch(),
            term_suspended=suspended,
            ready_to_become_active=reason is None,
            not_ready_reason=reason,
            address=self.address,
            pid=os.getpid(),
        )

    def health(self) -> HealthReport:
        """A healthy report; ``UnhealthyServiceError`` (503 ``unhealthy``) naming every problem."""
        problems = self._health()
        if problems:
            raise UnhealthyServiceError(
                f"nimbus {self.address} is unhealthy: {'; '.join(problems)}"
            )
        return HealthReport(healthy=True, detail=f"nimbus {self.address} is {self.state().value}")

    def _not_ready(self, state: HAState) -> str | None:
        if state is HAState.STOPPING:
            return "stopping"
        if state is HAState.INITIALIZING:
            return "initializing: not registered yet, or its first code sync has not run"
        if self.settings.mode is HAMode.SELF:
            return "self_elected: nimbus.ha.mode is self, it takes no transition"
        problems = self._health()
        if problems:
            return f"unhealthy: {'; '.join(problems)}"
        if self._may_resume():
            return "zookeeper_suspended: its code is checked again once the connection is back"
        try:
            return self._readiness.to_queue()
        except (StratusError, KazooException) as exc:
            return f"cannot_check_code({exc!r})"

    # ------------------------------------------------------------------ transitions

    def to_active(self, epoch: int, source: RequestSource = RequestSource.ZKFC) -> ServiceStatus:
        """Act under ``epoch``, won by this nimbus's failover controller; see the module doc."""
        with self._transitions:
            self._refuse_in_self_mode("active")
            self._refuse_unforced_user(source, "active")
            current = self._controller.accepted_term() or self.suspended_term()
            if current is not None and current.epoch == epoch:
                return self.status()  # already given that term: nothing changes
            if self.highest_epoch is not None and epoch < self.highest_epoch:
                raise StaleEpochError(
                    f"nimbus {self.address} was already given epoch {self.highest_epoch}; "
                    f"epoch {epoch} is older: win the election again for a newer one"
                )
            self._check_ready()
            term = self._adopt_term(epoch)
            self.highest_epoch = epoch
            self._lead(term)
            self._on_transition(HAState.ACTIVE)
            log.info("event=ha_active address=%s epoch=%d", self.address, epoch)
            return self.status()

    def to_standby(self, source: RequestSource = RequestSource.ZKFC) -> ServiceStatus:
        """Stop acting now; idempotent (a standby answers its status and changes nothing)."""
        with self._transitions:
            self._refuse_in_self_mode("standby")
            self._refuse_unforced_user(source, "standby")
            assert self._lock is not None
            term = self._lock.revoke()
            if term is not None:
                self._controller.revoked(term, RevokeReason.RESIGNED)
                if not self._wait(lambda: self._controller.term is not term):
                    log.warning(
                        "event=ha_standby_slow address=%s epoch=%d waited_secs=%g",
                        self.address,
                        term.epoch,
                        self.settings.transition_timeout_secs,
                    )
                self._on_transition(HAState.STANDBY)
                log.info("event=ha_standby address=%s epoch=%d", self.address, term.epoch)
            return self.status()

    def _refuse_in_self_mode(self, target: str) -> None:
        if self.settings.mode is HAMode.SELF:
            raise TransitionRefusedError(
                f"nimbus {self.address} elects itself (nimbus.ha.mode: self) and takes no "
                f"transition to {target}; run it with nimbus.ha.mode: zkfc under a zkfc"
            )

    def _refuse_unforced_user(self, source: RequestSource, target: str) -> None:
        """Under a zkfc, an operator's transition must be forced (it bypasses the zkfc)."""
        if source is RequestSource.USER:
            raise TransitionRefusedError(
                f"nimbus {self.address} is managed by its zkfc (automatic failover is on) and "
                f"takes a transition to {target} from an operator only when forced "
                "(haadmin --forcemanual)"
            )
        if source is RequestSource.USER_FORCED:
            log.warning(
                "event=ha_forced_transition address=%s to=%s: the zkfc is bypassed",
                self.address,
                target,
            )

    def _check_ready(self) -> None:
        state = self.state()
        if state in (HAState.INITIALIZING, HAState.STOPPING):
            raise TransitionRefusedError(
                f"nimbus {self.address} cannot become active while {state.value}; "
                "ask again once its status is standby"
            )
        reason = self._readiness.to_lead()
        if reason is not None:
            raise TransitionRefusedError(
                f"nimbus {self.address} is not ready to become active: {reason}; it fetches "
                "the missing code by itself: ask again once its status says it is ready"
            )

    def _adopt_term(self, epoch: int) -> Leadership:
        assert self._lock is not None
        try:
            return self._adopt(epoch, self._lock.holds)
        except TermMismatchError as exc:
            if exc.current_epoch > epoch:
                raise StaleEpochError(f"nimbus {self.address}: {exc}") from None
            raise TransitionRefusedError(
                f"nimbus {self.address} will not act for epoch {epoch}: {exc}; "
                "only the controller that won that epoch for this nimbus may hand it over"
            ) from None
        except StratusError as exc:
            raise TransitionRefusedError(
                f"nimbus {self.address} could not check epoch {epoch} in ZooKeeper: {exc}"
            ) from None

    def _lead(self, term: Leadership) -> None:
        """Hand ``term`` to the controller (ending its previous one) and wait until it acts.

        The previous term may no longer hold (its session's lease ended) while the controller
        still sits on it; it is ended all the same, or the controller would ignore ``term``.
        """
        assert self._lock is not None
        previous = self._controller.term
        self._lock.grant(term)  # ``previous`` stops holding here
        if previous is not None:
            self._controller.revoked(previous, RevokeReason.DEPOSED)
        self._controller.cluster_changed()  # a controller waiting to queue checks first
        self._controller.elected(term)
        accepted = self._wait(
            lambda: self._controller.accepted_term() is term or not self._lock_holds(term)
        )
        if accepted and self._controller.accepted_term() is term:
            return
        if self._lock.granted is term:
            self._lock.revoke()
        raise TransitionRefusedError(
            f"nimbus {self.address} did not become active for epoch {term.epoch}: "
            + (
                "its leadership controller gave the term back (code missing, or the term "
                "stopped holding)"
                if accepted
                else f"its leadership controller did not accept the term within "
                f"{self.settings.transition_timeout_secs:g}s"
            )
        )

    def _lock_holds(self, term: Leadership) -> bool:
        return self._lock is not None and self._lock.holds(term)

    def _wait(self, done: Callable[[], bool]) -> bool:
        """Wait until ``done()``, at most the transition timeout; whether it came true."""
        deadline = self._clock() + self.settings.transition_timeout_secs
        idle = threading.Event()
        while not done():
            if self._clock() >= deadline:
                return False
            idle.wait(WAIT_STEP_SECS)
        return True
