"""One scheduling round (``plan_round``): the scenarios one by one, then properties.

Pure logic: records and assignments are built here, nothing touches ZooKeeper.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from stratus.api.records import Assignment, AssignmentReason, PipelineRecord, PipelineStatus
from stratus.nimbus.scheduling.scheduler import Plan, plan_round

EPOCH = 7
NOW = 1_700_000_000.0


def record(
    name: str,
    *,
    status: PipelineStatus = PipelineStatus.ACTIVE,
    submitted: float = 0.0,
    rebalances: int = 0,
    digest: str = "d0",
) -> PipelineRecord:
    return PipelineRecord(
        name=name,
        status=status,
        digest=digest,
        size_bytes=100,
        conf={"k": name},
        submitted=submitted,
        updated=submitted,
        epoch=1,
        rebalances=rebalances,
    )


def assignment(pipeline: PipelineRecord, supervisor: str, *, epoch: int = 1) -> Assignment:
    return Assignment(
        pipeline=pipeline.name,
        supervisor=supervisor,
        epoch=epoch,
        generation=pipeline.rebalances,
        digest=pipeline.digest,
        size_bytes=pipeline.size_bytes,
        conf=pipeline.conf,
        assigned=1.0,
    )


def plan(
    pipelines: Mapping[str, PipelineRecord],
    assignments: Mapping[str, Assignment] | None = None,
    *,
    capacity: Mapping[str, int],
    keep_on: set[str] | None = None,
    timed_out: set[str] | None = None,
    fenced: set[str] | None = None,
    warm: Mapping[str, int] | None = None,
    reserved: Mapping[str, int] | None = None,
) -> Plan:
    return plan_round(
        pipelines=pipelines,
        assignments=assignments or {},
        capacity=capacity,
        keep_on=set(capacity) if keep_on is None else keep_on,
        timed_out=timed_out or set(),
        fenced=fenced or set(),
        epoch=EPOCH,
        now=NOW,
        warm=warm,
        reserved=reserved,
    )


def records(*items: PipelineRecord) -> dict[str, PipelineRecord]:
    return {item.name: item for item in items}


def used(assignments: Mapping[str, Assignment]) -> Counter[str]:
    return Counter(a.supervisor for a in assignments.values())


# ---------------------------------------------------------------------------------------------
# Scenarios


def test_a_fresh_cluster_spreads_every_pipeline_across_the_supervisors() -> None:
    pipelines = records(*(record(f"p{i}", submitted=i) for i in range(10)))
    result = plan(pipelines, capacity={"a": 4, "b": 4, "c": 4})
    assert set(result.assign) == set(pipelines)
    assert sorted(used(result.assign).values()) == [3, 3, 4]
    assert result.unassign == [] and result.moved == {}


def test_every_new_assignment_carries_the_epoch_the_time_and_the_record() -> None:
    etl = record("etl", rebalances=2, digest="d9")
    new = plan(records(etl), capacity={"a": 1}).assign["etl"]
    assert (new.pipeline, new.supervisor, new.epoch, new.assigned) == ("etl", "a", EPOCH, NOW)
    assert (new.generation, new.digest, new.size_bytes, new.conf) == (2, "d9", 100, etl.conf)


def test_a_steady_cluster_yields_an_empty_plan() -> None:
    pipelines = records(record("p1"), record("p2"), record("p3"))
    current = {"p1": assignment(pipelines["p1"], "a"), "p2": assignment(pipelines["p2"], "b")}
    current["p3"] = assignment(pipelines["p3"], "a")
    result = plan(pipelines, current, capacity={"a": 2, "b": 2})
    assert result.empty
    assert (result.assign, result.unassign, result.moved) == ({}, [], {})


def test_pipelines_that_do_not_run_or_are_gone_are_unassigned() -> None:
    pipelines = records(
        record("off", status=PipelineStatus.INACTIVE),
        record("killed", status=PipelineStatus.KILLED),
        record("failed", status=PipelineStatus.FAILED),
        record("finished", status=PipelineStatus.FINISHED),
        record("pending", status=PipelineStatus.PENDING),
    )
    current = {name: assignment(r, "a") for name, r in pipelines.items()}
    current["gone"] = assignment(record("gone"), "a")
    result = plan(pipelines, current, capacity={"a": 10})
    assert result.unassign == sorted(current)
    assert result.assign == {} and result.moved == {}


def test_pipelines_that_do_not_run_are_never_assigned() -> None:
    pipelines = records(record("off", status=PipelineStatus.INACTIVE), record("on"))
    assert set(plan(pipelines, capacity={"a": 10}).assign) == {"on"}


def test_a_rebalance_restarts_the_pipeline_in_place() -> None:
    before = record("etl")
    after = record("etl", rebalances=1)
    result = plan(records(after), {"etl": assignment(before, "b")}, capacity={"a": 9, "b": 1})
    rewritten = result.assign["etl"]
    assert (rewritten.supervisor, rewritten.generation, rewritten.epoch) == ("b", 1, EPOCH)
    assert rewritten.assigned == NOW
    assert result.moved == {} and result.unassign == []


def test_new_code_restarts_the_pipeline_in_place() -> None:
    result = plan(
        records(record("etl", digest="new")),
        {"etl": assignment(record("etl", digest="old"), "a")},
        capacity={"a": 1},
    )
    assert (result.assign["etl"].supervisor, result.assign["etl"].digest) == ("a", "new")


def test_a_dead_supervisors_pipelines_move_to_the_supervisors_with_most_room() -> None:
    pipelines = records(*(record(f"p{i}", submitted=i) for i in range(4)))
    current = {name: assignment(r, "dead") for name, r in pipelines.items()}
    current["p3"] = assignment(pipelines["p3"], "b")
    result = plan(pipelines, current, capacity={"a": 3, "b": 3}, keep_on={"a", "b"})
    assert result.moved == {"p0": ("dead", "a"), "p1": ("dead", "a"), "p2": ("dead", "b")}
    assert {name: a.supervisor for name, a in result.assign.items()} == {
        "p0": "a",
        "p1": "a",
        "p2": "b",
    }
    assert result.unassign == []


def test_a_dead_supervisors_pipelines_go_where_warm_workers_are_ready_first() -> None:
    pipelines = records(*(record(f"p{i}", submitted=i) for i in range(3)))
    current = {name: assignment(r, "dead") for name, r in pipelines.items()}
    capacity = {"roomy": 8, "warm": 2}
    result = plan(
        pipelines, current, capacity=capacity, keep_on={"roomy", "warm"}, warm={"warm": 1}
    )
    # the oldest takes the one ready warm worker; the others go where the room is
    assert result.moved == {
        "p0": ("dead", "warm"),
        "p1": ("dead", "roomy"),
        "p2": ("dead", "roomy"),
    }
    cold = plan(pipelines, current, capacity=capacity, keep_on={"roomy", "warm"})
    assert {target for _, target in cold.moved.values()} == {"roomy"}  # without: the room


def test_a_timed_out_worker_moves_where_a_warm_worker_is_ready() -> None:
    etl = record("etl")
    current = {"etl": assignment(etl, "a")}
    capacity = {"a": 5, "roomy": 5, "warm": 1}
    result = plan(records(etl), current, capacity=capacity, timed_out={"etl"}, warm={"warm": 1})
    assert result.moved == {"etl": ("a", "warm")}


def test_a_dead_supervisors_pipeline_with_no_room_elsewhere_is_unassigned() -> None:
    pipelines = records(record("old", submitted=1), record("young", submitted=2))
    current = {name: assignment(r, "dead") for name, r in pipelines.items()}
    result = plan(pipelines, current, capacity={"a": 1}, keep_on={"a"})
    assert result.moved == {"old": ("dead", "a"), "young": ("dead", None)}
    assert set(result.assign) == {"old"}
    assert result.unassign == ["young"]


def test_a_timed_out_worker_moves_to_another_supervisor() -> None:
    etl = record("etl")
    result = plan(
        records(etl), {"etl": assignment(etl, "a")}, capacity={"a": 5, "b": 1}, timed_out={"etl"}
    )
    assert result.moved == {"etl": ("a", "b")}
    assert result.assign["etl"].supervisor == "b"


def test_a_timed_out_worker_with_no_room_elsewhere_stays_where_it_is() -> None:
    etl = record("etl")
    current = {"etl": assignment(etl, "a")}
    result = plan(records(etl), current, capacity={"a": 5, "b": 0}, timed_out={"etl"})
    assert result.empty and result.moved == {}


def test_a_timed_out_worker_that_stays_still_gets_its_rebalance() -> None:
    current = {"etl": assignment(record("etl"), "a")}
    result = plan(
        records(record("etl", rebalances=1)), current, capacity={"a": 1}, timed_out={"etl"}
    )
    assert result.assign["etl"].supervisor == "a" and result.assign["etl"].generation == 1


def test_a_fenced_pipeline_is_assigned_anew_on_its_own_supervisor_when_it_has_most_room() -> None:
    """A pipeline fence stopped its worker and the supervisor holds it until a newer
    assignment: rewritten there, which is no move."""
    etl = record("etl")
    current = {"etl": assignment(etl, "a")}
    result = plan(records(etl), current, capacity={"a": 2, "b": 1}, fenced={"etl"})
    assert result.assign["etl"].supervisor == "a" and result.assign["etl"].epoch == EPOCH
    assert result.moved == {}
    change = result.changes["etl"]
    assert (change.reason, change.supervisor, change.previous) == (
        AssignmentReason.FENCED,
        "a",
        "a",
    )


def test_a_fenced_pipeline_goes_where_the_most_room_is_or_a_warm_worker_waits() -> None:
    etl = record("etl")
    current = {"etl": assignment(etl, "a")}
    assert plan(records(etl), current, capacity={"a": 1, "b": 3}, fenced={"etl"}).moved == {
        "etl": ("a", "b")
    }
    warm = plan(records(etl), current, capacity={"a": 3, "w": 1}, fenced={"etl"}, warm={"w": 1})
    assert warm.moved == {"etl": ("a", "w")}
    suspected = plan(records(etl), current, capacity={"b": 1}, keep_on={"a", "b"}, fenced={"etl"})
    assert suspected.moved == {"etl": ("a", "b")}  # its own takes no work: elsewhere


def test_a_fenced_pipeline_with_no_room_anywhere_stays_and_nothing_is_written() -> None:
    etl = record("etl")
    current = {"etl": assignment(etl, "a")}
    result = plan(records(etl), current, capacity={"b": 0}, keep_on={"a", "b"}, fenced={"etl"})
    assert result.empty and result.moved == {}


def test_the_slot_a_timed_out_worker_leaves_is_free_for_the_next_pipeline() -> None:
    stuck = record("stuck", submitted=1)
    new = record("new", submitted=2)
    result = plan(
        records(stuck, new),
        {"stuck": assignment(stuck, "a")},
        capacity={"a": 1, "b": 1},
        timed_out={"stuck"},
    )
    assert result.assign["stuck"].supervisor == "b"
    assert result.assign["new"].supervisor == "a"


def test_a_supervisor_that_takes_no_new_work_keeps_its_pipelines_and_their_slots() -> None:
    pipelines = records(*(record(f"p{i}", submitted=i) for i in range(3)))
    current = {"p0": assignment(pipelines["p0"], "quiet")}
    result = plan(pipelines, current, capacity={"a": 1}, keep_on={"a", "quiet"})
    assert "p0" not in result.assign and result.unassign == []
    assert {name: a.supervisor for name, a in result.assign.items()} == {"p1": "a"}


def test_the_pipelines_that_stay_count_against_the_slots() -> None:
    pipelines = records(*(record(f"p{i}", submitted=i) for i in range(4)))
    current = {"p0": assignment(pipelines["p0"], "a"), "p1": assignment(pipelines["p1"], "a")}
    result = plan(pipelines, current, capacity={"a": 2, "b": 1})
    assert {name: a.supervisor for name, a in result.assign.items()} == {"p2": "b"}


def test_a_supervisor_over_its_slots_keeps_its_pipelines_but_gets_no_more() -> None:
    pipelines = records(*(record(f"p{i}", submitted=i) for i in range(4)))
    current = {name: assignment(pipelines[name], "shrunk") for name in ("p0", "p1", "p2")}
    result = plan(pipelines, current, capacity={"shrunk": 1})
    assert result.empty


def test_a_pipeline_takes_a_standby_workers_slot_only_when_no_other_slot_is_free() -> None:
    pipelines = records(*(record(f"p{i}", submitted=i) for i in range(3)))
    # "a" has two slots, both standby workers'; "b" has one, free
    result = plan(pipelines, capacity={"a": 2, "b": 1}, reserved={"a": 2})
    placed = {n: a.supervisor for n, a in result.assign.items()}
    assert placed == {"p0": "b", "p1": "a", "p2": "a"}  # then actives first: they yield
    assert plan(pipelines, capacity={"a": 2, "b": 1}).assign["p0"].supervisor == "a"


def test_a_moved_pipeline_prefers_a_slot_free_of_standby_workers() -> None:
    pipelines = records(record("etl"))
    current = {"etl": assignment(pipelines["etl"], "dead")}
    result = plan(
        pipelines, current, capacity={"a": 3, "b": 1}, keep_on={"a", "b"}, reserved={"a": 3}
    )
    assert result.moved == {"etl": ("dead", "b")}


def test_when_room_is_short_the_oldest_pipelines_are_placed_first() -> None:
    pipelines = records(record("b-young", submitted=5), record("a-old", submitted=1))
    pipelines["c-tie"] = record("c-tie", submitted=1)
    result = plan(pipelines, capacity={"s": 2})
    assert set(result.assign) == {"a-old", "c-tie"}


def test_a_supervisor_judged_dead_takes_no_new_work_even_if_offered() -> None:
    result = plan(records(record("etl")), capacity={"zombie": 5, "a": 1}, keep_on={"a"})
    assert result.assign["etl"].supervisor == "a"


def test_ties_are_broken_by_fewest_pipelines_then_by_id() -> None:
    pipelines = records(*(record(f"p{i}", submitted=i) for i in range(3)))
    current = {"p0": assignment(pipelines["p0"], "big")}
    # free: big 2 (1 used), small-b 2, small-a 2: the empty ones first, then by id
    result = plan(pipelines, current, capacity={"big": 3, "small-b": 2, "small-a": 2})
    assert {n: a.supervisor for n, a in result.assign.items()} == {"p1": "small-a", "p2": "small-b"}


def test_the_plan_applied_gives_the_new_assignments() -> None:
    pipelines = records(record("stay"), record("new"), record("off", status=PipelineStatus.KILLED))
    current = {"stay": assignment(pipelines["stay"], "a"), "off": assignment(pipelines["off"], "a")}
    result = plan(pipelines, current, capacity={"a": 3})
    after = result.applied_to(current)
    assert set(after) == {"stay", "new"} and after["stay"] is current["stay"]


def test_a_thousand_pipelines_on_two_hundred_supervisors_fill_them_evenly() -> None:
    pipelines = records(*(record(f"p{i:04d}", submitted=i) for i in range(1000)))
    capacity = {f"s{j:03d}": 8 for j in range(200)}
    counts = used(plan(pipelines, capacity=capacity).assign)
    assert set(counts.values()) == {5}


# ---------------------------------------------------------------------------------------------
# Properties

SUPERVISORS = [f"s{i}" for i in range(6)]
STATUSES = list(PipelineStatus)


@st.composite
def clusters(draw: st.DrawFn) -> dict[str, object]:
    """Random pipelines, assignments (some on dead or unknown supervisors) and judgements."""
    names = draw(st.lists(st.sampled_from([f"p{i}" for i in range(12)]), unique=True))
    pipelines = {
        name: record(
            name,
            status=draw(st.sampled_from(STATUSES)),
            submitted=draw(st.integers(0, 5)),
            rebalances=draw(st.integers(0, 2)),
        )
        for name in names
    }
    assigned = draw(st.lists(st.sampled_from([*names, "ghost"]), unique=True))
    assignments = {}
    for name in assigned:
        base = pipelines.get(name, record(name))
        stale = draw(st.booleans())
        source = record(name, rebalances=base.rebalances - 1) if stale else base
        assignments[name] = assignment(source, draw(st.sampled_from([*SUPERVISORS, "gone"])))
    keep_on = draw(st.sets(st.sampled_from(SUPERVISORS)))
    capacity = {
        sid: draw(st.integers(0, 4))
        for sid in draw(st.sets(st.sampled_from(SUPERVISORS)))
        if sid in keep_on or draw(st.booleans())
    }
    timed_out = draw(st.sets(st.sampled_from([*names, "ghost"])))
    return {
        "pipelines": pipelines,
        "assignments": assignments,
        "capacity": capacity,
        "keep_on": keep_on,
        "timed_out": timed_out,
    }


def run(cluster: dict[str, object], **changes: object) -> Plan:
    return plan_round(**{**cluster, **changes}, epoch=EPOCH, now=NOW)  # type: ignore[arg-type]


def staying(cluster: dict[str, object]) -> dict[str, Assignment]:
    """The assignments the rules keep where they are (running, on a live supervisor)."""
    pipelines: dict[str, PipelineRecord] = cluster["pipelines"]  # type: ignore[assignment]
    assignments: dict[str, Assignment] = cluster["assignments"]  # type: ignore[assignment]
    keep_on: set[str] = cluster["keep_on"]  # type: ignore[assignment]
    return {
        name: a
        for name, a in assignments.items()
        if name in pipelines and pipelines[name].status.runs and a.supervisor in keep_on
    }


def takers(cluster: dict[str, object]) -> dict[str, int]:
    capacity: dict[str, int] = cluster["capacity"]  # type: ignore[assignment]
    keep_on: set[str] = cluster["keep_on"]  # type: ignore[assignment]
    return {sid: slots for sid, slots in capacity.items() if sid in keep_on}


@settings(deadline=None)
@given(clusters())
def test_no_supervisor_is_given_work_beyond_its_slots(cluster: dict[str, object]) -> None:
    after = used(run(cluster).applied_to(cluster["assignments"]))  # type: ignore[arg-type]
    before = used(staying(cluster))
    slots = takers(cluster)
    for sid, count in after.items():
        assert count <= max(before[sid], slots.get(sid, 0)), sid


@settings(deadline=None)
@given(clusters())
def test_every_active_pipeline_is_assigned_when_the_free_slots_allow(
    cluster: dict[str, object],
) -> None:
    pipelines: dict[str, PipelineRecord] = cluster["pipelines"]  # type: ignore[assignment]
    kept = staying(cluster)
    before = used(kept)
    free = sum(max(0, slots - before[sid]) for sid, slots in takers(cluster).items())
    active = {name for name, r in pipelines.items() if r.status.runs}
    timed_out: set[str] = cluster["timed_out"]  # type: ignore[assignment]
    moving = set(kept) & timed_out  # re-placed first, keeping their old slot until they move
    if len(active - set(kept)) + len(moving) <= free:
        after = run(cluster).applied_to(cluster["assignments"])  # type: ignore[arg-type]
        assert active <= set(after)


@settings(deadline=None)
@given(clusters())
def test_a_cluster_that_was_planned_is_steady(cluster: dict[str, object]) -> None:
    after = run(cluster).applied_to(cluster["assignments"])  # type: ignore[arg-type]
    assert run(cluster, assignments=after, timed_out=set()).empty


@settings(deadline=None)
@given(clusters())
def test_live_assignments_never_move(cluster: dict[str, object]) -> None:
    result = run(cluster)
    timed_out: set[str] = cluster["timed_out"]  # type: ignore[assignment]
    for name, current in staying(cluster).items():
        if name not in timed_out:
            assert name not in result.moved and name not in result.unassign
            assert result.applied_to({name: current})[name].supervisor == current.supervisor


@settings(deadline=None)
@given(clusters())
def test_only_running_pipelines_stay_assigned(cluster: dict[str, object]) -> None:
    pipelines: dict[str, PipelineRecord] = cluster["pipelines"]  # type: ignore[assignment]
    result = run(cluster)
    after = result.applied_to(cluster["assignments"])  # type: ignore[arg-type]
    assert all(name in pipelines and pipelines[name].status.runs for name in after)
    assert not set(result.assign) & set(result.unassign)
    keep_on: set[str] = cluster["keep_on"]  # type: ignore[assignment]
    assert all(a.supervisor in keep_on for a in after.values())


@settings(deadline=None)
@given(clusters())
def test_every_written_assignment_matches_its_record_and_the_round(
    cluster: dict[str, object],
) -> None:
    pipelines: dict[str, PipelineRecord] = cluster["pipelines"]  # type: ignore[assignment]
    result = run(cluster)
    for name, new in result.assign.items():
        r = pipelines[name]
        assert (new.pipeline, new.epoch, new.assigned) == (name, EPOCH, NOW)
        assert (new.generation, new.digest, new.conf) == (r.rebalances, r.digest, r.conf)
    for name, (_, target) in result.moved.items():
        assert target == (result.assign[name].supervisor if target else None)


@settings(deadline=None)
@given(clusters())
def test_a_rebalance_restarts_a_live_pipeline_in_place(cluster: dict[str, object]) -> None:
    pipelines: dict[str, PipelineRecord] = cluster["pipelines"]  # type: ignore[assignment]
    timed_out: set[str] = cluster["timed_out"]  # type: ignore[assignment]
    result = run(cluster)
    for name, current in staying(cluster).items():
        if name not in timed_out and current.generation != pipelines[name].rebalances:
            assert result.assign[name].supervisor == current.supervisor
            assert result.assign[name].generation == pipelines[name].rebalances


@settings(deadline=None)
@given(
    st.integers(1, 8),
    st.lists(st.integers(0, 5), min_size=1, max_size=40),
    st.integers(1, 30),
)
def test_a_fresh_cluster_with_equal_slots_is_spread_within_one(
    slots: int, submitted: list[int], supervisors: int
) -> None:
    pipelines = records(*(record(f"p{i}", submitted=t) for i, t in enumerate(submitted)))
    capacity = {f"s{j}": slots for j in range(supervisors)}
    counts = used(plan(pipelines, capacity=capacity).assign)
    loads = [counts[sid] for sid in capacity]
    assert max(loads) - min(loads) <= 1
    assert sum(loads) == min(len(pipelines), slots * supervisors)


@settings(deadline=None)
@given(clusters())
def test_every_write_of_a_pipeline_with_a_record_comes_with_its_change(
    cluster: dict[str, object],
) -> None:
    pipelines: dict[str, PipelineRecord] = cluster["pipelines"]  # type: ignore[assignment]
    assignments: dict[str, Assignment] = cluster["assignments"]  # type: ignore[assignment]
    result = run(cluster)
    written = set(result.assign) | set(result.unassign)
    assert set(result.changes) == {name for name in written if name in pipelines}
    for name, change in result.changes.items():
        new = result.assign.get(name)
        old = assignments.get(name)
        assert change.supervisor == (new.supervisor if new else None)
        assert change.previous == (old.supervisor if old else None)
        assert (change.epoch, change.at) == (EPOCH, NOW)


def test_each_change_says_why_the_assignment_changed() -> None:
    records = {
        "silent": record("silent", submitted=0),
        "moved": record("moved", submitted=1),
        "stranded": record("stranded", submitted=2),
        "new": record("new", submitted=3),
        "done": record("done", status=PipelineStatus.FINISHED),
        "broken": record("broken", status=PipelineStatus.FAILED),
    }
    current = {
        "silent": assignment(records["silent"], "s1"),
        "moved": assignment(records["moved"], "dead"),
        "stranded": assignment(records["stranded"], "dead"),
        "done": assignment(records["done"], "s1"),
        "broken": assignment(records["broken"], "s1"),
        "gone": assignment(record("gone"), "s1"),
    }
    result = plan(records, current, capacity={"s1": 1, "s2": 1}, timed_out={"silent"})

    why = {name: (c.reason.value, c.supervisor, c.previous) for name, c in result.changes.items()}
    assert why == {
        "silent": ("worker_silent", "s2", "s1"),
        "moved": ("supervisor_dead", "s1", "dead"),  # the slot "silent" left
        "stranded": ("no_room", None, "dead"),
        "done": ("finished", None, "s1"),
        "broken": ("failed", None, "s1"),
    }  # "new" found no room (nothing written); "gone" has no record to keep a history under
