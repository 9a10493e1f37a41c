"""Which standby workers the leader promotes: the pure plan, from verdicts on supervisors.

Guarantees: a pipeline is promoted only off a supervisor under a verdict that says its active
worker is gone, or once a planned stop of its old worker is seen done (``stopped``), only to
the supervisor of its placement, never to the active's own, and only when that supervisor is
registered, neither suspected, cordoned nor under a verdict itself, and reports the
pipeline's standby worker READY with the generation and code of the pipeline's record now; at
most once per plan. Everything else is refused, with the reason, and moves the ordinary way (a
warm or cold start, ``scheduler.plan_round``)::

    plan = plan_promotions(
        verdicts={"s1": How.FLOOR},          # s1 silent for at least its floor
        fenced={},                           # How.FENCED: the pipelines each fence answered for
        pipelines=records,
        assignments=current,                 # {pipeline: (Assignment, znode version)}
        placements=placements,               # {pipeline: (placement or None, znode version)}
        heartbeats=supervisor_beats,         # {supervisor: SupervisorHeartbeat}
        suspected={"s1"}, registered={"s1", "s2"},
        epoch=term.epoch, now=time.time(),
        stopped={"clicks": "s3"},            # How.STOPPED: drained off s3 (or a new
                                             # generation took it off), its worker stopped
        cordoned={"s4"},                     # no promotion to a cordoned supervisor
    )
    plan.promotions   # (Promotion("orders", from_supervisor="s1", to_supervisor="s2", ...),)
    plan.refusals     # (PromotionRefusal("web", "s1", How.FLOOR, Refusal.NOT_READY, ...),)

**The verdicts** (``How``): ``fenced``, the supervisor answered a pipeline fence for the
pipeline in this term (its worker is gone; ``fenced`` names the pipelines each fence covered,
and a pipeline of that supervisor outside it is refused: its worker may still run);
``floor``, the supervisor has been silent for at least its floor, so its hot workers have
stopped themselves (``beat_watch``); ``dead``, the round judged it dead. ``stopped`` is a
pipeline's, never a supervisor's: a drain took the pipeline's assignment off the supervisor
and no live supervisor reports its old worker running any more (the drain's second step,
``scheduler`` rule 5), or a new generation did, its standby worker READY for it
(``update_moves``, ``scheduler`` rule 2). Its other pipelines may still run there (a drain
that found no room for them keeps them), so ``stopped`` as a verdict on a supervisor is refused
(``ValueError``); the round passes ``stopped``, pipeline by pipeline.

Only a pipeline that runs (ACTIVE) and asks for a standby worker (``pipeline.standby: hot``) is
considered: another pipeline of that supervisor is not refused, it is none of this plan's
business (nothing changes for pipelines that did not ask). Each promotion carries the new
assignment and its history change (``standby_promoted``), and the znode versions its
transaction checks: the assignment and the placement as read, so that a plan made from a stale
read writes nothing. A ``stopped`` pipeline has no assignment (the drain deleted it): its
promotion creates one (``assignment_version`` None), which fails if anything created one since.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from enum import StrEnum

from stratus.api.records import (
    Assignment,
    AssignmentChange,
    AssignmentReason,
    PipelineRecord,
    SupervisorHeartbeat,
)
from stratus.api.standby_workers import (
    StandbyWorkerBeat,
    StandbyWorkerPlacement,
    StandbyWorkerState,
    wants_standby_worker,
)
from stratus.nimbus.scheduling.scheduler import assignment_of


class How(StrEnum):
    """Why the active worker of a supervisor's pipelines is known to be gone."""

    FENCED = "fenced"  # the supervisor answered a pipeline fence for it in this term
    FLOOR = "floor"  # silent for at least its floor: its hot workers stopped themselves
    DEAD = "dead"  # the round judged it dead (nimbus.supervisor.timeout.secs)
    STOPPED = "stopped"  # a pipeline's: drained or updated off it, its old worker stopped


class Refusal(StrEnum):
    """Why a hot pipeline off a supervisor under a verdict is not promoted."""

    NOT_FENCED = "not_fenced"  # a fence answered, but not for this pipeline
    NO_STANDBY_WORKER = "no_standby_worker"  # no placement, or one placed nowhere
    UNREADABLE_PLACEMENT = "unreadable_placement"  # its znode does not decode
    ON_ACTIVE_SUPERVISOR = "on_active_supervisor"  # placed where the active worker was
    STANDBY_UNREGISTERED = "standby_unregistered"
    STANDBY_UNDER_VERDICT = "standby_under_verdict"  # its supervisor's workers are gone too
    STANDBY_SUSPECTED = "standby_suspected"
    STANDBY_CORDONED = "standby_cordoned"  # cordoned or drained: it takes no new pipeline
    STANDBY_STOPPING = "standby_stopping"  # its supervisor is shutting down
    NOT_REPORTED = "not_reported"  # its supervisor's heartbeat does not report it
    NOT_READY = "not_ready"  # FETCHING, STARTING, REFUSED or FAILED
    STALE_GENERATION = "stale_generation"  # ready for another generation than the record's
    STALE_DIGEST = "stale_digest"  # ready for other code than the record's


@dataclass(frozen=True)
class Promotion:
    """One pipeline's standby worker to promote, in one fenced transaction: write
    ``assignment`` (checking ``assignment_version``; None: there is none, a drain deleted
    it, and the write creates it), delete the placement (checking ``placement_version``) and
    record ``change``. ``cold_start_fenced``: when the leader asked the pipeline fence of its
    worker's start in place, cold (wall, monotonic), for the trail; None for any other."""

    pipeline: str
    from_supervisor: str
    to_supervisor: str
    how: How
    assignment_version: int | None
    placement_version: int
    assignment: Assignment
    change: AssignmentChange
    cold_start_fenced: tuple[float, float] | None = None


@dataclass(frozen=True)
class PromotionRefusal:
    """A hot pipeline off ``from_supervisor`` that is not promoted, and why; ``standby`` is
    the supervisor of its placement, if any."""

    pipeline: str
    from_supervisor: str
    how: How
    reason: Refusal
    standby: str | None
    detail: str


@dataclass(frozen=True)
class PromotionPlan:
    """What the promotions are; empty when no hot pipeline is off a supervisor under a
    verdict."""

    promotions: tuple[Promotion, ...] = field(default_factory=tuple)
    refusals: tuple[PromotionRefusal, ...] = field(default_factory=tuple)

    @property
    def promoted(self) -> dict[str, Promotion]:
        """The promotions by pipeline."""
        return {promotion.pipeline: promotion for promotion in self.promotions}


def plan_promotions(  # noqa: PLR0913 keyword-only: the snapshot a promotion plans from
    *,
    verdicts: Mapping[str, How],
    pipelines: Mapping[str, PipelineRecord],
    assignments: Mapping[str, tuple[Assignment, int]],
    placements: Mapping[str, tuple[StandbyWorkerPlacement | None, int]],
    heartbeats: Mapping[str, SupervisorHeartbeat],
    suspected: Set[str],
    registered: Set[str],
    epoch: int,
    now: float,
    fenced: Mapping[str, Set[str]] | None = None,
    stopped: Mapping[str, str] | None = None,
    cordoned: Set[str] = frozenset(),
) -> PromotionPlan:
    """The promotions the rules of the module docstring allow, and the refusals.

    ``verdicts``: supervisor -> ``How`` (never ``stopped``). ``assignments`` and
    ``placements``: as read, with their znode versions (a placement None: unreadable).
    ``heartbeats``: each supervisor's newest heartbeat, whose ``standby_workers`` report its
    standby workers. ``suspected``: the supervisors the failure detector suspects.
    ``registered``: the supervisors with a registration. ``fenced``: for each supervisor
    under a ``fenced`` verdict, the pipelines its fence answered for. ``stopped``: pipeline
    -> the supervisor a drain (or a new generation) took it off, for the pipelines with no
    assignment whose old worker no live supervisor reports running. ``cordoned``: the
    cordoned supervisors (drained ones too). ``epoch`` and ``now`` go into each new
    assignment and change. ``ValueError`` for a verdict that is not a ``How``, for
    ``stopped`` as a supervisor's verdict, and for a ``stopped`` pipeline that has an assignment.
    """
    hows = {supervisor: _how(supervisor, how) for supervisor, how in verdicts.items()}
    stopped = stopped or {}
    assigned = sorted(set(stopped) & set(assignments))
    if assigned:
        name = assigned[0]
        raise ValueError(
            f"pipeline {name} is listed as stopped off {stopped[name]}, but it is assigned "
            f"to {assignments[name][0].supervisor}: only a pipeline with no assignment is "
            "promoted as stopped"
        )
    promotions: list[Promotion] = []
    refusals: list[PromotionRefusal] = []
    others = _Others(hows, heartbeats, suspected, registered, fenced or {}, cordoned)
    hot = sorted(
        (record.submitted, name)
        for name, record in pipelines.items()
        if (name in assignments or name in stopped)
        and record.status.runs
        and wants_standby_worker(record.conf)
    )
    for _, name in hot:
        record = pipelines[name]
        source, how, assignment_version = _source(name, assignments, stopped, hows)
        if how is None:
            continue
        entry = placements.get(name)
        placement = entry[0] if entry is not None else None
        standby = placement.supervisor if placement is not None else None
        refused = others.refusal(name, record, source, how, entry)
        if refused is not None:
            reason, detail = refused
            refusals.append(PromotionRefusal(name, source, how, reason, standby, detail))
            continue
        assert entry is not None and standby is not None  # refusal() checked both
        promotions.append(
            Promotion(
                pipeline=name,
                from_supervisor=source,
                to_supervisor=standby,
                how=how,
                assignment_version=assignment_version,
                placement_version=entry[1],
                assignment=assignment_of(name, record, standby, epoch=epoch, now=now),
                change=AssignmentChange(
                    at=now,
                    epoch=epoch,
                    reason=AssignmentReason.STANDBY_PROMOTED,
                    supervisor=standby,
                    previous=source,
                    generation=record.generation,
                    digest=record.digest,
                ),
            )
        )
    return PromotionPlan(tuple(promotions), tuple(refusals))


def _source(
    name: str,
    assignments: Mapping[str, tuple[Assignment, int]],
    stopped: Mapping[str, str],
    hows: Mapping[str, How],
) -> tuple[str, How | None, int | None]:
    """Where ``name``'s active worker was, the verdict that says it is gone (None: none), and
    the version of its assignment (None: it has none)."""
    if name in stopped:
        return stopped[name], How.STOPPED, None
    assignment, version = assignments[name]
    return assignment.supervisor, hows.get(assignment.supervisor), version


def _how(supervisor: str, how: str) -> How:
    try:
        verdict = How(how)
    except ValueError:
        raise ValueError(
            f"the verdict on supervisor {supervisor} is {how!r}, not one of "
            f"{', '.join(h.value for h in How if h is not How.STOPPED)}"
        ) from None
    if verdict is How.STOPPED:
        raise ValueError(
            f"the verdict on supervisor {supervisor} is 'stopped', which is a pipeline's "
            "(a planned stop whose old worker stopped): pass those pipelines in stopped"
        )
    return verdict


@dataclass(frozen=True)
class _Others:
    """What a promotion checks beyond the pipeline: the other supervisors and the fences."""

    verdicts: Mapping[str, How]
    heartbeats: Mapping[str, SupervisorHeartbeat]
    suspected: Set[str]
    registered: Set[str]
    fenced: Mapping[str, Set[str]]
    cordoned: Set[str]

    def refusal(
        self,
        name: str,
        record: PipelineRecord,
        source: str,
        how: How,
        entry: tuple[StandbyWorkerPlacement | None, int] | None,
    ) -> tuple[Refusal, str] | None:
        """Why ``name`` may not be promoted off ``source``, in words; None: it may."""
        if how is How.FENCED and name not in self.fenced.get(source, frozenset()):
            return Refusal.NOT_FENCED, f"the fence {source} answered did not name {name}"
        if entry is None:
            return Refusal.NO_STANDBY_WORKER, "no standby worker is placed"
        placement = entry[0]
        if placement is None:
            return Refusal.UNREADABLE_PLACEMENT, "its placement does not decode"
        target = placement.supervisor
        if target is None:
            because = placement.unplaced_because or "no reason given"
            return Refusal.NO_STANDBY_WORKER, f"placed nowhere: {because}"
        if target == source:
            return Refusal.ON_ACTIVE_SUPERVISOR, f"its standby worker is on {source} too"
        unfit = self._unfit(target)
        if unfit is not None:
            return unfit
        stale = _stale(placement.generation, placement.digest, record.generation, record.digest)
        if stale is not None:
            return stale[0], f"placed for {stale[1]}"
        heartbeat = self.heartbeats.get(target)
        if heartbeat is None:
            return Refusal.NOT_REPORTED, f"{target} has no heartbeat"
        if heartbeat.stopping:
            return Refusal.STANDBY_STOPPING, f"{target} is stopping"
        beat = _beat_of(heartbeat, name, placement)
        if beat is None:
            return Refusal.NOT_REPORTED, f"{target}'s heartbeat does not report it"
        stale = _stale(beat.generation, beat.digest, record.generation, record.digest)
        if stale is not None:
            return stale[0], f"{target} reports one for {stale[1]}"
        if beat.state is not StandbyWorkerState.READY:
            error = f": {beat.error}" if beat.error else ""
            return Refusal.NOT_READY, f"{target} reports it {beat.state.value}{error}"
        return None

    def _unfit(self, target: str) -> tuple[Refusal, str] | None:
        """Why supervisor ``target`` takes no promotion, whatever the pipeline; None: it may."""
        if target not in self.registered:
            return Refusal.STANDBY_UNREGISTERED, f"{target} is not registered"
        if target in self.verdicts:
            return Refusal.STANDBY_UNDER_VERDICT, f"{target} is {self.verdicts[target].value} too"
        if target in self.suspected:
            return Refusal.STANDBY_SUSPECTED, f"{target} is suspected"
        if target in self.cordoned:
            return Refusal.STANDBY_CORDONED, f"{target} is cordoned"
        return None


def _stale(
    generation: int, digest: str, wanted: int, wanted_digest: str
) -> tuple[Refusal, str] | None:
    """Whether a standby worker of ``generation`` and ``digest`` is not the record's."""
    if generation != wanted:
        return Refusal.STALE_GENERATION, f"generation {generation}, not {wanted}"
    if digest != wanted_digest:
        return Refusal.STALE_DIGEST, f"code {digest[:12]}, not {wanted_digest[:12]}"
    return None


def _beat_of(
    heartbeat: SupervisorHeartbeat, pipeline: str, placement: StandbyWorkerPlacement
) -> StandbyWorkerBeat | None:
    """The pipeline's standby worker as the heartbeat reports it: the one of the placement's
    generation and code if several are reported (one on its way out), else any."""
    beats = [beat for beat in heartbeat.standby_workers if beat.pipeline == pipeline]
    for beat in beats:
        if beat.generation == placement.generation and beat.digest == placement.digest:
            return beat
    return beats[0] if beats else None
