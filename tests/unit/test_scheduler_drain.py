"""Drains in one scheduling round (``plan_round``): the scenarios one by one, then properties.

Pure logic, as in ``test_scheduler.py``: a drain moves a pipeline in two rounds, break
before make (its assignment goes, then once no live supervisor runs its worker it is placed),
each step recorded as ``drained``, and prefers a supervisor with a warm worker ready.
"""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from stratus.api.records import Assignment, AssignmentReason, PipelineRecord
from stratus.nimbus.scheduling.scheduler import Plan, plan_round
from tests.unit.test_scheduler import (
    EPOCH,
    NOW,
    SUPERVISORS,
    assignment,
    clusters,
    record,
    records,
    used,
)


def drain_plan(
    pipelines: Mapping[str, PipelineRecord],
    assignments: Mapping[str, Assignment] | None = None,
    *,
    capacity: Mapping[str, int],
    draining: set[str] | None = None,
    drained_from: Mapping[str, str] | None = None,
    still_running: set[str] | None = None,
    warm: Mapping[str, int] | None = None,
    keep_on: set[str] | None = None,
) -> Plan:
    return plan_round(
        pipelines=pipelines,
        assignments=assignments or {},
        capacity=capacity,
        keep_on=keep_on if keep_on is not None else {*capacity, *(draining or set())},
        timed_out=set(),
        epoch=EPOCH,
        now=NOW,
        draining=draining or set(),
        drained_from=drained_from,
        still_running=still_running or set(),
        warm=warm,
    )


def why(result: Plan) -> dict[str, tuple[str, str | None, str | None]]:
    return {name: (c.reason.value, c.supervisor, c.previous) for name, c in result.changes.items()}


def test_a_drained_supervisors_pipeline_first_loses_its_assignment_only() -> None:
    etl = record("etl")
    result = drain_plan(
        records(etl), {"etl": assignment(etl, "s1")}, capacity={"s2": 2}, draining={"s1"}
    )

    assert result.unassign == ["etl"] and result.assign == {}  # its worker stops first
    assert why(result) == {"etl": ("drained", None, "s1")}
    assert result.drain_moving == {"etl": "s1"} and result.no_room == {}


def test_a_drained_pipeline_with_no_room_elsewhere_keeps_running_where_it_is() -> None:
    etl = record("etl", rebalances=1)
    stale = assignment(record("etl"), "s1")  # a rebalance waits too
    result = drain_plan(records(etl), {"etl": stale}, capacity={"s2": 0}, draining={"s1"})

    assert result.unassign == [] and result.no_room == {"etl": "s1"}
    assert result.assign["etl"].supervisor == "s1"
    assert why(result) == {"etl": ("rebalanced", "s1", "s1")}


def test_a_pipeline_on_the_way_waits_while_its_old_worker_runs_and_holds_its_slot() -> None:
    etl, new = record("etl", submitted=5), record("new", submitted=0)
    result = drain_plan(
        records(etl, new),
        capacity={"s2": 1},
        drained_from={"etl": "s1"},
        still_running={"etl"},
    )

    assert result.assign == {} and result.changes == {}  # "new" finds the slot held
    assert result.drain_moving == {"etl": "s1"}


def test_a_pipeline_on_the_way_is_placed_once_its_old_worker_stopped() -> None:
    etl = record("etl")
    result = drain_plan(records(etl), capacity={"s2": 1}, drained_from={"etl": "s1"})

    assert result.assign["etl"].supervisor == "s2"
    assert result.moved == {"etl": ("s1", "s2")}
    assert why(result) == {"etl": ("drained", "s2", "s1")}


def test_a_drained_pipeline_goes_where_a_warm_worker_is_ready() -> None:
    etl, web = record("etl", submitted=0), record("web", submitted=1)
    result = drain_plan(
        records(etl, web),
        capacity={"roomy": 8, "warm": 1},
        drained_from={"etl": "s1", "web": "s1"},
        warm={"warm": 1, "roomy": 0},
    )

    assert result.assign["etl"].supervisor == "warm"  # its one warm worker: the oldest
    assert result.assign["web"].supervisor == "roomy"  # none left there: the most room


def test_a_pipeline_without_assignment_waits_for_its_old_worker_to_stop() -> None:
    etl = record("etl")
    result = drain_plan(records(etl), capacity={"s1": 1, "s2": 1}, still_running={"etl"})

    assert result.assign == {} and result.changes == {}


def test_a_pipeline_on_the_way_with_no_room_is_named() -> None:
    etl = record("etl")
    result = drain_plan(records(etl), capacity={"s2": 0}, drained_from={"etl": "s1"})

    assert result.assign == {}
    assert result.no_room == {"etl": "s1"} and result.drain_moving == {"etl": "s1"}


# ---------------------------------------------------------------------- properties


@st.composite
def drains(draw: st.DrawFn) -> dict[str, object]:
    """A random cluster of ``test_scheduler.clusters`` with drains, pipelines on the way,
    workers still running and warm workers."""
    cluster = draw(clusters())
    pipelines: dict[str, PipelineRecord] = cluster["pipelines"]  # type: ignore[assignment]
    assignments: dict[str, Assignment] = cluster["assignments"]  # type: ignore[assignment]
    unassigned = sorted(set(pipelines) - set(assignments))
    cluster["draining"] = draw(st.sets(st.sampled_from(SUPERVISORS)))
    cluster["drained_from"] = {
        name: draw(st.sampled_from(SUPERVISORS))
        for name in draw(st.sets(st.sampled_from(unassigned))) if unassigned
    } if unassigned else {}  # fmt: skip
    cluster["still_running"] = draw(st.sets(st.sampled_from(unassigned))) if unassigned else set()
    cluster["warm"] = {sid: draw(st.integers(0, 2)) for sid in SUPERVISORS}
    cluster["capacity"] = {
        sid: slots
        for sid, slots in cluster["capacity"].items()  # type: ignore[attr-defined]
        if sid not in cluster["draining"]  # type: ignore[operator]
    }  # a drained supervisor is cordoned: it takes nothing
    return cluster


def run(cluster: dict[str, object]) -> Plan:
    return plan_round(**cluster, epoch=EPOCH, now=NOW)  # type: ignore[arg-type]


@settings(deadline=None)
@given(drains())
def test_no_pipeline_is_placed_while_a_live_supervisor_runs_its_old_worker(
    cluster: dict[str, object],
) -> None:
    result = run(cluster)
    assert not set(result.assign) & cluster["still_running"]  # type: ignore[operator]


@settings(deadline=None)
@given(drains())
def test_a_drain_never_assigns_a_pipeline_in_the_round_that_takes_it_off(
    cluster: dict[str, object],
) -> None:
    result = run(cluster)
    assignments: dict[str, Assignment] = cluster["assignments"]  # type: ignore[assignment]
    timed_out: set[str] = cluster["timed_out"]  # type: ignore[assignment]
    for name, change in result.changes.items():
        if change.reason is AssignmentReason.DRAINED and name in assignments:
            assert name in result.unassign and name not in result.assign
            assert name not in timed_out


@settings(deadline=None)
@given(drains())
def test_no_drained_supervisor_gets_a_pipeline(cluster: dict[str, object]) -> None:
    result = run(cluster)
    assignments: dict[str, Assignment] = cluster["assignments"]  # type: ignore[assignment]
    draining: set[str] = cluster["draining"]  # type: ignore[assignment]
    for name, new in result.assign.items():
        old = assignments.get(name)
        if new.supervisor in draining:
            assert old is not None and old.supervisor == new.supervisor  # rewritten in place


@settings(deadline=None)
@given(drains())
def test_a_drain_gives_no_supervisor_work_beyond_its_slots(cluster: dict[str, object]) -> None:
    result = run(cluster)
    assignments: dict[str, Assignment] = cluster["assignments"]  # type: ignore[assignment]
    capacity: dict[str, int] = cluster["capacity"]  # type: ignore[assignment]
    keep_on: set[str] = cluster["keep_on"]  # type: ignore[assignment]
    before = used({n: a for n, a in assignments.items() if a.supervisor in keep_on})
    after = used(result.applied_to(assignments))
    for sid, count in after.items():
        assert count <= max(before[sid], capacity.get(sid, 0) if sid in keep_on else 0), sid


@settings(deadline=None)
@given(drains())
def test_every_pipeline_of_a_drain_is_moving_staying_for_room_or_gone(
    cluster: dict[str, object],
) -> None:
    result = run(cluster)
    assignments: dict[str, Assignment] = cluster["assignments"]  # type: ignore[assignment]
    pipelines: dict[str, PipelineRecord] = cluster["pipelines"]  # type: ignore[assignment]
    draining: set[str] = cluster["draining"]  # type: ignore[assignment]
    keep_on: set[str] = cluster["keep_on"]  # type: ignore[assignment]
    timed_out: set[str] = cluster["timed_out"]  # type: ignore[assignment]
    for name, old in assignments.items():
        drained = old.supervisor in draining and old.supervisor in keep_on
        if not drained or name not in pipelines or not pipelines[name].status.runs:
            continue
        if name in timed_out:
            continue
        assert (name in result.drain_moving) != (name in result.no_room)
