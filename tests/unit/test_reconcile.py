"""The supervisor's reconcile rules alone (``supervisor/reconcile.py``): the epoch filter and
the plan of desired against held workers."""

from __future__ import annotations

from stratus.supervisor.reconcile import (
    Action,
    ActionKind,
    Held,
    assignments_for,
    plan,
    waiting_for_slots,
)
from tests.harness.supervisor_fakes import assignment

# ---------------------------------------------------------------------- the epoch filter


def test_only_assignments_naming_this_supervisor_are_kept() -> None:
    mine, _ = assignments_for(
        "s1", {"a": assignment("a", "s1"), "b": assignment("b", "s2")}, seen={}
    )
    assert set(mine) == {"a"}


def test_an_assignment_older_than_an_epoch_seen_for_its_pipeline_is_ignored() -> None:
    _, seen = assignments_for("s1", {"etl": assignment(supervisor="s2", epoch=5)}, seen={})
    mine, seen = assignments_for("s1", {"etl": assignment(supervisor="s1", epoch=4)}, seen)
    assert mine == {}
    assert seen == {"etl": 5}


def test_an_assignment_of_the_same_or_a_newer_epoch_is_kept() -> None:
    for epoch in (5, 6):
        mine, seen = assignments_for("s1", {"etl": assignment(epoch=epoch)}, {"etl": 5})
        assert set(mine) == {"etl"}
        assert seen == {"etl": epoch}


def test_epochs_seen_are_remembered_after_the_assignment_goes() -> None:
    _, seen = assignments_for("s1", {"etl": assignment(epoch=7)}, {})
    _, seen = assignments_for("s1", {}, seen)
    mine, _ = assignments_for("s1", {"etl": assignment(epoch=6)}, seen)
    assert mine == {}


# ---------------------------------------------------------------------- the plan


def kinds(actions: list[Action]) -> dict[str, ActionKind]:
    return {action.pipeline: action.kind for action in actions}


def test_missing_workers_are_started_up_to_the_slots_oldest_assignment_first() -> None:
    desired = {
        "c": assignment("c", assigned=3.0),
        "a": assignment("a", assigned=2.0),
        "b": assignment("b", assigned=1.0),
    }
    actions = plan(desired, {}, slots=2)
    assert [a.pipeline for a in actions] == ["b", "a"]
    assert waiting_for_slots(desired, {}, actions) == ["c"]


def test_workers_held_take_slots_even_while_they_stop() -> None:
    held = {"old": Held(None), "x": Held(assignment("x"))}
    actions = plan({"x": assignment("x"), "new": assignment("new")}, held, slots=2)
    assert kinds(actions) == {}


def test_done_workers_take_no_slot() -> None:
    held = {"x": Held(assignment("x"), done=True)}
    actions = plan({"x": assignment("x"), "new": assignment("new")}, held, slots=1)
    assert kinds(actions) == {"new": ActionKind.START}


def test_a_worker_whose_assignment_is_gone_or_moved_is_stopped() -> None:
    mine, _ = assignments_for("s1", {"moved": assignment("moved", "s2")}, {})
    held = {"gone": Held(assignment("gone")), "moved": Held(assignment("moved"))}
    assert kinds(plan(mine, held, slots=4)) == {
        "gone": ActionKind.STOP,
        "moved": ActionKind.STOP,
    }


def test_a_new_generation_or_digest_restarts_the_worker() -> None:
    held = {"g": Held(assignment("g")), "d": Held(assignment("d"))}
    desired = {"g": assignment("g", generation=1), "d": assignment("d", digest="b" * 64)}
    actions = plan(desired, held, slots=4)
    assert kinds(actions) == {"g": ActionKind.RESTART, "d": ActionKind.RESTART}
    assert {a.pipeline: a.assignment for a in actions} == desired


def test_a_new_epoch_alone_keeps_the_worker_running() -> None:
    desired = {"etl": assignment(epoch=2, assigned=200.0)}
    actions = plan(desired, {"etl": Held(assignment(epoch=1))}, slots=4)
    assert actions == [Action(ActionKind.UPDATE, "etl", desired["etl"])]


def test_an_unchanged_assignment_needs_nothing() -> None:
    assert plan({"etl": assignment()}, {"etl": Held(assignment())}, slots=4) == []


def test_a_failed_worker_runs_again_only_for_a_new_assignment() -> None:
    held = {"etl": Held(assignment(), done=True)}
    assert plan({"etl": assignment(epoch=2)}, held, slots=4)[0].kind is ActionKind.UPDATE
    again = plan({"etl": assignment(assigned=500.0)}, held, slots=4)
    assert kinds(again) == {"etl": ActionKind.RESTART}


def test_a_pipeline_assigned_again_while_its_worker_stops_is_restarted() -> None:
    assert kinds(plan({"etl": assignment()}, {"etl": Held(None)}, slots=4)) == {
        "etl": ActionKind.RESTART
    }


# ---------------------------------------------------------------------- the restart policy
