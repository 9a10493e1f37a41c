"""The failover lane's poll (``FailoverLane.step``) and the round's snapshot of the hot
pipelines (``hot_snapshot``), on an injected clock with scripted beats: pure logic, no
pacemaker, no ZooKeeper. The promoter on the other side is a recording stand-in; the
transaction itself is tested on a real ZooKeeper (tests/cluster/test_failover_lane.py).

Pipeline "orders" (hot) runs on s1 with its standby worker READY on s2; "web" (not hot)
runs on s3. Beats come every 100 ms, and the lane polls every 100 ms.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar, cast

import pytest

from stratus.api.records import (
    Assignment,
    AssignmentReason,
    PipelineRecord,
    SupervisorHeartbeat,
    SupervisorSummary,
)
from stratus.api.standby_workers import BeatLease, StandbyWorkerState
from stratus.coordination.leadership import Leadership
from stratus.nimbus.failover.beat_watch import BeatWatch, ReadOutcome
from stratus.nimbus.failover.lane import ColdStartsNow, FailoverLane, HotSnapshot, hot_snapshot
from stratus.nimbus.failover.promotion_plan import How, Promotion, PromotionRefusal, Refusal
from stratus.nimbus.settings import DetectorSettings
from stratus.state.beats import Beat, BeatRead
from stratus.state.errors import StateStoreUnavailableError
from tests.harness.supervisor_fakes import FakeClock
from tests.harness.zkfixtures import wait_until
from tests.unit.test_promotion_plan import (
    assignment,
    heartbeat,
    placement,
    record,
    standby_beat,
)

T = TypeVar("T")

SETTINGS = DetectorSettings(
    threshold=8.0, window=200, pause_secs=0.3, min_std_secs=0.05, poll_secs=0.1
)
POLL = SETTINGS.poll_secs
LEASE = BeatLease(lease_secs=0.8, stop_secs=0.1, poll_secs=0.02)
EPOCH = 9
ANSWER_SECS = 10.0  # how long a fence's answer is waited for, past the floor


@dataclass
class Term:
    """The term as the lane uses it: its epoch, and whether it is still held."""

    epoch: int = EPOCH
    is_leader: bool = True


class Beats:
    """The pacemakers as the lane reads them, counting the reads."""

    def __init__(self) -> None:
        self.beats: dict[str, Beat] = {}
        self.reads = 0
        self.down = False  # no pacemaker answers

    def beat(self, supervisor: str) -> None:
        last = self.beats.get(supervisor)
        self.beats[supervisor] = Beat("boot-1", last.seq + 1 if last else 0, LEASE.lease_secs)

    def read(self) -> BeatRead:
        self.reads += 1
        if self.down:
            raise StateStoreUnavailableError("pacemaker", "/beats", "no pacemaker answered")
        return BeatRead(dict(self.beats), 3, 3, False)


class Promoter:
    """Records the promotions asked; ``moved`` makes each one find its version moved."""

    def __init__(self) -> None:
        self.asked: list[Promotion] = []
        self.promoted: list[tuple[Promotion, float, float]] = []
        self.moved = False

    def promote(
        self, _term: Any, promotion: Promotion, *, silent_secs: float, floor_secs: float
    ) -> bool:
        self.asked.append(promotion)
        if self.moved:
            return False
        self.promoted.append((promotion, silent_secs, floor_secs))
        return True


def snapshot(standby: StandbyWorkerState = StandbyWorkerState.READY) -> HotSnapshot:
    orders, web = record("orders"), record("web", standby=None, submitted=11.0)
    placed = placement(orders, "s2")
    return hot_snapshot(
        EPOCH,
        {"orders": orders, "web": web},
        {"orders": (assignment(orders, "s1"), 11), "web": (assignment(web, "s3"), 5)},
        {"orders": (placed, 4)},
        {"s2": heartbeat("s2", standby_beat(placed, standby))},
    )


class Fence:
    """A pipeline fence that answers (or not), recording what it was asked."""

    def __init__(self, answers: bool) -> None:
        self.answers = answers
        self.asked: list[tuple[str, frozenset[str], int, float]] = []

    def __call__(
        self, supervisor: SupervisorSummary, pipelines: Any, epoch: int, timeout: float
    ) -> bool:
        self.asked.append((supervisor.id, frozenset(pipelines), epoch, timeout))
        return self.answers


class Immediate(Executor):
    """Runs each call at once, on the caller's thread: a fence's answer is there at the same
    poll, as the scripted clock needs."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        done: Future[T] = Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except Exception as exc:  # as a pool's thread would: the future holds it
            done.set_exception(exc)
        return done


class Lane:
    """A lane over scripted beats, with every supervisor registered with a beat lease."""

    def __init__(
        self,
        fence: Any = None,
        executor: Executor | None = None,
        cold_starts_now: ColdStartsNow | None = None,
        look_executor: Executor | None = None,
    ) -> None:
        self.refused: list[PromotionRefusal] = []
        self.clock = FakeClock()
        self.beats = Beats()
        self.promoter = Promoter()
        self.registered = {
            sid: SupervisorSummary(id=sid, beat_lease=LEASE) for sid in ("s1", "s2", "s3")
        }
        self.lane = FailoverLane(
            BeatWatch(SETTINGS, self.beats.read, clock=self.clock),
            cast(Any, self.promoter),
            lambda: self.registered,
            poll_secs=POLL,
            fence_pipelines=fence,
            fence_executor=executor or Immediate(),
            fence_answer_secs=ANSWER_SECS,
            on_refused=self.refused.append,
            cold_starts_now=cold_starts_now,
            look_executor=look_executor or Immediate(),
            clock=self.clock,
            wall=lambda: 1_700_000_100.0,
        )
        self.term = cast(Leadership, Term())

    def run(self, secs: float, beating: set[str]) -> list[Promotion]:
        """``secs`` of polls, each supervisor of ``beating`` beating between two polls."""
        done: list[Promotion] = []
        end = self.clock() + secs
        while self.clock() < end - 1e-9:
            self.clock.advance(POLL)
            for sid in beating:
                self.beats.beat(sid)
            done.extend(self.lane.step(self.term))
        return done


@pytest.fixture
def lane() -> Lane:
    return Lane()


def test_a_silent_supervisor_past_its_floor_has_its_hot_pipeline_promoted(lane: Lane) -> None:
    lane.lane.note(snapshot())
    assert lane.run(2.0, {"s1", "s2", "s3"}) == []
    done = lane.run(2.0, {"s2", "s3"})  # s1 falls silent
    assert [(p.pipeline, p.from_supervisor, p.to_supervisor, p.how) for p in done] == [
        ("orders", "s1", "s2", How.FLOOR)
    ]
    promotion = done[0]
    assert promotion.change.reason is AssignmentReason.STANDBY_PROMOTED
    assert (promotion.assignment_version, promotion.placement_version) == (11, 4)
    _, silent, floor = lane.promoter.promoted[0]
    assert silent >= floor
    assert len(lane.promoter.asked) == 1  # once: its versions are spent
    assert lane.lane.suspected() == frozenset()  # nothing hot is left on s1: not judged


def test_beats_with_jitter_below_the_floor_promote_nothing(lane: Lane) -> None:
    lane.lane.note(snapshot())
    for gap in (0.1, 0.3, 0.1, 0.5, 0.2, 0.7, 0.1, 0.4) * 3:
        lane.run(gap - POLL, {"s2", "s3"})
        lane.run(POLL, {"s1", "s2", "s3"})
    assert lane.promoter.asked == []
    assert lane.promoter.promoted == []


def test_a_pipeline_not_hot_is_never_judged_nor_promoted(lane: Lane) -> None:
    lane.lane.note(snapshot())
    lane.run(3.0, {"s1", "s2"})  # s3, holding only "web", falls silent
    assert lane.lane.suspected() == frozenset()
    assert lane.promoter.asked == []


def test_no_hot_pipeline_reads_no_beat(lane: Lane) -> None:
    lane.run(1.0, set())  # no snapshot yet
    web = record("web", standby=None)
    lane.lane.note(hot_snapshot(EPOCH, {"web": web}, {"web": (assignment(web, "s3"), 5)}, {}, {}))
    lane.run(1.0, set())
    assert lane.beats.reads == 0


def test_a_snapshot_of_another_term_is_not_acted_on(lane: Lane) -> None:
    lane.lane.note(HotSnapshot(**{**snapshot().__dict__, "epoch": EPOCH - 1}))
    lane.run(3.0, set())
    assert lane.beats.reads == 0
    assert lane.promoter.asked == []


def test_a_lost_version_race_promotes_nothing_and_waits_for_a_new_snapshot(lane: Lane) -> None:
    lane.lane.note(snapshot())
    lane.promoter.moved = True
    assert lane.run(3.0, {"s2", "s3"}) == []
    assert len(lane.promoter.asked) == 1  # not asked again from the same read
    assert lane.promoter.promoted == []
    lane.promoter.moved = False
    lane.lane.note(snapshot())  # the next round's read; the watch, unread meanwhile, is
    # blind to the stretch: s1 gets a whole floor again
    assert [p.pipeline for p in lane.run(3.0, {"s2", "s3"})] == ["orders"]


def test_a_suspected_supervisor_that_answers_its_fence_is_promoted_before_its_floor() -> None:
    fence = Fence(answers=True)
    lane = Lane(fence)
    lane.lane.note(snapshot())
    lane.run(2.0, {"s1", "s2", "s3"})
    done = lane.run(2.0, {"s2", "s3"})
    assert [(p.pipeline, p.how) for p in done] == [("orders", How.FENCED)]
    assert [(sid, pipelines, epoch) for sid, pipelines, epoch, _ in fence.asked] == [
        ("s1", frozenset({"orders"}), EPOCH)  # its hot pipelines only: not "web"
    ]
    (_, _, _, within), (_, silent, floor) = fence.asked[0], lane.promoter.promoted[0]
    assert within == ANSWER_SECS  # an answer counts whenever it comes
    assert LEASE.lease_secs <= silent < floor  # on the fence's answer, before the floor


def test_a_stall_shorter_than_the_beat_lease_asks_no_fence_and_promotes_nothing() -> None:
    """A beat agent stalled on a loaded host (0.7 s: phi suspects its supervisor, whose beat
    lease still holds) then beating again: its hot worker ran on its lease all along, and a
    fence would have stopped it for nothing."""
    fence = Fence(answers=True)
    lane = Lane(fence)
    lane.lane.note(snapshot())
    lane.run(2.0, {"s1", "s2", "s3"})
    suspected = False
    for _ in range(7):  # 0.7 s without a beat of s1
        lane.run(POLL, {"s2", "s3"})
        suspected = suspected or "s1" in lane.lane.suspected()
    assert suspected  # phi has spoken, before the beat lease ran out
    assert lane.run(2.0, {"s1", "s2", "s3"}) == []
    assert fence.asked == [] and lane.promoter.asked == []


def jittery(lane: Lane) -> None:
    """s1's beat agent stalls again and again (gaps of 0.1 to 0.7 s): phi learns it."""
    lane.lane.note(snapshot())
    for gap in (0.1, 0.3, 0.1, 0.5, 0.2, 0.7, 0.1, 0.4) * 3:
        lane.run(gap - POLL, {"s2", "s3"})
        lane.run(POLL, {"s1", "s2", "s3"})


def silent(lane: Lane, secs: float) -> bool:
    """``secs`` without a beat of s1; whether phi suspected s1 meanwhile."""
    suspected = False
    for _ in range(round(secs / POLL)):
        lane.run(POLL, {"s2", "s3"})
        suspected = suspected or "s1" in lane.lane.suspected()
    return suspected


def test_a_silence_past_the_beat_lease_that_phi_does_not_suspect_asks_the_fence() -> None:
    """A host whose beat agent stalls often: phi, which learnt its rhythm, stays below the
    threshold at a silence of 0.9 s, but the beat lease (0.8 s) has run out, so its hot
    worker stopped itself. The fence's answer promotes the standby worker, rather than
    leaving the supervisor to start the worker again in place (a Spark driver's start)."""
    fence = Fence(answers=True)
    lane = Lane(fence)
    jittery(lane)
    assert not silent(lane, 0.9)  # phi never suspected s1
    lane.run(1.0, {"s1", "s2", "s3"})  # heard again
    assert [(sid, pipelines) for sid, pipelines, _, _ in fence.asked] == [
        ("s1", frozenset({"orders"}))
    ]
    promoted = [
        (p.pipeline, p.from_supervisor, p.to_supervisor, p.how)
        for p, _, _ in lane.promoter.promoted
    ]
    assert promoted == [("orders", "s1", "s2", How.FENCED)]
    _, silence, _ = lane.promoter.promoted[0]
    assert silence >= LEASE.lease_secs


def test_past_its_floor_without_phi_a_supervisor_is_fenced_never_promoted_unanswered() -> None:
    """Phi still decides the ``floor`` verdict: a silence past the floor that it does not
    suspect promotes nothing without the fence's answer."""
    fence = Fence(answers=False)
    lane = Lane(fence)
    jittery(lane)
    lane.clock.advance(1.1)  # the leader's own pause: the next read finds s1 past its floor
    for sid in ("s2", "s3"):
        lane.beats.beat(sid)
    assert lane.lane.step(lane.term) == ()
    assert "s1" not in lane.lane.suspected()
    assert [sid for sid, _, _, _ in fence.asked] == ["s1"]
    assert lane.promoter.asked == []


def test_a_cold_start_is_fenced_once_and_handed_to_the_round_on_the_answer() -> None:
    """The round saw "orders" start cold on s1, its standby worker READY: the lane asks
    s1's pipeline fence once for that assignment, beating or not, and hands the answer to
    the round (``fence_held``), promoting nothing itself."""
    fence = Fence(answers=True)
    lane = Lane(fence)
    cold = replace(snapshot(), cold_starts={"orders": 11})
    lane.lane.note(cold)
    assert lane.run(1.0, {"s1", "s2", "s3"}) == []
    assert [(sid, pipelines) for sid, pipelines, _, _ in fence.asked] == [
        ("s1", frozenset({"orders"}))
    ]
    assert lane.lane.fence_held(cold.assignments) == {"orders"}
    assert lane.promoter.asked == []
    asked = lane.lane.cold_start_fenced("orders", 11)  # for the promotion's trail line
    assert asked is not None and asked[0] == 1_700_000_100.0 and asked[1] <= lane.clock()
    assert lane.lane.cold_start_fenced("orders", 12) is None
    lane.lane.note(replace(snapshot(), cold_starts={"orders": 12}))  # a later assignment's
    lane.run(POLL, {"s1", "s2", "s3"})
    assert len(fence.asked) == 2
    assert lane.lane.cold_start_fenced("orders", 12) is not None


ACTIVE_S1 = snapshot().assignments["orders"][0]


class ColdNow:
    """``cold_starts_now`` as the nimbus's ``ColdStartWatch`` answers it: the pipelines
    of ``cold`` among those of the snapshot it is given, recording each call's."""

    def __init__(self, cold: dict[str, int]) -> None:
        self.cold = cold
        self.seen: list[set[str]] = []
        self.down = False  # the heartbeats cannot be read

    def __call__(self, snapshot: HotSnapshot, *, registered: Any, suspected: Any) -> dict[str, int]:
        self.seen.append(set(snapshot.assignments))
        if self.down:
            raise StateStoreUnavailableError("pacemaker", "/supervisors/s1", "no answer")
        return {name: v for name, v in self.cold.items() if name in snapshot.assignments}


def test_a_cold_start_between_rounds_is_fenced_at_the_poll_after_a_look_and_once() -> None:
    """The round saw "orders" running; its worker then starts cold (the lane's own look
    at the heartbeats, which counts at the poll after it ended): the fence is asked then,
    once for that assignment, and the answer handed to the round, as for a cold start the
    round saw."""
    fence = Fence(answers=True)
    now = ColdNow({})
    lane = Lane(fence, cold_starts_now=now)
    lane.lane.note(snapshot())
    assert lane.run(0.5, {"s1", "s2", "s3"}) == []
    assert fence.asked == [] and now.seen[-1] == {"orders"}  # looked at, every poll
    now.cold = {"orders": 11}
    lane.run(POLL, {"s1", "s2", "s3"})  # the look that finds it
    assert fence.asked == []
    lane.run(POLL, {"s1", "s2", "s3"})  # what it found counts
    assert [(sid, pipelines) for sid, pipelines, _, _ in fence.asked] == [
        ("s1", frozenset({"orders"}))
    ]
    assert lane.lane.fence_held(snapshot().assignments) == {"orders"}
    assert lane.lane.cold_start_fenced("orders", 11) is not None
    calls = len(now.seen)
    lane.run(0.5, {"s1", "s2", "s3"})
    assert len(fence.asked) == 1  # asked once
    assert len(now.seen) == calls  # and nothing left to look at: no read spent
    moved = snapshot()  # promoted, then back on s1 at a later version, starting cold again
    later = replace(moved, assignments={**moved.assignments, "orders": (ACTIVE_S1, 12)})
    lane.lane.note(later)
    now.cold = {"orders": 12}
    lane.run(2 * POLL, {"s1", "s2", "s3"})
    assert len(fence.asked) == 2 and lane.lane.cold_start_fenced("orders", 12) is not None


def test_heartbeats_that_cannot_be_read_fence_nothing_and_the_beats_are_judged_on() -> None:
    fence = Fence(answers=True)
    now = ColdNow({"orders": 11})
    now.down = True
    lane = Lane(fence, cold_starts_now=now)
    lane.lane.note(snapshot())
    reads = lane.beats.reads
    assert lane.run(0.5, {"s1", "s2", "s3"}) == []
    assert fence.asked == [] and lane.beats.reads == reads + 5
    now.down = False
    lane.run(2 * POLL, {"s1", "s2", "s3"})
    assert [sid for sid, _, _, _ in fence.asked] == ["s1"]


def test_a_look_that_hangs_holds_up_neither_the_beats_nor_a_floor_verdict() -> None:
    """A look whose read hangs (a pacemaker cut off, up to the client's timeout) runs on its
    own thread: the beats are read at every poll meanwhile, and a silent supervisor is
    promoted at its floor."""
    release, returned = threading.Event(), threading.Event()

    def hanging(snapshot: HotSnapshot, *, registered: Any, suspected: Any) -> dict[str, int]:
        release.wait(5)
        returned.set()
        return {}

    with ThreadPoolExecutor(max_workers=1) as looks:
        lane = Lane(Fence(answers=False), cold_starts_now=hanging, look_executor=looks)
        lane.lane.note(snapshot())
        reads = lane.beats.reads
        assert lane.run(1.0, {"s1", "s2", "s3"}) == []
        assert not returned.is_set()  # ten polls went by while the first look hung
        assert lane.beats.reads == reads + 10
        done = lane.run(2.0, {"s2", "s3"})  # s1 falls silent
        release.set()
    assert [(p.pipeline, p.how) for p in done] == [("orders", How.FLOOR)]


def test_the_fence_is_asked_once_the_silence_reached_the_beat_lease() -> None:
    fence = Fence(answers=False)
    lane = Lane(fence)
    lane.lane.note(snapshot())
    lane.run(2.0, {"s1", "s2", "s3"})
    last_beat = lane.clock()
    while not fence.asked:
        lane.run(POLL, {"s2", "s3"})
    assert lane.clock() - last_beat >= LEASE.lease_secs - 1e-9
    assert lane.clock() - last_beat < LEASE.floor_secs(0.1)  # with time left to the floor


def test_a_fence_that_gets_no_answer_is_asked_once_and_the_floor_promotes() -> None:
    fence = Fence(answers=False)
    lane = Lane(fence)
    lane.lane.note(snapshot())
    lane.run(2.0, {"s1", "s2", "s3"})
    done = lane.run(2.0, {"s2", "s3"})
    assert [(p.pipeline, p.how) for p in done] == [("orders", How.FLOOR)]
    assert len(fence.asked) == 1
    _, silent, floor = lane.promoter.promoted[0]
    assert silent >= floor


@pytest.mark.timeout(60)
def test_a_fence_a_dead_host_never_answers_does_not_stop_the_lane_reading_beats() -> None:
    released = threading.Event()

    def hanging_fence(supervisor: SupervisorSummary, pipelines: Any, epoch: int, _t: float) -> bool:
        released.wait()  # a dead host's packets are dropped: no answer within the call
        return False

    with ThreadPoolExecutor(max_workers=1) as fencing:
        lane = Lane(hanging_fence, fencing)
        lane.lane.note(snapshot())
        lane.run(2.0, {"s1", "s2", "s3"})
        done = lane.run(2.0, {"s2", "s3"})  # the fence still waits: the floor promotes
        released.set()
    assert [(p.pipeline, p.how) for p in done] == [("orders", How.FLOOR)]


def test_suspicion_before_the_floor_promotes_nothing_without_a_fence(lane: Lane) -> None:
    lane.lane.note(snapshot())
    lane.run(2.0, {"s1", "s2", "s3"})
    while not lane.lane.suspected():
        assert lane.run(POLL, {"s2", "s3"}) == []
    assert lane.lane.suspected() == {"s1"}  # phi has spoken: the round moves nothing of it
    assert lane.promoter.asked == []  # but its floor has not passed


def test_a_late_read_keeps_the_silence_of_a_dead_host(lane: Lane) -> None:
    """The lane's thread not scheduled for 0.5 s (a loaded machine) is no blindness: the
    first read after it shows no newer beat of s1, so s1 was silent all along."""
    lane.lane.note(snapshot())
    lane.run(2.0, {"s1", "s2", "s3"})
    assert lane.run(0.6, {"s2", "s3"}) == []  # s1 silent, short of its floor
    lane.clock.advance(5 * POLL)
    for sid in ("s2", "s3"):
        lane.beats.beat(sid)
    assert [p.pipeline for p in lane.lane.step(lane.term)] == ["orders"]
    assert lane.lane.outcome is ReadOutcome.JUDGED


def test_the_lane_shows_the_phi_of_each_supervisor_it_judges(lane: Lane) -> None:
    lane.lane.note(snapshot())
    assert lane.lane.phi() == {}  # nothing judged yet
    lane.run(2.0, {"s1", "s2", "s3"})
    calm = lane.lane.phi()
    assert set(calm) == {"s1"}  # the holder of a hot pipeline's active worker, no other
    assert calm["s1"] < SETTINGS.threshold
    lane.run(0.9, {"s2", "s3"})  # s1 silent, short of its floor: phi has spoken already
    assert lane.lane.phi()["s1"] >= SETTINGS.threshold
    lane.lane.stop()  # the term is over: a nimbus that does not lead shows none
    assert lane.lane.phi() == {}


def test_a_refused_promotion_is_told_once_per_suspicion_of_its_supervisor(lane: Lane) -> None:
    lane.lane.note(snapshot(StandbyWorkerState.STARTING))
    lane.run(2.0, {"s1", "s2", "s3"})
    assert lane.run(2.0, {"s2", "s3"}) == []  # s1 past its floor: about ten plans refused
    assert [(r.pipeline, r.how, r.reason) for r in lane.refused] == [
        ("orders", How.FLOOR, Refusal.NOT_READY)
    ]
    lane.run(1.0, {"s1", "s2", "s3"})  # s1 heard again: no longer suspected
    lane.run(2.0, {"s2", "s3"})  # and silent again: a new suspicion, told again
    assert [r.reason for r in lane.refused] == [Refusal.NOT_READY, Refusal.NOT_READY]


def test_a_fenced_pipeline_whose_promotion_is_refused_is_handed_to_the_round() -> None:
    """The supervisor answered the fence (its worker is gone, it holds the pipeline until a
    newer assignment), the standby worker is not READY: the round moves the pipeline, even
    once its supervisor is heard again, and the lane promotes it no more."""
    lane = Lane(Fence(answers=True))
    starting = snapshot(StandbyWorkerState.STARTING)
    lane.lane.note(starting)
    lane.run(2.0, {"s1", "s2", "s3"})
    assert lane.lane.fence_held(starting.assignments) == frozenset()
    assert lane.run(2.0, {"s2", "s3"}) == []
    assert [(r.pipeline, r.how, r.reason) for r in lane.refused] == [
        ("orders", How.FENCED, Refusal.NOT_READY)
    ]
    lane.run(1.0, {"s1", "s2", "s3"})  # a stall only: s1 is heard again
    assert lane.lane.suspected() == frozenset()
    assert lane.lane.fence_held(starting.assignments) == {"orders"}
    lane.lane.note(snapshot())  # the standby worker READY, the assignment still the fenced one
    assert lane.run(2.0, {"s2", "s3"}) == []  # the round moves it, not the lane
    assert lane.promoter.asked == []
    assert lane.lane.fence_held(starting.assignments) == {"orders"}  # until it is moved
    moved = {name: (a, version + 1) for name, (a, version) in starting.assignments.items()}
    assert lane.lane.fence_held(moved) == frozenset()  # the round wrote it: spent
    assert lane.lane.fence_held(starting.assignments) == frozenset()  # and forgotten


def test_a_refused_promotion_without_a_fence_answered_is_not_handed_to_the_round() -> None:
    """No answer: the worker may still run (until the floor), and the supervisor holds
    nothing it was not asked; the floor's refusal hands nothing either."""
    lane = Lane(Fence(answers=False))
    starting = snapshot(StandbyWorkerState.STARTING)
    lane.lane.note(starting)
    lane.run(2.0, {"s1", "s2", "s3"})
    assert lane.run(2.0, {"s2", "s3"}) == []
    assert [(r.how, r.reason) for r in lane.refused] == [(How.FLOOR, Refusal.NOT_READY)]
    assert lane.lane.fence_held(starting.assignments) == frozenset()


class LateFence(Fence):
    """A fence the supervisor obeys at once but answers only once ``answer`` is set (its
    worker's stop takes longer than the time left to the floor)."""

    def __init__(self) -> None:
        super().__init__(answers=True)
        self.answer = threading.Event()

    def __call__(
        self, supervisor: SupervisorSummary, pipelines: Any, epoch: int, timeout: float
    ) -> bool:
        super().__call__(supervisor, pipelines, epoch, timeout)
        return self.answer.wait(timeout=30)


def held_once_answered(lane: Lane, beating: set[str], current: Any) -> frozenset[str]:
    """Poll until the late answer is in and the lane acted on it; what it hands the round."""
    wait_until(
        lambda: lane.run(POLL, beating) == [] and lane.lane.fence_held(current),
        timeout=20,
        what="the late answer handed to the round",
    )
    return lane.lane.fence_held(current)


@pytest.mark.timeout(60)
def test_a_fence_answered_after_the_floor_counts_and_its_refused_pipeline_is_handed() -> None:
    fence = LateFence()
    with ThreadPoolExecutor(max_workers=1) as fencing:
        lane = Lane(fence, fencing)
        starting = snapshot(StandbyWorkerState.STARTING)
        lane.lane.note(starting)
        lane.run(2.0, {"s1", "s2", "s3"})
        assert lane.run(2.0, {"s2", "s3"}) == []  # no answer yet: refused on the floor
        assert [r.how for r in lane.refused] == [How.FLOOR]
        assert lane.lane.fence_held(starting.assignments) == frozenset()
        fence.answer.set()  # the worker has stopped: the supervisor answers, late
        assert held_once_answered(lane, {"s2", "s3"}, starting.assignments) == {"orders"}
    assert [r.how for r in lane.refused] == [How.FLOOR, How.FENCED]
    [(_, _, _, waited)] = fence.asked
    assert waited == ANSWER_SECS  # longer than the time left to the floor


@pytest.mark.timeout(60)
def test_a_fence_answered_once_its_supervisor_is_heard_again_hands_its_pipeline() -> None:
    """The stall ended before the floor and the answer came after: no verdict, no promotion,
    and the supervisor holds the pipeline; the round moves it."""
    fence = LateFence()
    with ThreadPoolExecutor(max_workers=1) as fencing:
        lane = Lane(fence, fencing)
        lane.lane.note(snapshot())
        lane.run(2.0, {"s1", "s2", "s3"})
        while not fence.asked:
            lane.run(POLL, {"s2", "s3"})
        lane.run(POLL, {"s1", "s2", "s3"})  # heard again before the floor
        assert lane.lane.suspected() == frozenset()
        assert lane.lane.fence_held(snapshot().assignments) == frozenset()
        fence.answer.set()
        held = held_once_answered(lane, {"s1", "s2", "s3"}, snapshot().assignments)
    assert held == {"orders"}
    assert lane.promoter.asked == []


def test_a_term_no_longer_held_reads_nothing(lane: Lane) -> None:
    lane.lane.note(snapshot())
    cast(Term, lane.term).is_leader = False
    lane.run(3.0, set())
    assert lane.beats.reads == 0


def test_the_snapshot_leaves_out_what_the_round_wrote() -> None:
    orders, other = record("orders"), record("other", submitted=12.0)
    current: dict[str, tuple[Assignment, int]] = {
        "orders": (assignment(orders), 1),
        "other": (assignment(other), 2),
    }
    pipelines: dict[str, PipelineRecord] = {"orders": orders, "other": other}
    taken = hot_snapshot(EPOCH, pipelines, current, {}, {}, written={"other"})
    assert set(taken.assignments) == {"orders"}
    assert taken.holders == {"s1"}


def test_a_poll_of_no_positive_seconds_is_refused() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="poll must be positive"):
        FailoverLane(
            BeatWatch(SETTINGS, Beats().read, clock=clock),
            cast(Any, Promoter()),
            dict,
            poll_secs=0,
        )


def test_a_holder_whose_registration_left_is_judged_on_and_promoted_at_its_floor(
    lane: Lane,
) -> None:
    """A dead host's session ends about a session timeout after its death; a silence that
    started again meanwhile (a blind read of the store, a new term) must not leave it to the
    round."""
    lane.lane.note(snapshot())
    lane.run(2.0, {"s1", "s2", "s3"})
    lane.run(0.5, {"s2", "s3"})  # s1 falls silent
    lane.beats.down = True  # the pacemakers answer nothing for 0.4 s: every silence restarts
    lane.run(4 * POLL, {"s2", "s3"})
    lane.beats.down = False
    lane.run(POLL, {"s2", "s3"})
    assert lane.lane.outcome is ReadOutcome.BLIND
    del lane.registered["s1"]  # its session ended before its floor passed
    done = lane.run(1.5, {"s2", "s3"})
    assert [(p.pipeline, p.from_supervisor, p.to_supervisor, p.how) for p in done] == [
        ("orders", "s1", "s2", How.FLOOR)
    ]
    _, silent, floor = lane.promoter.promoted[0]
    assert silent >= floor == LEASE.floor_secs(0.1)  # the beat lease it last advertised


def test_a_holder_never_registered_in_the_term_is_left_to_the_round(lane: Lane) -> None:
    del lane.registered["s1"]  # and its heartbeat, from an older release, says no beat lease
    lane.lane.note(snapshot())
    lane.run(3.0, {"s2", "s3"})
    assert lane.lane.suspected() == frozenset()
    assert lane.promoter.asked == []


def test_a_holder_never_registered_in_the_term_is_judged_from_its_heartbeats_beat_lease(
    lane: Lane,
) -> None:
    """A new term that began after the host died never sees its registration (its session
    ended first); its last heartbeat, in the pacemakers, still says its beat lease."""
    del lane.registered["s1"]
    hot = snapshot()
    last = SupervisorHeartbeat(id="s1", time=8.0, slots=4, beat_lease=LEASE)
    lane.lane.note(replace(hot, heartbeats={**hot.heartbeats, "s1": last}))
    lane.run(1.0, {"s1", "s2", "s3"})  # its last beats, seen first in this term
    done = lane.run(1.5, {"s2", "s3"})
    assert [(p.pipeline, p.from_supervisor, p.how) for p in done] == [("orders", "s1", How.FLOOR)]
    _, silent, floor = lane.promoter.promoted[0]
    assert silent >= floor == LEASE.floor_secs(0.1)


def test_a_stretch_with_nothing_hot_gives_the_next_holder_a_whole_floor(lane: Lane) -> None:
    lane.lane.note(snapshot())
    lane.run(2.0, {"s1", "s2", "s3"})
    lane.run(0.5, {"s2", "s3"})  # s1 falls silent
    lane.lane.note(HotSnapshot(epoch=EPOCH))  # then nothing is hot for a while: no read
    reads = lane.beats.reads
    lane.run(2.0, {"s2", "s3"})
    assert lane.beats.reads == reads
    lane.lane.note(snapshot())  # hot again, on s1
    assert lane.run(0.9, {"s2", "s3"}) == []  # its silence counts from the first read again
    assert [p.pipeline for p in lane.run(0.3, {"s2", "s3"})] == ["orders"]


def test_the_lane_logs_a_suspicion_a_blind_read_and_a_holder_left_to_the_round(
    lane: Lane, caplog: pytest.LogCaptureFixture
) -> None:
    """What an operator reads when a failover was the round's, not the lane's: each once."""
    caplog.set_level("INFO", logger="stratus.nimbus.failover.lane")
    del lane.registered["s3"]  # never seen registered: "web" is not hot, so s3 holds none
    orders = record("orders")
    other = record("other", submitted=12.0)
    lane.lane.note(
        hot_snapshot(
            EPOCH,
            {"orders": orders, "other": other},
            {"orders": (assignment(orders, "s1"), 11), "other": (assignment(other, "s3"), 3)},
            {"orders": (placement(orders, "s2"), 4)},
            {"s2": heartbeat("s2", standby_beat(placement(orders, "s2")))},
        )
    )
    lane.run(2.0, {"s1", "s2", "s3"})
    lane.run(0.8, {"s2", "s3"})  # s1 silent: suspected before its floor (1.02 s)
    lane.beats.down = True  # the pacemakers answer nothing for 0.4 s: every silence restarts
    lane.run(4 * POLL, {"s2", "s3"})
    lane.beats.down = False
    lane.run(POLL, {"s2", "s3"})
    events = [r.getMessage() for r in caplog.records if "event=failover" not in r.getMessage()]
    assert [e.split()[0] for e in events] == [
        "event=supervisor_not_judged",
        "event=supervisor_suspected",
        "event=beat_watch_blind",
    ]
    assert "supervisor=s3 reason=unregistered action=left_to_the_round" in events[0]
    assert "supervisor=s1" in events[1]
    assert "gap_secs=0.500" in events[2]
    assert lane.promoter.asked == []
