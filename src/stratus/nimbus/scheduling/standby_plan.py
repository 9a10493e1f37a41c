"""Where the standby workers of hot pipelines wait: one placement round, as a plan of writes.

Pure: the leader's scheduling round, once it has planned the assignments (``plan_round``),
hands this module the pipelines, the assignments as that plan leaves them, what it knows of
the supervisors and the placements it read from ``standby-workers/``, and writes the plan
it gets back in its fenced transactions (``standby_workers.StandbyWorkerTable``)::

    standby = plan_standby_workers(
        pipelines=records, assignments=plan.applied_to(current),  # the round's plan
        supervisors=registered, heartbeats=beats,   # summaries; heartbeats (standby beats)
        cordoned={"s3"}, dead=set(), suspected=set(), stopping=set(),
        placements=placements,                      # {pipeline: placement, None: unreadable}
        max_workers=-1, needs_beat_lease=True, epoch=term.epoch, now=time.time(),
        deferred={"orders"},                        # rule 5: its new worker's first batch
    )
    standby.writes  # (StandbyWrite(pipeline, kind, reason, placement or None, previous), ...)

The rules, in the order a round applies them:

1. The placement of a pipeline that is gone, not ACTIVE, or no longer hot
   (``wants_standby_worker``) is deleted.
2. A placement's standby worker moves when its supervisor runs the pipeline's active worker
   (an assignment moved there), is judged dead, suspected, stopping or cordoned, is gone
   (neither registered nor heartbeating), no longer advertises a beat lease where one is
   needed, or has no slot left for it once active workers took theirs; and when that
   supervisor's beat reports it REFUSED or FAILED for the placement's generation and code
   (the refusal is kept in the placement, newest first, at most ``MAX_REFUSALS``), unless it
   FAILED with other code than the record's: that failure says nothing of the code the
   pipeline runs now (an update withdrawn, or replaced). One that stays but is of an older
   generation or other code is rewritten in place.
3. The hot pipelines without a standby worker are placed, oldest submit first (then by
   name), while fewer than ``max_workers`` are placed (-1: no bound; when the bound is
   lowered, the newest submits lose theirs first). Never on the supervisor of the active
   worker; on another host than the active worker's first (``SupervisorSummary.host``), then
   on the supervisor with the fewest standby workers, then the most free slots, then by id.
   A supervisor must be registered, not dead, suspected, stopping or cordoned, advertise a
   beat lease when ``needs_beat_lease`` (the pacemaker state store), not have refused this
   pipeline in the last ``REFUSAL_BACKOFF_SECS``, and have a slot free of active and standby
   workers.
4. A pipeline no supervisor fits gets a placement naming none, with ``unplaced_because``;
   it is placed by a later round once one fits.
5. A hot pipeline without a standby worker whose active worker has just been assigned and
   has not committed a batch yet (``deferred``: a promotion, a move, a submit; the caller
   says which) is not placed in this round: recovery first. Its place under
   ``max_workers`` is kept, and nothing is written for it.

Nothing is written that would not change: a placement that stays where it is, of its
generation and code, and an unplaced one whose reason and refusals are the same, keep their
znodes as they are, so a steady cluster writes nothing (ZooKeeper's load stays flat).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from enum import StrEnum

from stratus.api.records import (
    Assignment,
    PipelineRecord,
    PipelineStatus,
    SupervisorHeartbeat,
    SupervisorSummary,
)
from stratus.api.standby_workers import (
    MAX_REFUSALS,
    StandbyWorkerBeat,
    StandbyWorkerPlacement,
    StandbyWorkerRefusal,
    StandbyWorkerState,
    wants_standby_worker,
)
from stratus.nimbus.scheduling.scheduler import assignment_conf

REFUSAL_BACKOFF_SECS = 600.0  # a supervisor that refused a pipeline is not asked again sooner
MAX_WORKERS_KEY = "nimbus.standby.workers.max"


class StandbyWriteKind(StrEnum):
    """What one write does to a pipeline's placement."""

    PLACE = "place"  # a placement for one without a standby worker (a supervisor, or none)
    MOVE = "move"  # off its supervisor: to another, or to none
    REWRITE = "rewrite"  # on the same supervisor, for a new generation or other code
    DELETE = "delete"  # no standby worker any more


class StandbyReason(StrEnum):
    """Why a placement is written, as the leader logs it."""

    PLACED = "placed"  # a hot pipeline without a standby worker
    OVER_MAX = "over_max"  # past nimbus.standby.workers.max
    ACTIVE_HERE = "active_here"  # its supervisor runs the active worker now
    SUPERVISOR_DEAD = "supervisor_dead"
    SUPERVISOR_SUSPECTED = "supervisor_suspected"
    SUPERVISOR_STOPPING = "supervisor_stopping"
    SUPERVISOR_CORDONED = "supervisor_cordoned"
    SUPERVISOR_GONE = "supervisor_gone"  # neither registered nor heartbeating
    NO_BEAT_LEASE = "no_beat_lease"  # it no longer advertises one
    NO_SLOT = "no_slot"  # active workers took the slots of its supervisor
    REFUSED = "refused"  # its supervisor will not run it
    FAILED = "failed"  # it exited more often than its restarts allow
    NEW_GENERATION = "new_generation"  # rewritten: a rebalance, an update, a rollback
    NOT_HOT = "not_hot"  # pipeline.standby is none now
    NOT_ACTIVE = "not_active"
    PIPELINE_GONE = "pipeline_gone"


@dataclass(frozen=True)
class StandbyWrite:
    """One pipeline's placement written (``placement``) or deleted (None)."""

    pipeline: str
    kind: StandbyWriteKind
    reason: StandbyReason
    placement: StandbyWorkerPlacement | None
    previous: str | None = None  # the supervisor named before


@dataclass(frozen=True)
class StandbyPlan:
    """What one round writes of the placements, by pipeline; empty when nothing changes."""

    writes: tuple[StandbyWrite, ...] = field(default_factory=tuple)

    @property
    def empty(self) -> bool:
        return not self.writes


def plan_standby_workers(  # noqa: PLR0913 keyword-only: the snapshot a round plans from
    *,
    pipelines: Mapping[str, PipelineRecord],
    assignments: Mapping[str, Assignment],
    supervisors: Mapping[str, SupervisorSummary],
    heartbeats: Mapping[str, SupervisorHeartbeat],
    placements: Mapping[str, StandbyWorkerPlacement | None],
    cordoned: Set[str],
    dead: Set[str],
    suspected: Set[str],
    stopping: Set[str],
    max_workers: int,
    needs_beat_lease: bool,
    epoch: int,
    now: float,
    deferred: Set[str] = frozenset(),
) -> StandbyPlan:
    """The writes that bring ``placements`` in line with the rules of the module docstring.

    ``assignments``: as the round's plan leaves them. ``supervisors``: the registered ones
    (their summaries); ``heartbeats``: the supervisors' heartbeats, with their standby
    workers' beats. ``placements``: the znodes of ``standby-workers/``, None for one that
    does not decode. ``max_workers``: ``nimbus.standby.workers.max`` (-1: no bound).
    ``needs_beat_lease``: a supervisor must advertise a beat lease to hold one (not with
    the ZooKeeper state store). ``epoch`` and ``now`` (wall clock) go into every placement
    written. ``deferred``: the pipelines whose placement waits (rule 5).
    """
    if max_workers < -1:
        raise ValueError(f"{MAX_WORKERS_KEY} must be -1 (no bound) or more, got {max_workers}")
    round_ = _Round(
        pipelines=pipelines,
        assignments=assignments,
        cluster=_Cluster(
            supervisors, heartbeats, cordoned, dead, suspected, stopping, needs_beat_lease
        ),
        placements=placements,
        epoch=epoch,
        now=now,
    )
    hot = sorted(
        (r for r in pipelines.values() if r.status is PipelineStatus.ACTIVE and _hot(r)),
        key=lambda r: (r.submitted, r.name),
    )
    hot_names = {r.name for r in hot}
    for name in sorted(placements):
        if name not in hot_names:
            round_.delete(name)
    holding = [r for r in hot if round_.supervisor_of(r.name) is not None]
    waiting = [r for r in hot if round_.supervisor_of(r.name) is None]
    bound = len(hot) if max_workers == -1 else max_workers
    for record in holding[bound:]:
        round_.unplace(record, StandbyWriteKind.MOVE, StandbyReason.OVER_MAX, _over(bound))
    moving = [(r, cause) for r in holding[:bound] if (cause := round_.stay_or_move(r)) is not None]
    for record, cause in moving:
        round_.move(record, cause)
    for record in waiting:
        if round_.placed >= bound:
            round_.unplace(record, StandbyWriteKind.PLACE, StandbyReason.OVER_MAX, _over(bound))
        elif record.name in deferred:
            round_.placed += 1  # its place under the bound is kept for the next rounds
        else:
            round_.place(record)
    return StandbyPlan(writes=tuple(sorted(round_.writes, key=lambda w: w.pipeline)))


_GIVEN_UP = {  # what a standby worker's beat may say that moves it elsewhere
    StandbyWorkerState.REFUSED: StandbyReason.REFUSED,
    StandbyWorkerState.FAILED: StandbyReason.FAILED,
}


def _failed_other_code(record: PipelineRecord, beat: StandbyWorkerBeat) -> bool:
    """Whether ``beat`` is a failure of other code than ``record`` runs (an update
    withdrawn, or replaced): it says nothing of the code the placement is rewritten for."""
    return beat.state is StandbyWorkerState.FAILED and beat.digest != record.digest


def _hot(record: PipelineRecord) -> bool:
    return wants_standby_worker(record.conf)


def _over(bound: int) -> str:
    return f"the cluster's bound of standby workers is reached ({MAX_WORKERS_KEY}: {bound})"


class _Unfit(StrEnum):
    """Why a supervisor takes no standby worker of a pipeline, as ``unplaced_because`` tells
    it (in this order, each with how many supervisors it kept out)."""

    ACTIVE_HERE = "runs its active worker"
    DEAD = "dead"
    GONE = "gone"
    SUSPECTED = "suspected"
    STOPPING = "stopping"
    CORDONED = "cordoned"
    NO_BEAT_LEASE = "no beat lease (no fast beats, or an older release)"
    REFUSED = f"refused it in the last {REFUSAL_BACKOFF_SECS / 60:g} min"
    NO_SLOT = "no free slot"
    LEAVING = "the one it leaves"


_UNFIT = {  # why a supervisor's standby worker leaves it -> why it takes none
    StandbyReason.SUPERVISOR_DEAD: _Unfit.DEAD,
    StandbyReason.SUPERVISOR_GONE: _Unfit.GONE,  # not for a registered one: for completeness
    StandbyReason.SUPERVISOR_SUSPECTED: _Unfit.SUSPECTED,
    StandbyReason.SUPERVISOR_STOPPING: _Unfit.STOPPING,
    StandbyReason.SUPERVISOR_CORDONED: _Unfit.CORDONED,
    StandbyReason.NO_BEAT_LEASE: _Unfit.NO_BEAT_LEASE,
}


class _Cluster:
    """What the round knows of the supervisors, and which may hold a standby worker."""

    def __init__(
        self,
        supervisors: Mapping[str, SupervisorSummary],
        heartbeats: Mapping[str, SupervisorHeartbeat],
        cordoned: Set[str],
        dead: Set[str],
        suspected: Set[str],
        stopping: Set[str],
        needs_beat_lease: bool,
    ) -> None:
        self.supervisors = supervisors
        self.heartbeats = heartbeats
        self._cordoned = cordoned
        self._dead = dead
        self._suspected = suspected
        self._stopping = stopping
        self._needs_beat_lease = needs_beat_lease

    def slots(self, sid: str) -> int:
        """Its slots, as registered (else as its last heartbeat said)."""
        if sid in self.supervisors:
            return self.supervisors[sid].slots
        beat = self.heartbeats.get(sid)
        return beat.slots if beat is not None else 0

    def host(self, sid: str | None) -> str:
        """Its host, "" when unknown."""
        summary = self.supervisors.get(sid) if sid is not None else None
        return summary.host if summary is not None else ""

    def leave_because(self, sid: str) -> StandbyReason | None:
        """Why a standby worker on ``sid`` leaves it, whatever its pipeline; None: it stays."""
        if sid in self._dead:
            return StandbyReason.SUPERVISOR_DEAD
        if sid not in self.supervisors and sid not in self.heartbeats:
            return StandbyReason.SUPERVISOR_GONE
        if sid in self._suspected:
            return StandbyReason.SUPERVISOR_SUSPECTED
        if sid in self._stopping:
            return StandbyReason.SUPERVISOR_STOPPING
        if sid in self._cordoned:
            return StandbyReason.SUPERVISOR_CORDONED
        summary = self.supervisors.get(sid)  # unregistered for now: judged by its heartbeat
        if self._needs_beat_lease and summary is not None and summary.beat_lease is None:
            return StandbyReason.NO_BEAT_LEASE
        return None

    def unfit(self, sid: str) -> _Unfit | None:
        """Why a registered ``sid`` takes no standby worker, whatever its pipeline; None: it
        may (if it has room)."""
        why = self.leave_because(sid)
        return _UNFIT[why] if why is not None else None

    def beat(self, placement: StandbyWorkerPlacement) -> StandbyWorkerBeat | None:
        return placement_beat(placement, self.heartbeats)


def placement_beat(
    placement: StandbyWorkerPlacement, heartbeats: Mapping[str, SupervisorHeartbeat]
) -> StandbyWorkerBeat | None:
    """What the placement's supervisor reports of its standby worker, for the placement's
    generation and code; None: nothing (yet)."""
    heartbeat = heartbeats.get(placement.supervisor or "")
    wanted = (placement.pipeline, placement.generation, placement.digest)
    for beat in heartbeat.standby_workers if heartbeat is not None else ():
        if (beat.pipeline, beat.generation, beat.digest) == wanted:
            return beat
    return None


class _Round:
    """The writes being built, and the slots and standby workers of each supervisor."""

    def __init__(
        self,
        *,
        pipelines: Mapping[str, PipelineRecord],
        assignments: Mapping[str, Assignment],
        cluster: _Cluster,
        placements: Mapping[str, StandbyWorkerPlacement | None],
        epoch: int,
        now: float,
    ) -> None:
        self._pipelines = pipelines
        self._assignments = assignments
        self._cluster = cluster
        self._placements = placements
        self._epoch = epoch
        self._now = now
        self.writes: list[StandbyWrite] = []
        self._active = Counter(a.supervisor for a in assignments.values())
        self._standby: Counter[str] = Counter()  # those that stay, or are placed, this round
        self.placed = 0  # standby workers placed (staying, moved or new) in this round

    def supervisor_of(self, name: str) -> str | None:
        placement = self._placements.get(name)
        return placement.supervisor if placement is not None else None

    def delete(self, name: str) -> None:
        """The placement of a pipeline that is gone, not ACTIVE or not hot goes."""
        record = self._pipelines.get(name)
        if record is None:
            reason = StandbyReason.PIPELINE_GONE
        elif record.status is not PipelineStatus.ACTIVE:
            reason = StandbyReason.NOT_ACTIVE
        else:
            reason = StandbyReason.NOT_HOT
        kind = StandbyWriteKind.DELETE
        self.writes.append(StandbyWrite(name, kind, reason, None, self.supervisor_of(name)))

    def stay_or_move(self, record: PipelineRecord) -> StandbyReason | None:
        """A placed standby worker: why it moves, or None (it stays, rewritten for a new
        generation or other code). Called in submit order: the oldest keep their slots."""
        placement = self._placements[record.name]
        assert placement is not None and placement.supervisor is not None
        sid = placement.supervisor
        cause = self._move_cause(record, placement)
        if cause is not None:
            return cause
        self._standby[sid] += 1
        self.placed += 1
        if (placement.generation, placement.digest) != (record.generation, record.digest):
            written = placement.model_copy(update=self._fields(record))
            self.writes.append(
                StandbyWrite(
                    record.name,
                    StandbyWriteKind.REWRITE,
                    StandbyReason.NEW_GENERATION,
                    written,
                    sid,
                )
            )
        return None

    def _move_cause(
        self, record: PipelineRecord, placement: StandbyWorkerPlacement
    ) -> StandbyReason | None:
        sid = placement.supervisor
        assert sid is not None
        if sid == self._active_on(record.name):
            return StandbyReason.ACTIVE_HERE
        cause = self._cluster.leave_because(sid)
        if cause is not None:
            return cause
        beat = self._cluster.beat(placement)
        if beat is not None and beat.state in _GIVEN_UP and not _failed_other_code(record, beat):
            return _GIVEN_UP[beat.state]
        if self._standby[sid] >= self._cluster.slots(sid) - self._active[sid]:
            return StandbyReason.NO_SLOT
        return None

    def move(self, record: PipelineRecord, cause: StandbyReason) -> None:
        """Off its supervisor: to the one that fits best, or to none."""
        placement = self._placements[record.name]
        assert placement is not None
        refusals = list(placement.refusals)
        if cause in (StandbyReason.REFUSED, StandbyReason.FAILED):
            refusals = self._refused(placement, cause)
        target, unfit = self._choose(record, refusals, leaving=placement.supervisor)
        if target is None:
            self._unplaced(record, StandbyWriteKind.MOVE, cause, unfit, refusals)
            return
        self._put(record, StandbyWriteKind.MOVE, cause, target, refusals)

    def place(self, record: PipelineRecord) -> None:
        """A hot pipeline without a standby worker: on the supervisor that fits best."""
        placement = self._placements.get(record.name)
        refusals = list(placement.refusals) if placement is not None else []
        target, unfit = self._choose(record, refusals, leaving=None)
        if target is None:
            self._unplaced(record, StandbyWriteKind.PLACE, StandbyReason.PLACED, unfit, refusals)
            return
        self._put(record, StandbyWriteKind.PLACE, StandbyReason.PLACED, target, refusals)

    def unplace(
        self, record: PipelineRecord, kind: StandbyWriteKind, reason: StandbyReason, why: str
    ) -> None:
        """No standby worker for ``record``, for ``why`` (written only if that is news)."""
        placement = self._placements.get(record.name)
        refusals = list(placement.refusals) if placement is not None else []
        self._write_unplaced(record, kind, reason, why, refusals)

    def _unplaced(
        self,
        record: PipelineRecord,
        kind: StandbyWriteKind,
        reason: StandbyReason,
        unfit: Counter[_Unfit],
        refusals: list[StandbyWorkerRefusal],
    ) -> None:
        if not unfit:
            why = "no supervisor is registered"
        else:
            told = ", ".join(f"{each.value} ({unfit[each]})" for each in _Unfit if unfit[each])
            why = f"no supervisor fits: {told}"
        self._write_unplaced(record, kind, reason, why, refusals)

    def _write_unplaced(
        self,
        record: PipelineRecord,
        kind: StandbyWriteKind,
        reason: StandbyReason,
        why: str,
        refusals: list[StandbyWorkerRefusal],
    ) -> None:
        placement = self._placements.get(record.name)
        if (
            placement is not None
            and placement.supervisor is None
            and placement.unplaced_because == why
            and placement.refusals == refusals
        ):
            return  # said already: nothing written
        fields = {"supervisor": None, "unplaced_because": why, "refusals": refusals}
        written = self._placement(record, placement, fields)
        previous = placement.supervisor if placement is not None else None
        self.writes.append(StandbyWrite(record.name, kind, reason, written, previous))

    def _put(
        self,
        record: PipelineRecord,
        kind: StandbyWriteKind,
        reason: StandbyReason,
        target: str,
        refusals: list[StandbyWorkerRefusal],
    ) -> None:
        placement = self._placements.get(record.name)
        fields = {"supervisor": target, "unplaced_because": None, "refusals": refusals}
        written = self._placement(record, placement, fields)
        previous = placement.supervisor if placement is not None else None
        self.writes.append(StandbyWrite(record.name, kind, reason, written, previous))
        self._standby[target] += 1
        self.placed += 1

    def _placement(
        self,
        record: PipelineRecord,
        current: StandbyWorkerPlacement | None,
        fields: Mapping[str, object],
    ) -> StandbyWorkerPlacement:
        """The placement written: ``current``'s (what a newer release wrote kept), or a new
        one, of the record's generation and code, placed now."""
        update = {**self._fields(record), **fields, "placed": self._now}
        if current is not None:
            return current.model_copy(update=update)
        return StandbyWorkerPlacement.model_validate({"pipeline": record.name, **update})

    def _fields(self, record: PipelineRecord) -> dict[str, object]:
        """What a placement takes from the pipeline's record, and the term that writes it."""
        return {
            "epoch": self._epoch,
            "generation": record.generation,
            "digest": record.digest,
            "size_bytes": record.size_bytes,
            "blake3": record.blake3,
            "conf": assignment_conf(record),
        }

    def _refused(
        self, placement: StandbyWorkerPlacement, cause: StandbyReason
    ) -> list[StandbyWorkerRefusal]:
        """The placement's refusals with its supervisor's new one first, the newest kept."""
        assert placement.supervisor is not None
        beat = self._cluster.beat(placement)
        error = beat.error if beat is not None else None
        reason = f"{cause.value}: {error}" if error else cause.value
        refusal = StandbyWorkerRefusal(
            supervisor=placement.supervisor, reason=reason[:1024], at=self._now
        )
        return [refusal, *placement.refusals][:MAX_REFUSALS]

    def _choose(
        self,
        record: PipelineRecord,
        refusals: list[StandbyWorkerRefusal],
        *,
        leaving: str | None,
    ) -> tuple[str | None, Counter[_Unfit]]:
        """The supervisor that fits best (rule 3), or None and why each did not fit."""
        active = self._active_on(record.name)
        active_host = self._cluster.host(active)
        refused = {r.supervisor for r in refusals if self._now - r.at < REFUSAL_BACKOFF_SECS}
        unfit: Counter[_Unfit] = Counter()
        best: tuple[int, int, int, str] | None = None
        for sid in self._cluster.supervisors:
            why = self._unfit(sid, active, refused, leaving)
            if why is not None:
                unfit[why] += 1
                continue
            same_host = int(bool(active_host) and self._cluster.host(sid) == active_host)
            key = (same_host, self._standby[sid], -self._free(sid), sid)
            best = key if best is None or key < best else best
        return (best[-1] if best is not None else None), unfit

    def _unfit(
        self, sid: str, active: str | None, refused: Set[str], leaving: str | None
    ) -> _Unfit | None:
        if sid == active:
            return _Unfit.ACTIVE_HERE
        why = self._cluster.unfit(sid)
        if why is not None:
            return why
        if sid in refused:
            return _Unfit.REFUSED
        if self._free(sid) < 1:
            return _Unfit.NO_SLOT
        if sid == leaving:
            return _Unfit.LEAVING
        return None

    def _free(self, sid: str) -> int:
        """Slots free of active workers and of the standby workers kept or placed so far."""
        return self._cluster.slots(sid) - self._active[sid] - self._standby[sid]

    def _active_on(self, name: str) -> str | None:
        assignment = self._assignments.get(name)
        return assignment.supervisor if assignment is not None else None
