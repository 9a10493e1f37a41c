"""The leader's duties, built at start: the round of duties and the failover lane beside it.

The duties run in the order of a round (``DutyRound``): removals of killed pipelines, the
expiry of kept checkpoints, purges, activations of replicated code, failures of lost code,
and last the scheduling, with its fences of silent supervisors and its standby workers'
promotions. The failover lane (pipelines with a standby worker, judged on the pacemakers'
fast beats) is built beside the round with the same promoter and fencing; with the
ZooKeeper state store there is no lane. Their metrics (promotions, refusals, phi, the
standby workers' census) are declared here, read while this nimbus leads. What opens a
connection or a thread notes its close on the daemon's stack (``opened``); nothing is
started here: the daemon starts the lane with each term::

    duties = build_duties(settings, opened, session=session, paths=paths, view=view, ...)
    controller = LeadershipController(..., lambda term: duties.round.run(term), ...)
    if duties.lane is not None:
        duties.lane.start(term)
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

from stratus.api.clock import Clock
from stratus.api.purges import nimbus_party
from stratus.codedist.code_sync import CodeSync
from stratus.codedist.distributor import CodeDistributor
from stratus.coordination.leadership import Leadership
from stratus.nimbus.cluster_view import ClusterView
from stratus.nimbus.duties.checkpoint_retention import ExpireKeptCheckpoints
from stratus.nimbus.duties.cold_starts import ColdStartWatch
from stratus.nimbus.duties.killed import RemoveKilled
from stratus.nimbus.duties.lost_code import FailLostCode
from stratus.nimbus.duties.purges import CarryOutPurges, PurgeOrders
from stratus.nimbus.duties.replication import ActivateReplicated
from stratus.nimbus.duties.round import DutyRound
from stratus.nimbus.duties.scheduling import SchedulingDuty
from stratus.nimbus.failover.beat_watch import BeatWatch
from stratus.nimbus.failover.lane import FailoverLane
from stratus.nimbus.failover.promotion import Promoter
from stratus.nimbus.failover.promotion_plan import How, Promotion, PromotionRefusal, Refusal
from stratus.nimbus.leadership.leader_trail import LeaderTrail
from stratus.nimbus.metrics import NimbusMetrics
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.scheduling.assignments import AssignmentTable
from stratus.nimbus.scheduling.cordons import CordonTable, DrainMemory
from stratus.nimbus.scheduling.pipeline_metrics import ObservedRound
from stratus.nimbus.scheduling.standby_census import CENSUS_STATES, StandbyCensus
from stratus.nimbus.scheduling.standby_workers import StandbyWorkerTable
from stratus.nimbus.scheduling.supervisor_fencing import SupervisorFencing
from stratus.nimbus.settings import NimbusSettings
from stratus.pacemaker.blocking import BlockingPacemakerPool
from stratus.state.beats import BeatBoard
from stratus.state.heartbeats import HeartbeatBoard
from stratus.state.pacemaker_store import PacemakerStateStore
from stratus.zk.paths import ClusterPaths
from stratus.zk.session import ZkSession


@dataclass(frozen=True)
class LeaderDuties:
    """The leader's duties of one nimbus (``build_duties``)."""

    round: DutyRound  # run once per round of the leadership controller
    lane: FailoverLane | None  # None with the ZooKeeper state store; started with each term


def build_duties(  # noqa: PLR0913 keyword-only: the daemon's collaborators
    settings: NimbusSettings,
    opened: ExitStack,
    *,
    session: ZkSession,
    paths: ClusterPaths,
    view: ClusterView,
    history: LeaderTrail,
    metrics: NimbusMetrics,
    ops: PipelineOps,
    board: HeartbeatBoard,
    assignments: AssignmentTable,
    cordons: CordonTable,
    drains: DrainMemory,
    removal: RemoveKilled,
    distributor: CodeDistributor,
    code_sync: CodeSync,
    observed: Callable[[ObservedRound], None],
    leading: Callable[[], bool],
    wake_round: Callable[[], None],
    address: str,
    clock: Clock,
    wall: Clock,
) -> LeaderDuties:
    """The leader's duties, in the order of a round, and the failover lane beside them;
    ``wake_round`` runs a round now (from any thread, never blocking)."""

    def promoted(term: Leadership, promotion: Promotion, silent: float, floor: float) -> None:
        metrics.promotions.labels(promotion.how.value).inc()
        history.promoted(
            epoch=term.epoch,
            pipeline=promotion.pipeline,
            from_supervisor=promotion.from_supervisor,
            to_supervisor=promotion.to_supervisor,
            how=promotion.how.value,
            silent_secs=silent,
            floor_secs=floor,
            cold_start_fenced=promotion.cold_start_fenced,
        )

    def refused(refusal: PromotionRefusal) -> None:
        metrics.promotion_refusals.labels(refusal.reason.value).inc()

    promoter = Promoter(session.client, paths, on_promoted=promoted)
    fencing = supervisor_fencing(settings, opened, metrics, clock=clock)
    lane = failover_lane(
        settings,
        opened,
        promoter,
        fencing,
        view,
        on_refused=refused,
        on_held=wake_round,
        clock=clock,
        wall=wall,
    )
    scheduling = SchedulingDuty(
        ops=ops,
        assignments=assignments,
        board=board,
        registered=view.supervisors,
        settings=settings.scheduling,
        clock=clock,
        wall=wall,
        on_unknown=lambda reason: metrics.heartbeats_unknown.labels(reason).inc(),
        on_observed=observed,
        connections=lambda: session.connections,
        zookeeper_epoch=session.zookeeper_epoch,
        fencing=fencing,
        cordons=cordons,
        drains=drains,
        standby=StandbyWorkerTable(session.client, paths),
        lane=lane,
        promoter=promoter,
        on_refused=refused,
    )
    declare_failover_metrics(metrics, lane, scheduling, leading)
    purges = CarryOutPurges(
        PurgeOrders(session.client, paths),
        checkpoint_root=settings.pipelines.checkpoint_root,
        by=settings.pipelines.purge_by,
        here=nimbus_party(address),
        live=view.supervisors,
        wall=wall,
    )
    purges.report_while(leading)
    metrics.declare_purges(purges.count)
    duties = DutyRound(
        [
            removal,
            ExpireKeptCheckpoints(
                ops,
                checkpoint_root=settings.pipelines.checkpoint_root,
                retention_secs=settings.pipelines.checkpoint_retention_secs,
                wall=wall,
                clock=clock,
            ),
            purges,
            ActivateReplicated(view.pipelines, distributor, ops),
            FailLostCode(code_sync.lost, ops),
            scheduling,
        ],
        on_failure=metrics.duty_failed,
    )
    metrics.declare_duties(duties.names)
    return LeaderDuties(duties, lane)


def declare_failover_metrics(
    metrics: NimbusMetrics,
    lane: FailoverLane | None,
    scheduling: SchedulingDuty,
    leading: Callable[[], bool],
) -> None:
    """The hot pipelines' metrics: every verdict and refusal reason at 0, the lane's phi, and
    the census of the scheduling round's last read while this nimbus leads (none on a
    standby: its last round may be an old term's)."""

    def census() -> StandbyCensus:
        last = scheduling.standby_census
        return last if last is not None and leading() else _NO_CENSUS

    metrics.declare_failover(
        hows=[how.value for how in How],
        reasons=[reason.value for reason in Refusal],
        phi=lane.phi if lane is not None else dict,
    )
    metrics.declare_standby(
        states=CENSUS_STATES,
        count=lambda state: census().states.get(state, 0),
        hot=lambda: census().hot,
        coverage=lambda: census().coverage,
    )


_NO_CENSUS = StandbyCensus(states={}, hot=0, covered=0)  # not leading, or no round yet


def supervisor_fencing(
    settings: NimbusSettings, opened: ExitStack, metrics: NimbusMetrics, *, clock: Clock
) -> SupervisorFencing | None:
    """The leader's fence of silent supervisors, with this nimbus's client credentials
    (None when it never fences)."""
    if settings.fencing is None:
        return None
    fencing = SupervisorFencing(
        settings.fencing,
        settings.api.client,
        clock=clock,
        on_outcome=lambda result, method: metrics.supervisor_fences.labels(result, method).inc(),
    )
    opened.callback(fencing.close)
    return fencing


def failover_lane(  # noqa: PLR0913 keyword-only: callbacks and clocks
    settings: NimbusSettings,
    opened: ExitStack,
    promoter: Promoter,
    fencing: SupervisorFencing | None,
    view: ClusterView,
    *,
    on_refused: Callable[[PromotionRefusal], None],
    on_held: Callable[[], None],
    clock: Clock,
    wall: Clock,
) -> FailoverLane | None:
    """The leader's failover lane, reading the beats from the pacemakers; None with the
    ZooKeeper state store, where no supervisor sends beats. With ``fencing``, it fences
    the hot pipelines of a suspected supervisor; without, it waits for the floor."""
    store = settings.state_store
    if store.pacemaker is None:
        return None
    pool = BlockingPacemakerPool(store.pacemaker, call_timeout_secs=store.call_timeout_secs)
    opened.callback(pool.close)
    detector = settings.detector
    lane = FailoverLane(
        BeatWatch(detector, BeatBoard(pool).read, clock=clock),
        promoter,
        view.supervisors,
        poll_secs=detector.poll_secs,
        fence_pipelines=fencing.fence_pipelines if fencing is not None else None,
        fence_answer_secs=fencing.settings.timeout_secs if fencing is not None else 0.0,
        on_refused=on_refused,
        on_held=on_held,
        cold_starts_now=(
            ColdStartWatch(HeartbeatBoard(PacemakerStateStore(pool)).workers_on, wall=wall)
            if fencing is not None
            else None
        ),
        clock=clock,
        wall=wall,
    )
    opened.callback(lane.close)
    return lane
