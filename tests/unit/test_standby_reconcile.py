"""The supervisor's rules for standby workers alone (``reconcile.plan_with_standby``): the
placements' epoch filter, START_STANDBY, STOP_STANDBY and PROMOTE, and actives first."""

from __future__ import annotations

from stratus.api.records import Assignment, FencingToken
from stratus.api.standby_workers import StandbyWorkerPlacement
from stratus.supervisor.reconcile import (
    ActionKind,
    Held,
    HeldStandby,
    StandbyAction,
    StandbyKind,
    plan_with_standby,
    standby_workers_for,
    vanished_placements_kept,
)
from tests.harness.supervisor_fakes import assignment

TOKEN = FencingToken(era=1, zxid=42)


def placement(
    name: str = "etl",
    supervisor: str | None = "s2",
    *,
    epoch: int = 1,
    generation: int = 0,
    digest: str = "d" * 64,
    placed: float = 0.0,
) -> StandbyWorkerPlacement:
    return StandbyWorkerPlacement(
        pipeline=name,
        supervisor=supervisor,
        epoch=epoch,
        generation=generation,
        digest=digest,
        size_bytes=10,
        placed=placed,
    )


def assigned_here(name: str = "etl", **changes: object) -> Assignment:
    return assignment(name, "s2", digest="d" * 64).model_copy(update={"token": TOKEN, **changes})


def kinds(actions: list[StandbyAction]) -> list[tuple[StandbyKind, str]]:
    return [(action.kind, action.pipeline) for action in actions]


def test_only_placements_naming_this_supervisor_of_no_older_epoch_are_kept() -> None:
    placements = {"a": placement("a", "s2", epoch=3), "b": placement("b", "s1", epoch=3)}
    mine, seen = standby_workers_for("s2", placements, {})
    assert set(mine) == {"a"} and seen == {"a": 3, "b": 3}
    mine, seen = standby_workers_for("s2", {"a": placement("a", "s2", epoch=2)}, seen)
    assert mine == {} and seen["a"] == 3  # a deposed leader's late write


def test_a_placement_here_with_a_free_slot_starts_a_standby_worker() -> None:
    decided = plan_with_standby({}, {}, 2, {"etl": placement()}, {})
    assert kinds(decided.standby) == [(StandbyKind.START_STANDBY, "etl")]
    assert decided.standby[0].placement == placement()


def test_a_placement_gone_moved_or_of_a_new_generation_stops_its_standby_worker() -> None:
    held = {"etl": HeldStandby(placement(), ready=True)}
    for now in ({}, {"etl": placement(generation=1)}, {"etl": placement(digest="e" * 64)}):
        decided = plan_with_standby({}, {}, 2, now, held)
        assert kinds(decided.standby) == [(StandbyKind.STOP_STANDBY, "etl")], now
    decided = plan_with_standby({}, {}, 2, {"etl": placement(epoch=7)}, held)
    assert decided.standby == []  # a new epoch alone re-stamps it


def test_an_assignment_here_promotes_the_ready_standby_worker_of_its_generation() -> None:
    held = {"etl": HeldStandby(placement(), ready=True)}
    decided = plan_with_standby({"etl": assigned_here()}, {}, 1, {}, held)
    assert kinds(decided.standby) == [(StandbyKind.PROMOTE, "etl")]
    assert decided.standby[0].assignment == assigned_here()
    assert decided.actions == [] and decided.waiting == []


def test_no_promotion_without_ready_the_same_generation_or_a_token() -> None:
    """Each case falls back to the ordinary start, once the standby worker has stopped."""
    cases = [
        ({"etl": HeldStandby(placement(), ready=False)}, assigned_here()),
        ({"etl": HeldStandby(placement(), ready=True)}, assigned_here(generation=3)),
        ({"etl": HeldStandby(placement(), ready=True)}, assigned_here(token=None)),
    ]
    for held, assigned in cases:
        decided = plan_with_standby({"etl": assigned}, {}, 2, {}, held)
        assert kinds(decided.standby) == [(StandbyKind.STOP_STANDBY, "etl")]
        assert decided.actions == [] and decided.waiting == ["etl"]
    decided = plan_with_standby({"etl": assigned_here(generation=3)}, {}, 2, {}, {})
    assert [(a.kind, a.pipeline) for a in decided.actions] == [(ActionKind.START, "etl")]


def test_no_promotion_while_a_worker_of_the_pipeline_is_held() -> None:
    held = {"etl": Held(assigned_here(generation=5))}
    standby = {"etl": HeldStandby(placement(), ready=True)}
    decided = plan_with_standby({"etl": assigned_here()}, held, 2, {}, standby)
    assert StandbyKind.PROMOTE not in {a.kind for a in decided.standby}
    assert [(a.kind, a.pipeline) for a in decided.actions] == [(ActionKind.RESTART, "etl")]


def test_a_standby_workers_slot_yields_to_an_assignment() -> None:
    """Two slots: a running worker, a standby worker, then a new assignment: the standby
    worker stops and no new one starts; the assignment starts."""
    held = {"run": Held(assignment("run", "s2"))}
    standby = {"hot": HeldStandby(placement("hot"), ready=True)}
    placed = {"hot": placement("hot"), "new": placement("new")}
    desired = {"run": assignment("run", "s2"), "late": assignment("late", "s2")}
    decided = plan_with_standby(desired, held, 2, placed, standby)
    assert [(a.kind, a.pipeline) for a in decided.actions] == [(ActionKind.START, "late")]
    assert kinds(decided.standby) == [(StandbyKind.STOP_STANDBY, "hot")]


def test_standby_workers_fill_the_slots_left_oldest_placement_first() -> None:
    placed = {
        "b": placement("b", placed=2.0),
        "a": placement("a", placed=1.0),
        "c": placement("c", placed=3.0),
    }
    decided = plan_with_standby({}, {"run": Held(assignment("run", "s2"))}, 3, placed, {})
    assert kinds(decided.standby) == [
        (StandbyKind.START_STANDBY, "a"),
        (StandbyKind.START_STANDBY, "b"),
    ]


def test_a_failed_standby_worker_keeps_no_slot() -> None:
    standby = {"a": HeldStandby(placement("a"), takes_slot=False)}
    decided = plan_with_standby({}, {}, 1, {"a": placement("a"), "b": placement("b")}, standby)
    assert kinds(decided.standby) == [(StandbyKind.START_STANDBY, "b")]


def test_without_standby_workers_the_plan_is_the_ordinary_one() -> None:
    desired = {"a": assignment("a", "s2"), "b": assignment("b", "s2", assigned=200.0)}
    decided = plan_with_standby(desired, {}, 1, {}, {})
    assert [(a.kind, a.pipeline) for a in decided.actions] == [(ActionKind.START, "a")]
    assert decided.standby == [] and decided.waiting == ["b"]


def test_a_placement_one_read_lacks_is_kept_until_a_second_read_agrees() -> None:
    """A read between a promotion's two writes may see the placement gone and the
    assignment not here yet: the READY standby worker runs on until the next read."""
    held = {"etl": HeldStandby(placement(), ready=True)}
    placed, vanished = vanished_placements_kept({}, held, {}, frozenset())
    assert placed == {"etl": placement()} and vanished == {"etl"}
    assert plan_with_standby({}, {}, 2, placed, held).standby == []  # not stopped yet

    promoted = {"etl": assigned_here()}  # the next read: the promotion, whole
    placed, vanished = vanished_placements_kept({}, held, promoted, vanished)
    assert vanished == frozenset()
    decided = plan_with_standby(promoted, {}, 2, placed, held)
    assert kinds(decided.standby) == [(StandbyKind.PROMOTE, "etl")]


def test_a_placement_two_reads_in_a_row_lack_stops_its_standby_worker() -> None:
    held = {"etl": HeldStandby(placement(), ready=True)}
    placed, vanished = vanished_placements_kept({}, held, {}, frozenset({"etl"}))
    assert placed == {} and vanished == frozenset()
    decided = plan_with_standby({}, {}, 2, placed, held)
    assert kinds(decided.standby) == [(StandbyKind.STOP_STANDBY, "etl")]
