"""The leader's scheduling duty: heartbeats in, outcomes recorded, a plan applied, all fenced.

Each round reads the pipelines, the assignments and the heartbeats from ZooKeeper and the
cluster state store (never from a view that may lag), then:

1. notes every heartbeat that *changed* since the last round (``Liveness``: the leader
   compares what it saw, never wall clocks across machines);
2. records the outcomes workers report: an updated version that committed its first batch
   is proven, one that failed before is rolled back to the previous kept version
   (``update_trial``), a batch that finished makes its pipeline FINISHED, a worker its
   supervisor gave up on makes it FAILED with the worker's error (``worker_outcomes``);
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
   supervisor judged dead when it is READY (``promotion_plan``, verdict ``dead``: one
   fenced transaction each; one that finds a version moved ends the round, which the next
   reads again), and plans step 6 from the assignments so promoted; with a
   ``FailoverLane``, moves no pipeline of a supervisor the lane suspects, gives it none,
   and hands the lane the hot pipelines of its read (``HotSnapshot``) at its end.

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

from kazoo.exceptions import KazooException

from stratus.api.clock import Clock
from stratus.api.records import (
    Assignment,
    AssignmentReason,
    PipelineRecord,
    SupervisorHeartbeat,
    SupervisorSummary,
)
from stratus.api.standby_workers import StandbyWorkerPlacement
from stratus.coordination.leadership import Leadership
from stratus.errors import StratusError
from stratus.nimbus.duties.worker_outcomes import WorkerOutcomes, Workers, current_beat
from stratus.nimbus.failover.lane import FailoverLane, hot_snapshot
from stratus.nimbus.failover.promotion import Promoter
from stratus.nimbus.failover.promotion_plan import How, plan_promotions
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.scheduling.assignments import AssignmentTable
from stratus.nimbus.scheduling.cordons import CordonTable, DrainMemory, DrainRound
from stratus.nimbus.scheduling.liveness import Liveness
from stratus.nimbus.scheduling.pipeline_metrics import ObservedRound
from stratus.nimbus.scheduling.scheduler import Plan, plan_round
from stratus.nimbus.scheduling.standby_plan import plan_standby_workers
from stratus.nimbus.scheduling.standby_workers import Placements, StandbyWorkerTable
from stratus.nimbus.scheduling.supervisor_fencing import Silence, SupervisorFencing, fence_verdicts
from stratus.nimbus.settings import SchedulingSettings
from stratus.state.errors import StateStoreUnavailableError
from stratus.state.heartbeats import HeartbeatBoard, HeartbeatRead

log = logging.getLogger(__name__)

# What a round whose heartbeats were unknown is counted as, and the reason it logs.
_UNKNOWN_REASONS = {"warming": "pacemakers_warming", "unreachable": "pacemaker_unreachable"}


class SchedulingDuty:
    """One scheduling round at a time, on the leadership controller's thread; see the module
    docstring."""

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
    ) -> None:
        self._ops = ops
        self._lane = lane  # None: no supervisor is suspected on the fast beats
        self._promoter = promoter  # None: no standby worker is promoted on a dead supervisor
        self._standby = standby  # None: no standby worker is ever placed (tests of other rules)
        self._standby_settings = settings.standby
        self._cordons = cordons  # None: nothing is ever cordoned (tests of other rules)
        self._drains = drains or DrainMemory()
        self._assignments = assignments
        self._board = board
        self._registered = registered  # the supervisors' registrations, from the cluster view
        self._supervisor_timeout = settings.supervisor_timeout_secs
        self._task_timeout = settings.task_timeout_secs
        self._blind_after_reconnect = settings.blind_after_reconnect
        self._wall = wall  # only for the assignments' timestamps
        self._liveness = Liveness(clock=clock)
        self._epoch: int | None = None  # the term the liveness memory belongs to
        self._on_unknown = on_unknown  # "unavailable" | "warming" | "unreachable", per round
        self._on_observed = on_observed  # what the round saw (the per-pipeline metrics)
        self._clock = clock
        self._blind = False  # the last read of the heartbeats failed
        self._unregistered_since: dict[str, float] = {}  # this term's first round without it
        self._connections = connections  # the session's count of connections (ZkSession)
        # ZooKeeper's leader epoch now, None from a standalone server (ZkSession)
        self._zookeeper_epoch = zookeeper_epoch
        self._watched_since = connections()  # the count when the epoch was last learned
        self._quorum_epoch: int | None = None  # ZooKeeper's epoch then (None: standalone)
        self._epoch_learned = False  # once, since the duty began
        self._fencing = fencing  # None: silent supervisors are only waited out
        self._outcomes = WorkerOutcomes(ops, settings.rollback)

    def run(self, term: Leadership) -> Plan:
        """One round; the plan it applied (empty when nothing had to change)."""
        registered = self._registered()
        if term.epoch != self._epoch:
            self._liveness.reset()  # a new term judges nothing dead before its own timeout
            self._unregistered_since.clear()
            self._epoch = term.epoch
        pipelines = self._ops.read_all()
        current = self._assignments.read_all()
        assignments = {name: assignment for name, (assignment, _) in current.items()}
        cordons = self._cordons.read_all() if self._cordons is not None else {}
        self._restart_after_a_new_quorum(term)
        read_began = self._clock()  # silences are judged at this moment, not later
        heartbeats = self._read_heartbeats(term)
        if heartbeats is None:
            return Plan(assign={}, unassign=[], moved={})  # nothing judged, nothing moved
        workers, supervisors = heartbeats.workers, heartbeats.supervisors
        placements = self._standby.read_all() if self._standby is not None else {}
        self._observe(assignments, workers, supervisors)
        pipelines.update(self._outcomes.record(term, pipelines, assignments, workers))
        self._on_observed(self._observed(term, pipelines, assignments, workers))
        dead = self._dead(registered, supervisors, assignments, read_began)
        known = set(registered) | set(supervisors) | {a.supervisor for a in assignments.values()}
        self._note_registrations(known, registered, read_began)
        timed_out = self._timed_out(assignments, workers, known - dead, read_began)
        if not heartbeats.complete:
            dead, timed_out = self._unknown_spared(term, dead, timed_out, heartbeats, assignments)
        if heartbeats.partial:
            dead, timed_out = self._unseen_spared(term, dead, timed_out, read_began)
        silences = self._silences(registered, assignments, dead, heartbeats, read_began)
        dead |= self._fence(term, registered, silences, read_began)
        if not self._promote_dead(
            term, pipelines, current, assignments, placements, supervisors, registered, dead
        ):
            return Plan(assign={}, unassign=[], moved={})  # a version moved: the next round
        lane_suspected = self._lane.suspected() if self._lane is not None else frozenset()
        timed_out -= _promoting(assignments, lane_suspected, dead)
        keep_on = known - dead
        unassigned = [
            name for name, record in pipelines.items()
            if record.status.runs and name not in assignments
        ]  # fmt: skip
        draining = {sid for sid, cordon in cordons.items() if cordon.drain}
        suspected = {sid for sid in registered if self._fence_due(sid, read_began)} | lane_suspected
        drained_from = self._drained_from(unassigned) if draining else {}
        still_running = _still_running(unassigned, workers, keep_on)
        if not heartbeats.complete or heartbeats.partial:
            still_running |= set(drained_from)  # a heartbeat missing may be a worker running
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
            epoch=term.epoch,
            now=self._wall(),
            draining=draining,
            drained_from=drained_from,
            still_running=still_running,
            warm={sid: beat.warm_ready for sid, beat in supervisors.items()},
            reserved=_reserved(placements),
        )
        if plan.assign or plan.unassign:
            self._assignments.apply(term, plan, current)
        self._note_drains(term, plan)
        if term.is_leader:  # the state store's deletes are not fenced by the epoch
            self._forget_departed(dead, registered, assignments, plan, workers)
        else:
            log.info("event=forget_skipped epoch=%d reason=term_not_held", term.epoch)
        placed = self._place_standby_workers(
            term,
            pipelines,
            plan.applied_to(assignments),
            registered,
            supervisors,
            placements,
            cordoned=set(cordons),
            dead=dead,
            suspected=suspected,
        )
        written = {*plan.assign, *plan.unassign, *placed}  # their versions read are spent
        return self._noted_hot(term, plan, pipelines, current, placements, supervisors, written)

    def _noted_hot(
        self,
        term: Leadership,
        plan: Plan,
        pipelines: Mapping[str, PipelineRecord],
        current: Mapping[str, tuple[Assignment, int]],
        placements: Placements,
        supervisors: Mapping[str, SupervisorHeartbeat],
        written: set[str],
    ) -> Plan:
        """Hand the failover lane what it promotes from: the hot pipelines of the round's
        read, but those whose znodes the round wrote (their versions read no longer hold);
        ``plan``, the round's."""
        if self._lane is not None:
            self._lane.note(
                hot_snapshot(
                    term.epoch, pipelines, current, placements, supervisors, written=written
                )
            )
        return plan

    def _promote_dead(
        self,
        term: Leadership,
        pipelines: Mapping[str, PipelineRecord],
        current: dict[str, tuple[Assignment, int]],
        assignments: dict[str, Assignment],
        placements: dict[str, tuple[StandbyWorkerPlacement | None, int]],
        supervisors: Mapping[str, SupervisorHeartbeat],
        registered: Mapping[str, SupervisorSummary],
        dead: set[str],
    ) -> bool:
        """Promote the standby workers of the hot pipelines of dead supervisors (verdict
        ``dead``) and apply the promotions to the round's snapshot (``current``,
        ``assignments``, ``placements``); False when one found a version moved (the lane
        promoted it meanwhile, or the read is stale): the next round reads again."""
        if self._promoter is None or not dead:
            return True
        plan = plan_promotions(
            verdicts=dict.fromkeys(dead, How.DEAD),
            pipelines=pipelines,
            assignments=current,
            placements=placements,
            heartbeats=supervisors,
            suspected=set(self._lane.suspected()) if self._lane is not None else set(),
            registered=set(registered),
            epoch=term.epoch,
            now=self._wall(),
        )
        for refusal in plan.refusals:
            log.info(
                "event=promotion_refused pipeline=%s epoch=%d from=%s how=dead reason=%s "
                "standby=%s action=moved_the_ordinary_way",
                refusal.pipeline,
                term.epoch,
                refusal.from_supervisor,
                refusal.reason.value,
                refusal.standby or "-",
            )
        for promotion in plan.promotions:
            name = promotion.pipeline
            silent = self._liveness.silent_for(_supervisor_key(promotion.from_supervisor))
            floor = self._supervisor_timeout
            if not self._promoter.promote(term, promotion, silent_secs=silent, floor_secs=floor):
                return False
            current[name] = (promotion.assignment, promotion.assignment_version + 1)
            assignments[name] = promotion.assignment
            placements.pop(name, None)
        return True

    def _place_standby_workers(  # noqa: PLR0913 the round's snapshot, passed on
        self,
        term: Leadership,
        pipelines: Mapping[str, PipelineRecord],
        assignments: Mapping[str, Assignment],
        registered: Mapping[str, SupervisorSummary],
        supervisors: Mapping[str, SupervisorHeartbeat],
        placements: Placements,
        *,
        cordoned: set[str],
        dead: set[str],
        suspected: set[str],
    ) -> set[str]:
        """Place, move, rewrite and drop the standby workers of hot pipelines against the
        assignments as the round's plan left them; write what changes, fenced; the
        pipelines whose placement it wrote (none without a ``StandbyWorkerTable``)."""
        if self._standby is None:
            return set()
        plan = plan_standby_workers(
            pipelines=pipelines,
            assignments=assignments,
            supervisors=registered,
            heartbeats=supervisors,
            placements={name: placement for name, (placement, _) in placements.items()},
            cordoned=cordoned,
            dead=dead,
            suspected=suspected,
            stopping={sid for sid, beat in supervisors.items() if beat.stopping},
            max_workers=self._standby_settings.max_workers,
            needs_beat_lease=self._standby_settings.needs_beat_lease,
            epoch=term.epoch,
            now=self._wall(),
        )
        if plan.empty:
            return set()
        self._standby.apply(term, plan, placements)
        return {write.pipeline for write in plan.writes}

    def _drained_from(self, unassigned: list[str]) -> dict[str, str]:
        """Of the unassigned pipelines, those a drain took off a supervisor (their newest
        change), with that supervisor."""
        return {
            name: change.previous
            for name, change in self._assignments.newest_changes(unassigned).items()
            if change.reason is AssignmentReason.DRAINED
            and change.supervisor is None
            and change.previous is not None
        }

    def _note_drains(self, term: Leadership, plan: Plan) -> None:
        """What the round did and saw of the drains: logged, and kept for the API."""
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

    def _restart_after_a_new_quorum(self, term: Leadership) -> None:
        """With ``blind_after_reconnect`` (supervisors that ride out outages): once the
        connection to ZooKeeper came back since the last round (whether its term was
        suspended and resumed for it or not: a term granted by a zkfc is not), every silence
        restarts if ZooKeeper's leader epoch changed meanwhile, since a supervisor may have
        kept its workers on a proof that no quorum served.

        A proof needs a moment when no quorum served; a ZooKeeper leader that loses its
        quorum never serves again in its epoch, so service resumes only under a new one.
        The same epoch on both sides of the disconnection (a reconnection to another member
        of the same quorum) means the quorum served throughout, every supervisor that could
        reach it wrote on, and none could prove an outage: the silences run on, and a
        connection that flaps moves on time. A standalone server keeps its epoch across
        restarts, so with one every reconnection restarts the silences; so does an epoch
        that cannot be learned (nothing judged from a blind stretch), asked again next
        round."""
        if not self._blind_after_reconnect:
            return
        count = self._connections()
        if count == self._watched_since and self._epoch_learned:
            return
        try:
            epoch = self._zookeeper_epoch()
        except (StratusError, KazooException) as exc:
            self._restart_silences()
            log.warning(
                "event=heartbeats_watched_again epoch=%d zookeeper_epoch=unknown "
                "action=every_silence_restarts error=%s",
                term.epoch,
                exc,
            )
            return
        previous, learned = self._quorum_epoch, self._epoch_learned
        self._watched_since, self._quorum_epoch, self._epoch_learned = count, epoch, True
        if learned and epoch is not None and epoch == previous:
            log.info(
                "event=heartbeats_watched_again epoch=%d zookeeper_epoch=%d "
                "action=silences_run_on reason=same_zookeeper_leader",
                term.epoch,
                epoch,
            )
            return
        self._restart_silences()
        log.info(
            "event=heartbeats_watched_again epoch=%d zookeeper_epoch=%s previous=%s "
            "action=every_silence_restarts",
            term.epoch,
            "standalone" if epoch is None else epoch,
            ("standalone" if previous is None else previous) if learned else "unknown",
        )

    def _restart_silences(self) -> None:
        """Every silence starts again now: the round's, and the failover lane's."""
        self._liveness.reset()
        if self._lane is not None:
            self._lane.restart_silences()

    # ------------------------------------------------------------------ unknown heartbeats

    def _read_heartbeats(self, term: Leadership) -> HeartbeatRead | None:
        """Every heartbeat; None when the store cannot be read (the round judges nothing)."""
        try:
            read = self._board.read()
        except StateStoreUnavailableError as exc:
            log.error(
                "event=heartbeats_unknown epoch=%d reason=store_unavailable "
                "action=nothing_judged_dead_nothing_moved error=%s",
                term.epoch,
                exc,
            )
            self._blind = True
            self._on_unknown("unavailable")
            return None
        if self._blind:
            self._blind = False
            self._restart_silences()  # the stretch without heartbeats was blindness
            log.warning(
                "event=heartbeats_known_again epoch=%d action=every_silence_restarts", term.epoch
            )
        return read

    def _unknown_spared(
        self,
        term: Leadership,
        dead: set[str],
        timed_out: set[str],
        heartbeats: HeartbeatRead,
        assignments: Mapping[str, Assignment],
    ) -> tuple[set[str], set[str]]:
        """From an incomplete read, the supervisors and workers judged dead or silent minus
        those whose heartbeat is missing from it: unknown, not dead."""
        unknown_supervisors = {sid for sid in dead if sid not in heartbeats.supervisors}
        unknown_workers = {
            name
            for name in timed_out
            if current_beat(assignments[name], heartbeats.workers) is None
        }
        action = "not_judged_until_the_warm_up_ends"
        self._report_unknown(term, "warming", action, unknown_supervisors, unknown_workers)
        return dead - unknown_supervisors, timed_out - unknown_workers

    def _note_registrations(
        self, known: set[str], registered: Mapping[str, SupervisorSummary], now: float
    ) -> None:
        """When this term first saw each known supervisor without its registration."""
        for sid in known:
            if sid in registered:
                self._unregistered_since.pop(sid, None)
            else:
                self._unregistered_since.setdefault(sid, now)
        for sid in set(self._unregistered_since) - known:
            del self._unregistered_since[sid]

    def _unseen_spared(
        self,
        term: Leadership,
        dead: set[str],
        timed_out: set[str],
        judged_at: float,
    ) -> tuple[set[str], set[str]]:
        """From a partial read, the supervisors judged dead minus those whose silence may be
        the pacemaker the leader did not reach: every one still registered, or unregistered
        for less than the supervisor timeout; and no worker judged silent."""
        spared = {
            sid
            for sid in dead
            if judged_at - self._unregistered_since.get(sid, judged_at) <= self._supervisor_timeout
        }
        self._report_unknown(term, "unreachable", "not_judged_while_registered", spared, timed_out)
        return dead - spared, set()

    def _report_unknown(
        self, term: Leadership, reason: str, action: str, supervisors: set[str], pipelines: set[str]
    ) -> None:
        """Log and count a round that left ``supervisors`` and ``pipelines`` unjudged."""
        if not supervisors and not pipelines:
            return
        log.warning(
            "event=heartbeats_unknown epoch=%d reason=%s supervisors=%s pipelines=%s action=%s",
            term.epoch,
            _UNKNOWN_REASONS[reason],
            ",".join(sorted(supervisors)) or "-",
            ",".join(sorted(pipelines)) or "-",
            action,
        )
        self._on_unknown(reason)

    # ------------------------------------------------------------------ liveness

    def _observe(
        self,
        assignments: Mapping[str, Assignment],
        workers: Workers,
        supervisors: Mapping[str, SupervisorHeartbeat],
    ) -> None:
        for sid, supervisor in supervisors.items():
            self._liveness.observe(_supervisor_key(sid), supervisor.time)
        for name, assignment in assignments.items():
            beat = current_beat(assignment, workers)
            token = (assignment.supervisor, assignment.assigned, beat.time if beat else None)
            self._liveness.observe(_worker_key(name), token)

    def _observed(
        self,
        term: Leadership,
        pipelines: Mapping[str, PipelineRecord],
        assignments: Mapping[str, Assignment],
        workers: Workers,
    ) -> ObservedRound:
        current = {
            name: beat
            for name, assignment in assignments.items()
            if (beat := current_beat(assignment, workers)) is not None
        }
        return ObservedRound(
            epoch=term.epoch,
            pipelines=dict(pipelines),
            workers=current,
            silent_secs={name: self._liveness.silent_for(_worker_key(name)) for name in current},
            taken_at=self._clock(),
        )

    def _dead(
        self,
        registered: Mapping[str, SupervisorSummary],
        supervisors: Mapping[str, SupervisorHeartbeat],
        assignments: Mapping[str, Assignment],
        judged_at: float,
    ) -> set[str]:
        """Supervisors silent past the timeout at ``judged_at``; one that stopped cleanly and
        left too only then: its workers may outlive it, and it may come back for them."""
        known = set(registered) | set(supervisors) | {a.supervisor for a in assignments.values()}
        return {
            sid
            for sid in known
            if self._liveness.silent_for(_supervisor_key(sid), at=judged_at)
            > self._supervisor_timeout
        }

    def _timed_out(
        self,
        assignments: Mapping[str, Assignment],
        workers: Workers,
        keep_on: set[str],
        judged_at: float,
    ) -> set[str]:
        """Pipelines whose worker, on a supervisor still alive, fell silent (at ``judged_at``)."""
        silent = set()
        for name, assignment in assignments.items():
            beat = current_beat(assignment, workers)
            if assignment.supervisor not in keep_on or (beat is not None and beat.state.final):
                continue
            if self._liveness.silent_for(_worker_key(name), at=judged_at) > self._task_timeout:
                silent.add(name)
        return silent

    # ------------------------------------------------------------------ fencing

    def _silences(
        self,
        registered: Mapping[str, SupervisorSummary],
        assignments: Mapping[str, Assignment],
        dead: set[str],
        heartbeats: HeartbeatRead,
        judged_at: float,
    ) -> dict[str, Silence]:
        """The silences of the registered supervisors that hold pipelines and are not dead
        yet, but for those an incomplete read leaves unknown."""
        if self._fencing is None:
            return {}
        silences = {}
        for sid in {a.supervisor for a in assignments.values()} - dead:
            if sid not in registered:
                continue  # no address to fence it at: its lease is waited out
            if not heartbeats.complete and sid not in heartbeats.supervisors:
                continue  # unknown, not silent
            since = self._liveness.changed_at(_supervisor_key(sid))
            silences[sid] = Silence(since=since, secs=max(0.0, judged_at - since))
        return silences

    def _fence(
        self,
        term: Leadership,
        registered: Mapping[str, SupervisorSummary],
        silences: Mapping[str, Silence],
        judged_at: float,
    ) -> set[str]:
        """Start the fences due; the supervisors a fence has stopped, as of ``judged_at``."""
        if self._fencing is None:
            return set()
        verdicts = fence_verdicts(
            silences,
            self._fencing.attempts(),
            epoch=term.epoch,
            after_secs=self._fencing.settings.after_secs,
            timeout_secs=self._supervisor_timeout,
            now=judged_at,
        )
        if term.is_leader:  # a deposed leader's fence would be refused; ask none
            for sid in sorted(verdicts.start):
                self._fencing.start(
                    registered[sid], epoch=term.epoch, silent_since=silences[sid].since
                )
        for sid in sorted(verdicts.fenced):
            log.info(
                "event=supervisor_judged_dead supervisor=%s epoch=%d reason=fenced "
                "silent_secs=%.1f",
                sid,
                term.epoch,
                silences[sid].secs,
            )
        return set(verdicts.fenced)

    def _fence_due(self, sid: str, judged_at: float) -> bool:
        """Whether ``sid`` is silent past the fence threshold: it gets no new pipeline."""
        if self._fencing is None:
            return False
        silent = self._liveness.silent_for(_supervisor_key(sid), at=judged_at)
        return silent > self._fencing.settings.after_secs

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
            self._liveness.forget(_worker_key(name))
        still_assigned = {a.supervisor for a in assignments.values()} | {
            a.supervisor for a in plan.assign.values()
        }
        for sid in dead - set(registered) - still_assigned:
            for name, beats in workers.items():
                if sid in beats:
                    self._board.remove_worker(name, sid)
            self._board.remove_supervisor(sid)
            self._liveness.forget(_supervisor_key(sid))
            if self._fencing is not None:
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


def _reserved(placements: Placements) -> dict[str, int]:
    """The standby workers placed on each supervisor, whose slots pipelines take last."""
    reserved: dict[str, int] = {}
    for placement, _ in placements.values():
        if placement is not None and placement.supervisor is not None:
            reserved[placement.supervisor] = reserved.get(placement.supervisor, 0) + 1
    return reserved


def _stopping(beat: SupervisorHeartbeat | None) -> bool:
    return beat is not None and beat.stopping


def _supervisor_key(supervisor: str) -> str:
    return f"supervisor/{supervisor}"


def _worker_key(pipeline: str) -> str:
    return f"worker/{pipeline}"
