"""The history of the nimbuses' leader terms, kept in ZooKeeper under ``leader-terms/``.

One persistent node per term, named by its epoch (``leader-terms/0000000007``), holding a
``LeaderTerm``: who led, from when, until when, and how long the failover to it took. The
nimbus that wins writes its term in one fenced transaction (so only the leader of that epoch
can), which also closes the previous term if nobody did (its leader died: the end is when
this successor saw its slot free) and trims the history to the newest ``keep`` terms. A
leader that steps down, loses its term or stops writes its own end. Every nimbus reads the
history for ``GET /api/v1/leader/terms``::

    log = LeaderTermLog(client, ClusterPaths("/stratus"))
    record = log.began(term, "10.0.0.5:6627")     # on accepting a term; the failover time
    log.ended(term)                                # on giving it up
    log.read()                                     # LeaderTerms, newest first

The failover time is the leaderless gap: from the previous leader's last sign of life to
the winner's acceptance of its term (after its code check, when it may act). The last sign
of life depends on how the previous term ended (``last_sign_of_life``):

- it wrote its own end (stepped down, stopped), or its nimbus is still registered (it
  resigned with its session alive): it was alive until it freed its slot, which the winner
  saw free at ``Leadership.found_free_at``;
- neither (killed, frozen, cut off from ZooKeeper): its slot was freed by the expiry of its
  ZooKeeper session, which the server declares one session timeout after it last heard from
  it; that timeout (``session_timeout_secs``, recorded in every term) goes before the slot
  was seen free. ZooKeeper expires sessions on its tick, so the gap may be up to one
  ``tickTime`` long, and a process killed between two pings was silent up to a third of the
  timeout before it died.

Every instant is on the winner's own monotonic clock, except the recorded timeout, a
duration: no two machines' clocks are compared. The previous term's end (``ended_at``,
written by the winner) is that same last sign of life, so a timeline of the terms shows the
gap between them.

A call made while ZooKeeper is out of reach waits in kazoo's queue until it comes back, so
the end of a term and a read of the history wait at most ``timeout_secs``: a nimbus that
stops during an outage must not hang on its history, and an API read answers 503 instead.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from pydantic import ValidationError

from stratus.api.clock import Clock
from stratus.api.errors import UnavailableError
from stratus.api.records import LeaderTerm, LeaderTerms
from stratus.coordination.errors import CoordinationError, TransactionFailedError
from stratus.coordination.leadership import Leadership
from stratus.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

TERMS_KEPT = 100
CALL_TIMEOUT_SECS = 2.0  # an end written on stop, or a read for the API, waits no longer
WRITE_ATTEMPTS = 3  # the previous leader may write its own end between our read and write


class LeaderTermLog:
    """Writes and reads the history of terms; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        *,
        keep: int = TERMS_KEPT,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
        timeout_secs: float = CALL_TIMEOUT_SECS,
        session_timeout: Callable[[], float | None] = lambda: None,
    ) -> None:
        """``session_timeout``: this nimbus's granted ZooKeeper session timeout, recorded in
        its terms (a successor counts it in the gap after this nimbus dies)."""
        self._session_timeout = session_timeout
        self._client = client
        self._timeout_secs = timeout_secs
        self._paths = paths
        self._keep = keep
        self._clock = clock  # the clock of Leadership.found_free_at (the session's)
        self._wall = wall

    def began(self, term: Leadership, nimbus: str) -> LeaderTerm | None:
        """Record ``term`` as begun now, closing the previous one if still open; the record
        written, or None if it could not be (logged: the history is not worth a failover)."""
        try:
            return self._begin(term, nimbus)
        except (KazooException, CoordinationError, ValidationError) as exc:
            log.warning(
                "event=leader_term_not_recorded epoch=%d nimbus=%s error=%r",
                term.epoch,
                nimbus,
                exc,
            )
        except Exception:  # the boundary: a term is accepted whatever its history does
            log.exception("event=leader_term_not_recorded epoch=%d nimbus=%s", term.epoch, nimbus)
        return None

    def ended(self, term: Leadership) -> None:
        """Write the end of ``term`` if nobody has (its successor may have, first)."""
        path = self._paths.leader_term(term.epoch)
        deadline = time.monotonic() + self._timeout_secs
        try:
            raw, stat = self._client.get_async(path).get(timeout=self._timeout_secs)
            record = LeaderTerm.model_validate_json(raw)
            if record.ended_at is not None:
                return
            ended = record.model_copy(update={"ended_at": self._wall(), "ended_by": "leader"})
            written = self._client.set_async(path, ended.encode(), version=stat.version)
            written.get(timeout=max(0.0, deadline - time.monotonic()))
        except (NoNodeError, BadVersionError):
            return  # never recorded, or closed meanwhile by the successor
        except (KazooException, KazooTimeoutError, ValidationError) as exc:
            log.warning("event=leader_term_end_not_recorded epoch=%d error=%r", term.epoch, exc)

    def read(self) -> LeaderTerms:
        """The terms kept, newest first; a node that vanishes or is unreadable is skipped.

        Raises ``UnavailableError`` (503) when ZooKeeper does not answer in time."""
        try:
            return self._read(time.monotonic() + self._timeout_secs)
        except (KazooException, KazooTimeoutError) as exc:
            raise UnavailableError(
                f"ZooKeeper did not answer the read of the leader terms within "
                f"{self._timeout_secs:g} s ({type(exc).__name__}); retry once it is back"
            ) from exc

    def _read(self, deadline: float) -> LeaderTerms:
        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        parent = self._paths.leader_terms
        try:
            names = sorted(self._client.get_children_async(parent).get(timeout=left()))
        except NoNodeError:
            return LeaderTerms(terms=[])
        names.reverse()
        pending = [self._client.get_async(posixpath.join(parent, name)) for name in names]
        terms = []
        for result in pending:
            try:
                raw, _ = result.get(timeout=left())
                terms.append(LeaderTerm.model_validate_json(raw))
            except (NoNodeError, ValidationError):
                continue
        return LeaderTerms(terms=terms)

    # ------------------------------------------------------------------ the winner's write

    def _begin(self, term: Leadership, nimbus: str) -> LeaderTerm:
        for _ in range(WRITE_ATTEMPTS - 1):
            try:
                return self._write_begin(term, nimbus)
            except TransactionFailedError:
                continue  # a node changed between the read and the write: read again
        return self._write_begin(term, nimbus)

    def _write_begin(self, term: Leadership, nimbus: str) -> LeaderTerm:
        parent = self._paths.leader_terms
        now_wall, now = self._wall(), self._clock()
        names = sorted(self._client.get_children(parent))
        mine = self._paths.leader_term(term.epoch)
        if posixpath.basename(mine) in names:  # a resumed term: recorded already
            return LeaderTerm.model_validate_json(self._client.get(mine)[0])
        earlier = [name for name in names if int(name) < term.epoch]
        previous = self._previous(earlier[-1]) if earlier else None
        seen_free = term.found_free_at
        gone = None
        if seen_free is not None and previous is not None:
            gone = last_sign_of_life(seen_free, previous[2], self._alive(previous[2]))
        record = LeaderTerm(
            epoch=term.epoch,
            nimbus=nimbus,
            started_at=now_wall,
            failover_secs=None if gone is None else max(0.0, now - gone),
            session_timeout_secs=self._session_timeout(),
        )
        tx = term.transaction()
        tx.create(mine, record.encode())
        if previous is not None:
            path, version, old = previous
            if old.ended_at is None:  # it died (or has not written its end yet): close it
                ended_at = now_wall - (now - gone) if gone is not None else now_wall
                closed = old.model_copy(update={"ended_at": ended_at, "ended_by": "successor"})
                tx.set_data(path, closed.encode(), version=version)
        for name in earlier[: max(0, len(names) + 1 - self._keep)]:
            tx.delete(posixpath.join(parent, name))
        tx.commit()
        return record

    def _alive(self, previous: LeaderTerm) -> bool:
        """Whether the previous leader's nimbus is still registered (its session lives)."""
        return self._client.exists(self._paths.nimbus(previous.nimbus)) is not None

    def _previous(self, name: str) -> tuple[str, int, LeaderTerm] | None:
        path = posixpath.join(self._paths.leader_terms, name)
        try:
            raw, stat = self._client.get(path)
        except NoNodeError:
            return None
        return path, stat.version, LeaderTerm.model_validate_json(raw)


def last_sign_of_life(seen_free: float, previous: LeaderTerm, registered: bool) -> float:
    """When (the winner's monotonic clock) the previous leader was last known alive, given
    when the winner saw its slot free and whether its nimbus is still ``registered``: see
    the module docstring. A term recorded before terms carried their session timeout counts
    none (the gap is then the time from the slot's release, as it was measured before)."""
    if previous.ended_at is not None or registered:
        return seen_free
    return seen_free - (previous.session_timeout_secs or 0.0)
