"""A nimbus's leadership, as one state machine on one thread fed by one event queue.

In the mould of Hadoop's ``ZKFailoverController``: the elector, the code check and the
leader's duties sit behind small interfaces (``LeaderLock``, ``Readiness``, ``Duties``), and
every event that can change the state (elected, revoked, leader changed, cluster changed,
the timer, stop) goes through one queue to one thread, so their order is never a race.
Every action as leader takes the term (``Leadership``, its epoch) as an argument.

A nimbus queues only when it may lead: its hook agrees and it holds the code of every ACTIVE
and INACTIVE pipeline. Elected, it checks again against ZooKeeper itself and gives the lock
back if anything is missing; a leader that finds code missing later steps down the same way.
Stop leaves the queue first, so another nimbus leads at once. The transitions, all of them:

=========  ===============================  ==========================================  =======
state      event                            action                                      next
=========  ===============================  ==========================================  =======
WAITING    tick, cluster changed            check the code and the hook (to queue)
WAITING    code complete                    join the leader lock queue                  QUEUED
WAITING    code incomplete                  nothing: the code sync is fetching          WAITING
QUEUED     elected(term)                    check again, reading ZooKeeper (to lead)
QUEUED     code complete(term)              count the term, a first round (below)       LEADING
QUEUED     code incomplete(term)            give the lock back, fetch the code          WAITING
QUEUED     tick, out of the queue           (a hand-back finished late)                 WAITING
LEADING    tick, cluster changed            check the code (to keep leading)
LEADING    code complete(term)              run the duties for the term                 LEADING
LEADING    code incomplete(term)            give the lock back, fetch the code          WAITING
LEADING    revoked(term), leader changed    stop acting for the term                    QUEUED
           to another member at a later
           epoch
WAITING    elected(term)                    (a stale grant) give the lock back          WAITING
any        stop                             leave the queue                             STOPPED
=========  ===============================  ==========================================  =======

The timer ticks every ``lead_check_secs`` out of leadership and every ``monitor_freq_secs``
while leading; the clock is injected, and ``step()`` handles one event, so a test drives the
machine by hand::

    controller = LeadershipController(lock, readiness, duties, settings, address="n1:6627")
    controller.start()
    controller.elected(term)          # from the elector's callbacks (any thread)
    controller.cluster_changed()      # from watches: the duties run now
    controller.stop()                 # leaves the queue; another nimbus leads at once
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kazoo.exceptions import KazooException

from stratus.api.clock import Clock
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import LeaderChange, RevokeReason
from stratus.errors import StratusError
from stratus.nimbus.settings import LeadershipSettings

log = logging.getLogger(__name__)

STOP_TIMEOUT_SECS = 5.0


class ControllerState(enum.Enum):
    WAITING = "waiting"  # out of the queue until it may lead (code, hook)
    QUEUED = "queued"  # in the leader lock queue
    LEADING = "leading"  # holds a term it accepted; runs the duties
    STOPPED = "stopped"


# ---------------------------------------------------------------------- the interfaces


class LeaderLock(Protocol):
    """The leader lock queue as the controller sees it (the elector, in the daemon)."""

    def join(self) -> None: ...

    def leave(self) -> None: ...

    def in_queue(self) -> bool: ...


class Readiness(Protocol):
    """Whether this nimbus may lead: None when it may, else why not."""

    def to_queue(self) -> str | None: ...

    def to_lead(self) -> str | None:
        """Checked once elected, against ZooKeeper itself (never raises: unsure is a no)."""
        ...

    def to_keep_leading(self) -> str | None: ...

    def fetch_missing(self) -> None:
        """Fetch the missing code now (never blocks)."""
        ...


Duties = Callable[[Leadership], object]  # one round of the leader's duties for the term


# ---------------------------------------------------------------------- the events


@dataclass(frozen=True)
class Tick:
    """The timer: a period went by."""


@dataclass(frozen=True)
class ClusterChanged:
    """A watch saw pipelines, nimbuses, supervisors or code holders change; or a submit or
    kill on this nimbus."""


@dataclass(frozen=True)
class Elected:
    term: Leadership


@dataclass(frozen=True)
class Revoked:
    term: Leadership
    reason: RevokeReason


@dataclass(frozen=True)
class LeaderChanged:
    change: LeaderChange


@dataclass(frozen=True)
class Stop:
    """Leave the queue for good."""


@dataclass(frozen=True)
class CodeComplete:
    """A check found that this nimbus may (queue, lead, keep leading) for ``term``."""

    term: Leadership | None = None


@dataclass(frozen=True)
class CodeIncomplete:
    """A check found that this nimbus may not, and why."""

    reason: str
    term: Leadership | None = None


Event = Tick | ClusterChanged | Elected | Revoked | LeaderChanged | Stop
Outcome = CodeComplete | CodeIncomplete


class LeadershipController:
    """One nimbus's leadership state machine; see the module docstring."""

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        lock: LeaderLock,
        readiness: Readiness,
        duties: Duties,
        settings: LeadershipSettings,
        *,
        address: str,
        on_gained: Callable[[Leadership], None] = lambda _term: None,
        on_lost: Callable[[Leadership], None] = lambda _term: None,
        on_granted: Callable[[Leadership], None] = lambda _term: None,
        on_revoked: Callable[[Leadership, RevokeReason], None] = lambda _term, _reason: None,
        clock: Clock = time.monotonic,
    ) -> None:
        """``on_gained``/``on_lost``: a term accepted and acted for, and its end.
        ``on_granted``/``on_revoked``: every term as the lock grants or revokes it, on the
        caller's thread, before any check (the nimbus's history: both the self-elected and
        the zkfc-granted terms come in here)."""
        self._lock = lock
        self._readiness = readiness
        self._duties = duties
        self._settings = settings
        self._address = address
        self._on_gained = on_gained
        self._on_lost = on_lost
        self._on_granted = on_granted
        self._on_revoked = on_revoked
        self._clock = clock
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._change_pending = threading.Event()  # one ClusterChanged in the queue is enough
        self._stopping = threading.Event()  # every event from here on is a stop
        self._thread: threading.Thread | None = None
        self.state = ControllerState.WAITING
        self.term: Leadership | None = None  # the term accepted, while LEADING
        self._next_tick = clock()  # the first tick checks at once

    # ------------------------------------------------------------------ inputs (any thread)

    def elected(self, term: Leadership) -> None:
        self._on_granted(term)
        self._events.put(Elected(term))

    def revoked(self, term: Leadership, reason: RevokeReason) -> None:
        self._on_revoked(term, reason)
        self._events.put(Revoked(term, reason))

    def leader_changed(self, change: LeaderChange) -> None:
        self._events.put(LeaderChanged(change))

    def cluster_changed(self) -> None:
        """Never blocks (watch callbacks call it); repeated changes make one round."""
        if not self._change_pending.is_set():
            self._change_pending.set()
            self._events.put(ClusterChanged())

    def accepted_term(self) -> Leadership | None:
        """The term this nimbus acts for (any thread): None unless LEADING and still held.

        Leader-only API calls take their term from here, not from the elector: a term the
        elector granted is not acted on before the code check accepts it, and not once the
        controller gives it back.
        """
        term = self.term
        if term is None or self.state is not ControllerState.LEADING or not term.is_leader:
            return None
        return term

    # ------------------------------------------------------------------ the thread

    @property
    def running(self) -> bool:
        """True while the controller's thread handles events (started, not stopped, alive)."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nimbus-leadership", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Leave the queue at once, then stop the thread.

        The hand-over does not wait behind a duty round: the queue is left from the caller's
        thread, and the controller's next event, whatever it is, acts as ``Stop`` (which
        leaves again, should a join have raced with this one).
        """
        self._stopping.set()
        self._lock.leave()
        self._events.put(Stop())
        if self._thread is not None:
            self._thread.join(timeout=STOP_TIMEOUT_SECS)

    def _run(self) -> None:
        while self.state is not ControllerState.STOPPED:
            try:
                self.step(block=True)
            except Exception:  # the last boundary: the thread outlives any one event
                log.exception("event=leadership_event_failed address=%s", self._address)

    def step(self, *, block: bool = False) -> None:
        """Handle the next event, and the timer's tick if it is due."""
        try:
            timeout = max(0.0, self._next_tick - self._clock())
            event: Event | None = self._events.get(block=block, timeout=timeout if block else None)
        except queue.Empty:
            event = None
        if event is not None:
            if isinstance(event, ClusterChanged):
                self._change_pending.clear()
            self.handle(event)
        if self.state is not ControllerState.STOPPED and self._clock() >= self._next_tick:
            self._next_tick = self._clock() + self._period()
            self.handle(Tick())

    def _period(self) -> float:
        if self.state is ControllerState.LEADING:
            return self._settings.monitor_freq_secs
        return self._settings.lead_check_secs

    # ------------------------------------------------------------------ the transitions

    def handle(self, event: Event | Outcome) -> None:
        """Apply one event: every transition of the table in the module docstring."""
        state = self.state
        match event:
            case _ if state is ControllerState.STOPPED:
                pass
            case _ if isinstance(event, Stop) or self._stopping.is_set():
                self._lock.leave()
                self._enter(ControllerState.STOPPED)
            case Revoked(term, reason):
                self._note_revoked(term, reason)
            case LeaderChanged(change) if self._superseded(change):
                log.info(
                    "event=leadership_superseded address=%s leader=%s epoch=%d",
                    self._address,
                    change.member_id,
                    change.epoch,
                )
                self._enter(ControllerState.QUEUED)
            case Tick() | ClusterChanged() if state is ControllerState.WAITING:
                self.handle(self._check_to_queue())
            case CodeComplete() if state is ControllerState.WAITING:
                self._join()
            case CodeIncomplete(reason) if state is ControllerState.WAITING:
                log.debug("event=not_queuing address=%s reason=%s", self._address, reason)
            case Tick() if state is ControllerState.QUEUED and not self._lock.in_queue():
                self._enter(ControllerState.WAITING)
            case Elected(term) if state is ControllerState.QUEUED:
                self.handle(self._check_to_lead(term))
            case Elected(term) if state is ControllerState.WAITING and term.is_leader:
                self._step_down(term, "elected_out_of_the_queue")
            case CodeComplete(term) if state is ControllerState.QUEUED and term is not None:
                self._accept(term)
            case Tick() | ClusterChanged() if state is ControllerState.LEADING:
                self._check_leading()
            case CodeComplete(term) if state is ControllerState.LEADING and term is not None:
                self._duties(term)
            case CodeIncomplete(reason, term) if term is not None and state in _HOLDING:
                self._step_down(term, reason)
            case _:
                log.debug("event=leadership_event_ignored state=%s event=%s", state.value, event)

    def _enter(self, state: ControllerState) -> None:
        if state is not ControllerState.LEADING:
            self.term = None
        if state is not self.state:
            log.info(
                "event=leadership_state address=%s from=%s to=%s",
                self._address,
                self.state.value,
                state.value,
            )
            self.state = state
            self._next_tick = self._clock() + self._period()

    def _check_to_queue(self) -> Outcome:
        try:
            return _outcome(self._readiness.to_queue(), None)
        except (StratusError, KazooException) as exc:  # checked again at the next tick
            return CodeIncomplete(f"cannot_check_code({exc!r})")

    def _check_to_lead(self, term: Leadership) -> Outcome:
        try:
            return _outcome(self._readiness.to_lead(), term)
        except Exception as exc:  # unsure is a no: never hold the lock without acting
            log.exception("event=lead_check_failed address=%s epoch=%d", self._address, term.epoch)
            return CodeIncomplete(f"cannot_check_code({exc!r})", term)

    def _join(self) -> None:
        try:
            self._lock.join()
        except (StratusError, KazooException) as exc:
            log.warning("event=queue_failed address=%s error=%s", self._address, exc)
            return
        log.info("event=queued address=%s", self._address)
        self._enter(ControllerState.QUEUED)

    def _accept(self, term: Leadership) -> None:
        log.info("event=leadership_gained address=%s epoch=%d", self._address, term.epoch)
        self._on_gained(term)
        self._enter(ControllerState.LEADING)
        self.term = term
        self._check_leading()  # the first round: the duties run at once

    def _check_leading(self) -> None:
        """A round as leader: the code check first (a leader lacking code steps down)."""
        term = self.term
        if term is None or not term.is_leader:
            return  # the lease ran out: the revocation is on its way
        try:
            reason = self._readiness.to_keep_leading()
        except (StratusError, KazooException) as exc:
            log.warning(
                "event=leader_duties_failed address=%s epoch=%d error=%s",
                self._address,
                term.epoch,
                exc,
            )
            return
        self.handle(_outcome(reason, term))

    def _step_down(self, term: Leadership, reason: str) -> None:
        """Give the lock back and fetch what is missing; queue again once it is here."""
        self.term = None  # no longer accepted, from before the lock is given back
        log.warning(
            "event=stepping_down address=%s epoch=%d reason=%s", self._address, term.epoch, reason
        )
        self._lock.leave()
        self._readiness.fetch_missing()
        self._enter(ControllerState.WAITING)

    def _note_revoked(self, term: Leadership, reason: RevokeReason) -> None:
        log.warning(
            "event=leadership_lost address=%s epoch=%d reason=%s",
            self._address,
            term.epoch,
            reason.value,
        )
        self._on_lost(term)
        if self.state is ControllerState.LEADING and self.term is term:
            self._enter(ControllerState.QUEUED)  # the candidate stays queued

    def _superseded(self, change: LeaderChange) -> bool:
        """Another member leads at a later epoch than the term this nimbus acts for."""
        term = self.term
        return (
            self.state is ControllerState.LEADING
            and term is not None
            and change.slot == term.slot
            and change.member_id != self._address
            and change.epoch > term.epoch
        )


_HOLDING = (ControllerState.QUEUED, ControllerState.LEADING)


def _outcome(reason: str | None, term: Leadership | None) -> Outcome:
    return CodeComplete(term) if reason is None else CodeIncomplete(reason, term)
