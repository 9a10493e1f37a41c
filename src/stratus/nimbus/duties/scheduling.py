"""The leader's scheduling duty: heartbeats in, outcomes recorded, a plan applied, all fenced.

Each round reads the pipelines, the assignments and the heartbeats from ZooKeeper and the
cluster state store (never from a view that may lag), then:

1. notes every heartbeat that *changed* since the last round (``Liveness``: the leader
   compares what it saw, never wall clocks across machines);
2. records the outcomes workers report: an updated version that committed its first batch
   is proven, one that failed before is rolled back to the previous kept version
   (``update_trial``), a hot pipeline's held update whose standby worker FAILED is
   withdrawn, its running worker untouched (``update_withdrawal``), a batch that finished
   makes its pipeline FINISHED, a worker its supervisor gave up on makes it FAILED with the
   worker's error (``worker_outcomes``);
3. judges supervisors dead when none of their heartbeats changed for
   ``nimbus.supervisor.timeout.secs``, and workers silent when theirs did not for
   ``nimbus.task.timeout.secs``. A supervisor that stopped (its last heartbeat says
   ``stopping``, its registration is gone) is judged by the same timeout: its workers may
   outlive it until its lease ends, and a supervisor restarted in time adopts them; it
   gets no new pipeline meanwhile, and its stop never drains it;
4. with a ``SupervisorFencing``, fences (off this thread) each supervisor that holds
   pipelines and was silent for ``nimbus.supervisor.fence.after.secs``, gives it no new
   pipeline meanwhile, and judges it dead as soon as a fence of that silence succeeded,
   in a round whose read began after it (``stratus.nimbus.scheduling.supervisor_fencing``);
5. with a ``CordonTable``, reads the cordons: a cordoned supervisor gets no new pipeline,
   a drained one loses its pipelines (``scheduler`` rules 4 and 5: the pipelines a drain
   took off and that are not placed yet come from their history's newest change, and wait
   while a live supervisor still runs their worker, or while the read of the heartbeats is
   not complete); what the round saw of the drains goes to ``DrainMemory`` for the API;
6. plans (``plan_round``) and applies the plan in the term's fenced transactions;
7. with a ``StandbyWorkerTable``, places the standby workers of hot pipelines
   (``standby_plan``: the assignments as the plan left them; a supervisor judged dead,
   silent past the fence threshold, stopping or cordoned holds none) and writes the
   placements that change, fenced too. Standby workers take slots: the plan of step 6
   gives a pipeline a standby worker's slot only when no supervisor has another. With no
   hot pipeline this costs one listing of ``standby-workers/`` and writes nothing;
8. with a ``Promoter``, before step 6, promotes the standby worker of each hot pipeline of a
   supervisor judged dead (``promotion_plan``, verdict ``dead``), and of each hot pipeline
   on the way from a drained supervisor whose old worker stopped (``stopped``: the drain's
   second step, a promotion instead of a placement), and of each hot pipeline on the way to
   its standby worker for a new generation (its newest change ``updated``, ``rolled_back``,
   ``restarted`` or ``rebalanced`` to no supervisor) whose old worker stopped, by the same
   rule, when it is READY on a supervisor that is not cordoned (one fenced transaction
   each; one that finds a version moved ends the round, which the next reads again), and
   plans step 6 from the assignments so promoted; it also tells step 6 which hot
   pipelines' new generations wait for their standby worker (``holding``, at most
   ``nimbus.standby.update.hold.secs``) and which go to it (``switching``: the assignment
   is deleted, break before make; ``update_moves``);
   with a ``FailoverLane``, moves no pipeline of a supervisor the lane suspects, gives it none,
   and hands the lane the hot pipelines of its read (``HotSnapshot``) at its end; but
   writes a new assignment for each pipeline the lane hands back (``fence_held``: a fence
   it asked stopped the worker and holds the pipeline, and the promotion was refused); the
   census of their standby workers is kept for the metrics (``standby_census``).

The liveness memory starts afresh with every term: a new leader has seen no heartbeat yet,
so it judges nothing dead before a whole timeout of its own term has passed (Storm
reassigns too early after a failover, and guards its first term only). With
``blind_after_reconnect`` (supervisors that ride out outages of ZooKeeper) it also starts
afresh after a reconnection across which ZooKeeper's own leader epoch changed: only then
can a supervisor have proved that no quorum served, and kept its workers on that proof.

Heartbeats the leader cannot see are unknown, never dead:

- a state store that cannot be read (every pacemaker unreachable) ends the round before
  anything is judged: nothing is assigned, moved or forgotten, the round is logged at
  ERROR and counted (``on_unknown("unavailable")``). When the heartbeats can be read again
  the liveness memory restarts, as at a new term: the blind stretch is not silence;
- a read that is not complete (every pacemaker that answered is warming up, after a
  restart that emptied it) judges what it holds as usual, but a supervisor or worker whose
  heartbeat is missing from it is not judged dead until a complete read (the warm-up
  lasts one ``pacemaker.pulse.ttl.secs``) shows it missing (``on_unknown("warming")``);
- a read that is partial (a configured pacemaker did not answer) may hold heartbeats older
  than their writers' newest: a supervisor that reaches only the pacemaker the leader does
  not renewed its lease with rounds the leader cannot see. So a supervisor silent in it is
  judged dead only once its registration (its ZooKeeper session, without which its lease
  does not renew) has been gone for a whole supervisor timeout, and no worker is judged
  silent from it (``on_unknown("unreachable")``)::

    duty = SchedulingDuty(
        ops=ops, assignments=table, board=board, registered=view.supervisors, settings=settings
    )
    duty.run(term)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from stratus.api.clock import Clock
from stratus.api.records import (
    Assignment,
    AssignmentReason,
    PipelineRecord,
    SupervisorHeartbeat,
    SupervisorSummary,
)
from stratus.api.standby_workers import wants_standby_worker
from stratus.coordination.leadership import Leadership
from stratus.nimbus.duties.heartbeat_judge import HeartbeatJudge
from stratus.nimbus.duties.quorum_watch import QuorumWatch
from stratus.nimbus.duties.round_fencing import RoundFencing
from stratus.nimbus.duties.standby_round import (
    RoundRead,
    StandbyRound,
    reported_standby,
    reserved_slots,
)
from stratus.nimbus.duties.worker_outcomes import WorkerOutcomes, Workers, current_beat
from stratus.nimbus.failover.lane import FailoverLane
from stratus.nimbus.failover.promotion import Promoter
from stratus.nimbus.failover.promotion_plan import PromotionRefusal
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.scheduling.assignments import AssignmentTable
from stratus.nimbus.scheduling.cordons import CordonTable, DrainMemory, DrainRound
from stratus.nimbus.scheduling.pipeline_metrics import ObservedRound
from stratus.nimbus.scheduling.scheduler import Plan, plan_round
from stratus.nimbus.scheduling.standby_census import StandbyCensus
from stratus.nimbus.scheduling.standby_workers import StandbyWorkerTable
from stratus.nimbus.scheduling.supervisor_fencing import SupervisorFencing
from stratus.nimbus.settings import SchedulingSettings
from stratus.state.heartbeats import HeartbeatBoard

log = logging.getLogger(__name__)


class SchedulingDuty:
    """One scheduling round at a time, on the leadership controller's thread; see the module
    docstring. Its parts: the heartbeats and their silences (``HeartbeatJudge``, restarted
    after a new quorum by ``QuorumWatch``), the fences (``RoundFencing``) and the standby
    workers' steps (``StandbyRound``)."""

    name = "scheduling"

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        *,
        ops: PipelineOps,
        assignments: AssignmentTable,
        board: HeartbeatBoard,
        registered: Callable[[], Mapping[str, SupervisorSummary]],
        settings: SchedulingSettings,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
        on_unknown: Callable[[str], None] = lambda _reason: None,
        on_observed: Callable[[ObservedRound], None] = lambda _round: None,
        connections: Callable[[], int] = lambda: 0,
        zookeeper_epoch: Callable[[], int | None] = lambda: 0,
        fencing: SupervisorFencing | None = None,
        cordons: CordonTable | None = None,
        drains: DrainMemory | None = None,
        standby: StandbyWorkerTable | None = None,
        lane: FailoverLane | None = None,
        promoter: Promoter | None = None,
        on_refused: Callable[[PromotionRefusal], None] = lambda _refusal: None,
    ) -> None:
        self._ops = ops
        self._standby = StandbyRound(
            settings.standby,
            table=standby,
            promoter=promoter,
            lane=lane,
            on_refused=on_refused,
            wall=wall,
            clock=clock,
        )
        self._cordons = cordons  # None: nothing is ever cordoned (tests of other rules)
        self._drains = drains or DrainMemory()
        self._assignments = assignments
        self._board = board
        self._registered = registered  # the supervisors' registrations, from the cluster view
        self._supervisor_timeout = settings.supervisor_timeout_secs
        self._wall = wall  # only for the assignments' timestamps
        self._heartbeats = HeartbeatJudge(board, settings, clock=clock, on_unknown=on_unknown)
        self._quorum = QuorumWatch(
            enabled=settings.blind_after_reconnect,
            connections=connections,
            zookeeper_epoch=zookeeper_epoch,
            restart_silences=self._heartbeats.restart_silences,
        )
        self._on_observed = on_observed  # what the round saw (the per-pipeline metrics)
        self._clock = clock
        self._fencing = RoundFencing(
            fencing, self._heartbeats, supervisor_timeout_secs=settings.supervisor_timeout_secs
        )
        self._outcomes = WorkerOutcomes(ops, settings.rollback)

    @property
    def standby_census(self) -> StandbyCensus | None:
        """The hot pipelines' standby workers as the last round read them (any thread);
        None before the first round."""
        return self._standby.census

    def run(self, term: Leadership) -> Plan:
        """One round; the plan it applied (empty when nothing had to change)."""
        registered = self._registered()
        judge = self._heartbeats
        judge.begin_round(term)  # a new term judges nothing dead before its own timeout
        pipelines = self._ops.read_all()
        current = self._assignments.read_all()
        assignments = {name: assignment for name, (assignment, _) in current.items()}
        cordons = self._cordons.read_all() if self._cordons is not None else {}
        self._quorum.check(term)
        read_began = self._clock()  # silences are judged at this moment, not later
        heartbeats = judge.read(term)
        if heartbeats is None:
            return Plan(assign={}, unassign=[], moved={})  # nothing judged, nothing moved
        workers, supervisors = heartbeats.workers, heartbeats.supervisors
        placements = self._standby.read_placements()
        judge.observe(assignments, workers, supervisors)
        standby = reported_standby(placements, supervisors)
        pipelines.update(self._outcomes.record(term, pipelines, assignments, workers, standby))
        self._on_observed(judge.observed(term, pipelines, assignments, workers))
        dead = judge.dead(registered, supervisors, assignments, read_began)
        known = set(registered) | set(supervisors) | {a.supervisor for a in assignments.values()}
        judge.note_registrations(known, registered, read_began)
        timed_out = judge.timed_out(assignments, workers, known - dead, read_began)
        if not heartbeats.complete:
            dead, timed_out = judge.unknown_spared(term, dead, timed_out, heartbeats, assignments)
        if heartbeats.partial:
            dead, timed_out = judge.unseen_spared(term, dead, timed_out, read_began)
        silences = self._fencing.silences(registered, assignments, dead, heartbeats, read_began)
        dead |= self._fencing.fenced(term, registered, silences, read_began)
        keep_on = known - dead
        draining = {sid for sid, cordon in cordons.items() if cordon.drain}
        drained_from, updated_from, still_running = self._unassigned(
            pipelines,
            assignments,
            workers,
            keep_on,
            draining=draining,
            sure=heartbeats.complete and not heartbeats.partial,
        )
        read = RoundRead(pipelines, current, assignments, placements, supervisors, registered)
        if not self._standby.promote(
            term,
            read,
            dead=dead,
            stopped={
                n: s for n, s in (drained_from | updated_from).items() if n not in still_running
            },
            cordoned=set(cordons),
            silent_for=judge.supervisor_silent_for,
            floor_secs=self._supervisor_timeout,
        ):
            return Plan(assign={}, unassign=[], moved={})  # a version moved: the next round
        lane_suspected = self._standby.lane_suspected()
        timed_out -= _promoting(assignments, lane_suspected, dead)
        suspected = {s for s in registered if self._fencing.due(s, read_began)} | lane_suspected
        updates = self._standby.update_moves(
            term,
            read,
            serving=_serving(read.assignments, workers),
            dead=dead,
            suspected=suspected,
            cordoned=set(cordons),
        )
        plan = plan_round(
            pipelines=pipelines,
            assignments=assignments,
            capacity={
                sid: summary.slots
                for sid, summary in registered.items()
                if sid in keep_on
                and sid not in cordons
                and not _stopping(supervisors.get(sid))
                and sid not in suspected
            },
            keep_on=keep_on,
            timed_out=timed_out,
            fenced=self._standby.fence_held(read),  # stopped by a fence, not promoted
            epoch=term.epoch,
            now=self._wall(),
            draining=draining,
            drained_from=drained_from,
            still_running=still_running,
            warm={sid: beat.warm_ready for sid, beat in supervisors.items()},
            reserved=reserved_slots(placements),
            holding=updates.holding,
            switching=updates.switching,
        )
        if plan.assign or plan.unassign:
            self._assignments.apply(term, plan, current)
        self._note_moves(term, plan, updates.switching)
        if term.is_leader:  # the state store's deletes are not fenced by the epoch
            self._forget_departed(dead, registered, assignments, plan, workers)
        else:
            log.info("event=forget_skipped epoch=%d reason=term_not_held", term.epoch)
        placed = self._standby.place(
            term,
            read,
            plan.applied_to(assignments),
            cordoned=set(cordons),
            dead=dead,
            suspected=suspected,
            rewritten={*plan.assign, *plan.unassign},
            workers=workers,
        )
        # the failover lane promotes from the round's read, but what the round wrote (their
        # versions read are spent)
        self._standby.hand_to_lane(
            term,
            read,
            written={*plan.assign, *plan.unassign, *placed},
            workers=workers,
            cordoned=set(cordons),
        )
        self._standby.take_census(read)
        return plan

    def _unassigned(
        self,
        pipelines: Mapping[str, PipelineRecord],
        assignments: Mapping[str, Assignment],
        workers: Workers,
        keep_on: set[str],
        *,
        draining: set[str],
        sure: bool,
    ) -> tuple[dict[str, str], dict[str, str], set[str]]:
        """The ACTIVE pipelines with no assignment: those on the way from a drained
        supervisor, those on the way to their standby worker (a new generation), and those
        whose old worker still runs (``_still_running``; with a read of the heartbeats that
        is not ``sure``, every one on the way: a heartbeat missing may be a worker running)."""
        unassigned = [
            name for name, record in pipelines.items()
            if record.status.runs and name not in assignments
        ]  # fmt: skip
        drained_from, updated_from = self._on_the_way(unassigned, pipelines, draining=draining)
        still_running = _still_running(unassigned, workers, keep_on)
        if not sure:
            still_running |= set(drained_from) | set(updated_from)
        return drained_from, updated_from, still_running

    def _on_the_way(
        self, unassigned: list[str], pipelines: Mapping[str, PipelineRecord], *, draining: set[str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """Of the unassigned pipelines, by their newest change: those a drain took off a
        supervisor (while any supervisor is drained), and the hot ones whose new generation
        took them off theirs for their standby worker; each with that supervisor. Only
        those histories are read: none in a round with no drain and no unassigned hot
        pipeline."""
        asked = [
            name for name in unassigned if draining or wants_standby_worker(pipelines[name].conf)
        ]
        drained: dict[str, str] = {}
        updated: dict[str, str] = {}
        for name, change in self._assignments.newest_changes(asked).items() if asked else ():
            if change.supervisor is not None or change.previous is None:
                continue
            if change.reason is AssignmentReason.DRAINED and draining:
                drained[name] = change.previous
            elif change.reason.new_generation and wants_standby_worker(pipelines[name].conf):
                updated[name] = change.previous
        return drained, updated

    def _note_moves(
        self,
        term: Leadership,
        plan: Plan,
        switching: frozenset[str],
    ) -> None:
        """What the round did and saw of the drains (logged, and kept for the API) and of
        the new generations that go through a standby worker (logged)."""
        for name in sorted(switching & set(plan.unassign)):
            change = plan.changes[name]
            log.info(
                "event=update_through_standby pipeline=%s epoch=%d generation=%d reason=%s "
                "from=%s step=old_worker_stops",
                name,
                term.epoch,
                change.generation,
                change.reason.value,
                change.previous,
            )
        for name in sorted(set(plan.drain_moving) & set(plan.unassign)):
            log.info(
                "event=pipeline_drained pipeline=%s epoch=%d from=%s step=old_worker_stops",
                name,
                term.epoch,
                plan.drain_moving[name],
            )
        for name, source in sorted(plan.no_room.items()):
            log.warning(
                "event=drain_no_room pipeline=%s epoch=%d supervisor=%s", name, term.epoch, source
            )
        self._drains.note(DrainRound(term.epoch, dict(plan.drain_moving), dict(plan.no_room)))

    def _forget_departed(
        self,
        dead: set[str],
        registered: Mapping[str, SupervisorSummary],
        assignments: Mapping[str, Assignment],
        plan: Plan,
        workers: Workers,
    ) -> None:
        """Drop the heartbeats of dead supervisors that left and no longer run anything, and
        the memory of pipelines no longer assigned.

        Called only while the term is held: the state store's deletes are not fenced, and a
        deposed leader's round may have read a world that has moved on.
        """
        for name in plan.unassign:
            self._heartbeats.forget_worker(name)
        still_assigned = {a.supervisor for a in assignments.values()} | {
            a.supervisor for a in plan.assign.values()
        }
        for sid in dead - set(registered) - still_assigned:
            for name, beats in workers.items():
                if sid in beats:
                    self._board.remove_worker(name, sid)
            self._board.remove_supervisor(sid)
            self._heartbeats.forget_supervisor(sid)
            self._fencing.forget(sid)
            log.info("event=supervisor_forgotten supervisor=%s", sid)


def _promoting(
    assignments: Mapping[str, Assignment], lane_suspected: frozenset[str], dead: set[str]
) -> set[str]:
    """The pipelines on a supervisor the failover lane suspects and the round does not judge
    dead: the lane promotes those that are hot, and the round moves none of them."""
    return {
        name
        for name, assignment in assignments.items()
        if assignment.supervisor in lane_suspected and assignment.supervisor not in dead
    }


def _still_running(unassigned: list[str], workers: Workers, keep_on: set[str]) -> set[str]:
    """Of the unassigned pipelines, those whose worker a supervisor not judged dead still
    runs (a heartbeat of it in no final state): placed once it has stopped."""
    return {
        name
        for name in unassigned
        if any(
            sid in keep_on and not beat.state.final for sid, beat in workers.get(name, {}).items()
        )
    }


def _serving(assignments: Mapping[str, Assignment], workers: Workers) -> set[str]:
    """The pipelines whose assigned worker runs: its supervisor reports it, of the
    assignment's generation and code, in no final state."""
    return {
        name
        for name, assignment in assignments.items()
        if (beat := current_beat(assignment, workers)) is not None and not beat.state.final
    }


def _stopping(beat: SupervisorHeartbeat | None) -> bool:
    return beat is not None and beat.stopping
