"""A hot pipeline's new generation through its standby worker: the pure plan that says which
new generations wait, which go to the standby worker and which are applied in place
(``plan_update_moves``), the memory of how long each has waited (``HoldMemory``), and the
round's rule that holds or deletes the assignment (``plan_round``'s ``holding`` and
``switching``).

Unless a test says otherwise, pipeline "orders" ran generation 2 on s1 and was updated to new
code (generation 3); its old worker runs there, and its standby worker is placed on s2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from stratus.api.records import Assignment, PipelineRecord, PipelineStatus, SupervisorHeartbeat
from stratus.api.standby_workers import StandbyWorkerPlacement, StandbyWorkerState
from stratus.nimbus.failover.update_moves import (
    HoldMemory,
    InPlace,
    UpdateMoves,
    plan_update_moves,
)
from stratus.nimbus.scheduling.scheduler import Plan, plan_round
from tests.unit.test_promotion_plan import (
    OTHER_DIGEST,
    assignment,
    heartbeat,
    placement,
    record,
    standby_beat,
)

HOLD_SECS = 120.0
EPOCH, NOW = 7, 1_700_000_000.0


def updated(old: PipelineRecord, **changes: Any) -> PipelineRecord:
    """``old`` with new code: one version more, so one generation more."""
    fields = {"version": old.version + 1, "digest": OTHER_DIGEST, "generation_cause": "updated"}
    return old.model_copy(update=fields | changes)


class Update:
    """The snapshot of one updated hot pipeline, changed test by test."""

    def __init__(self) -> None:
        self.old = record()
        self.new = updated(self.old)
        self.pipelines: dict[str, PipelineRecord] = {"orders": self.new}
        self.assignments: dict[str, tuple[Assignment, int]] = {
            "orders": (assignment(self.old, "s1"), 11)
        }
        self.placement: StandbyWorkerPlacement | None = placement(self.new, "s2")
        self.reported: list[Any] = [standby_beat(placement(self.old, "s2"))]  # the old one
        self.serving = {"orders"}
        self.held_for: dict[str, float] = {}
        self.dead: set[str] = set()
        self.suspected: set[str] = set()
        self.cordoned: set[str] = set()

    def report(self, state: StandbyWorkerState) -> None:
        """s2 reports the standby worker of the new generation in ``state``."""
        assert self.placement is not None
        self.reported = [standby_beat(self.placement, state)]

    def plan(self, hold_secs: float = HOLD_SECS) -> UpdateMoves:
        placements = {} if self.placement is None else {"orders": (self.placement, 4)}
        beats: Mapping[str, SupervisorHeartbeat] = {
            "s1": heartbeat("s1"),
            "s2": heartbeat("s2", *self.reported),
        }
        return plan_update_moves(
            pipelines=self.pipelines,
            assignments=self.assignments,
            placements=placements,
            heartbeats=beats,
            serving=self.serving,
            held_for=self.held_for,
            hold_secs=hold_secs,
            dead=self.dead,
            suspected=self.suspected,
            registered={"s1", "s2", "s3"},
            cordoned=self.cordoned,
        )


def held(moves: UpdateMoves) -> bool:
    return moves == UpdateMoves(holding=frozenset({"orders"}))


def in_place(moves: UpdateMoves) -> InPlace:
    assert moves.holding == moves.switching == frozenset()
    return moves.in_place["orders"]


# ---------------------------------------------------------------------- plan_update_moves


def test_a_new_generation_waits_while_its_standby_worker_is_placed_for_the_old_one() -> None:
    update = Update()
    update.placement = placement(update.old, "s2")  # the round rewrites it after this plan
    assert held(update.plan())


@pytest.mark.parametrize("state", [StandbyWorkerState.FETCHING, StandbyWorkerState.STARTING])
def test_a_new_generation_waits_while_its_standby_worker_starts(state) -> None:
    update = Update()
    assert held(update.plan())  # s2 still reports the old generation's
    update.report(state)
    assert held(update.plan())


def test_a_new_generation_goes_to_its_standby_worker_once_it_is_ready_for_it() -> None:
    update = Update()
    update.report(StandbyWorkerState.READY)
    assert update.plan() == UpdateMoves(switching=frozenset({"orders"}))


def test_a_ready_standby_worker_of_the_old_generation_is_not_taken_for_the_new() -> None:
    update = Update()
    update.reported = [standby_beat(placement(update.old, "s2"), StandbyWorkerState.READY)]
    assert held(update.plan())


@pytest.mark.parametrize("state", [StandbyWorkerState.REFUSED, StandbyWorkerState.FAILED])
def test_a_standby_worker_that_gave_up_on_the_new_generation_ends_the_wait(state) -> None:
    update = Update()
    update.report(state)
    assert in_place(update.plan()) is InPlace.STANDBY_GAVE_UP


def test_without_a_placed_standby_worker_the_new_generation_is_applied_in_place() -> None:
    update = Update()
    update.placement = None
    assert in_place(update.plan()) is InPlace.NO_STANDBY_WORKER
    update.placement = placement(update.new, None)  # placed nowhere: no supervisor fits
    assert in_place(update.plan()) is InPlace.NO_STANDBY_WORKER


def test_a_wait_as_long_as_the_bound_ends_in_place() -> None:
    update = Update()
    update.held_for = {"orders": HOLD_SECS - 0.1}
    assert held(update.plan())
    update.held_for = {"orders": HOLD_SECS}
    assert in_place(update.plan()) is InPlace.HOLD_EXPIRED


def test_a_ready_standby_worker_is_taken_even_at_the_bound() -> None:
    update = Update()
    update.report(StandbyWorkerState.READY)
    update.held_for = {"orders": HOLD_SECS * 2}
    assert update.plan().switching == {"orders"}


def test_an_old_worker_that_does_not_run_is_not_waited_for() -> None:
    update = Update()  # a failed trial's rollback: its worker FAILED, nothing to keep running
    update.serving = set()
    assert in_place(update.plan()) is InPlace.OLD_WORKER_NOT_RUNNING
    update.report(StandbyWorkerState.READY)
    assert in_place(update.plan()) is InPlace.OLD_WORKER_NOT_RUNNING


def test_a_bound_of_zero_applies_every_new_generation_in_place() -> None:
    update = Update()
    update.report(StandbyWorkerState.READY)
    assert in_place(update.plan(hold_secs=0)) is InPlace.HOLD_OFF
    with pytest.raises(ValueError, match=r"nimbus\.standby\.update\.hold\.secs must be 0 or more"):
        update.plan(hold_secs=-1)


@pytest.mark.parametrize("unfit", ["dead", "suspected", "cordoned"])
def test_a_ready_standby_worker_on_an_unfit_supervisor_is_waited_for_not_taken(unfit) -> None:
    update = Update()
    update.report(StandbyWorkerState.READY)
    getattr(update, unfit).add("s2")  # the standby workers' round moves it elsewhere
    assert held(update.plan())


def test_only_an_active_hot_pipeline_with_a_new_generation_is_planned() -> None:
    update = Update()
    update.pipelines = {"orders": update.old}  # the same generation and code
    assert update.plan() == UpdateMoves()
    update.pipelines = {"orders": updated(update.old, conf={"k": "v"})}  # not hot
    assert update.plan() == UpdateMoves()
    update.pipelines = {"orders": updated(update.old, status=PipelineStatus.INACTIVE)}
    assert update.plan() == UpdateMoves()


def test_each_cause_of_a_new_generation_waits_alike() -> None:
    update = Update()
    update.pipelines = {"orders": update.old.model_copy(update={"rebalances": 3})}
    assert held(update.plan())  # a rebalance: same code, one generation more


# ---------------------------------------------------------------------- HoldMemory


def test_a_hold_is_counted_from_the_round_that_first_saw_its_generation() -> None:
    clock = [100.0]
    memory = HoldMemory(lambda: clock[0])
    update = Update()
    assert memory.waited(update.pipelines, update.assignments) == {"orders": 0.0}
    clock[0] = 130.0
    assert memory.waited(update.pipelines, update.assignments) == {"orders": 30.0}

    update.pipelines = {"orders": updated(update.new, version=3)}  # updated again meanwhile
    assert memory.waited(update.pipelines, update.assignments) == {"orders": 0.0}
    clock[0] = 140.0
    assert memory.waited(update.pipelines, {}) == {}  # switched: its assignment is gone
    assert memory.waited(update.pipelines, update.assignments) == {"orders": 0.0}


# ---------------------------------------------------------------------- plan_round


def round_plan(
    pipelines: Mapping[str, PipelineRecord],
    assignments: Mapping[str, Assignment],
    **kwargs: Any,
) -> Plan:
    options: dict[str, Any] = {"capacity": {"s1": 2, "s2": 2}, "keep_on": {"s1", "s2"}}
    options.update(kwargs)
    return plan_round(
        pipelines=pipelines,
        assignments=assignments,
        timed_out=options.pop("timed_out", set()),
        epoch=EPOCH,
        now=NOW,
        **options,
    )


def test_a_held_new_generation_keeps_the_old_assignment_untouched() -> None:
    update = Update()
    old = {"orders": assignment(update.old, "s1")}
    result = round_plan(update.pipelines, old, holding={"orders"})
    assert result.empty and result.changes == {}

    in_place_plan = round_plan(update.pipelines, old)  # as without a standby worker
    assert in_place_plan.assign["orders"].generation == update.new.generation
    change = in_place_plan.changes["orders"]
    assert (change.reason.value, change.previous, change.supervisor) == ("updated", "s1", "s1")


@pytest.mark.parametrize("cause", ["updated", "rolled_back", "restarted", "rebalanced"])
def test_a_switching_new_generation_loses_its_assignment_to_no_supervisor(cause) -> None:
    update = Update()
    new = updated(update.old, generation_cause=cause)
    result = round_plan(
        {"orders": new}, {"orders": assignment(update.old, "s1")}, switching={"orders"}
    )
    assert result.unassign == ["orders"] and result.assign == {}
    change = result.changes["orders"]
    assert (change.reason.value, change.previous, change.supervisor) == (cause, "s1", None)
    assert (change.generation, change.digest) == (new.generation, new.digest)


def test_a_switching_pipeline_waits_for_its_old_worker_as_any_unassigned_one() -> None:
    update = Update()
    waiting = round_plan(update.pipelines, {}, still_running={"orders"}, capacity={"s2": 1})
    assert waiting.empty  # the standby worker's promotion comes first, once it stopped
    placed = round_plan(update.pipelines, {}, capacity={"s2": 1})
    assert placed.changes["orders"].reason.value == "placed"  # not promoted: the ordinary way


def test_holding_and_switching_leave_the_moves_of_other_rules_alone() -> None:
    update = Update()
    old = {"orders": assignment(update.old, "s1")}
    silent = round_plan(update.pipelines, old, timed_out={"orders"}, holding={"orders"})
    assert silent.moved == {"orders": ("s1", "s2")}
    dead = round_plan(update.pipelines, old, keep_on={"s2"}, switching={"orders"})
    assert dead.assign["orders"].supervisor == "s2"
    assert dead.changes["orders"].reason.value == "supervisor_dead"
    drained = round_plan(update.pipelines, old, draining={"s1"}, holding={"orders"})
    assert drained.changes["orders"].reason.value == "drained"
