"""Where the leader places standby workers (``plan_standby_workers``): the scenarios one by
one. Pure logic: records, summaries and beats are built here, nothing touches ZooKeeper.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import TypedDict

import pytest

from stratus.api.records import (
    Assignment,
    PipelineRecord,
    PipelineStatus,
    SupervisorHeartbeat,
    SupervisorSummary,
)
from stratus.api.standby_workers import (
    BeatLease,
    StandbyWorkerBeat,
    StandbyWorkerPlacement,
    StandbyWorkerRefusal,
    StandbyWorkerState,
)
from stratus.nimbus.scheduling.standby_plan import (
    REFUSAL_BACKOFF_SECS,
    StandbyPlan,
    StandbyReason,
    StandbyWrite,
    StandbyWriteKind,
    plan_standby_workers,
)

EPOCH = 7
NOW = 1_700_000_000.0
LEASE = BeatLease(lease_secs=0.8, stop_secs=0.2, poll_secs=0.02)


def record(
    name: str,
    *,
    hot: bool = True,
    submitted: float = 0.0,
    rebalances: int = 0,
    status: PipelineStatus = PipelineStatus.ACTIVE,
) -> PipelineRecord:
    return PipelineRecord(
        name=name,
        status=status,
        digest="d0",
        size_bytes=100,
        conf={"pipeline.standby": "hot" if hot else "none"},
        submitted=submitted,
        updated=submitted,
        epoch=1,
        rebalances=rebalances,
    )


def assignment(pipeline: PipelineRecord, supervisor: str) -> Assignment:
    return Assignment(
        pipeline=pipeline.name,
        supervisor=supervisor,
        epoch=1,
        generation=pipeline.generation,
        digest=pipeline.digest,
        size_bytes=pipeline.size_bytes,
        conf=pipeline.conf,
        assigned=1.0,
    )


def summary(
    sid: str, host: str, *, slots: int = 2, beat_lease: BeatLease | None = LEASE
) -> SupervisorSummary:
    return SupervisorSummary(id=sid, host=host, slots=slots, beat_lease=beat_lease)


def placement(
    pipeline: PipelineRecord,
    supervisor: str | None,
    *,
    generation: int | None = None,
    refusals: list[StandbyWorkerRefusal] | None = None,
    unplaced_because: str | None = None,
) -> StandbyWorkerPlacement:
    return StandbyWorkerPlacement(
        pipeline=pipeline.name,
        supervisor=supervisor,
        epoch=1,
        generation=pipeline.generation if generation is None else generation,
        digest=pipeline.digest,
        size_bytes=pipeline.size_bytes,
        conf=pipeline.conf,
        placed=1.0,
        refusals=refusals or [],
        unplaced_because=unplaced_because,
    )


def standby_beat(
    pipeline: PipelineRecord, state: StandbyWorkerState, *, error: str | None = None
) -> StandbyWorkerBeat:
    return StandbyWorkerBeat(
        pipeline=pipeline.name,
        generation=pipeline.generation,
        digest=pipeline.digest,
        state=state,
        since=1.0,
        error=error,
    )


def heartbeat(sid: str, *beats: StandbyWorkerBeat, stopping: bool = False) -> SupervisorHeartbeat:
    return SupervisorHeartbeat(
        id=sid, time=1.0, slots=2, stopping=stopping, standby_workers=list(beats)
    )


def plan(  # noqa: PLR0913 the snapshot, with the defaults of a quiet cluster
    pipelines: list[PipelineRecord],
    supervisors: list[SupervisorSummary],
    *,
    assignments: Sequence[Assignment] = (),
    placements: Mapping[str, StandbyWorkerPlacement | None] | None = None,
    heartbeats: Sequence[SupervisorHeartbeat] = (),
    cordoned: Set[str] = frozenset(),
    dead: Set[str] = frozenset(),
    suspected: Set[str] = frozenset(),
    max_workers: int = -1,
    needs_beat_lease: bool = True,
    now: float = NOW,
    deferred: Set[str] = frozenset(),
) -> StandbyPlan:
    return plan_standby_workers(
        pipelines={p.name: p for p in pipelines},
        assignments={a.pipeline: a for a in assignments},
        supervisors={s.id: s for s in supervisors},
        heartbeats={h.id: h for h in heartbeats},
        placements=placements or {},
        cordoned=cordoned,
        dead=dead,
        suspected=suspected,
        stopping={h.id for h in heartbeats if h.stopping},
        max_workers=max_workers,
        needs_beat_lease=needs_beat_lease,
        epoch=EPOCH,
        now=now,
        deferred=deferred,
    )


class Trouble(TypedDict):
    dead: Set[str]
    suspected: Set[str]
    cordoned: Set[str]


def in_trouble(kind: str, sid: str) -> Trouble:
    """The round's sets with ``sid`` in the one named ``kind`` (none for "stopping", which
    its heartbeat says)."""
    return Trouble(
        dead={sid} if kind == "dead" else set(),
        suspected={sid} if kind == "suspected" else set(),
        cordoned={sid} if kind == "cordoned" else set(),
    )


def where(result: StandbyPlan) -> dict[str, str | None]:
    """Each pipeline written, and the supervisor its placement names now (None: none)."""
    return {
        w.pipeline: w.placement.supervisor if w.placement is not None else None
        for w in result.writes
    }


def only(result: StandbyPlan) -> StandbyWrite:
    assert len(result.writes) == 1, result.writes
    return result.writes[0]


def applied(
    result: StandbyPlan, placements: Mapping[str, StandbyWorkerPlacement | None]
) -> dict[str, StandbyWorkerPlacement | None]:
    """The placements once ``result`` is written over ``placements``."""
    after = dict(placements)
    for write in result.writes:
        if write.placement is None:
            after.pop(write.pipeline, None)
        else:
            after[write.pipeline] = write.placement
    return after


# ---------------------------------------------------------------------- where it goes


def test_a_standby_worker_goes_to_another_host_than_its_active_worker():
    a = record("a")
    result = plan(
        [a],
        [summary("s1", "h1", slots=4), summary("s2", "h1", slots=4), summary("s3", "h2")],
        assignments=[assignment(a, "s1")],
    )
    write = only(result)
    assert write.kind is StandbyWriteKind.PLACE and write.reason is StandbyReason.PLACED
    assert where(result) == {"a": "s3"}  # s2 has more free slots, but shares the host
    assert write.placement is not None
    assert write.placement.epoch == EPOCH and write.placement.placed == NOW
    assert write.placement.generation == a.generation and write.placement.digest == a.digest


def test_on_one_host_it_goes_to_another_supervisor_than_its_active_worker():
    a = record("a")
    result = plan(
        [a],
        [summary("s1", "h1", slots=8), summary("s2", "h1", slots=1)],
        assignments=[assignment(a, "s1")],
    )
    assert where(result) == {"a": "s2"}


def test_with_one_supervisor_it_is_unplaced_saying_why():
    a = record("a")
    result = plan([a], [summary("s1", "h1")], assignments=[assignment(a, "s1")])
    write = only(result)
    assert write.placement is not None and write.placement.supervisor is None
    assert write.placement.unplaced_because == "no supervisor fits: runs its active worker (1)"


def test_the_fewest_standby_workers_come_before_the_most_free_slots():
    a, b = record("a", submitted=1), record("b", submitted=2)
    result = plan(
        [a, b],
        [summary("s1", "h1"), summary("s2", "h2", slots=2), summary("s3", "h3", slots=4)],
        assignments=[assignment(a, "s1"), assignment(b, "s1")],
    )
    assert where(result) == {"a": "s3", "b": "s2"}  # b: s3 has more free slots, and one already


def test_it_takes_no_slot_that_active_workers_hold():
    a, b = record("a"), record("b", hot=False)
    result = plan(
        [a, b],
        [summary("s1", "h1"), summary("s2", "h2", slots=1), summary("s3", "h3", slots=1)],
        assignments=[assignment(a, "s1"), assignment(b, "s2")],
    )
    assert where(result) == {"a": "s3"}


def test_with_pacemakers_only_a_supervisor_that_sends_fast_beats_takes_one():
    a = record("a")
    supervisors = [
        summary("s1", "h1"),
        summary("s2", "h2", slots=4, beat_lease=None),
        summary("s3", "h3"),
    ]
    active = [assignment(a, "s1")]
    assert where(plan([a], supervisors, assignments=active)) == {"a": "s3"}
    # with the ZooKeeper state store no supervisor sends fast beats, and none needs to
    assert where(plan([a], supervisors, assignments=active, needs_beat_lease=False)) == {"a": "s2"}


@pytest.mark.parametrize("unfit", ["dead", "suspected", "cordoned", "stopping"])
def test_a_supervisor_in_trouble_takes_none(unfit):
    a = record("a")
    result = plan(
        [a],
        [summary("s1", "h1"), summary("s2", "h2")],
        assignments=[assignment(a, "s1")],
        heartbeats=[heartbeat("s2", stopping=unfit == "stopping")],
        **in_trouble(unfit, "s2"),
    )
    write = only(result)
    assert write.placement is not None and write.placement.supervisor is None
    assert write.placement.unplaced_because == (
        f"no supervisor fits: runs its active worker (1), {unfit} (1)"
    )


# ---------------------------------------------------------------------- the bound


def test_the_bound_places_the_oldest_submits_first():
    old, new = record("old", submitted=1), record("new", submitted=2)
    result = plan(
        [new, old],
        [summary("s1", "h1"), summary("s2", "h2"), summary("s3", "h3")],
        assignments=[assignment(old, "s1"), assignment(new, "s1")],
        max_workers=1,
    )
    assert where(result) == {"old": "s2", "new": None}
    over = next(w for w in result.writes if w.pipeline == "new")
    assert over.reason is StandbyReason.OVER_MAX
    assert over.placement is not None
    assert "nimbus.standby.workers.max" in (over.placement.unplaced_because or "")


def test_a_lowered_bound_takes_the_newest_submits_standby_workers():
    old, new = record("old", submitted=1), record("new", submitted=2)
    placed = {"old": placement(old, "s2"), "new": placement(new, "s3")}
    result = plan(
        [old, new],
        [summary("s1", "h1"), summary("s2", "h2"), summary("s3", "h3")],
        assignments=[assignment(old, "s1"), assignment(new, "s1")],
        placements=placed,
        max_workers=1,
    )
    write = only(result)
    assert (write.pipeline, write.kind, write.reason) == (
        "new",
        StandbyWriteKind.MOVE,
        StandbyReason.OVER_MAX,
    )
    assert write.placement is not None and write.placement.supervisor is None
    assert write.previous == "s3"


def test_a_bound_below_minus_one_is_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"nimbus\.standby\.workers\.max"):
        plan([], [], max_workers=-2)


# ---------------------------------------------------------------------- moves


@pytest.mark.parametrize(
    ("trouble", "reason"),
    [
        ("dead", StandbyReason.SUPERVISOR_DEAD),
        ("suspected", StandbyReason.SUPERVISOR_SUSPECTED),
        ("cordoned", StandbyReason.SUPERVISOR_CORDONED),
        ("stopping", StandbyReason.SUPERVISOR_STOPPING),
    ],
)
def test_a_standby_worker_leaves_a_supervisor_in_trouble(trouble, reason):
    a = record("a")
    result = plan(
        [a],
        [summary("s1", "h1"), summary("s2", "h2"), summary("s3", "h3")],
        assignments=[assignment(a, "s1")],
        placements={"a": placement(a, "s2")},
        heartbeats=[heartbeat("s2", stopping=trouble == "stopping")],
        **in_trouble(trouble, "s2"),
    )
    write = only(result)
    assert (write.kind, write.reason, write.previous) == (StandbyWriteKind.MOVE, reason, "s2")
    assert where(result) == {"a": "s3"}


def test_it_leaves_the_supervisor_its_active_worker_moved_to():
    a = record("a")
    result = plan(  # s1 died, the active worker moved to s2, where the standby worker waits
        [a],
        [summary("s2", "h2"), summary("s3", "h3")],
        assignments=[assignment(a, "s2")],
        placements={"a": placement(a, "s2")},
        dead={"s1"},
    )
    write = only(result)
    assert (write.kind, write.reason) == (StandbyWriteKind.MOVE, StandbyReason.ACTIVE_HERE)
    assert where(result) == {"a": "s3"}


def test_it_leaves_a_supervisor_that_is_gone():
    a = record("a")
    result = plan(
        [a],
        [summary("s1", "h1"), summary("s3", "h3")],
        assignments=[assignment(a, "s1")],
        placements={"a": placement(a, "s2")},  # s2: neither registered nor heartbeating
    )
    assert only(result).reason is StandbyReason.SUPERVISOR_GONE
    assert where(result) == {"a": "s3"}


def test_active_workers_take_a_standby_workers_slot_and_it_moves():
    a, b = record("a"), record("b", hot=False)
    result = plan(
        [a, b],
        [summary("s1", "h1"), summary("s2", "h2", slots=1), summary("s3", "h3")],
        assignments=[assignment(a, "s1"), assignment(b, "s2")],  # b took s2's only slot
        placements={"a": placement(a, "s2")},
    )
    assert only(result).reason is StandbyReason.NO_SLOT
    assert where(result) == {"a": "s3"}


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        (StandbyWorkerState.REFUSED, StandbyReason.REFUSED),
        (StandbyWorkerState.FAILED, StandbyReason.FAILED),
    ],
)
def test_a_refused_or_failed_standby_worker_moves_and_the_refusal_is_kept(state, reason):
    a = record("a")
    result = plan(
        [a],
        [summary("s1", "h1"), summary("s2", "h2"), summary("s3", "h3")],
        assignments=[assignment(a, "s1")],
        placements={"a": placement(a, "s2")},
        heartbeats=[heartbeat("s2", standby_beat(a, state, error="not enough memory"))],
    )
    write = only(result)
    assert write.reason is reason and where(result) == {"a": "s3"}
    assert write.placement is not None
    assert write.placement.refusals == [
        StandbyWorkerRefusal(supervisor="s2", reason=f"{reason.value}: not enough memory", at=NOW)
    ]


def test_a_ready_standby_worker_stays_and_nothing_is_written():
    a = record("a")
    result = plan(
        [a],
        [summary("s1", "h1"), summary("s2", "h2"), summary("s3", "h3", slots=8)],
        assignments=[assignment(a, "s1")],
        placements={"a": placement(a, "s2")},
        heartbeats=[heartbeat("s2", standby_beat(a, StandbyWorkerState.READY))],
    )
    assert result.empty


def test_a_refusal_of_an_older_generation_moves_nothing():
    a = record("a", rebalances=1)
    old = record("a", rebalances=0)
    result = plan(
        [a],
        [summary("s1", "h1"), summary("s2", "h2"), summary("s3", "h3")],
        assignments=[assignment(a, "s1")],
        placements={"a": placement(a, "s2")},
        heartbeats=[heartbeat("s2", standby_beat(old, StandbyWorkerState.REFUSED))],
    )
    assert result.empty


@pytest.mark.parametrize(
    ("state", "moves"), [(StandbyWorkerState.FAILED, False), (StandbyWorkerState.REFUSED, True)]
)
def test_a_failure_of_other_code_than_the_records_is_rewritten_in_place_a_refusal_moves(
    state, moves
):
    a = record("a")  # its update to other code was withdrawn: the placement is of that code
    withdrawn = a.model_copy(update={"digest": "e1", "version": 2})
    result = plan(
        [a],
        [summary("s1", "h1"), summary("s2", "h2"), summary("s3", "h3")],
        assignments=[assignment(a, "s1")],
        placements={"a": placement(withdrawn, "s2")},
        heartbeats=[heartbeat("s2", standby_beat(withdrawn, state, error="no-such-project"))],
    )
    write = only(result)
    assert write.placement is not None
    assert where(result) == {"a": "s3" if moves else "s2"}
    assert (write.placement.digest, bool(write.placement.refusals)) == ("d0", moves)


def test_a_supervisor_that_refused_is_not_asked_again_for_ten_minutes():
    a = record("a")
    supervisors = [summary("s1", "h1"), summary("s2", "h2")]
    for ago, expected in ((60.0, None), (REFUSAL_BACKOFF_SECS + 1, "s2")):
        refusal = StandbyWorkerRefusal(supervisor="s2", reason="refused: memory", at=NOW - ago)
        unplaced = placement(a, None, refusals=[refusal], unplaced_because="earlier")
        result = plan(
            [a], supervisors, assignments=[assignment(a, "s1")], placements={"a": unplaced}
        )
        assert where(result) == {"a": expected}
        write = only(result)
        assert write.placement is not None and write.placement.refusals == [refusal]
        if expected is None:
            assert write.placement.unplaced_because == (
                "no supervisor fits: runs its active worker (1), refused it in the last 10 min (1)"
            )


def test_a_placement_keeps_the_newest_five_refusals():
    a = record("a")
    earlier = [
        StandbyWorkerRefusal(supervisor=f"old{n}", reason="refused", at=NOW - 3600 - n)
        for n in range(5)
    ]
    result = plan(
        [a],
        [summary("s1", "h1"), summary("s2", "h2"), summary("s3", "h3")],
        assignments=[assignment(a, "s1")],
        placements={"a": placement(a, "s2", refusals=earlier)},
        heartbeats=[heartbeat("s2", standby_beat(a, StandbyWorkerState.REFUSED))],
    )
    write = only(result)
    assert write.placement is not None
    assert [r.supervisor for r in write.placement.refusals] == [
        "s2",
        *(f"old{n}" for n in range(4)),
    ]


# ---------------------------------------------------------------------- rewrites, deletes


def test_a_new_generation_rewrites_the_placement_where_it_is():
    a = record("a", rebalances=2)
    result = plan(
        [a],
        [summary("s1", "h1"), summary("s2", "h2"), summary("s3", "h3", slots=8)],
        assignments=[assignment(a, "s1")],
        placements={"a": placement(a, "s2", generation=1)},
    )
    write = only(result)
    assert (write.kind, write.reason) == (StandbyWriteKind.REWRITE, StandbyReason.NEW_GENERATION)
    assert write.placement is not None
    assert (write.placement.supervisor, write.placement.generation) == ("s2", 2)
    assert write.placement.epoch == EPOCH


def test_what_a_newer_release_wrote_into_a_placement_is_kept():
    a = record("a", rebalances=2)
    stored = placement(a, "s2", generation=1).model_dump(mode="json") | {"future": 1}
    result = plan(
        [a],
        [summary("s1", "h1"), summary("s2", "h2")],
        assignments=[assignment(a, "s1")],
        placements={"a": StandbyWorkerPlacement.model_validate(stored)},
    )
    write = only(result)
    assert write.placement is not None and write.placement.unknown_fields == {"future": 1}


@pytest.mark.parametrize(
    ("pipeline", "reason"),
    [
        (record("a", hot=False), StandbyReason.NOT_HOT),
        (record("a", status=PipelineStatus.INACTIVE), StandbyReason.NOT_ACTIVE),
        (record("a", status=PipelineStatus.KILLED), StandbyReason.NOT_ACTIVE),
        (None, StandbyReason.PIPELINE_GONE),
    ],
)
def test_a_pipeline_that_is_not_hot_and_active_loses_its_placement(pipeline, reason):
    a = record("a")
    result = plan(
        [pipeline] if pipeline is not None else [],
        [summary("s1", "h1"), summary("s2", "h2")],
        placements={"a": placement(a, "s2")},
    )
    write = only(result)
    assert (write.kind, write.reason, write.placement, write.previous) == (
        StandbyWriteKind.DELETE,
        reason,
        None,
        "s2",
    )


def test_an_unreadable_placement_of_a_hot_pipeline_is_written_whole():
    a = record("a")
    result = plan(
        [a],
        [summary("s1", "h1"), summary("s2", "h2")],
        assignments=[assignment(a, "s1")],
        placements={"a": None},
    )
    assert where(result) == {"a": "s2"}


def test_a_second_round_over_the_first_ones_writes_writes_nothing():
    pipelines = [record(name, submitted=n) for n, name in enumerate("abcde")]
    supervisors = [summary("s1", "h1", slots=3), summary("s2", "h2"), summary("s3", "h2")]
    assignments = [assignment(p, "s1") for p in pipelines[:3]]
    placements: dict[str, StandbyWorkerPlacement | None] = {}
    first = plan(pipelines, supervisors, assignments=assignments, placements=placements)
    assert where(first) == {"a": "s2", "b": "s3", "c": "s2", "d": "s3", "e": None}

    second = plan(
        pipelines, supervisors, assignments=assignments, placements=applied(first, placements)
    )
    assert second.empty  # placed ones stay, the unplaced one's reason is the same


# ---------------------------------------------------------------------- recovery first


def test_a_pipeline_awaiting_its_first_batch_gets_no_standby_worker_yet_and_keeps_its_turn():
    old, new = record("old", submitted=1.0), record("new", submitted=2.0)
    supervisors = [summary("s1", "h1"), summary("s2", "h2"), summary("s3", "h3")]
    assignments = [assignment(old, "s1"), assignment(new, "s1")]
    waiting = plan(
        [old, new], supervisors, assignments=assignments, max_workers=1, deferred={"old"}
    )
    over = only(waiting)  # nothing for "old"; "new" stays behind it under the bound
    assert (over.pipeline, over.reason) == ("new", StandbyReason.OVER_MAX)
    later = plan([old, new], supervisors, assignments=assignments, max_workers=1)
    assert where(later) == {"old": "s2", "new": None}


def test_a_deferred_pipeline_keeps_the_standby_worker_it_has():
    a = record("a")
    placements = {"a": placement(a, "s2")}
    result = plan(
        [a],
        [summary("s1", "h1"), summary("s2", "h2")],
        assignments=[assignment(a, "s1")],
        placements=placements,
        deferred={"a"},
    )
    assert result.empty
