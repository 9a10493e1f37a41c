"""Whether a hot pipeline's new generation goes through its standby worker: the pure plan.

An update, a rollback, a restart or a rebalance gives a pipeline a new generation, which the
round applies in place (its worker restarts on its supervisor: a Spark start). A pipeline with
``pipeline.standby: hot`` may instead keep its old worker running while its standby worker,
whose placement the round rewrites for the new generation, starts for it; once that worker is
READY, the old worker stops and the standby worker is promoted (``how: stopped``, as after a
drain): the gap is a stop, a round and a first batch. For each hot pipeline whose assignment
is of another generation or code than its record, this plan says which::

    moves = plan_update_moves(
        pipelines=records,
        assignments=current,          # {pipeline: (Assignment, znode version)}
        placements=placements,        # {pipeline: (placement or None, znode version)}
        heartbeats=supervisor_beats,  # {supervisor: SupervisorHeartbeat}
        serving={"orders", "ads"},    # their old worker runs, as its supervisor reports it
        held_for={"ads": 30.0},       # how long each new generation has waited already
        hold_secs=120.0,              # nimbus.standby.update.hold.secs
        dead=set(), suspected=set(), registered={"s1", "s2"}, cordoned=set(),
    )
    moves.holding     # {"ads"}: its old assignment stays; its standby worker is on its way
    moves.switching   # {"orders"}: its standby worker is READY: the assignment goes
    moves.in_place    # {"web": "no_standby_worker"}: rewritten in place, and why

**Switching** is the drain's rule asked ahead of time: the pipeline's standby worker would be
promoted (``promotion_plan``, ``stopped``) if its old worker had stopped now: READY for the
record's generation and code, on a supervisor that is registered and neither under a verdict,
suspected, cordoned nor stopping. **Holding**: its old worker runs (a heartbeat of its
assignment's generation in no final state: a worker that failed or stopped gains nothing by
waiting, such as one whose update is rolled back after its trial failed), the new
generation has waited less than ``hold_secs``, and the standby worker is on its way: placed
on a supervisor, and not reported REFUSED or FAILED for the new generation and code (its
placement not yet rewritten, its supervisor not reporting it yet, FETCHING or STARTING, or
its supervisor unfit now: the standby workers' round moves it). **In place**, with the reason,
in every other case; with ``hold_secs`` 0 every new generation is applied in place. An
update whose standby worker FAILED is withdrawn before this plan sees it, where it can be
(``update_withdrawal``): ``standby_gave_up`` is left for a REFUSED one, and for a FAILED one
with no version before it to go back to.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from enum import StrEnum

from stratus.api.clock import Clock
from stratus.api.records import Assignment, PipelineRecord, SupervisorHeartbeat
from stratus.api.standby_workers import (
    StandbyWorkerPlacement,
    StandbyWorkerState,
    wants_standby_worker,
)
from stratus.nimbus.failover.promotion_plan import How, Refusal, plan_promotions


class InPlace(StrEnum):
    """Why a hot pipeline's new generation is applied in place."""

    HOLD_OFF = "hold_off"  # nimbus.standby.update.hold.secs is 0
    OLD_WORKER_NOT_RUNNING = "old_worker_not_running"  # no heartbeat, or a final state
    NO_STANDBY_WORKER = "no_standby_worker"  # no placement, or one placed nowhere
    STANDBY_GAVE_UP = "standby_gave_up"  # REFUSED, or FAILED and not withdrawn
    HOLD_EXPIRED = "hold_expired"  # waited nimbus.standby.update.hold.secs


# the refusals of a promotion that end the wait at once: there is no standby worker to wait for
_NOTHING_TO_WAIT_FOR = frozenset(
    {Refusal.NO_STANDBY_WORKER, Refusal.UNREADABLE_PLACEMENT, Refusal.ON_ACTIVE_SUPERVISOR}
)
_GAVE_UP = frozenset({StandbyWorkerState.REFUSED, StandbyWorkerState.FAILED})


@dataclass(frozen=True)
class UpdateMoves:
    """What the round does with each hot pipeline's new generation."""

    holding: frozenset[str] = frozenset()
    switching: frozenset[str] = frozenset()
    in_place: Mapping[str, InPlace] = field(default_factory=dict)


def plan_update_moves(  # noqa: PLR0913 keyword-only: the snapshot the round plans from
    *,
    pipelines: Mapping[str, PipelineRecord],
    assignments: Mapping[str, tuple[Assignment, int]],
    placements: Mapping[str, tuple[StandbyWorkerPlacement | None, int]],
    heartbeats: Mapping[str, SupervisorHeartbeat],
    serving: Set[str],
    held_for: Mapping[str, float],
    hold_secs: float,
    dead: Set[str],
    suspected: Set[str],
    registered: Set[str],
    cordoned: Set[str],
) -> UpdateMoves:
    """The rules of the module docstring, for each ACTIVE hot pipeline whose assignment is of
    another generation or code than its record. ``serving``: the pipelines whose old worker
    runs. ``held_for``: how long each new generation has waited (absent: it just came).
    ``dead``, ``suspected``, ``registered``, ``cordoned``: what the round knows of the
    supervisors, as the promotions take it. ``ValueError`` for a negative ``hold_secs``."""
    if hold_secs < 0:
        raise ValueError(f"nimbus.standby.update.hold.secs must be 0 or more, got {hold_secs}")
    changed = new_generations(pipelines, assignments)
    if not changed:
        return UpdateMoves()
    if hold_secs == 0:
        return UpdateMoves(in_place=dict.fromkeys(changed, InPlace.HOLD_OFF))
    ahead = plan_promotions(  # as if each old worker had stopped now: the drain's own rule
        verdicts=dict.fromkeys(dead, How.DEAD),
        stopped=changed,
        pipelines=pipelines,
        assignments={},
        placements=placements,
        heartbeats=heartbeats,
        suspected=suspected,
        registered=registered,
        cordoned=cordoned,
        epoch=0,
        now=0.0,
    )
    refused = {refusal.pipeline: refusal.reason for refusal in ahead.refusals}
    holding: set[str] = set()
    switching: set[str] = set()
    in_place: dict[str, InPlace] = {}
    for name in changed:
        if name not in serving:
            in_place[name] = InPlace.OLD_WORKER_NOT_RUNNING
        elif name not in refused:
            switching.add(name)
        elif refused[name] in _NOTHING_TO_WAIT_FOR:
            in_place[name] = InPlace.NO_STANDBY_WORKER
        elif _gave_up(pipelines[name], placements[name][0], heartbeats):
            in_place[name] = InPlace.STANDBY_GAVE_UP
        elif held_for.get(name, 0.0) >= hold_secs:
            in_place[name] = InPlace.HOLD_EXPIRED
        else:
            holding.add(name)
    return UpdateMoves(frozenset(holding), frozenset(switching), in_place)


def _gave_up(
    record: PipelineRecord,
    placement: StandbyWorkerPlacement | None,
    heartbeats: Mapping[str, SupervisorHeartbeat],
) -> bool:
    """Whether the supervisor of ``placement`` reports the standby worker of ``record``'s
    generation and code REFUSED or FAILED."""
    if placement is None or placement.supervisor is None:
        return False
    heartbeat = heartbeats.get(placement.supervisor)
    return heartbeat is not None and any(
        beat.pipeline == record.name
        and (beat.generation, beat.digest) == (record.generation, record.digest)
        and beat.state in _GAVE_UP
        for beat in heartbeat.standby_workers
    )


def new_generations(
    pipelines: Mapping[str, PipelineRecord], assignments: Mapping[str, tuple[Assignment, int]]
) -> dict[str, str]:
    """The ACTIVE hot pipelines whose assignment is of another generation or code than their
    record, with the supervisor of that assignment."""
    return {
        name: assignment.supervisor
        for name, (assignment, _) in assignments.items()
        if (record := pipelines.get(name)) is not None
        and record.status.runs
        and wants_standby_worker(record.conf)
        and (assignment.generation, assignment.digest) != (record.generation, record.digest)
    }


class HoldMemory:
    """Since when each hot pipeline's new generation has waited, on the leader's clock (one
    scheduling round at a time). It starts afresh with the leader: a new leader's hold of a
    generation it finds waiting starts at its first round, so that a change of leader may
    lengthen a hold by at most one bound.

        memory = HoldMemory(time.monotonic)
        held_for = memory.waited(pipelines, assignments)   # {pipeline: seconds}
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._since: dict[str, tuple[int, str, float]] = {}  # generation, digest, since

    def waited(
        self,
        pipelines: Mapping[str, PipelineRecord],
        assignments: Mapping[str, tuple[Assignment, int]],
    ) -> dict[str, float]:
        """How long the new generation of each pipeline of ``new_generations`` has waited:
        0 for one seen for the first time; the others are forgotten."""
        now = self._clock()
        since: dict[str, tuple[int, str, float]] = {}
        for name in new_generations(pipelines, assignments):
            record = pipelines[name]
            seen = self._since.get(name)
            if seen is None or seen[:2] != (record.generation, record.digest):
                seen = (record.generation, record.digest, now)
            since[name] = seen
        self._since = since
        return {name: now - seen[2] for name, seen in since.items()}
