"""Which standby workers the leader promotes (``plan_promotions``): the scenarios one by one.

Pure logic: records, assignments, placements and heartbeats are built here. Unless a test says
otherwise, pipeline "orders" runs on s1, its standby worker waits READY on s2, and s1 is
silent past its floor. A drained pipeline (``stopped``) has no assignment: the drain deleted
it, and its old worker on s1 stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from stratus.api.records import (
    Assignment,
    AssignmentReason,
    PipelineRecord,
    PipelineStatus,
    SupervisorHeartbeat,
)
from stratus.api.standby_workers import (
    StandbyWorkerBeat,
    StandbyWorkerPlacement,
    StandbyWorkerState,
)
from stratus.nimbus.failover.promotion_plan import (
    How,
    PromotionPlan,
    Refusal,
    plan_promotions,
)

EPOCH = 9
NOW = 1_700_000_000.0
DIGEST = "a" * 64
OTHER_DIGEST = "b" * 64


def record(
    name: str = "orders",
    *,
    standby: str | None = "hot",
    rebalances: int = 2,
    digest: str = DIGEST,
    status: PipelineStatus = PipelineStatus.ACTIVE,
    submitted: float = 10.0,
) -> PipelineRecord:
    conf: dict[str, Any] = {"spark.sql.shuffle.partitions": "4"}
    if standby is not None:
        conf["pipeline.standby"] = standby
    return PipelineRecord(
        name=name,
        status=status,
        digest=digest,
        size_bytes=100,
        conf=conf,
        submitted=submitted,
        updated=submitted,
        epoch=1,
        rebalances=rebalances,
        owner="alice",
    )


def assignment(pipeline: PipelineRecord, supervisor: str = "s1") -> Assignment:
    return Assignment(
        pipeline=pipeline.name,
        supervisor=supervisor,
        epoch=3,
        generation=pipeline.generation,
        digest=pipeline.digest,
        size_bytes=pipeline.size_bytes,
        conf=pipeline.conf,
        assigned=5.0,
    )


def placement(
    pipeline: PipelineRecord,
    supervisor: str | None = "s2",
    *,
    generation: int | None = None,
    digest: str | None = None,
) -> StandbyWorkerPlacement:
    return StandbyWorkerPlacement(
        pipeline=pipeline.name,
        supervisor=supervisor,
        epoch=3,
        generation=pipeline.generation if generation is None else generation,
        digest=pipeline.digest if digest is None else digest,
        size_bytes=pipeline.size_bytes,
        conf=pipeline.conf,
        placed=6.0,
        unplaced_because=None if supervisor is not None else "no supervisor has a free slot",
    )


def standby_beat(
    placed: StandbyWorkerPlacement,
    state: StandbyWorkerState = StandbyWorkerState.READY,
    *,
    generation: int | None = None,
    digest: str | None = None,
) -> StandbyWorkerBeat:
    return StandbyWorkerBeat(
        pipeline=placed.pipeline,
        generation=placed.generation if generation is None else generation,
        digest=placed.digest if digest is None else digest,
        state=state,
        since=7.0,
        pid=4242,
    )


def heartbeat(
    supervisor: str, *beats: StandbyWorkerBeat, stopping: bool = False
) -> SupervisorHeartbeat:
    return SupervisorHeartbeat(
        id=supervisor, time=8.0, slots=4, stopping=stopping, standby_workers=list(beats)
    )


class Cluster:
    """The snapshot a promotion plans from, built up pipeline by pipeline."""

    def __init__(self) -> None:
        self.pipelines: dict[str, PipelineRecord] = {}
        self.assignments: dict[str, tuple[Assignment, int]] = {}
        self.placements: dict[str, tuple[StandbyWorkerPlacement | None, int]] = {}
        self.beats: dict[str, list[StandbyWorkerBeat]] = {}
        self.registered = {"s1", "s2", "s3", "s4"}
        self.suspected: set[str] = set()
        self.stopping: set[str] = set()
        self.cordoned: set[str] = set()

    def add(
        self,
        pipeline: PipelineRecord,
        active: str = "s1",
        standby: str | None = "s2",
        *,
        state: StandbyWorkerState | None = StandbyWorkerState.READY,
    ) -> StandbyWorkerPlacement:
        placed = placement(pipeline, standby)
        self.pipelines[pipeline.name] = pipeline
        self.assignments[pipeline.name] = (assignment(pipeline, active), 11)
        self.placements[pipeline.name] = (placed, 4)
        if standby is not None and state is not None:
            self.beats.setdefault(standby, []).append(standby_beat(placed, state))
        return placed

    def drained(self, pipeline: PipelineRecord, **kwargs: Any) -> StandbyWorkerPlacement:
        """``pipeline`` as a drain leaves it once its old worker stopped: no assignment."""
        placed = self.add(pipeline, **kwargs)
        del self.assignments[pipeline.name]
        return placed

    def plan(
        self,
        verdicts: Mapping[str, How] | None = None,
        fenced: Mapping[str, set[str]] | None = None,
        stopped: Mapping[str, str] | None = None,
    ) -> PromotionPlan:
        supervisors = self.registered | set(self.beats)
        if verdicts is None:
            verdicts = {} if stopped else {"s1": How.FLOOR}
        return plan_promotions(
            verdicts=verdicts,
            fenced=fenced,
            stopped=stopped,
            cordoned=self.cordoned,
            pipelines=self.pipelines,
            assignments=self.assignments,
            placements=self.placements,
            heartbeats={
                sid: heartbeat(sid, *self.beats.get(sid, []), stopping=sid in self.stopping)
                for sid in supervisors
            },
            suspected=self.suspected,
            registered=self.registered,
            epoch=EPOCH,
            now=NOW,
        )


def refusal(plan: PromotionPlan, pipeline: str = "orders") -> Refusal:
    assert plan.promotions == ()
    [refused] = [r for r in plan.refusals if r.pipeline == pipeline]
    return refused.reason


def test_a_ready_standby_worker_is_promoted_off_a_supervisor_silent_past_its_floor() -> None:
    cluster = Cluster()
    orders = record()
    cluster.add(orders)

    plan = cluster.plan()

    [promotion] = plan.promotions
    assert (promotion.pipeline, promotion.from_supervisor, promotion.to_supervisor) == (
        "orders",
        "s1",
        "s2",
    )
    assert promotion.how is How.FLOOR
    assert (promotion.assignment_version, promotion.placement_version) == (11, 4)
    new = promotion.assignment
    assert (new.supervisor, new.epoch, new.generation, new.digest, new.assigned) == (
        "s2",
        EPOCH,
        orders.generation,
        DIGEST,
        NOW,
    )
    assert new.conf["pipeline.owner"] == "alice"  # the conf every assignment carries
    change = promotion.change
    assert change.reason is AssignmentReason.STANDBY_PROMOTED
    assert (change.previous, change.supervisor, change.epoch, change.at) == ("s1", "s2", EPOCH, NOW)
    assert plan.refusals == ()


@pytest.mark.parametrize("how", [How.FENCED, How.FLOOR, How.DEAD])
def test_every_verdict_promotes(how: How) -> None:
    cluster = Cluster()
    cluster.add(record())
    plan = cluster.plan({"s1": how}, fenced={"s1": {"orders"}})
    assert [(p.pipeline, p.to_supervisor, p.how) for p in plan.promotions] == [
        ("orders", "s2", how)
    ]


def test_fenced_and_floor_both_promote() -> None:
    cluster = Cluster()
    cluster.add(record("orders"), active="s1", standby="s3")
    cluster.add(record("clicks"), active="s2", standby="s4")
    plan = cluster.plan({"s1": How.FENCED, "s2": How.FLOOR}, fenced={"s1": {"orders"}})
    assert {p.pipeline: (p.how, p.to_supervisor) for p in plan.promotions} == {
        "orders": (How.FENCED, "s3"),
        "clicks": (How.FLOOR, "s4"),
    }


def test_a_fence_promotes_only_the_pipelines_it_answered_for() -> None:
    cluster = Cluster()
    cluster.add(record("orders"))
    cluster.add(record("clicks"))  # assigned to s1 after the fence was sent
    plan = cluster.plan({"s1": How.FENCED}, fenced={"s1": {"orders"}})
    assert [p.pipeline for p in plan.promotions] == ["orders"]
    assert [(r.pipeline, r.reason) for r in plan.refusals] == [("clicks", Refusal.NOT_FENCED)]


def test_two_pipelines_on_one_dead_supervisor_both_promote_to_their_own_standbys() -> None:
    cluster = Cluster()
    cluster.add(record("orders", submitted=1.0), standby="s2")
    cluster.add(record("clicks", submitted=2.0), standby="s3")
    plan = cluster.plan({"s1": How.DEAD})
    assert [(p.pipeline, p.from_supervisor, p.to_supervisor) for p in plan.promotions] == [
        ("orders", "s1", "s2"),
        ("clicks", "s1", "s3"),
    ]
    assert plan.refusals == ()


def test_no_promotion_to_a_standby_worker_not_yet_ready() -> None:
    for state in (
        StandbyWorkerState.FETCHING,
        StandbyWorkerState.STARTING,
        StandbyWorkerState.REFUSED,
        StandbyWorkerState.FAILED,
    ):
        cluster = Cluster()
        cluster.add(record(), state=state)
        plan = cluster.plan()
        assert refusal(plan) is Refusal.NOT_READY
        assert state.value in plan.refusals[0].detail


def test_no_promotion_to_a_standby_worker_its_supervisor_does_not_report() -> None:
    cluster = Cluster()
    cluster.add(record(), state=None)
    assert refusal(cluster.plan()) is Refusal.NOT_REPORTED


def test_no_promotion_to_a_standby_worker_of_an_older_generation() -> None:
    cluster = Cluster()
    orders = record(rebalances=3)  # rebalanced since its standby worker was placed
    cluster.add(orders)
    stale = placement(orders, generation=orders.generation - 1)
    cluster.placements["orders"] = (stale, 4)
    cluster.beats["s2"] = [standby_beat(stale)]
    assert refusal(cluster.plan()) is Refusal.STALE_GENERATION
    # the placement decides what may be promoted, whatever its supervisor reports
    cluster.beats["s2"] = [standby_beat(stale, generation=orders.generation)]
    assert refusal(cluster.plan()) is Refusal.STALE_GENERATION


def test_no_promotion_to_a_standby_worker_of_other_code() -> None:
    cluster = Cluster()
    orders = record()
    cluster.add(orders)
    stale = placement(orders, digest=OTHER_DIGEST)  # the code before an update
    cluster.placements["orders"] = (stale, 4)
    cluster.beats["s2"] = [standby_beat(stale)]
    assert refusal(cluster.plan()) is Refusal.STALE_DIGEST


def test_no_promotion_while_the_supervisor_still_reports_the_old_standby_worker() -> None:
    cluster = Cluster()
    orders = record()
    placed = cluster.add(orders, state=None)
    # the placement was rewritten for the new code; s2 still runs the old one, READY
    cluster.beats["s2"] = [standby_beat(placed, digest=OTHER_DIGEST)]
    assert refusal(cluster.plan()) is Refusal.STALE_DIGEST
    cluster.beats["s2"] = [standby_beat(placed, generation=orders.generation - 1)]
    assert refusal(cluster.plan()) is Refusal.STALE_GENERATION


def test_no_promotion_to_a_suspected_standby_supervisor() -> None:
    cluster = Cluster()
    cluster.add(record())
    cluster.suspected = {"s1", "s2"}
    assert refusal(cluster.plan()) is Refusal.STANDBY_SUSPECTED


def test_no_promotion_to_an_unregistered_standby_supervisor() -> None:
    cluster = Cluster()
    cluster.add(record())
    cluster.registered = {"s1", "s3"}  # s2's registration is gone; its last heartbeat stays
    assert refusal(cluster.plan()) is Refusal.STANDBY_UNREGISTERED


def test_no_promotion_to_a_standby_supervisor_under_a_verdict_itself() -> None:
    cluster = Cluster()
    cluster.add(record())
    assert refusal(cluster.plan({"s1": How.FLOOR, "s2": How.DEAD})) is Refusal.STANDBY_UNDER_VERDICT


def test_no_promotion_to_a_stopping_standby_supervisor() -> None:
    cluster = Cluster()
    cluster.add(record())
    cluster.stopping = {"s2"}
    assert refusal(cluster.plan()) is Refusal.STANDBY_STOPPING


def test_never_to_the_active_workers_own_supervisor() -> None:
    cluster = Cluster()
    cluster.add(record(), active="s1", standby="s1")
    assert refusal(cluster.plan()) is Refusal.ON_ACTIVE_SUPERVISOR


def test_no_promotion_without_a_placed_standby_worker() -> None:
    cluster = Cluster()
    orders = record()
    cluster.add(orders, standby=None)
    plan = cluster.plan()
    assert refusal(plan) is Refusal.NO_STANDBY_WORKER
    assert "no supervisor has a free slot" in plan.refusals[0].detail
    del cluster.placements["orders"]
    assert refusal(cluster.plan()) is Refusal.NO_STANDBY_WORKER
    cluster.placements["orders"] = (None, 4)  # a znode that does not decode
    assert refusal(cluster.plan()) is Refusal.UNREADABLE_PLACEMENT


def test_a_pipeline_not_hot_is_never_promoted() -> None:
    cluster = Cluster()
    cluster.add(record("orders", standby=None))  # a placement left behind: no longer hot
    cluster.add(record("clicks", standby="none"))
    plan = cluster.plan({"s1": How.DEAD})
    assert plan.promotions == ()
    assert plan.refusals == ()  # its move is the round's, as for every pipeline that did not ask


def test_a_pipeline_that_does_not_run_is_never_promoted() -> None:
    cluster = Cluster()
    cluster.add(record(status=PipelineStatus.INACTIVE))
    plan = cluster.plan({"s1": How.DEAD})
    assert plan.promotions == ()
    assert plan.refusals == ()


def test_nothing_is_promoted_off_a_supervisor_without_a_verdict() -> None:
    cluster = Cluster()
    cluster.add(record(), active="s3")
    cluster.suspected = {"s3"}  # suspected, but not yet fenced nor silent past its floor
    assert cluster.plan() == PromotionPlan()


def test_an_unknown_verdict_is_refused_by_name() -> None:
    cluster = Cluster()
    cluster.add(record())
    with pytest.raises(ValueError, match="verdict on supervisor s1 is 'gone'"):
        cluster.plan({"s1": "gone"})  # type: ignore[dict-item]


def test_no_promotion_to_a_cordoned_standby_supervisor() -> None:
    cluster = Cluster()
    cluster.add(record("orders"))
    cluster.drained(record("clicks"))
    cluster.cordoned = {"s2"}  # cordoned, or drained too: it takes no new pipeline
    plan = cluster.plan({"s1": How.DEAD}, stopped={"clicks": "s1"})
    assert plan.promotions == ()
    assert {(r.pipeline, r.how, r.reason) for r in plan.refusals} == {
        ("orders", How.DEAD, Refusal.STANDBY_CORDONED),
        ("clicks", How.STOPPED, Refusal.STANDBY_CORDONED),
    }


# ---------------------------------------------------------------------- drains


def test_a_drained_pipeline_whose_old_worker_stopped_is_promoted_creating_its_assignment() -> None:
    cluster = Cluster()
    orders = record()
    cluster.drained(orders)

    plan = cluster.plan(stopped={"orders": "s1"})

    [promotion] = plan.promotions
    assert (promotion.pipeline, promotion.from_supervisor, promotion.to_supervisor) == (
        "orders",
        "s1",
        "s2",
    )
    assert promotion.how is How.STOPPED
    assert (promotion.assignment_version, promotion.placement_version) == (None, 4)
    assert (promotion.assignment.supervisor, promotion.assignment.generation) == (
        "s2",
        orders.generation,
    )
    change = promotion.change
    assert change.reason is AssignmentReason.STANDBY_PROMOTED
    assert (change.previous, change.supervisor) == ("s1", "s2")
    assert plan.refusals == ()


def test_a_drained_pipeline_is_promoted_beside_a_dead_supervisors() -> None:
    cluster = Cluster()
    cluster.add(record("orders", submitted=1.0), active="s3", standby="s2")
    cluster.drained(record("clicks", submitted=2.0), standby="s4")
    plan = cluster.plan({"s3": How.DEAD}, stopped={"clicks": "s1"})
    assert [(p.pipeline, p.how, p.assignment_version) for p in plan.promotions] == [
        ("orders", How.DEAD, 11),
        ("clicks", How.STOPPED, None),
    ]


def test_a_drained_pipeline_is_refused_as_a_dead_supervisors_is() -> None:
    cluster = Cluster()
    cluster.drained(record(), state=StandbyWorkerState.STARTING)
    plan = cluster.plan(stopped={"orders": "s1"})
    assert refusal(plan) is Refusal.NOT_READY
    assert (plan.refusals[0].how, plan.refusals[0].from_supervisor) == (How.STOPPED, "s1")
    cluster = Cluster()
    cluster.drained(record(), standby=None)
    assert refusal(cluster.plan(stopped={"orders": "s1"})) is Refusal.NO_STANDBY_WORKER
    cluster = Cluster()
    cluster.drained(record())
    assert refusal(cluster.plan({"s2": How.DEAD}, stopped={"orders": "s1"})) is (
        Refusal.STANDBY_UNDER_VERDICT
    )


def test_a_drained_pipeline_whose_old_worker_still_runs_is_not_considered() -> None:
    cluster = Cluster()
    cluster.drained(record())  # the round lists it in stopped only once its worker stopped
    assert cluster.plan({}, stopped={}) == PromotionPlan()
    assert cluster.plan({"s1": How.DEAD}) == PromotionPlan()  # nor as a dead one's


def test_a_drained_pipeline_not_hot_or_not_running_is_never_promoted() -> None:
    cluster = Cluster()
    cluster.drained(record("orders", standby=None))
    cluster.drained(record("clicks", status=PipelineStatus.INACTIVE))
    assert cluster.plan(stopped={"orders": "s1", "clicks": "s1"}) == PromotionPlan()


def test_stopped_is_never_a_verdict_on_a_supervisor() -> None:
    cluster = Cluster()
    cluster.add(record())  # a drain that found no room keeps it running on s1
    with pytest.raises(ValueError, match="supervisor s1 is 'stopped', which is a pipeline's"):
        cluster.plan({"s1": How.STOPPED})


def test_a_stopped_pipeline_that_has_an_assignment_is_refused_by_name() -> None:
    cluster = Cluster()
    cluster.add(record())
    with pytest.raises(ValueError, match="pipeline orders is listed as stopped off s1, but it"):
        cluster.plan({}, stopped={"orders": "s1"})
