"""One scheduling round: where every ACTIVE pipeline should run, as a plan of changes.

Pure: the leader reads the pipelines, the assignments and the heartbeats, judges which
supervisors are alive and which workers silent, and asks ``plan_round`` what to change; it
then writes the plan in its fenced transactions::

    plan = plan_round(
        pipelines=records, assignments=current,
        capacity={"s1": 4, "s2": 4},  # may take new work: registered, not silent, not
                                      # stopping, not cordoned
        keep_on={"s1", "s2", "s3"},   # not judged dead: their assignments stay put
        timed_out={"etl"},            # pipelines whose worker went silent
        fenced={"orders"},            # whose worker a pipeline fence stopped: placed again
        epoch=term.epoch, now=time.time(),
        draining={"s3"},              # cordoned with a drain: its pipelines move away
        drained_from={"web": "s3"},   # taken off s3 by the drain, not placed yet
        still_running={"web"},        # unassigned, but a live supervisor still runs its worker
        warm={"s2": 1},               # ready warm workers, as the heartbeats say
        reserved={"s1": 1},           # standby workers placed there
        holding={"ads"},              # a hot pipeline's new generation waits for its standby
        switching={"orders"},         # its standby worker is READY for the new generation
    )
    plan.assign, plan.unassign, plan.moved, plan.changes, plan.drain_moving, plan.no_room

The rules, in the order a round applies them:

1. An assignment of a pipeline that is gone or does not run (not ACTIVE) is deleted.
2. An assignment on a supervisor in ``keep_on`` stays there; a new generation (a rebalance,
   an update, a rollback, a restart) or digest rewrites it in place, which restarts its
   worker with the new conf; but a hot pipeline's new generation may go through its standby
   worker (``failover.update_moves`` decides, from the standby workers' beats): one in
   ``holding`` keeps its old assignment as it is (its old worker runs on while its standby
   worker starts for the new generation), and one in ``switching`` loses it, break before
   make, recorded with the generation's reason (``updated``, ...) to no supervisor: its old
   worker stops, and the leader then promotes the standby worker, or places the pipeline
   by rule 4 once that worker stopped.
3. The pipelines of supervisors not in ``keep_on`` (judged dead), the ACTIVE pipelines with
   no assignment, and those whose worker timed out are then placed, oldest submit first
   (then by name), each on the supervisor with the most free slots (ties: fewer pipelines
   there, then the id), which spreads them across the nodes; a pipeline that moves (a dead
   supervisor's, a timed-out one) prefers a supervisor with a ready warm worker (``warm``),
   where its new worker skips the Spark start. A timed-out one goes to another
   supervisor than its own, or stays where it is when no other has room; a dead supervisor's
   pipeline that finds no room is unassigned (and placed again once room appears). A
   pipeline of ``fenced`` (the leader's pipeline fence stopped its worker on a live
   supervisor, which holds it back until a newer assignment, and its standby worker was not
   promoted) gets a new assignment on the supervisor with the most free slots, its own
   included (the new fencing token ends the hold there), preferring a ready warm worker;
   with no room anywhere it stays as it is, and a later round places it.
4. An ACTIVE pipeline with no assignment whose worker a supervisor not judged dead still
   runs (``still_running``: its assignment was just deleted, and that worker stops) is not
   placed yet: the old worker stops before a new one claims the checkpoint, as after any
   move. It holds a slot meanwhile, so that the room it will need is not given away.
5. A drain moves in two steps, break before make, each recorded as ``DRAINED``: a
   pipeline on a supervisor of ``draining`` (not judged dead) loses its assignment if
   another supervisor has room (its worker stops there), else it stays and is named in
   ``plan.no_room``; once no live supervisor runs its worker, the pipeline
   (``drained_from``) is placed. Both steps prefer a supervisor with a ready warm worker
   (``warm``), so that the new worker's JVM is up before the old one stops and the gap
   is one checkpoint hand-over. The pipelines on the way are placed before any other,
   and the drain's first steps come after every other placement: a running pipeline
   waits for room, a stopped one does not.

An assignment's conf is the record's, with the record's owner under ``pipeline.owner``: what
the supervisor that serves the pipeline's log knows of who may read it.

Every assignment written or deleted for a pipeline that still has a record comes with an
``AssignmentChange`` in ``plan.changes`` (time, epoch, where from, where to, and the
``AssignmentReason``), which the leader records in the same transaction as the write; the
assignment of a pipeline whose record is gone is deleted with no change recorded (its
history goes with its record).

Only supervisors of ``capacity`` that are also in ``keep_on`` take new work, never more than
their slots; the pipelines that stay on a supervisor count against its slots. A supervisor
that already runs more than its slots (it came back with fewer) keeps them but gets nothing
new. A standby worker placed on a supervisor (``reserved``) takes one of its slots too: a
pipeline goes to a supervisor with a slot free of both first, and takes a standby worker's
slot only when no supervisor has such a slot left (active workers first: that standby
worker then yields, and the leader places it elsewhere, ``standby_plan``). A round costs
O((P + S) log S) for P pipelines and S supervisors: the free slots are a heap, not a scan
per pipeline; only a moved pipeline's choice of a warm worker scans the supervisors that
report one.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from stratus.api.pipeline_conf import OWNER_KEY
from stratus.api.records import (
    Assignment,
    AssignmentChange,
    AssignmentReason,
    PipelineRecord,
    PipelineStatus,
)


@dataclass(frozen=True)
class Plan:
    """What one round changes; empty when the cluster is as it should be."""

    assign: dict[str, Assignment]  # pipelines to (re)write: new, moved, or restarted in place
    unassign: list[str]  # assignments to delete, sorted
    moved: dict[str, tuple[str, str | None]]  # pipeline -> (from, to or None: no room left)
    changes: dict[str, AssignmentChange] = field(default_factory=dict)  # recorded with writes
    drain_moving: dict[str, str] = field(default_factory=dict)  # off a drained one, not placed
    no_room: dict[str, str] = field(default_factory=dict)  # drained pipelines with no room

    @property
    def empty(self) -> bool:
        return not (self.assign or self.unassign)

    def applied_to(self, assignments: Mapping[str, Assignment]) -> dict[str, Assignment]:
        """The assignments once this plan is written over ``assignments``."""
        gone = set(self.unassign)
        kept = {name: a for name, a in assignments.items() if name not in gone}
        return kept | self.assign


def plan_round(  # noqa: PLR0913 keyword-only: the snapshot a round plans from
    *,
    pipelines: Mapping[str, PipelineRecord],
    assignments: Mapping[str, Assignment],
    capacity: Mapping[str, int],
    keep_on: Set[str],
    timed_out: Set[str],
    epoch: int,
    now: float,
    fenced: Set[str] = frozenset(),
    draining: Set[str] = frozenset(),
    drained_from: Mapping[str, str] | None = None,
    still_running: Set[str] = frozenset(),
    warm: Mapping[str, int] | None = None,
    reserved: Mapping[str, int] | None = None,
    holding: Set[str] = frozenset(),
    switching: Set[str] = frozenset(),
) -> Plan:
    """The changes that bring ``assignments`` in line with the rules of the module docstring.

    ``capacity``: supervisors that may take new work (registered, not silent, not stopping,
    not cordoned), with their slots. ``keep_on``: supervisors not judged dead.
    ``timed_out``: pipelines whose worker the leader has not heard from for
    ``nimbus.task.timeout.secs``. ``draining``: supervisors whose pipelines move away.
    ``drained_from``: pipelines a drain took off a supervisor and that have no assignment
    yet, with that supervisor. ``still_running``: pipelines with no assignment whose worker
    a supervisor of ``keep_on`` still runs. ``warm``: each supervisor's ready warm workers.
    ``reserved``: the standby workers placed on each supervisor, whose slots a pipeline takes
    last. ``epoch`` and ``now`` go into every assignment written. ``fenced``: pipelines whose
    worker a pipeline fence stopped on a live supervisor, to assign anew. ``holding`` and
    ``switching``: hot pipelines whose new generation waits for their standby worker, or
    goes to it (rule 2); each only for an assignment that stays.
    """
    drained_from = drained_from or {}
    round_ = _Round(epoch, now)
    staying: dict[str, Assignment] = {}
    to_place: list[_Candidate] = []
    to_drain: list[_Candidate] = []
    for name, assignment in assignments.items():
        record = pipelines.get(name)
        if record is None or not record.status.runs:
            round_.unassign.append(name)
            if record is not None:  # a removed pipeline's history goes with its record
                round_.note(name, record, _STOPPED[record.status], None, assignment.supervisor)
            continue
        if assignment.supervisor in keep_on:
            staying[name] = assignment
            if name not in timed_out and name not in fenced:
                if assignment.supervisor in draining:
                    to_drain.append(_Candidate(name, record, assignment))
                continue
        to_place.append(_Candidate(name, record, assignment))
    on_the_way, new, held = _unassigned(pipelines, assignments, drained_from, still_running)
    to_place.extend(new)
    slots = _FreeSlots(capacity, keep_on, staying.values(), warm or {}, reserved or {})
    for candidate in sorted(on_the_way, key=_Candidate.order):
        round_.arrive(candidate, slots, waits=candidate.name in still_running)
    for _ in range(held):
        slots.take()  # no room for others meanwhile
    for candidate in sorted(to_place, key=_Candidate.order):
        round_.place(candidate, slots, keep_on, fenced)
    for candidate in sorted(to_drain, key=_Candidate.order):
        round_.drain(candidate, slots)
    for name, assignment in staying.items():
        if name not in round_.assign and name not in round_.drain_moving:
            if name in holding:
                continue  # its old worker runs on while its standby worker gets ready
            round_.keep(name, pipelines[name], assignment, switch=name in switching)
    return Plan(
        assign=round_.assign,
        unassign=sorted(round_.unassign),
        moved=round_.moved,
        changes=round_.changes,
        drain_moving=round_.drain_moving,
        no_room=round_.no_room,
    )


def _unassigned(
    pipelines: Mapping[str, PipelineRecord],
    assignments: Mapping[str, Assignment],
    drained_from: Mapping[str, str],
    still_running: Set[str],
) -> tuple[list[_Candidate], list[_Candidate], int]:
    """The pipelines that run and have no assignment: (on the way from a drained supervisor,
    to place, how many are held: their old worker still runs (no drain), so they wait a
    round and a slot waits for each)."""
    on_the_way: list[_Candidate] = []
    to_place: list[_Candidate] = []
    held = 0
    for name, record in pipelines.items():
        if not record.status.runs or name in assignments:
            continue
        candidate = _Candidate(name, record, None, drained_from.get(name))
        if candidate.drained_from is not None:
            on_the_way.append(candidate)
        elif name in still_running:
            held += 1  # its old worker stops first; a slot waits for it
        else:
            to_place.append(candidate)
    return on_the_way, to_place, held


_STOPPED = {  # why a pipeline that does not run loses its assignment
    PipelineStatus.INACTIVE: AssignmentReason.DEACTIVATED,
    PipelineStatus.KILLED: AssignmentReason.KILLED,
    PipelineStatus.FINISHED: AssignmentReason.FINISHED,
    PipelineStatus.FAILED: AssignmentReason.FAILED,
    PipelineStatus.PENDING: AssignmentReason.DEACTIVATED,  # not reached: never ACTIVE before
}


@dataclass(frozen=True)
class _Candidate:
    """A pipeline to place: new (``current`` None), on a dead supervisor, or timed out; or
    to drain; or on the way from a drained supervisor (``drained_from``)."""

    name: str
    record: PipelineRecord
    current: Assignment | None
    drained_from: str | None = None

    def order(self) -> tuple[float, str]:
        return (self.record.submitted, self.name)


class _Round:
    """The plan being built, and how each kind of pipeline enters it."""

    def __init__(self, epoch: int, now: float) -> None:
        self._epoch = epoch
        self._now = now
        self.assign: dict[str, Assignment] = {}
        self.unassign: list[str] = []
        self.moved: dict[str, tuple[str, str | None]] = {}
        self.changes: dict[str, AssignmentChange] = {}
        self.drain_moving: dict[str, str] = {}
        self.no_room: dict[str, str] = {}

    def arrive(self, candidate: _Candidate, slots: _FreeSlots, *, waits: bool) -> None:
        """A pipeline on the way from a drained supervisor: placed (preferably where a warm
        worker is ready) once its old worker has stopped; until then a slot waits for it."""
        name, record, source = candidate.name, candidate.record, candidate.drained_from
        assert source is not None
        target = slots.take(prefer_warm=True)
        if target is None:
            self.no_room[name] = source
        if waits or target is None:
            self.drain_moving[name] = source
            return
        self.moved[name] = (source, target)
        self.assign[name] = self._assignment(name, record, target)
        self.note(name, record, AssignmentReason.DRAINED, target, source)

    def drain(self, candidate: _Candidate, slots: _FreeSlots) -> None:
        """A pipeline on a drained supervisor: its assignment goes if another supervisor has
        room (kept for it from now on), else it stays and is named in ``no_room``."""
        name, record, current = candidate.name, candidate.record, candidate.current
        assert current is not None
        if slots.take(avoid=current.supervisor, prefer_warm=True) is None:
            self.no_room[name] = current.supervisor
            return
        self.unassign.append(name)
        self.drain_moving[name] = current.supervisor
        self.note(name, record, AssignmentReason.DRAINED, None, current.supervisor)

    def place(
        self, candidate: _Candidate, slots: _FreeSlots, keep_on: Set[str], fenced: Set[str]
    ) -> None:
        """Place a new pipeline, a dead supervisor's, a fenced one or a timed-out one (the
        last two kept if no room)."""
        name, record, current = candidate.name, candidate.record, candidate.current
        if current is None:
            target = slots.take()
            if target is not None:
                self.assign[name] = self._assignment(name, record, target)
                self.note(name, record, AssignmentReason.PLACED, target, None)
        elif current.supervisor not in keep_on:
            target = slots.take(prefer_warm=True)  # its Spark is up there: the gap shrinks
            self.moved[name] = (current.supervisor, target)
            if target is None:
                self.unassign.append(name)
                self.note(name, record, AssignmentReason.NO_ROOM, None, current.supervisor)
            else:
                self.assign[name] = self._assignment(name, record, target)
                reason = AssignmentReason.SUPERVISOR_DEAD
                self.note(name, record, reason, target, current.supervisor)
        elif name in fenced:  # anew, its own supervisor too: its slot there is free again
            slots.release(current.supervisor)
            target = slots.take(prefer_warm=True)
            if target is not None:
                if target != current.supervisor:
                    self.moved[name] = (current.supervisor, target)
                self.assign[name] = self._assignment(name, record, target)
                self.note(name, record, AssignmentReason.FENCED, target, current.supervisor)
        else:  # timed out on a live supervisor: elsewhere, or nowhere
            target = slots.take(avoid=current.supervisor, prefer_warm=True)
            if target is not None:
                slots.release(current.supervisor)
                self.moved[name] = (current.supervisor, target)
                self.assign[name] = self._assignment(name, record, target)
                reason = AssignmentReason.WORKER_SILENT
                self.note(name, record, reason, target, current.supervisor)

    def keep(self, name: str, record: PipelineRecord, current: Assignment, *, switch: bool) -> None:
        """An assignment that stays: rewritten in place if the pipeline changed, or deleted
        (``switch``: its standby worker is ready for the new generation)."""
        if current.generation == record.generation and current.digest == record.digest:
            return
        reason = _rewrite_reason(record, current)
        if switch:
            self.unassign.append(name)
            self.note(name, record, reason, None, current.supervisor)
            return
        self.assign[name] = self._assignment(name, record, current.supervisor)
        self.note(name, record, reason, current.supervisor, current.supervisor)

    def note(
        self,
        name: str,
        record: PipelineRecord,
        reason: AssignmentReason,
        supervisor: str | None,
        previous: str | None,
    ) -> None:
        """The change this round makes to ``name``'s assignment, for its history."""
        self.changes[name] = AssignmentChange(
            at=self._now,
            epoch=self._epoch,
            reason=reason,
            supervisor=supervisor,
            previous=previous,
            generation=record.generation,
            digest=record.digest,
        )

    def _assignment(self, name: str, record: PipelineRecord, supervisor: str) -> Assignment:
        return assignment_of(name, record, supervisor, epoch=self._epoch, now=self._now)


def assignment_of(
    name: str, record: PipelineRecord, supervisor: str, *, epoch: int, now: float
) -> Assignment:
    """The assignment of pipeline ``name`` (``record``, as it is now) to ``supervisor``,
    written in term ``epoch`` at wall-clock time ``now``."""
    return Assignment(
        pipeline=name,
        supervisor=supervisor,
        epoch=epoch,
        generation=record.generation,
        digest=record.digest,
        size_bytes=record.size_bytes,
        blake3=record.blake3,
        conf=assignment_conf(record),
        assigned=now,
    )


def assignment_conf(record: PipelineRecord) -> dict[str, Any]:
    """The conf an assignment carries: the record's, and its owner (if any) as
    ``pipeline.owner``."""
    if record.owner is None:
        return record.conf
    return {**record.conf, OWNER_KEY: record.owner}


class _FreeSlots:
    """Free slots per supervisor, the most free first: a heap with lazy deletion.

    Every change pushes a new entry; an entry whose free count is no longer the supervisor's
    is stale and skipped when it comes up. A slot ``reserved`` for a standby worker is taken
    only once no supervisor has a slot free of both pipelines and standby workers.
    """

    def __init__(
        self,
        capacity: Mapping[str, int],
        keep_on: Set[str],
        staying: Iterable[Assignment],
        warm: Mapping[str, int] | None = None,
        reserved: Mapping[str, int] | None = None,
    ) -> None:
        used: dict[str, int] = {}
        for assignment in staying:
            used[assignment.supervisor] = used.get(assignment.supervisor, 0) + 1
        self._slots = {sid: n for sid, n in capacity.items() if sid in keep_on}
        self._used = {sid: used.get(sid, 0) for sid in self._slots}
        self._reserved = {sid: n for sid, n in (reserved or {}).items() if sid in self._slots}
        self._heap: list[tuple[int, int, int, str]] = []
        for sid in self._slots:
            self._push(sid)
        self._warm = {sid: n for sid, n in (warm or {}).items() if n > 0 and sid in self._slots}

    def take(self, avoid: str | None = None, *, prefer_warm: bool = False) -> str | None:
        """One slot on the supervisor with the most free (never ``avoid``), or None; with
        ``prefer_warm`` on one with a ready warm worker first, if any has a free slot (that
        warm worker is then spoken for)."""
        if prefer_warm:
            warm = self._warm_target(avoid)
            if warm is not None:
                self._warm[warm] -= 1
                self._used[warm] += 1
                self._push(warm)
                return warm
        skipped = None
        target = None
        while self._heap:
            entry = heapq.heappop(self._heap)
            sid = entry[-1]
            if entry != self._entry(sid):
                continue  # stale
            if sid == avoid:
                skipped = entry
                continue
            target = sid
            break
        if skipped is not None:
            heapq.heappush(self._heap, skipped)
        if target is not None:
            self._used[target] += 1
            self._push(target)
        return target

    def _warm_target(self, avoid: str | None) -> str | None:
        """Of the supervisors with a warm worker left and a free slot, the most free."""
        fits = [
            self._entry(sid)
            for sid, count in self._warm.items()
            if count > 0 and sid != avoid and self._used[sid] < self._slots[sid]
        ]
        return min(fits)[-1] if fits else None

    def release(self, sid: str) -> None:
        """A pipeline left ``sid``: one more free slot there, if it takes work."""
        if sid in self._used:
            self._used[sid] -= 1
            self._push(sid)

    def _entry(self, sid: str) -> tuple[int, int, int, str]:
        """Free of standby workers too first, the most free first, then fewest used; then
        those with only reserved slots left, the most free for pipelines first."""
        used, slots = self._used[sid], self._slots[sid]
        spare = slots - used - self._reserved.get(sid, 0)
        return (0, -spare, used, sid) if spare > 0 else (1, used - slots, used, sid)

    def _push(self, sid: str) -> None:
        if self._used[sid] < self._slots[sid]:
            heapq.heappush(self._heap, self._entry(sid))


_REWRITES = {reason.value: reason for reason in AssignmentReason if reason.new_generation}


def _rewrite_reason(record: PipelineRecord, current: Assignment) -> AssignmentReason:
    """Why an assignment that stays is rewritten in place, or deleted for the standby worker:
    what changed the record's generation last (``generation_cause``), or, in a record older
    than it, new code or a rebalance."""
    cause = _REWRITES.get(record.generation_cause or "")
    if cause is not None:
        return cause
    updated = current.digest != record.digest
    return AssignmentReason.UPDATED if updated else AssignmentReason.REBALANCED
