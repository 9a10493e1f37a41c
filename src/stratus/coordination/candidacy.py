"""Candidacies: the state machine of every nomination of one coordinator, over its session.

A candidate queues as an ephemeral sequential node under ``candidates/``; once among the
first N of the queue it claims a free slot: one transaction creates the ephemeral slot node,
bumps the slot's epoch (the fencing token) with a version check, and logs the term for
subscribers. States and events are enums and ``transition`` holds every move::

    QUEUED --elected--> LEADING --suspended--> SUSPENDED --resumed--> LEADING
    LEADING/SUSPENDED --lost (session expired)--> QUEUED      SUSPENDED --deposed--> QUEUED
    any --resigned--> RESIGNED, which ignores every later event (a user may resign while the
    worker is in the middle of a move; the worker's own resign task then ends the term)

Threads: everything here runs on the coordinator's worker thread, except ``resign_now``, the
one move a user's thread makes (so that ``is_leader`` is false the moment ``unnominate``
is called), and ``add``/``get``/``groups`` (``nominate`` and the readers). One lock guards
every state move and the table of candidacies: a move and the dispatch it causes are one
step, so a resignation is never overwritten and ``on_elected`` is never posted after it;
loops over the candidacies walk a copy, so a nomination meanwhile cannot break them.
Elections, revocations and resumptions reach the user through ``dispatch``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import posixpath
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from stratus.coordination.errors import CoordinationError
from stratus.coordination.leadership import Leadership
from stratus.coordination.records import CandidateRecord, FencedWrite, RevokeReason, SlotRecord
from stratus.coordination.serial import Dispatch, Post
from stratus.zk.paths import GroupPaths, sequence_of
from stratus.zk.session import SessionChange, SessionState, ZkSession

log = logging.getLogger(__name__)

ElectedCallback = Callable[[Leadership], None]
RevokedCallback = Callable[[Leadership, RevokeReason], None]

TERMS_KEPT = 100  # term entries kept per group for leader-change subscribers that lag


class CandidateState(Enum):
    QUEUED = "queued"  # in the queue (or re-queuing), not leading
    LEADING = "leading"
    SUSPENDED = "suspended"  # was leading when the connection dropped; may resume
    RESIGNED = "resigned"  # unnominated; being removed


class CandidacyEvent(Enum):
    ELECTED = "elected"
    SUSPENDED = "suspended"
    RESUMED = "resumed"
    DEPOSED = "deposed"
    LOST = "lost"
    RESIGNED = "resigned"


_S, _E = CandidateState, CandidacyEvent
_TRANSITIONS: dict[tuple[CandidateState, CandidacyEvent], CandidateState] = {
    (_S.QUEUED, _E.ELECTED): _S.LEADING,
    (_S.LEADING, _E.SUSPENDED): _S.SUSPENDED,
    (_S.SUSPENDED, _E.RESUMED): _S.LEADING,
    (_S.SUSPENDED, _E.DEPOSED): _S.QUEUED,
    (_S.LEADING, _E.LOST): _S.QUEUED,
    (_S.SUSPENDED, _E.LOST): _S.QUEUED,
    **{(state, _E.RESIGNED): _S.RESIGNED for state in CandidateState},
    **{(_S.RESIGNED, event): _S.RESIGNED for event in CandidacyEvent},
}


def transition(state: CandidateState, event: CandidacyEvent) -> CandidateState:
    """The state after ``event``; ``CoordinationError`` for a move the machine never makes."""
    try:
        return _TRANSITIONS[(state, event)]
    except KeyError:
        raise CoordinationError(
            f"a candidacy in state {state.value} cannot be {event.value}; this is a bug"
        ) from None


@dataclass(eq=False)
class Candidacy:
    """One nomination: who runs in which group, and where it stands."""

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

    def leading(self, term: Leadership) -> bool:
        return self.term is term and self.state is CandidateState.LEADING


class Candidacies:
    """Every candidacy of one coordinator; see the module docstring."""

    def __init__(
        self,
        session: ZkSession,
        *,
        post: Post,
        dispatch: Dispatch,
        on_fence_refused: Callable[[], None] = lambda: None,
        on_fenced_write: Callable[[FencedWrite], None] | None = None,
    ) -> None:
        self._session = session
        self._on_fence_refused = on_fence_refused
        self._on_fenced_write = on_fenced_write
        self._client = session.client
        self._post = post
        self._dispatch = dispatch
        self._lock = threading.RLock()  # state moves and the table; re-entered by dispatch
        self._by_group: dict[str, Candidacy] = {}
        self._orphans: set[str] = set()  # our ephemeral nodes to delete once reconnected
        self._watch: dict[str, Callable[[Any], None]] = {}
        self._waiting_for: dict[str, tuple[int, ...]] = {}  # group -> sessions logged

    # ----------------------------------------------------------------- from any thread

    def get(self, group: str) -> Candidacy | None:
        with self._lock:
            return self._by_group.get(group)

    def groups(self) -> list[str]:
        with self._lock:
            return list(self._by_group)

    def add(self, candidacy: Candidacy) -> None:
        """Register a new candidacy (one per group); the caller posts its first ``evaluate``."""
        with self._lock:
            self._by_group[candidacy.group] = candidacy

    def resign_now(self, candidacy: Candidacy) -> None:
        """Stop leading at once (the worker removes the nodes in ``resign``)."""
        with self._lock:
            candidacy.state = transition(candidacy.state, CandidacyEvent.RESIGNED)

    def _all(self) -> list[Candidacy]:
        """A copy of the candidacies, safe to walk while others are added."""
        with self._lock:
            return list(self._by_group.values())

    # ----------------------------------------------------------------- the worker's moves

    def on_session(self, change: SessionChange) -> None:
        """React to a change of the session's state, in the order they happened."""
        if change.state is SessionState.SUSPENDED:
            self._suspend_all()
        elif change.state in (SessionState.EXPIRED, SessionState.CLOSED):
            self._end_all_terms()
        elif change.state is SessionState.CONNECTED:
            self._resume_suspended()
            self._delete_orphans()
            for group in self.groups():
                self.evaluate(group)

    def evaluate(self, group: str) -> None:
        """Queue this candidate if needed and claim a free slot when its turn has come."""
        candidacy = self.get(group)
        if candidacy is None or candidacy.state is not CandidateState.QUEUED:
            return
        if not self._session.connected:
            return
        paths = candidacy.paths
        watch = self._watcher(group)
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
            if position == candidacy.leaders:  # next in line: say whom it waits for
                self._note_waiting(candidacy)
            return  # the candidates watch wakes us when someone ahead leaves
        taken = set(self._client.get_children(paths.slots, watch=watch))
        seen_free = self._session.clock()  # when a vacated slot was seen (failover time)
        if candidacy.claim_unknown and self._adopt_claimed_slot(candidacy, taken):
            return
        for slot in range(candidacy.leaders):
            if str(slot) not in taken and self._claim(candidacy, slot, seen_free):
                return

    def resign(self, candidacy: Candidacy) -> None:
        """Remove a resigned candidacy's nodes (now, or once reconnected) and revoke its term.

        The term is revoked even when a delete fails (the connection dropped during the
        call): the candidacy has left the table, so no later session change would revoke
        it, and the nodes left are deleted once reconnected, or by ZooKeeper with the session.
        """
        term = candidacy.term
        with self._lock:
            if self._by_group.get(candidacy.group) is candidacy:
                del self._by_group[candidacy.group]
        paths = [term.slot_path] if term else []
        if candidacy.node:
            paths.append(candidacy.node)
        self._orphans.update(paths)
        try:
            self._delete_orphans()
        finally:
            candidacy.term = None
            if term is not None:
                _log_term(CandidacyEvent.RESIGNED, term)
                self._revoke(candidacy, term, RevokeReason.RESIGNED)

    # ----------------------------------------------------------------- session changes

    def _suspend_all(self) -> None:
        for candidacy in self._all():
            term = candidacy.term
            if term is None:
                continue
            with self._lock:
                if candidacy.state is CandidateState.LEADING and self._move(
                    candidacy, CandidacyEvent.SUSPENDED, term
                ):
                    self._revoke(candidacy, term, RevokeReason.SUSPENDED)

    def _end_all_terms(self) -> None:
        for candidacy in self._all():
            term = candidacy.term
            with self._lock:
                if term is not None and self._move(candidacy, CandidacyEvent.LOST, term):
                    self._revoke(candidacy, term, RevokeReason.SESSION_LOST)
            candidacy.term = None
            candidacy.node = None
            candidacy.claim_unknown = False

    def _resume_suspended(self) -> None:
        """After a reconnect: a suspended term resumes only if its slot is still ours."""
        for candidacy in self._all():
            term = candidacy.term
            if candidacy.state is not CandidateState.SUSPENDED or term is None:
                continue
            holds = self._holds_slot(term)  # a ZooKeeper read: outside the lock
            with self._lock:
                if holds:
                    if self._move(candidacy, CandidacyEvent.RESUMED, term):
                        self._dispatch(candidacy.on_elected, term)
                elif self._move(candidacy, CandidacyEvent.DEPOSED, term):
                    candidacy.term = None
                    self._revoke(candidacy, term, RevokeReason.DEPOSED)

    def _holds_slot(self, term: Leadership) -> bool:
        try:
            raw, stat = self._client.get(term.slot_path)
        except NoNodeError:
            return False
        record = SlotRecord.decode(raw)
        return stat.ephemeralOwner == self._session.session_id and record.epoch == term.epoch

    # ----------------------------------------------------------------- claiming a slot

    def _claim(self, candidacy: Candidacy, slot: int, seen_free: float | None = None) -> bool:
        """Take ``slot`` and bump its epoch in one transaction; False if someone was faster.
        ``seen_free`` is when the slot was seen free (the term's ``found_free_at``)."""
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
        probe = self._session.lease_probe()
        candidacy.claim_unknown = True
        results = tx.commit()
        candidacy.claim_unknown = False
        failures = [r for r in results if isinstance(r, Exception)]
        if not failures:
            self._session.confirm_contact(probe)
            self._grant(candidacy, record, seen_free)
            if sequence_of(results[3]) % TERMS_KEPT == 0:
                self._trim_terms(paths)
            return True
        if isinstance(results[0], NoNodeError):
            candidacy.node = None  # our queue node vanished; queue again
        if isinstance(results[0], NoNodeError) or isinstance(results[2], BadVersionError):
            self._post(lambda: self.evaluate(candidacy.group))
        elif not isinstance(results[1], NodeExistsError):
            log.warning(
                "event=claim_refused group=%s slot=%d results=%s", candidacy.group, slot, results
            )
        return False

    def _adopt_claimed_slot(self, candidacy: Candidacy, taken: set[str]) -> bool:
        """A claim whose reply was lost may have succeeded: look for a slot our session holds."""
        candidacy.claim_unknown = False
        for name in taken:
            try:
                raw, stat = self._client.get(candidacy.paths.slot(int(name)))
            except NoNodeError:
                continue
            if stat.ephemeralOwner == self._session.session_id:
                self._grant(candidacy, SlotRecord.decode(raw))
                return True
        return False

    def _grant(
        self, candidacy: Candidacy, record: SlotRecord, found_free_at: float | None = None
    ) -> None:
        paths = candidacy.paths
        term = Leadership(
            group=candidacy.group,
            member_id=candidacy.member_id,
            slot=record.slot,
            epoch=record.epoch,
            epoch_path=paths.epoch(record.slot),
            slot_path=paths.slot(record.slot),
            _client=self._client,
            _holds=candidacy.leading,
            _lease_end=functools.partial(self._session.lease_end, self._session.session_id),
            _clock=self._session.clock,
            found_free_at=found_free_at,
            _on_refused=self._on_fence_refused,
            _on_committed=self._on_fenced_write,
        )
        candidacy.term = term  # even if resigned meanwhile: resign then deletes the slot
        with self._lock:  # the move and its dispatch as one step: a resignation comes after
            if self._move(candidacy, CandidacyEvent.ELECTED, term):
                self._dispatch(candidacy.on_elected, term)

    def _trim_terms(self, paths: GroupPaths) -> None:
        names = self._client.get_children(paths.terms)
        if len(names) <= 2 * TERMS_KEPT:
            return
        for name in sorted(names, key=sequence_of)[:-TERMS_KEPT]:
            with contextlib.suppress(NoNodeError):
                self._client.delete(posixpath.join(paths.terms, name))

    # ----------------------------------------------------------------- helpers

    def _note_waiting(self, candidacy: Candidacy) -> None:
        """Log, once per leader session, that this candidate (next in line) waits for the
        leaders ahead: a leader that resigns frees its slot at once; one that stopped
        without resigning (killed, frozen, cut off) holds it until ZooKeeper expires its
        session, up to a session timeout after it last reached ZooKeeper (this session's
        granted timeout: the cluster's zookeeper.session.timeout.secs)."""
        holders: list[tuple[int, SlotRecord]] = []
        watch = self._watcher(candidacy.group)  # a slot claimed meanwhile: look again
        for name in sorted(self._client.get_children(candidacy.paths.slots, watch=watch)):
            try:
                raw, stat = self._client.get(posixpath.join(candidacy.paths.slots, name))
            except NoNodeError:
                continue
            holders.append((stat.ephemeralOwner, SlotRecord.decode(raw)))
        sessions = tuple(session for session, _ in holders)
        if not holders or self._waiting_for.get(candidacy.group) == sessions:
            return
        self._waiting_for[candidacy.group] = sessions
        leaders = ",".join(record.member_id for _, record in holders)
        timeout = self._session.granted_session_timeout
        log.info(
            "event=standby_waiting group=%s member=%s leader=%s leader_session=%s epoch=%s "
            "up_to_secs=%g reason=%r",
            candidacy.group,
            candidacy.member_id,
            leaders,
            ",".join(f"0x{session:x}" for session in sessions),
            ",".join(str(record.epoch) for _, record in holders),
            timeout,
            f"waiting for leader {leaders} to resign, or for its ZooKeeper session to expire "
            f"if it stopped without resigning (up to {timeout:g} s after its last contact)",
        )

    def _delete_orphans(self) -> None:
        """Delete our own leftover ephemeral nodes (never another session's)."""
        if not self._session.connected:
            return
        for path in sorted(self._orphans, key=lambda p: "/slots/" not in p):
            try:
                stat = self._client.exists(path)
                if stat is not None and stat.ephemeralOwner == self._session.session_id:
                    self._client.delete(path)
            except NoNodeError:
                pass
            self._orphans.discard(path)

    def _watcher(self, group: str) -> Callable[[Any], None]:
        """One stable watch function per group, so kazoo does not stack duplicates."""
        if group not in self._watch:
            self._watch[group] = lambda _event: self._post(lambda: self.evaluate(group))
        return self._watch[group]

    def _move(self, candidacy: Candidacy, event: CandidacyEvent, term: Leadership) -> bool:
        """Apply ``event``; False if the candidacy resigned meanwhile (then nothing is told).

        The check and the move are one step under the lock, so ``resign_now`` from a user's
        thread is never overwritten.
        """
        with self._lock:
            if candidacy.state is CandidateState.RESIGNED:
                return False
            candidacy.state = transition(candidacy.state, event)
        _log_term(event, term)
        return True

    def _revoke(self, candidacy: Candidacy, term: Leadership, reason: RevokeReason) -> None:
        if candidacy.on_revoked is not None:
            self._dispatch(candidacy.on_revoked, term, reason)


def prepare_group(session: ZkSession, paths: GroupPaths, leaders: int) -> None:
    """Create the group's nodes once; refuse a leader count that differs from the group's."""
    client = session.client
    try:
        client.create(paths.base, str(leaders).encode(), makepath=True)
    except NodeExistsError:
        raw, _ = client.get(paths.base)
        existing = int(raw.decode() or leaders)
        if existing != leaders:
            raise CoordinationError(
                f"group {paths.group!r} elects {existing} leader(s); "
                f"nominate with leaders={existing}"
            ) from None
    for path in (paths.candidates, paths.slots, paths.terms, paths.epochs):
        client.ensure_path(path)
    for slot in range(leaders):
        with contextlib.suppress(NodeExistsError):
            client.create(paths.epoch(slot), b"")


def _log_term(event: CandidacyEvent, term: Leadership) -> None:
    log.info(
        "event=%s group=%s member=%s slot=%d epoch=%d",
        event.value,
        term.group,
        term.member_id,
        term.slot,
        term.epoch,
    )
