"""The failover lane: the leader's thread that promotes the standby workers of hot pipelines.

Guarantees: a hot pipeline's standby worker is promoted off a supervisor only on a verdict
that its active worker is gone (``promotion_plan``): ``floor``, the supervisor is suspected
and has been silent on the fast beats for at least its floor (``beat_watch``), so its hot
workers have stopped themselves; or ``fenced``, a pipeline fence it answered in this term
named the pipeline. Each promotion is one fenced transaction of the term
(``promotion.Promoter``), logged (``event=worker_promoted``) and recorded in the trail
(``worker_promoted``). With no hot pipeline the lane reads nothing at all: no beat, no
znode::

    lane = FailoverLane(watch, promoter, view.supervisors, poll_secs=0.1)
    lane.start(term)                 # on gaining a term: its thread polls every poll_secs
    lane.note(hot_snapshot(...))     # after every scheduling round: what is hot, and where
    lane.suspected()                 # the supervisors it suspects: the round moves none of
                                     # their hot pipelines and gives them nothing new
    lane.fence_held(current)         # but these: fenced, promotion refused (see below)
    lane.phi()                       # {"s1": 0.4}: the phi of each supervisor it judges
    lane.stop()                      # on losing the term
    lane.close()                     # when the nimbus stops: the fences' threads too

**What it reads.** The beats, through ``BeatWatch.poll``, and the heartbeats of a few
supervisors whose hot worker may start cold (``cold_starts_now``, below), nothing else: the
pipelines, assignments, placements and other heartbeats come from the scheduling round's
last snapshot of the term (``HotSnapshot``, with the znode versions the round read), the
registrations from the cluster view. A snapshot older than a write it does not know of only
makes a promotion's transaction fail on its version; the next round's snapshot has the new
ones. Only the supervisors holding a hot pipeline's active worker, and advertising a beat
lease in a registration seen in this term or in the heartbeat of the round's snapshot, are
judged. One whose registration has left since (its ZooKeeper session ended: a dead host's
does about a session timeout after its death) is judged on, from the beat lease its newest
registration advertised; one whose registration this term never saw (a new term that began
after its host died), from the beat lease its last heartbeat advertised: a floor verdict
rests on the beat lease and the pacemakers, not on ZooKeeper, and a supervisor that
registers again replaces it. Otherwise a dead host whose silence restarted (a blind read of
the store, a new term) would be left to the round's timeout whenever its session ended
before its floor passed.

**The fence.** A supervisor is **suspected** once its phi reached ``nimbus.detector.threshold``
(on a calm host about 0.66 s after its last beat), before its floor (1.02 s by default). With
``fence_pipelines`` (the nimbus's ``SupervisorFencing``, unless
``nimbus.supervisor.fence.after.secs`` is 0), the lane asks a suspected supervisor, once per
suspicion, to stop the workers of its hot pipelines, once its silence has also reached its beat
lease (``lease_secs``, 0.8 s by default), while time is left to its floor: if it answers,
they are promoted at once as ``fenced``; if not (a dead host answers nothing), they are
promoted as ``floor`` once its silence reaches its floor. Suspicion alone promotes nothing,
and stops nothing: a supervisor merely slow to beat (its beat agent stalled on a loaded host)
is alive and obeys a fence, while its hot workers run on their beat lease until the lease runs
out; asked earlier, the fence would stop a worker that the next beat keeps, and the supervisor
answers only once it has stopped (a Spark driver's stop, far longer than the time left to the
floor), so the lane would not hear it and the stopped pipeline would wait, held, for a new
assignment. Once the silence reached the beat lease, the hot workers are stopping themselves:
the fence stops nothing that would run on. The fence is asked on a thread of its own
(``pipeline_fences``): the lane goes on reading the beats while it waits, so that a floor
verdict never waits on a fence (a dead host's fence waits out its whole timeout: its packets
are dropped).

**The beat lease, not phi, asks the fence.** A supervisor whose silence reached its beat
lease is asked its fence the same way when phi does not suspect it (logged
``event=beat_lease_ran_out``), at any time of its silence: phi learns a host's rhythm, and on
a host whose beat agent stalls again and again it stays below the threshold at silences its
hot workers do not survive, since their beat lease is one fixed timeout. Without the fence,
their supervisor would start them again in place once it is heard again, a Spark driver's
start (20 to 45 s on a loaded host), while their standby workers wait READY; with it, the
answer promotes them (``fenced``). Phi still decides the ``floor`` verdict (no answer) and
who is suspected.

**A cold start.** The round also hands the lane the hot pipelines whose worker starts again
in place, cold, while their standby worker is READY (``HotSnapshot.cold_starts``: a beat
lease lapsed on a stall the lane did not count as one); the lane asks their supervisor's
pipeline fence once per assignment, outside any suspicion, and hands the answer to the round
(``fence_held``) as it comes, which promotes the standby worker. With ``cold_starts_now``
(the nimbus's ``ColdStartWatch``) it also looks for them itself at each poll, from the
newest heartbeats of the supervisors whose hot pipeline's standby worker could take over,
so that a hot worker that crashed or stopped itself waits for no round to be fenced. Each
look runs on a thread of its own, and what it found counts at the poll after it ended: a
read that hangs delays the next look, never the beats' poll.

**The round runs at once.** Whenever pipelines are handed to the round (a cold start's
answer, a promotion refused after an answer, an answer that came once the supervisor was
heard again), ``on_held`` is called, and the leader runs its round then rather than at its
next tick (``nimbus.monitor.freq.secs``, 2 s by default): each is stopped, and waits for that
round alone.

**A fence answered, a promotion refused.** A supervisor that answered a pipeline fence has
stopped the pipeline's worker and holds the pipeline back until an assignment with a newer
fencing token; if the promotion is then refused (its standby worker not ``READY``, say), the
lane hands the pipeline to the round (``fence_held``) as it logs the refusal: the next round
promotes its standby worker if that is READY by then (``fenced``), else writes it a new
assignment, on the supervisor it picks (its own included), whether or not
the lane still suspects its supervisor, and the lane plans no promotion of it while its
assignment is the one the fence stopped. A fence's answer is the proof that its worker is
gone; without one (a refusal on ``floor``) nothing is handed. The answer is waited for
``fence_answer_secs`` (the leader's ``nimbus.supervisor.fencing.timeout.secs``), or the time
left to the floor if longer, on the fence's thread: one that comes after the floor turns a
``floor`` verdict into ``fenced``, and one that comes once the supervisor is heard again,
when the lane promotes nothing off it, hands its pipelines to the round just the same.

**Its own silences.** The round restarts its silences after a stretch it could not see
(the heartbeat store unreadable, ZooKeeper's leader changed across a reconnection); the lane
does not follow it: a floor verdict rests on the beat lease and the pacemakers alone, and the
lane's own reads tell it when the pacemakers did not answer (``BeatWatch``'s blindness).
Following the round would restart a dead host's silence whenever the host took ZooKeeper's
leader with it, a whole floor later than needed. A stretch in which the lane reads nothing
(no hot pipeline, no supervisor to judge) forgets the watch: whoever is judged next gets a
whole floor from its first read.

One thread per term, started by ``start`` and ended by ``stop``; the watch is reset at every
start (a new term judges nothing from an earlier one's beats). ``step`` is one poll, for
tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Set
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Protocol

from stratus.api.clock import Clock
from stratus.api.records import (
    Assignment,
    PipelineRecord,
    SupervisorHeartbeat,
    SupervisorSummary,
)
from stratus.api.standby_workers import StandbyWorkerPlacement, wants_standby_worker
from stratus.coordination.errors import CommitOutcomeUnknownError, LeadershipLostError
from stratus.coordination.leadership import Leadership
from stratus.nimbus.failover.beat_watch import BeatWatch, ReadOutcome, Suspicion, beat_floors
from stratus.nimbus.failover.pipeline_fences import FencePipelines, PipelineFences
from stratus.nimbus.failover.promotion import Promoter
from stratus.nimbus.failover.promotion_plan import (
    How,
    Promotion,
    PromotionRefusal,
    plan_promotions,
)
from stratus.nimbus.failover.refusals import RefusalMemory
from stratus.state.errors import StateStoreUnavailableError

log = logging.getLogger(__name__)


PHI_ONLY_SECS = 1e-9  # the floor passed to BeatWatch to learn who phi alone suspects


class ColdStartsNow(Protocol):
    """The hot pipelines of ``snapshot`` whose active worker starts cold now, while their
    standby worker could take over, each with its assignment's version (``ColdStartWatch``)."""

    def __call__(
        self, snapshot: HotSnapshot, *, registered: Set[str], suspected: Set[str]
    ) -> Mapping[str, int]: ...


@dataclass(frozen=True)
class HotSnapshot:
    """What a scheduling round read of the hot pipelines (ACTIVE, ``pipeline.standby: hot``,
    assigned), in the term at ``epoch``: their records, assignments and placements with the
    znode versions read, and every supervisor's heartbeat."""

    epoch: int
    pipelines: Mapping[str, PipelineRecord] = field(default_factory=dict)
    assignments: Mapping[str, tuple[Assignment, int]] = field(default_factory=dict)
    placements: Mapping[str, tuple[StandbyWorkerPlacement | None, int]] = field(
        default_factory=dict
    )
    heartbeats: Mapping[str, SupervisorHeartbeat] = field(default_factory=dict)
    cold_starts: Mapping[str, int] = field(default_factory=dict)  # pipeline -> the version
    # of its assignment whose worker starts cold, its standby worker READY (``cold_starts``)
    cordoned: frozenset[str] = frozenset()  # the supervisors no promotion may go to

    @property
    def holders(self) -> set[str]:
        """The supervisors holding a hot pipeline's active worker."""
        return {assignment.supervisor for assignment, _ in self.assignments.values()}

    def without(self, *pipelines: str) -> HotSnapshot:
        """The snapshot with ``pipelines`` left out (promoted: their versions read are spent;
        or fenced already)."""
        gone = set(pipelines)
        return replace(
            self,
            pipelines={k: v for k, v in self.pipelines.items() if k not in gone},
            assignments={k: v for k, v in self.assignments.items() if k not in gone},
            placements={k: v for k, v in self.placements.items() if k not in gone},
            cold_starts={k: v for k, v in self.cold_starts.items() if k not in gone},
        )


def hot_snapshot(
    epoch: int,
    pipelines: Mapping[str, PipelineRecord],
    assignments: Mapping[str, tuple[Assignment, int]],
    placements: Mapping[str, tuple[StandbyWorkerPlacement | None, int]],
    heartbeats: Mapping[str, SupervisorHeartbeat],
    *,
    written: Set[str] = frozenset(),
    cold_starts: Mapping[str, int] | None = None,
    cordoned: Set[str] = frozenset(),
) -> HotSnapshot:
    """The hot pipelines of a round's read, but those whose assignment or placement the
    round wrote since (``written``: their versions read no longer hold); ``cold_starts``:
    those whose worker starts cold, their standby worker READY; ``cordoned``: the
    supervisors the round read cordoned."""
    hot = {
        name: record
        for name, record in pipelines.items()
        if name in assignments
        and name not in written
        and record.status.runs
        and wants_standby_worker(record.conf)
    }
    return HotSnapshot(
        epoch=epoch,
        pipelines=hot,
        assignments={name: assignments[name] for name in hot},
        placements={name: placements[name] for name in hot if name in placements},
        heartbeats=dict(heartbeats) if hot else {},
        cold_starts={name: v for name, v in (cold_starts or {}).items() if name in hot},
        cordoned=frozenset(cordoned),
    )


def lease_ran_out(supervisor: SupervisorSummary, suspicion: Suspicion) -> bool:
    """Whether ``supervisor``'s silence has reached the beat lease it advertises: its hot
    workers no longer hold it (a beat the judging read did not show renewed nothing past
    then), so they are stopping themselves, and a pipeline fence stops nothing that would
    run on."""
    lease = supervisor.beat_lease
    return lease is not None and suspicion.silence_secs >= lease.lease_secs


class FailoverLane:
    """The thread that runs BeatWatch, the fence and the promotions; see the module docstring.

    ``registered``: the supervisors' registrations (the cluster view). ``cold_starts_now``:
    the hot pipelines of a snapshot whose worker starts cold now, from fresh heartbeats
    (``A cold start``), called on ``look_executor`` (a thread of its own by default).
    ``wall``: the assignments' timestamps. ``on_refused``: each refusal
    once per suspicion of its supervisor (``RefusalMemory``), as it is logged (the refusals'
    counter). ``on_held``: pipelines were handed to the round (``fence_held``), on any
    thread, never blocking (the leader runs a round at once).
    """

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        watch: BeatWatch,
        promoter: Promoter,
        registered: Callable[[], Mapping[str, SupervisorSummary]],
        *,
        poll_secs: float,
        fence_pipelines: FencePipelines | None = None,
        fence_executor: Executor | None = None,
        fence_answer_secs: float = 0.0,
        on_refused: Callable[[PromotionRefusal], None] = lambda _refusal: None,
        on_held: Callable[[], None] = lambda: None,
        cold_starts_now: ColdStartsNow | None = None,
        look_executor: Executor | None = None,
        clock: Clock = time.monotonic,
        wall: Clock = time.time,
    ) -> None:
        if not poll_secs > 0:
            raise ValueError(f"the failover lane's poll must be positive seconds, not {poll_secs}")
        self._watch = watch
        self._promoter = promoter
        self._registered = registered
        self._poll_secs = poll_secs
        self._fences = (  # None: no fence, promotions wait for the floor
            PipelineFences(
                fence_pipelines,
                answer_secs=fence_answer_secs,
                executor=fence_executor,
                on_held=on_held,
            )
            if fence_pipelines is not None
            else None
        )
        self._cold_starts_now = cold_starts_now
        self._look_executor = look_executor or ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="cold-start-look"
        )
        self._look: Future[Mapping[str, int]] | None = None  # the look under way, or done
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()  # guards what the round and the thread share:
        self._snapshot: HotSnapshot | None = None
        self._suspected: frozenset[str] = frozenset()
        self._phi: Mapping[str, float] = {}  # each judged supervisor's, at the last judgement
        self._told = RefusalMemory()  # the refusals logged, once per suspicion
        self._on_refused = on_refused
        self._unjudged: frozenset[str] = frozenset()  # holders left to the round, logged
        # the cold starts fenced this term, by pipeline and assignment version: when (wall, mono)
        self._cold_asked: dict[tuple[str, int], tuple[float, float]] = {}
        self._seen: dict[str, SupervisorSummary] = {}  # each holder's newest registration seen
        # in this term, kept once it is gone (its beat lease gives its floor)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._term: Leadership | None = None
        self.outcome: ReadOutcome | None = None  # the last read's, this term; None: none yet

    # ------------------------------------------------------------------ shared with the round

    def note(self, snapshot: HotSnapshot) -> None:
        """The round's newest read of the hot pipelines (any thread)."""
        with self._lock:
            self._snapshot = snapshot

    def suspected(self) -> frozenset[str]:
        """The supervisors suspected at the lane's last judgement in this term (any thread)."""
        with self._lock:
            return self._suspected

    def fence_held(self, current: Mapping[str, tuple[Assignment, int]]) -> frozenset[str]:
        """The pipelines a fence answered in this term stopped and holds on their supervisor,
        whose promotion was refused (or that none followed: the answer came once the
        supervisor was heard again), still assigned as the fence found them in ``current``
        (the round's read: each assignment with its version): the round moves them the
        ordinary way. Any other is forgotten: moved, rewritten or gone (any thread)."""
        return self._fences.held(current) if self._fences is not None else frozenset()

    def cold_start_fenced(self, pipeline: str, version: int | None) -> tuple[float, float] | None:
        """When this term asked the pipeline fence of ``pipeline``'s cold start at its
        assignment's ``version`` (wall, monotonic), or None (any thread)."""
        if version is None:
            return None
        with self._lock:
            return self._cold_asked.get((pipeline, version))

    def phi(self) -> Mapping[str, float]:
        """The phi of each supervisor judged at the lane's last judgement in this term,
        suspected or not (any thread); empty while it judges no one."""
        with self._lock:
            return self._phi

    # ------------------------------------------------------------------ lifecycle

    def start(self, term: Leadership) -> None:
        """Start the thread for ``term`` (the controller's ``on_gained``)."""
        if self._term is term and self._thread is not None and self._thread.is_alive():
            return
        self.stop()
        self._watch.reset()
        with self._lock:
            self._snapshot, self._suspected, self._phi = None, frozenset(), {}
        self._told.clear()
        self._unjudged = frozenset()
        self._seen = {}
        with self._lock:
            self._cold_asked = {}
        self._look = None  # an earlier term's look, if still under way, is not read
        if self._fences is not None:
            self._fences.clear()
        self.outcome = None
        self._term = term
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(term, self._stop), name="failover-lane", daemon=True
        )
        self._thread.start()
        log.info("event=failover_lane_started epoch=%d poll_secs=%g", term.epoch, self._poll_secs)

    def stop(self) -> None:
        """Stop the thread, if one runs (the controller's ``on_lost``; the nimbus's stop)."""
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            self._suspected, self._phi = frozenset(), {}
        if thread is not None and self._term is not None:
            log.info("event=failover_lane_stopped epoch=%d", self._term.epoch)
        self._term = None

    def close(self) -> None:
        """Stop the thread and the fences' threads (the nimbus's close, not each term's end):
        a fence still waiting is left to finish on its own, never waited for, and none
        queued starts."""
        self.stop()
        self._look_executor.shutdown(wait=False, cancel_futures=True)
        if self._fences is not None:
            self._fences.close()

    def _run(self, term: Leadership, stop: threading.Event) -> None:
        while not stop.wait(self._poll_secs):
            try:
                self.step(term)
            except LeadershipLostError as exc:
                log.info(
                    "event=failover_lane_ends epoch=%d reason=term_lost error=%s", term.epoch, exc
                )
                return
            except CommitOutcomeUnknownError as exc:
                log.warning("event=promotion_unknown epoch=%d error=%s", term.epoch, exc)
                with self._lock:
                    self._snapshot = None  # read back: wait for the next round's snapshot
            except Exception:  # the lane must outlive one bad step
                log.exception("event=failover_lane_step_failed epoch=%d", term.epoch)

    # ------------------------------------------------------------------ one poll

    def step(self, term: Leadership) -> tuple[Promotion, ...]:
        """One poll: judge the holders of hot pipelines, promote what the verdicts allow;
        the promotions committed."""
        with self._lock:
            snapshot = self._snapshot
        if not term.is_leader:
            return ()  # stepped down: on_lost stops the thread
        if snapshot is None or snapshot.epoch != term.epoch or not snapshot.assignments:
            self._idle()
            return ()  # nothing hot: no read at all
        registered = self._registered()
        self._fence_cold_starts(term, snapshot, registered)
        holders = snapshot.holders
        seen = {**self._seen, **registered}  # a registration gone: its newest seen this term
        self._seen = {sid: summary for sid, summary in seen.items() if sid in holders}
        floors = {  # a registration's beat lease first; else the one its heartbeat says
            **beat_floors({s: b for s, b in snapshot.heartbeats.items() if s in holders}),
            **beat_floors(self._seen),
        }
        self._log_unjudged(term, holders - set(floors), self._seen)
        if not floors:
            self._idle()
            return ()
        judged_before = self._watch.judged_at
        self.outcome = self._watch.poll()
        if self.outcome is ReadOutcome.BLIND:
            log.warning(
                "event=beat_watch_blind epoch=%d gap_secs=%.3f action=every_silence_restarts",
                term.epoch,
                (self._watch.judged_at or 0.0) - (judged_before or 0.0),
            )
        suspicions = {  # phi alone (the floors name who is judged), each with its real floor
            sid: replace(suspicion, floor_secs=floors[sid])
            for sid, suspicion in self._watch.suspected(
                dict.fromkeys(floors, PHI_ONLY_SECS)
            ).items()
        }
        phis = self._watch.phis()
        judged = {**self._past_lease(floors, registered, phis), **suspicions}
        self._log_suspicions(term, suspicions)
        self._set_suspected(suspicions, phis, silent=set(judged))
        if self._fences is not None:  # heard again: a later silence asks its fence again
            self._fences.keep_asked(suspected=set(judged))
        if not judged:
            return ()
        verdicts, fenced = self._verdicts(term, snapshot, registered, judged, set(suspicions))
        if not verdicts:
            return ()  # suspected, neither fenced nor past its floor yet
        offered = self._without_held(snapshot)  # the round moves those it holds
        plan = plan_promotions(
            verdicts=verdicts,
            pipelines=offered.pipelines,
            assignments=offered.assignments,
            placements=offered.placements,
            heartbeats=offered.heartbeats,
            suspected=set(suspicions),
            registered=set(registered),
            epoch=term.epoch,
            now=self._wall(),
            fenced=fenced,
        )
        self._hold(snapshot, fenced, plan.refusals)
        self._log_refusals(term, plan.refusals)
        done = []
        for promotion in plan.promotions:
            suspicion = judged[promotion.from_supervisor]
            if self._promoter.promote(
                term,
                promotion,
                silent_secs=suspicion.silence_secs,
                floor_secs=suspicion.floor_secs,
            ):
                done.append(promotion)
            with self._lock:
                if self._snapshot is snapshot:  # either way its versions are spent
                    self._snapshot = snapshot = snapshot.without(promotion.pipeline)
        return tuple(done)

    def _fence_cold_starts(
        self, term: Leadership, snapshot: HotSnapshot, registered: Mapping[str, SupervisorSummary]
    ) -> None:
        """Ask the pipeline fence of each hot pipeline whose worker starts cold while its
        standby worker is READY (``HotSnapshot.cold_starts``), once per assignment version:
        the answer hands it to the round, which promotes the standby worker."""
        if self._fences is None:
            return
        cold = {**snapshot.cold_starts, **self._fresh_cold_starts(snapshot, registered)}
        for name, version in sorted(cold.items()):
            if (name, version) in self._cold_asked:
                continue
            supervisor = snapshot.assignments[name][0].supervisor
            summary = registered.get(supervisor)
            if summary is None:
                continue
            with self._lock:
                self._cold_asked[(name, version)] = (self._wall(), self._clock())
            log.info(
                "event=cold_start_fenced epoch=%d pipeline=%s supervisor=%s "
                "action=promote_standby_worker",
                term.epoch,
                name,
                supervisor,
            )
            self._fences.ask_for_round(summary, {name: version}, term.epoch)

    def _fresh_cold_starts(
        self, snapshot: HotSnapshot, registered: Mapping[str, SupervisorSummary]
    ) -> Mapping[str, int]:
        """The cold starts the last look of ``cold_starts_now`` found, still at the versions
        of ``snapshot``; then the next look begins, on its own thread, among the snapshot's
        hot pipelines that the round did not hand and whose fence was not asked yet at their
        assignment's version. A look reads the pacemakers, and one that hangs (a pacemaker cut
        off: up to ``pacemaker.client.timeout.secs``) must not hold up the beats' poll: it
        delays only the next look. A look that failed finds nothing (the round looks too)."""
        if self._cold_starts_now is None:
            return {}
        found = self._looked(snapshot)
        if self._look is None or self._look.done():
            with self._lock:
                asked = set(self._cold_asked)
            left = snapshot.without(
                *(
                    name
                    for name, (_, version) in snapshot.assignments.items()
                    if (name, version) in asked or name in snapshot.cold_starts
                )
            )
            self._look = None
            if left.assignments:
                self._look = self._look_executor.submit(
                    self._cold_starts_now,
                    left,
                    registered=set(registered),
                    suspected=self.suspected(),
                )
        return found

    def _looked(self, snapshot: HotSnapshot) -> Mapping[str, int]:
        """What the finished look found, at the versions ``snapshot`` still holds."""
        look = self._look
        if look is None or not look.done():
            return {}
        try:
            found = look.result()
        except StateStoreUnavailableError as exc:
            log.debug("event=cold_starts_unread error=%s", exc)
            return {}
        except Exception:  # a bug of the look must not end the lane
            log.exception("event=cold_starts_look_failed")
            return {}
        held = snapshot.assignments
        return {name: v for name, v in found.items() if name in held and held[name][1] == v}

    def _past_lease(
        self,
        floors: Mapping[str, float],
        registered: Mapping[str, SupervisorSummary],
        phis: Mapping[str, float],
    ) -> dict[str, Suspicion]:
        """The registered supervisors judged whose silence reached their beat lease, phi or
        not: their hot workers are stopping themselves, so their fence is asked (``The
        fence``)."""
        silences = self._watch.silences()
        past = {}
        for sid, floor in floors.items():
            silence = Suspicion(sid, phis.get(sid, 0.0), silences.get(sid, 0.0), floor)
            if sid in registered and lease_ran_out(registered[sid], silence):
                past[sid] = silence
        return past

    def _verdicts(
        self,
        term: Leadership,
        snapshot: HotSnapshot,
        registered: Mapping[str, SupervisorSummary],
        judged: Mapping[str, Suspicion],
        suspected: Set[str],
    ) -> tuple[dict[str, How], dict[str, Set[str]]]:
        """``fenced`` for a supervisor whose fence answered for its hot pipelines (asked once
        per silence, once that reached its beat lease: while time is left to its floor if phi
        suspects it, at any time if not; its answer counts whenever it comes, for the
        assignments it was asked at), else ``floor`` once a supervisor of ``suspected`` (phi)
        has been silent for its floor; no verdict before."""
        verdicts: dict[str, How] = {}
        fenced: dict[str, Set[str]] = {}
        fences = self._fences
        for sid, suspicion in sorted(judged.items()):
            left = suspicion.floor_secs - suspicion.silence_secs
            if (
                fences is not None
                and not fences.asked(sid)
                and (left > 0 or sid not in suspected)
                and sid in registered
                and lease_ran_out(registered[sid], suspicion)
            ):
                if sid not in suspected:
                    log.info(
                        "event=beat_lease_ran_out epoch=%d supervisor=%s phi=%.1f "
                        "silent_secs=%.3f action=fence_hot_pipelines",
                        term.epoch,
                        sid,
                        suspicion.phi,
                        suspicion.silence_secs,
                    )
                hot = {
                    name: version
                    for name, (a, version) in snapshot.assignments.items()
                    if a.supervisor == sid
                }
                fences.ask(registered[sid], hot, term.epoch, left)
            answered = fences.answered(sid, snapshot.assignments) if fences else frozenset()
            if answered:
                verdicts[sid], fenced[sid] = How.FENCED, answered
            elif left <= 0 and sid in suspected:
                verdicts[sid] = How.FLOOR
        return verdicts, fenced

    def _log_suspicions(self, term: Leadership, suspicions: Mapping[str, Suspicion]) -> None:
        """Each supervisor newly suspected, once (the lane polls ten times a second)."""
        with self._lock:
            before = self._suspected
        for sid in sorted(suspicions.keys() - before):
            suspicion = suspicions[sid]
            log.info(
                "event=supervisor_suspected epoch=%d supervisor=%s phi=%.1f silent_secs=%.3f "
                "floor_secs=%.3f",
                term.epoch,
                sid,
                suspicion.phi,
                suspicion.silence_secs,
                suspicion.floor_secs,
            )

    def _log_unjudged(
        self, term: Leadership, unjudged: Set[str], seen: Mapping[str, SupervisorSummary]
    ) -> None:
        """Each holder of a hot pipeline the lane cannot judge, once until that changes: no
        registration seen in this term (only the round judges it), or one without a beat
        lease."""
        for sid in sorted(unjudged - self._unjudged):
            log.info(
                "event=supervisor_not_judged epoch=%d supervisor=%s reason=%s "
                "action=left_to_the_round",
                term.epoch,
                sid,
                "no_beat_lease" if sid in seen else "unregistered",
            )
        self._unjudged = frozenset(unjudged)

    def _without_held(self, snapshot: HotSnapshot) -> HotSnapshot:
        """``snapshot`` without the pipelines handed to the round at the assignment it read:
        the round moves them, the lane promotes none of them."""
        if self._fences is None:
            return snapshot
        for name, (assignment, version) in snapshot.assignments.items():
            if self._fences.holds(name, assignment, version):
                snapshot = snapshot.without(name)
        return snapshot

    def _hold(
        self,
        snapshot: HotSnapshot,
        fenced: Mapping[str, Set[str]],
        refusals: tuple[PromotionRefusal, ...],
    ) -> None:
        """Hand the round each refused pipeline that a fence answered for: its worker is gone
        and its supervisor holds it until a newer assignment (``fence_held``)."""
        if self._fences is None:
            return
        for refusal in refusals:
            name, sid = refusal.pipeline, refusal.from_supervisor
            if refusal.how is How.FENCED and name in fenced.get(sid, ()):
                self._fences.hold(sid, {name: snapshot.assignments[name][1]})  # as fenced

    def _idle(self) -> None:
        """Nobody to judge at this poll: no suspicion, and a watch that forgets what it
        judged (once), so that whoever is judged after this stretch without reads gets a
        whole floor from its first read. A fence still waited for is handed to the round
        when it answers."""
        self._set_suspected({})
        if self._fences is not None:
            self._fences.keep_asked(suspected=set())
        if self._watch.judged_at is not None:
            self._watch.reset()

    def _set_suspected(
        self,
        suspicions: Mapping[str, Suspicion],
        phi: Mapping[str, float] | None = None,
        *,
        silent: Set[str] = frozenset(),
    ) -> None:
        """What the last judgement says (nobody judged: no phi); a refusal off a supervisor
        neither suspected nor ``silent`` past its beat lease any more is forgotten, so that
        its next silence tells it again."""
        self._told.keep(under=suspicions.keys() | silent)
        with self._lock:
            self._suspected, self._phi = frozenset(suspicions), dict(phi or {})

    def _log_refusals(self, term: Leadership, refusals: tuple[PromotionRefusal, ...]) -> None:
        """Each refusal once per suspicion of its supervisor, until its reason changes (the
        lane polls ten times a second); each one told is counted (``on_refused``)."""
        for refusal in self._told.news(refusals):
            self._on_refused(refusal)
            log.warning(
                "event=promotion_refused pipeline=%s epoch=%d from=%s how=%s reason=%s "
                "standby=%s detail=%s action=moved_the_ordinary_way",
                refusal.pipeline,
                term.epoch,
                refusal.from_supervisor,
                refusal.how.value,
                refusal.reason.value,
                refusal.standby or "-",
                refusal.detail.replace(" ", "_"),
            )
