"""The oracle of the stress test: what must hold over every term, belief and fenced write.

Pure functions over records (no ZooKeeper here), so they can be fed by the stress test, by a
deterministic scenario with a deliberately broken library, or by hand-made records. Each check
returns a list of violations (empty = the invariant holds), each one sentence naming the group,
slot, epoch and members involved.

The records come from two independent sources:

- ZooKeeper's own history: every term won is a persistent node ``<group>/terms/t-<seq>`` created
  in the same transaction that bumped the slot's epoch, so its ``czxid`` is the zxid at which the
  term began; every accepted fenced write of the stress contenders is a sequential node carrying
  ``{member, group, slot, epoch}``, its ``czxid`` the zxid at which it was accepted.
- The contenders' logs: what ``is_leader`` answered and when (``time.monotonic()``, one clock
  for every process of the machine), each commit attempted and what it returned.

Why these invariants, and why a broken library fails them:

- ``check_fencing`` -- a write fenced with epoch ``e`` of slot ``k`` is accepted only while the
  epoch znode of ``k`` has version ``e``, i.e. strictly between the zxid of term ``e`` and the zxid
  of term ``e + 1`` of that slot, and only from the member who won term ``e``. A commit that skips
  the epoch check lets a deposed leader (an expired session that reconnected, a frozen process
  that woke up) write after its successor's term began: that write's zxid is past term
  ``e + 1``'s and this check names it.
- ``check_beliefs`` -- once term ``e + 1`` of a slot has been won, no member may still believe it
  holds an older term of that slot: ``is_leader`` must have turned false (lease lapsed, suspended,
  session lost) before anybody else could be elected. Sound on samples: the older belief is
  stamped with the time *before* asking (``t0``), the newer term's evidence with times *after*
  it was certainly won (``t1`` of its own beliefs, its ``on_elected`` call, its accepted commits).
  An ``is_leader`` that ignored suspension or the lease would answer true in a process that wakes
  up from a pause longer than the session, after its successor was elected.
  ``check_leader_bound`` states the same thing per group: at no instant do more than N members
  certainly believe they lead.
- ``check_terms`` -- the slots of a group are 0..N-1 and each slot's terms carry epochs 1, 2, 3,
  ... in zxid order: no term was won twice with one epoch, none skipped.
- ``check_logs_against_zookeeper`` -- what the library told the writer agrees with what
  ZooKeeper holds: a commit that returned is in ZooKeeper, a commit that raised
  ``LeadershipLostError`` or ``TransactionFailedError`` ("nothing was written") is not, and
  nothing is in ZooKeeper that no contender attempted.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SlotKey = tuple[str, int]  # (group, slot)
MAX_REPORTED = 20  # violations listed per check; the count says how many more


@dataclass(frozen=True)
class Term:
    """A term won, from ZooKeeper's ``terms`` record."""

    group: str
    slot: int
    epoch: int
    member: str
    czxid: int


@dataclass(frozen=True)
class Write:
    """An accepted fenced write, from ZooKeeper."""

    group: str
    slot: int
    epoch: int
    member: str
    write_id: str
    czxid: int
    path: str = ""


@dataclass(frozen=True)
class Belief:
    """``is_leader`` of term (group, slot, epoch) answered true between ``t0`` and ``t1``."""

    group: str
    slot: int
    epoch: int
    member: str
    t0: float
    t1: float


@dataclass(frozen=True)
class Evidence:
    """At time ``t`` the term (group, slot, epoch) had certainly been won already."""

    group: str
    slot: int
    epoch: int
    member: str
    t: float
    what: str


@dataclass(frozen=True)
class Attempt:
    """A commit a contender attempted, and what the library answered (None: never returned)."""

    member: str
    write_id: str
    group: str
    slot: int
    epoch: int
    believed: bool
    t0: float
    t1: float
    result: str | None
    returned_at: float | None
    path: str | None
    mode: str = "leader"  # leader (believed), stale (did not), forged (skipped the local guard)


@dataclass
class ContenderLog:
    """Everything one contender process logged (see ``stress_contender.py``)."""

    member: str
    attempts: dict[str, Attempt] = field(default_factory=dict)
    elections: list[Evidence] = field(default_factory=list)
    revocations: list[tuple[str, int, int, str, float]] = field(default_factory=list)
    sessions: list[tuple[int, str, float]] = field(default_factory=list)
    started: float | None = None
    exited: float | None = None

    @property
    def beliefs(self) -> list[Belief]:
        return [
            Belief(a.group, a.slot, a.epoch, a.member, a.t0, a.t1)
            for a in self.attempts.values()
            if a.believed
        ]

    @property
    def evidence(self) -> list[Evidence]:
        found = list(self.elections)
        for a in self.attempts.values():
            if a.believed:
                found.append(Evidence(a.group, a.slot, a.epoch, a.member, a.t1, "is_leader"))
            if a.result == "ok" and a.returned_at is not None:
                found.append(Evidence(a.group, a.slot, a.epoch, a.member, a.returned_at, "commit"))
        return found


def read_contender_log(path: Path) -> ContenderLog:
    """Parse a contender's JSON-lines log; a line cut short by SIGKILL is skipped."""
    events: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    member = next((e["member"] for e in events if e["ev"] == "start"), path.stem)
    log = ContenderLog(member)
    intents: dict[str, dict[str, Any]] = {}
    outcomes: dict[str, dict[str, Any]] = {}
    for e in events:
        ev = e["ev"]
        if ev == "start":
            log.started = e["t"]
        elif ev == "exit":
            log.exited = e["t"]
        elif ev == "session":
            log.sessions.append((e["id"], e["pw"], e["t"]))
        elif ev == "elected":
            log.elections.append(
                Evidence(e["g"], e["slot"], e["epoch"], member, e["t"], "on_elected")
            )
        elif ev == "revoked":
            log.revocations.append((e["g"], e["slot"], e["epoch"], e["reason"], e["t"]))
        elif ev == "intent":
            intents[e["id"]] = e
        elif ev == "outcome":
            outcomes[e["id"]] = e
    for write_id, i in intents.items():
        o = outcomes.get(write_id)
        log.attempts[write_id] = Attempt(
            member=member,
            write_id=write_id,
            group=i["g"],
            slot=i["slot"],
            epoch=i["epoch"],
            believed=i["believed"],
            t0=i["t0"],
            t1=i["t1"],
            result=o["result"] if o else None,
            returned_at=o["t"] if o else None,
            path=o.get("path") if o else None,
            mode=i.get("mode", "leader"),
        )
    return log


# ---------------------------------------------------------------------------------------------
# The checks


def _report(name: str, violations: list[str]) -> list[str]:
    if len(violations) <= MAX_REPORTED:
        return violations
    more = len(violations) - MAX_REPORTED
    return [*violations[:MAX_REPORTED], f"{name}: ... and {more} more"]


def check_terms(terms: Iterable[Term], leaders: dict[str, int]) -> list[str]:
    """Slots are 0..N-1; each slot's terms have epochs 1, 2, 3, ... in zxid order."""
    violations = []
    by_slot: dict[SlotKey, list[Term]] = defaultdict(list)
    for term in terms:
        if not 0 <= term.slot < leaders[term.group]:
            violations.append(
                f"group {term.group!r} elects {leaders[term.group]} leader(s) but {term.member} "
                f"won slot {term.slot} (epoch {term.epoch})"
            )
        by_slot[(term.group, term.slot)].append(term)
    for (group, slot), slot_terms in sorted(by_slot.items()):
        epochs = [t.epoch for t in sorted(slot_terms, key=lambda t: t.czxid)]
        if epochs != list(range(1, len(epochs) + 1)):
            violations.append(
                f"group {group!r} slot {slot}: term epochs in zxid order are {epochs}, "
                f"not 1..{len(epochs)}"
            )
    return _report("check_terms", violations)


def check_fencing(terms: Iterable[Term], writes: Iterable[Write]) -> list[str]:
    """Each accepted write of epoch e lies between terms e and e+1 of its slot, by e's winner."""
    violations = []
    term_of: dict[tuple[str, int, int], Term] = {(t.group, t.slot, t.epoch): t for t in terms}
    for w in sorted(writes, key=lambda w: w.czxid):
        term = term_of.get((w.group, w.slot, w.epoch))
        following = term_of.get((w.group, w.slot, w.epoch + 1))
        where = f"group {w.group!r} slot {w.slot}"
        if term is None:
            violations.append(
                f"{where}: write {w.write_id} by {w.member} (zxid {w.czxid:#x}) was accepted "
                f"with epoch {w.epoch}, which no term of that slot ever had"
            )
            continue
        if term.member != w.member:
            violations.append(
                f"{where}: write {w.write_id} by {w.member} was accepted with epoch {w.epoch}, "
                f"but term {w.epoch} was won by {term.member}"
            )
        if w.czxid < term.czxid:
            violations.append(
                f"{where}: write {w.write_id} of epoch {w.epoch} (zxid {w.czxid:#x}) was "
                f"accepted before term {w.epoch} began (zxid {term.czxid:#x})"
            )
        if following is not None and w.czxid > following.czxid:
            violations.append(
                f"{where}: stale write {w.write_id} by {w.member} of epoch {w.epoch} "
                f"(zxid {w.czxid:#x}) was accepted after {following.member} won term "
                f"{following.epoch} (zxid {following.czxid:#x})"
            )
    return _report("check_fencing", violations)


def check_beliefs(beliefs: Iterable[Belief], evidence: Iterable[Evidence]) -> list[str]:
    """Nobody believes it holds a term of a slot once a later term of that slot was won."""
    last_belief: dict[SlotKey, dict[int, Belief]] = defaultdict(dict)
    for b in beliefs:
        known = last_belief[(b.group, b.slot)].get(b.epoch)
        if known is None or b.t0 > known.t0:
            last_belief[(b.group, b.slot)][b.epoch] = b
    first_won: dict[SlotKey, dict[int, Evidence]] = defaultdict(dict)
    for ev in evidence:
        known_ev = first_won[(ev.group, ev.slot)].get(ev.epoch)
        if known_ev is None or ev.t < known_ev.t:
            first_won[(ev.group, ev.slot)][ev.epoch] = ev
    violations = []
    for key in sorted(set(last_belief) | set(first_won)):
        beliefs_of, won = last_belief[key], first_won[key]
        earliest_later: Evidence | None = None  # the earliest evidence of any epoch > e
        for epoch in sorted(set(beliefs_of) | set(won), reverse=True):
            belief = beliefs_of.get(epoch)
            if belief and earliest_later and belief.t0 >= earliest_later.t:
                violations.append(
                    f"group {key[0]!r} slot {key[1]}: {belief.member} believed it held "
                    f"epoch {epoch} at t={belief.t0:.3f}, {belief.t0 - earliest_later.t:.3f}"
                    f" s after {earliest_later.member} had won epoch "
                    f"{earliest_later.epoch} (its {earliest_later.what} at "
                    f"t={earliest_later.t:.3f})"
                )
            mine = won.get(epoch)
            if mine is not None and (earliest_later is None or mine.t < earliest_later.t):
                earliest_later = mine
    return _report("check_beliefs", violations)


def closest_handover(beliefs: Iterable[Belief], evidence: Iterable[Evidence]) -> float | None:
    """The smallest gap, over every handover of a slot, between the old term's last belief
    and the new term's first evidence (negative would be a violation): how close a run came."""
    last: dict[tuple[str, int, int], float] = {}
    for b in beliefs:
        key = (b.group, b.slot, b.epoch)
        last[key] = max(last.get(key, b.t0), b.t0)
    first: dict[tuple[str, int, int], float] = {}
    for ev in evidence:
        key = (ev.group, ev.slot, ev.epoch)
        first[key] = min(first.get(key, ev.t), ev.t)
    gaps = [
        first[(group, slot, epoch + 1)] - t
        for (group, slot, epoch), t in last.items()
        if (group, slot, epoch + 1) in first
    ]
    return min(gaps, default=None)


def check_leader_bound(beliefs: Iterable[Belief], leaders: dict[str, int]) -> list[str]:
    """At no instant do more than N members of a group certainly believe they lead.

    A term is certainly believed from its first ``t1`` to its last ``t0``: in between, some
    ``is_leader`` call returned true no later than the start and no earlier than the end.
    """
    spans: dict[tuple[str, int, int, str], list[float]] = {}
    for b in beliefs:
        key = (b.group, b.slot, b.epoch, b.member)
        span = spans.setdefault(key, [b.t1, b.t0])
        span[0], span[1] = min(span[0], b.t1), max(span[1], b.t0)
    violations = []
    by_group: dict[str, list[tuple[float, int, tuple[str, int, int, str]]]] = defaultdict(list)
    for key, (start, end) in spans.items():
        if start < end:
            by_group[key[0]].append((start, 1, key))
            by_group[key[0]].append((end, -1, key))
    for group, events in sorted(by_group.items()):
        active: set[tuple[str, int, int, str]] = set()
        for t, delta, key in sorted(events, key=lambda e: (e[0], e[1])):
            if delta < 0:
                active.discard(key)
                continue
            active.add(key)
            if len(active) > leaders[group]:
                holders = ", ".join(f"{m} (slot {s}, epoch {e})" for _, s, e, m in sorted(active))
                violations.append(
                    f"group {group!r} elects {leaders[group]} leader(s) but at t={t:.3f} "
                    f"{len(active)} believed they led: {holders}"
                )
    return _report("check_leader_bound", violations)


def check_logs_against_zookeeper(
    logs: Iterable[ContenderLog], writes: Iterable[Write]
) -> list[str]:
    """Commit answers agree with ZooKeeper: returned = written, refused = not written."""
    attempts = {a.write_id: a for log in logs for a in log.attempts.values()}
    violations = []
    stored = {}
    for w in writes:
        stored[w.write_id] = w
        attempt = attempts.get(w.write_id)
        if attempt is None:
            violations.append(
                f"write {w.write_id} (group {w.group!r} slot {w.slot} epoch {w.epoch}) is in "
                f"ZooKeeper but {w.member} never logged attempting it"
            )
            continue
        if (attempt.group, attempt.slot, attempt.epoch, attempt.member) != (
            w.group,
            w.slot,
            w.epoch,
            w.member,
        ):
            violations.append(f"write {w.write_id} in ZooKeeper differs from its attempt")
        if attempt.result not in (None, "ok", "unknown"):
            violations.append(
                f"write {w.write_id} by {w.member} (group {w.group!r} slot {w.slot} epoch "
                f"{w.epoch}) is in ZooKeeper although its commit answered "
                f"{attempt.result!r} (nothing written)"
            )
    for attempt in attempts.values():
        if attempt.result == "ok" and attempt.write_id not in stored:
            violations.append(
                f"write {attempt.write_id} by {attempt.member} was acknowledged but is not in "
                f"ZooKeeper"
            )
        if attempt.result is not None and attempt.result.startswith(("failed", "error:")):
            violations.append(
                f"write {attempt.write_id} by {attempt.member} failed unexpectedly: "
                f"{attempt.result}"
            )
    return _report("check_logs_against_zookeeper", violations)


def check_all(
    terms: list[Term],
    writes: list[Write],
    logs: list[ContenderLog],
    leaders: dict[str, int],
) -> list[str]:
    """Every check of this module, over one run's records."""
    beliefs = [b for log in logs for b in log.beliefs]
    evidence = [e for log in logs for e in log.evidence]
    return [
        *check_terms(terms, leaders),
        *check_fencing(terms, writes),
        *check_beliefs(beliefs, evidence),
        *check_leader_bound(beliefs, leaders),
        *check_logs_against_zookeeper(logs, writes),
    ]
