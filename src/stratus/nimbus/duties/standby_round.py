"""The standby workers' part of a scheduling round: promotions, placements, the lane's snapshot.

Before the round plans, the standby worker of each hot pipeline of a supervisor judged dead
(verdict ``dead``), and of each hot pipeline a drain or a new generation took off a
supervisor once its old worker stopped (``stopped``), is promoted when it is READY
(``promotion_plan``: one fenced transaction each); then the round asks which hot pipelines'
new generations wait for their standby worker or go to it (``update_moves``, the hold counted
on the leader's clock); after the plan is applied, the standby workers are placed against the
assignments as it left them (``standby_plan``), the failover lane gets the hot pipelines of
the round's read (``HotSnapshot``, with those whose worker starts cold while their standby
worker is READY: ``cold_starts``, for the lane to fence), and the metrics their standby
workers' census
(``standby_census``). A promotion refused is logged each round and counted once per verdict
(``RefusalMemory``). Kept apart from the round so that the round reads as the ordinary
scheduling, with the standby workers' collaborators (their table, the promoter, the lane)
behind one small interface; each is optional, and without it its step does nothing::

    standby = StandbyRound(settings.standby, table=table, promoter=promoter, lane=lane)
    placements = standby.read_placements()
    if not standby.promote(term, read, dead=dead, stopped=stopped, cordoned=cordoned,
                           silent_for=..., floor_secs=...):
        return  # a version moved: the next round reads again
    updates = standby.update_moves(term, read, serving=..., dead=..., suspected=...,
                                   cordoned=...)   # updates.holding, updates.switching
    standby.take_census(read)   # standby.census: the metrics' (any thread)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from stratus.api.clock import Clock
from stratus.api.records import (
    Assignment,
    PipelineRecord,
    SupervisorHeartbeat,
    SupervisorSummary,
)
from stratus.api.standby_workers import StandbyWorkerBeat, StandbyWorkerPlacement
from stratus.coordination.leadership import Leadership
from stratus.nimbus.duties.cold_starts import starting_cold
from stratus.nimbus.duties.worker_outcomes import Workers, current_beat
from stratus.nimbus.failover.lane import FailoverLane, hot_snapshot
from stratus.nimbus.failover.promotion import Promoter
from stratus.nimbus.failover.promotion_plan import (
    How,
    Promotion,
    PromotionRefusal,
    Refusal,
    plan_promotions,
)
from stratus.nimbus.failover.refusals import RefusalMemory
from stratus.nimbus.failover.update_moves import HoldMemory, UpdateMoves, plan_update_moves
from stratus.nimbus.scheduling.standby_census import StandbyCensus, standby_census
from stratus.nimbus.scheduling.standby_plan import placement_beat, plan_standby_workers
from stratus.nimbus.scheduling.standby_workers import Placements, StandbyWorkerTable
from stratus.nimbus.settings import StandbySettings

log = logging.getLogger(__name__)


@dataclass
class RoundRead:
    """What a scheduling round read, as the promotions leave it: ``current`` (each
    assignment with its version), ``assignments`` and ``placements`` change with each
    promotion; the rest is read only."""

    pipelines: Mapping[str, PipelineRecord]
    current: dict[str, tuple[Assignment, int]]
    assignments: dict[str, Assignment]
    placements: dict[str, tuple[StandbyWorkerPlacement | None, int]]
    supervisors: Mapping[str, SupervisorHeartbeat]  # the heartbeats
    registered: Mapping[str, SupervisorSummary]


class StandbyRound:
    """The standby workers' steps of a scheduling round; see the module docstring.
    ``on_refused``: each refused promotion once per verdict on its supervisor."""

    def __init__(
        self,
        settings: StandbySettings,
        *,
        table: StandbyWorkerTable | None = None,
        promoter: Promoter | None = None,
        lane: FailoverLane | None = None,
        on_refused: Callable[[PromotionRefusal], None] = lambda _refusal: None,
        wall: Clock = time.time,
        clock: Clock = time.monotonic,
    ) -> None:
        self._settings = settings
        self._table = table  # None: no standby worker is ever placed (tests of other rules)
        self._promoter = promoter  # None: the round promotes no standby worker
        self._lane = lane  # None: no supervisor is suspected on the fast beats
        self._wall = wall  # the records' timestamps, and the age of an assignment
        self._on_refused = on_refused
        self._told = RefusalMemory()  # the refusals counted, once per verdict
        self._holds = HoldMemory(clock)  # since when each new generation waits
        self._held: frozenset[str] = frozenset()  # the last round's holds, to log their ends
        self.census: StandbyCensus | None = None  # the last round's (read by any thread)

    def read_placements(self) -> dict[str, tuple[StandbyWorkerPlacement | None, int]]:
        """Every standby worker's placement, with its version (none without a table)."""
        return self._table.read_all() if self._table is not None else {}

    def lane_suspected(self) -> frozenset[str]:
        """The supervisors the failover lane suspects (none without a lane)."""
        return self._lane.suspected() if self._lane is not None else frozenset()

    def fence_held(self, read: RoundRead) -> frozenset[str]:
        """The pipelines the failover lane hands the round: a fence it asked stopped their
        worker, their supervisor holds them until a newer assignment, and their promotion was
        refused (``FailoverLane.fence_held``; none without a lane)."""
        return self._lane.fence_held(read.current) if self._lane is not None else frozenset()

    def promote(
        self,
        term: Leadership,
        read: RoundRead,
        *,
        dead: set[str],
        stopped: Mapping[str, str],
        cordoned: set[str],
        silent_for: Callable[[str], float],
        floor_secs: float,
    ) -> bool:
        """Promote the standby workers of the hot pipelines of dead supervisors (verdict
        ``dead``), of those a drain or a new generation took off a supervisor whose old
        worker stopped (``stopped``: pipeline -> that supervisor), and of those a fence of the
        failover lane stopped and handed to the round (``fence_held``: their supervisor was
        heard again before the lane promoted them), never to a ``cordoned`` supervisor, and
        apply the promotions to ``read``; False when one found a version moved (the lane
        promoted it meanwhile, or the read is stale): the next round reads again.
        ``silent_for`` says how long a dead supervisor has been silent, for the trail, and
        ``floor_secs`` the silence its verdict waited for (a planned stop's waited for none).
        A held pipeline whose standby worker is not READY is moved by the round as before."""
        fenced = self._fenced_off(read, dead)
        self._told.keep(under=dead | set(stopped.values()) | set(fenced))
        if self._promoter is None or not (dead or stopped or fenced):
            return True
        plan = plan_promotions(
            verdicts={**dict.fromkeys(fenced, How.FENCED), **dict.fromkeys(dead, How.DEAD)},
            fenced=fenced,
            stopped=stopped,
            pipelines=read.pipelines,
            assignments=read.current,
            placements=read.placements,
            heartbeats=read.supervisors,
            suspected=set(self._lane.suspected()) if self._lane is not None else set(),
            registered=set(read.registered),
            cordoned=cordoned,
            epoch=term.epoch,
            now=self._wall(),
        )
        refusals = [r for r in plan.refusals if r.reason is not Refusal.NOT_FENCED]
        for refusal in refusals:
            log.info(
                "event=promotion_refused pipeline=%s epoch=%d from=%s how=%s reason=%s "
                "standby=%s action=moved_the_ordinary_way",
                refusal.pipeline,
                term.epoch,
                refusal.from_supervisor,
                refusal.how.value,
                refusal.reason.value,
                refusal.standby or "-",
            )
        for refusal in self._told.news(refusals):
            self._on_refused(refusal)
        for planned in plan.promotions:
            name = planned.pipeline
            promotion = self._with_cold_start(planned)
            # a drain, an update, or a fence's answer (its supervisor heard again): no
            # silence waited for, no floor
            waited = promotion.how is How.DEAD
            if not self._promoter.promote(
                term,
                promotion,
                silent_secs=silent_for(promotion.from_supervisor) if waited else 0.0,
                floor_secs=floor_secs if waited else 0.0,
            ):
                return False
            written = promotion.assignment_version
            read.current[name] = (promotion.assignment, 0 if written is None else written + 1)
            read.assignments[name] = promotion.assignment
            read.placements.pop(name, None)
        return True

    def _with_cold_start(self, promotion: Promotion) -> Promotion:
        """``promotion`` with when the lane asked the fence of its cold start, if it did."""
        if promotion.how is not How.FENCED or self._lane is None:
            return promotion
        asked = self._lane.cold_start_fenced(promotion.pipeline, promotion.assignment_version)
        return replace(promotion, cold_start_fenced=asked) if asked is not None else promotion

    def _fenced_off(self, read: RoundRead, dead: set[str]) -> dict[str, set[str]]:
        """The pipelines the lane's fences stopped and hold (``fence_held``), by the
        supervisor each was stopped on, but those of ``dead`` supervisors (promoted as
        ``dead``). Their other pipelines run on: a ``fenced`` verdict names only these."""
        by_supervisor: dict[str, set[str]] = {}
        for name in self.fence_held(read):
            supervisor = read.assignments[name].supervisor
            if supervisor not in dead:
                by_supervisor.setdefault(supervisor, set()).add(name)
        return by_supervisor

    def update_moves(
        self,
        term: Leadership,
        read: RoundRead,
        *,
        serving: set[str],
        dead: set[str],
        suspected: set[str],
        cordoned: set[str],
    ) -> UpdateMoves:
        """Which hot pipelines' new generations wait for their standby worker, which go to
        it, and which are applied in place (``update_moves``; every one in place without a
        ``StandbyWorkerTable``); a hold's start and end are logged. ``serving``: the
        pipelines whose old worker runs."""
        moves = plan_update_moves(
            pipelines=read.pipelines,
            assignments=read.current,
            placements=read.placements,
            heartbeats=read.supervisors,
            serving=serving,
            held_for=self._holds.waited(read.pipelines, read.current),
            hold_secs=self._settings.update_hold_secs if self._table is not None else 0.0,
            dead=dead,
            suspected=suspected,
            registered=set(read.registered),
            cordoned=cordoned,
        )
        for name in sorted(moves.holding - self._held):
            log.info(
                "event=update_held pipeline=%s epoch=%d generation=%d supervisor=%s "
                "standby=%s hold_secs=%g",
                name,
                term.epoch,
                read.pipelines[name].generation,
                read.assignments[name].supervisor,
                _standby_of(read, name),
                self._settings.update_hold_secs,
            )
        for name, why in sorted(moves.in_place.items()):
            if name in self._held:
                log.warning(
                    "event=update_in_place pipeline=%s epoch=%d generation=%d reason=%s",
                    name,
                    term.epoch,
                    read.pipelines[name].generation,
                    why.value,
                )
        self._held = moves.holding
        return moves

    def place(
        self,
        term: Leadership,
        read: RoundRead,
        assignments: Mapping[str, Assignment],
        *,
        cordoned: set[str],
        dead: set[str],
        suspected: set[str],
        rewritten: set[str],
        workers: Workers,
    ) -> set[str]:
        """Place, move, rewrite and drop the standby workers of hot pipelines against
        ``assignments`` (as the round's plan left them); write what changes, fenced, each
        with the check that the pipeline's assignment is still as the round read it (but
        those the round ``rewritten`` itself); the pipelines whose placement it wrote (none
        without a ``StandbyWorkerTable``). A pipeline whose active worker (in ``workers``,
        the heartbeats) has not committed a batch of a young assignment is placed later
        (``awaiting_first_batch``)."""
        if self._table is None:
            return set()
        now = self._wall()
        plan = plan_standby_workers(
            pipelines=read.pipelines,
            assignments=assignments,
            supervisors=read.registered,
            heartbeats=read.supervisors,
            placements={name: placement for name, (placement, _) in read.placements.items()},
            cordoned=cordoned,
            dead=dead,
            suspected=suspected,
            stopping={sid for sid, beat in read.supervisors.items() if beat.stopping},
            max_workers=self._settings.max_workers,
            needs_beat_lease=self._settings.needs_beat_lease,
            epoch=term.epoch,
            now=now,
            deferred=awaiting_first_batch(
                assignments, workers, now=now, wait_secs=self._settings.place_wait_secs
            ),
        )
        if plan.empty:
            return set()
        unchanged = {
            name: version for name, (_, version) in read.current.items() if name not in rewritten
        }
        self._table.apply(term, plan, read.placements, unchanged)
        return {write.pipeline for write in plan.writes}

    def hand_to_lane(
        self,
        term: Leadership,
        read: RoundRead,
        *,
        written: set[str],
        workers: Workers,
        cordoned: set[str],
    ) -> None:
        """Hand the failover lane what it promotes from: the hot pipelines of the round's
        read, but those whose znodes the round wrote (their versions read no longer hold),
        with those whose worker starts cold while their standby worker is READY (in
        ``workers``, the heartbeats: ``cold_starts``), for the lane to fence."""
        if self._lane is None:
            return
        cold = starting_cold(
            pipelines=read.pipelines,
            assignments=read.current,
            placements=read.placements,
            heartbeats=read.supervisors,
            workers=workers,
            registered=set(read.registered),
            suspected=self._lane.suspected(),
            cordoned=cordoned,
            epoch=term.epoch,
            now=self._wall(),
        )
        self._lane.note(
            hot_snapshot(
                term.epoch,
                read.pipelines,
                read.current,
                read.placements,
                read.supervisors,
                written=written,
                cold_starts=cold,
                cordoned=cordoned,
            )
        )

    def take_census(self, read: RoundRead) -> None:
        """The census of the round's read, as its promotions left it (``census``)."""
        self.census = standby_census(read.pipelines, read.placements, read.supervisors)


def _standby_of(read: RoundRead, name: str) -> str:
    """The supervisor of ``name``'s standby worker as the round read it, or ``-``."""
    placement, _ = read.placements.get(name, (None, 0))
    return placement.supervisor if placement is not None and placement.supervisor else "-"


def reserved_slots(placements: Placements) -> dict[str, int]:
    """The standby workers placed on each supervisor, whose slots pipelines take last."""
    reserved: dict[str, int] = {}
    for placement, _ in placements.values():
        if placement is not None and placement.supervisor is not None:
            reserved[placement.supervisor] = reserved.get(placement.supervisor, 0) + 1
    return reserved


def reported_standby(
    placements: Placements, heartbeats: Mapping[str, SupervisorHeartbeat]
) -> dict[str, StandbyWorkerBeat]:
    """What the supervisor of each pipeline's standby worker reports of it, for its
    placement's generation and code (pipelines it reports nothing of are left out)."""
    return {
        name: beat
        for name, (placement, _) in placements.items()
        if placement is not None and (beat := placement_beat(placement, heartbeats)) is not None
    }


def awaiting_first_batch(
    assignments: Mapping[str, Assignment], workers: Workers, *, now: float, wait_secs: float
) -> set[str]:
    """The assigned pipelines whose worker has not yet reported a committed batch (or an
    sdp run) of its assignment, made less than ``wait_secs`` before ``now`` (wall clock, the
    assignment's ``assigned``): a promoted standby worker's first batch, a moved pipeline's
    or a new one's. Their next standby worker is placed once that batch is in, so that its
    start does not take the CPU they recover with; ``wait_secs`` bounds the wait for a
    pipeline that commits nothing (no new data) or whose worker fails. An assignment dated
    more than ``wait_secs`` ahead of ``now`` (a nimbus whose clock ran ahead wrote it) waits
    for nothing either, so that a skewed clock delays a standby worker by at most twice the
    bound, never by the skew."""
    return {
        name
        for name, assignment in assignments.items()
        if abs(now - assignment.assigned) < wait_secs and not _committed(assignment, workers)
    }


def _committed(assignment: Assignment, workers: Workers) -> bool:
    """Whether the worker of ``assignment`` reported a batch committed (or an sdp run)."""
    beat = current_beat(assignment, workers)
    if beat is None or beat.epoch != assignment.epoch:
        return False
    return beat.last_batch_id >= 0 or beat.runs > 0
