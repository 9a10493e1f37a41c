"""The leader's watch of the fast beats (``BeatWatch``), fed by scripted reads on an injected
clock: pure logic, no pacemaker.

Each supervisor beats every 100 ms and the watch reads every 100 ms (``nimbus.detector.poll.ms``);
every floor is the default one (beat lease 0.8 + stop 0.1 + worker poll 0.02 + margin 0.1).
"""

from __future__ import annotations

import pytest

from stratus.api.records import SupervisorSummary
from stratus.api.standby_workers import BeatLease
from stratus.nimbus.failover.beat_watch import BeatWatch, ReadOutcome, beat_floors
from stratus.nimbus.settings import DetectorSettings
from stratus.state.beats import Beat, BeatRead
from stratus.state.errors import StateStoreUnavailableError
from tests.harness.supervisor_fakes import FakeClock

SETTINGS = DetectorSettings(
    threshold=8.0, window=200, pause_secs=0.3, min_std_secs=0.05, poll_secs=0.1
)
POLL = SETTINGS.poll_secs
LEASE = BeatLease(lease_secs=0.8, stop_secs=0.1, poll_secs=0.02)
FLOOR = 1.02
READ_SECS = 0.005  # how long each scripted read takes


class Board:
    """The pacemakers as the watch reads them: each supervisor's newest beat, how many
    answered of three, or an outage."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.beats: dict[str, Beat] = {}
        self.answered = 3
        self.warming = False
        self.down = False

    def beat(self, supervisor: str, boot_id: str = "boot-1") -> None:
        last = self.beats.get(supervisor)
        seq = last.seq + 1 if last is not None and last.boot_id == boot_id else 0
        self.beats[supervisor] = Beat(boot_id, seq, LEASE.lease_secs)

    def read(self) -> BeatRead:
        self.clock.advance(READ_SECS)
        if self.down:
            raise StateStoreUnavailableError("pacemaker", "/beats", "no pacemaker answered")
        return BeatRead(dict(self.beats), self.answered, 3, self.warming)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def board(clock: FakeClock) -> Board:
    return Board(clock)


@pytest.fixture
def watch(clock: FakeClock, board: Board) -> BeatWatch:
    return BeatWatch(SETTINGS, board.read, clock=clock)


def run(
    clock: FakeClock, board: Board, watch: BeatWatch, secs: float, beating: set[str]
) -> list[ReadOutcome]:
    """``secs`` of polls, every supervisor of ``beating`` beating once between two reads."""
    outcomes = []
    end = clock() + secs
    while clock() < end - 1e-9:
        clock.now += POLL - READ_SECS
        for supervisor in beating:
            board.beat(supervisor)
        outcomes.append(watch.poll())
    return outcomes


def test_a_calm_supervisor_is_suspected_only_after_its_floor(
    clock: FakeClock, board: Board, watch: BeatWatch
) -> None:
    floors = {"s1": FLOOR, "s2": FLOOR}
    assert set(run(clock, board, watch, 5.0, {"s1", "s2"})) == {ReadOutcome.JUDGED}
    assert watch.suspected(floors) == {}

    # s1's host dies; s2 beats on
    outcomes = run(clock, board, watch, 0.9, {"s2"})
    assert set(outcomes) == {ReadOutcome.JUDGED}
    assert watch.suspected(floors) == {}  # phi passed 8 at 0.66 s: the floor holds it back

    run(clock, board, watch, 0.3, {"s2"})
    suspicions = watch.suspected(floors)
    assert list(suspicions) == ["s1"]
    assert suspicions["s1"].silence_secs >= FLOOR
    assert suspicions["s1"].phi >= SETTINGS.threshold
    assert suspicions["s1"].floor_secs == FLOOR


def test_the_silences_of_every_supervisor_judged_suspected_or_not(
    clock: FakeClock, board: Board, watch: BeatWatch
) -> None:
    floors = {"s1": FLOOR, "s2": FLOOR}
    assert watch.silences() == {}  # nothing judged yet
    run(clock, board, watch, 2.0, {"s1", "s2"})
    run(clock, board, watch, 0.5, {"s2"})  # s1 silent, short of its floor: no suspect
    assert watch.suspected(floors) == {}
    silences = watch.silences()
    assert set(silences) == {"s1", "s2"}
    assert 0.4 < silences["s1"] <= 0.5
    assert silences["s2"] < POLL


def test_a_minority_read_judges_nothing(clock: FakeClock, board: Board, watch: BeatWatch) -> None:
    floors = {"s1": FLOOR}
    run(clock, board, watch, 3.0, {"s1"})
    judged_at = watch.judged_at

    # s1 stops beating and two of the three pacemakers stop answering: the one that does
    # still holds s1's last beat, but a read of one says nothing of a missing beat
    board.answered = 1
    assert set(run(clock, board, watch, 0.25, set())) == {ReadOutcome.MINORITY}
    board.answered = 3
    board.warming = True
    assert watch.poll() is ReadOutcome.WARMING
    board.warming = False
    board.down = True
    assert watch.poll() is ReadOutcome.FAILED
    assert watch.error is not None and "no pacemaker answered" in watch.error
    assert watch.judged_at == judged_at  # none of them judged
    assert watch.suspected(floors) == {}

    # s1 stays silent well past its floor, but only reads of fewer than a majority came in
    # meanwhile: the first majority read after them comes after a gap, blind
    board.down = False
    board.answered = 1
    run(clock, board, watch, 2.0, set())
    assert watch.judged_at == judged_at
    assert watch.suspected(floors) == {}
    board.answered = 2
    assert watch.poll() is ReadOutcome.BLIND
    assert watch.suspected(floors) == {}


def test_a_leader_pause_keeps_every_silence_and_judges_at_the_first_read_after_it(
    clock: FakeClock, board: Board, watch: BeatWatch
) -> None:
    floors = {"s1": FLOOR, "s2": FLOOR}
    run(clock, board, watch, 3.0, {"s1", "s2"})
    clock.advance(0.3)  # s1's host dies; s2 beats on
    board.beat("s2")
    clock.advance(0.5)  # then the leader does not read for 0.8 s: a loaded machine, a GC
    board.beat("s2")
    assert watch.poll() is ReadOutcome.JUDGED  # late, but the store answered every read
    assert watch.suspected(floors) == {}  # 0.8 s of silence: short of the floor

    clock.advance(3.5 * POLL)  # late again
    board.beat("s2")
    assert watch.poll() is ReadOutcome.JUDGED
    suspicions = watch.suspected(floors)
    assert list(suspicions) == ["s1"]  # silent since its last beat heard, pauses included
    assert suspicions["s1"].silence_secs >= FLOOR  # s2's newer beat is an arrival: spared


def test_a_live_supervisor_after_a_long_leader_pause_is_an_arrival_not_a_suspect(
    clock: FakeClock, board: Board, watch: BeatWatch
) -> None:
    floors = {"s1": FLOOR}
    run(clock, board, watch, 3.0, {"s1"})
    clock.advance(5.0)  # the leader paused; s1 beat on, unseen
    board.beat("s1")
    assert watch.poll() is ReadOutcome.JUDGED
    assert watch.suspected(floors) == {}
    run(clock, board, watch, 0.9, set())  # then it falls silent
    assert watch.suspected(floors) == {}  # counted from the arrival after the pause
    run(clock, board, watch, 0.2, set())
    assert list(watch.suspected(floors)) == ["s1"]


def test_a_store_outage_of_more_than_three_polls_restarts_every_window(
    clock: FakeClock, board: Board, watch: BeatWatch
) -> None:
    floors = {"s1": FLOOR, "s2": FLOOR}
    run(clock, board, watch, 3.0, {"s1", "s2"})
    board.down = True  # no pacemaker answers the leader, nor, maybe, the supervisors
    assert set(run(clock, board, watch, 5.0, set())) == {ReadOutcome.FAILED}
    board.down = False
    assert watch.poll() is ReadOutcome.BLIND
    assert watch.suspected(floors) == {}  # silences start again at that read
    run(clock, board, watch, 0.9, set())
    assert watch.suspected(floors) == {}  # not one floor of silence seen yet
    run(clock, board, watch, 0.2, set())
    assert set(watch.suspected(floors)) == {"s1", "s2"}


def test_one_failed_read_within_three_polls_is_no_blindness(
    clock: FakeClock, board: Board, watch: BeatWatch
) -> None:
    floors = {"s1": FLOOR}
    run(clock, board, watch, 2.0, {"s1"})
    run(clock, board, watch, 0.9, set())
    board.down = True
    assert watch.poll() is ReadOutcome.FAILED
    board.down = False
    clock.advance(2 * POLL)  # the good reads 0.21 s apart: within three polls
    assert watch.poll() is ReadOutcome.JUDGED
    assert list(watch.suspected(floors)) == ["s1"]  # the silence ran on across the failure


def test_a_slow_read_within_three_polls_is_no_blindness(
    clock: FakeClock, board: Board, watch: BeatWatch
) -> None:
    run(clock, board, watch, 1.0, {"s1"})
    clock.advance(2 * POLL)
    assert watch.poll() is ReadOutcome.JUDGED


def test_a_new_boot_id_is_an_arrival(clock: FakeClock, board: Board, watch: BeatWatch) -> None:
    floors = {"s1": FLOOR}
    run(clock, board, watch, 2.0, {"s1"})
    run(clock, board, watch, 0.9, set())  # its beat agent died

    # started again: it counts from 0 under another boot id, below the seq last seen
    clock.now += POLL - READ_SECS
    board.beat("s1", boot_id="boot-2")
    assert board.beats["s1"].seq == 0
    watch.poll()
    run(clock, board, watch, 0.9, set())
    assert watch.suspected(floors) == {}  # heard 0.9 s ago, not 1.8 s
    run(clock, board, watch, 0.2, set())
    assert set(watch.suspected(floors)) == {"s1"}


def test_an_older_beat_is_no_arrival(clock: FakeClock, board: Board, watch: BeatWatch) -> None:
    floors = {"s1": FLOOR}
    run(clock, board, watch, 2.0, {"s1"})
    newest = board.beats["s1"]
    run(clock, board, watch, 0.6, set())
    # a majority that answers with a lagging pacemaker's older beat of the same boot
    board.beats["s1"] = Beat(newest.boot_id, newest.seq - 3, newest.lease_secs)
    run(clock, board, watch, 0.5, set())
    assert set(watch.suspected(floors)) == {"s1"}


def test_a_new_term_starts_empty(clock: FakeClock, board: Board, watch: BeatWatch) -> None:
    floors = {"s1": FLOOR, "s2": FLOOR, "s3": FLOOR}
    run(clock, board, watch, 2.0, {"s1", "s2"})
    run(clock, board, watch, 0.9, {"s2"})  # s1 died 0.9 s ago; s3 never beat

    watch.reset()  # this nimbus leads again
    began = clock()
    assert watch.suspected(floors) == {}  # no read in this term yet
    run(clock, board, watch, 0.5, {"s2"})
    # 1.4 s of silence since s1's last beat, but its silence in this term is 0.5 s at most
    assert watch.suspected(floors) == {}
    run(clock, board, watch, 0.6, {"s2"})
    assert list(watch.suspected(floors)) == ["s3"]
    run(clock, board, watch, 0.1, {"s2"})
    suspicions = watch.suspected(floors)
    assert list(suspicions) == ["s1", "s3"]
    assert watch.judged_at is not None
    # s3's beat was in no read: silent since the term began
    assert suspicions["s3"].silence_secs == pytest.approx(watch.judged_at - began)
    # s1's last beat was first seen in this term by its first read: when it started is
    # unknown (just before that read, maybe), so s1 is silent from that read's return
    assert suspicions["s1"].silence_secs == pytest.approx(watch.judged_at - (began + POLL))


def test_a_new_term_forgets_the_rhythm_the_last_one_learnt(
    clock: FakeClock, board: Board, watch: BeatWatch
) -> None:
    floors = {"loaded": FLOOR}
    run(clock, board, watch, 0.1, set())
    assert watch.suspected(floors) == {}  # judged from now on
    for _ in range(60):  # beats 100 and 500 ms apart, in turn: a loaded host
        run(clock, board, watch, 0.2, {"loaded"})
        run(clock, board, watch, 0.4, set())
    run(clock, board, watch, 0.1, {"loaded"})
    run(clock, board, watch, 1.2, set())
    assert watch.suspected(floors) == {}  # its jitter bought it time: phi is below 8

    watch.reset()  # this nimbus leads again; the loaded host's beats have stopped
    run(clock, board, watch, 1.2, set())
    assert list(watch.suspected(floors)) == ["loaded"]  # judged from the seed, at the floor


def test_a_supervisor_newly_judged_gets_a_whole_floor(
    clock: FakeClock, board: Board, watch: BeatWatch
) -> None:
    run(clock, board, watch, 2.0, set())
    assert watch.suspected({}) == {}  # s1 holds no hot worker: not judged
    # s1 now holds a hot worker; its beat agent has not beaten yet
    run(clock, board, watch, 0.1, set())
    assert watch.suspected({"s1": FLOOR}) == {}
    run(clock, board, watch, 0.9, set())
    assert watch.suspected({"s1": FLOOR}) == {}
    run(clock, board, watch, 0.2, set())
    assert set(watch.suspected({"s1": FLOOR})) == {"s1"}


def test_a_supervisor_judged_again_later_gets_a_whole_floor(
    clock: FakeClock, board: Board, watch: BeatWatch
) -> None:
    run(clock, board, watch, 2.0, {"s1"})
    assert watch.suspected({"s1": FLOOR}) == {}
    # its hot pipeline moved away: its beat agent stops, and it is judged no more
    run(clock, board, watch, 5.0, set())
    assert watch.suspected({}) == {}
    # a hot pipeline is assigned to it again, before its beat agent's first beat
    run(clock, board, watch, 0.1, set())
    assert watch.suspected({"s1": FLOOR}) == {}
    run(clock, board, watch, 0.9, set())
    assert watch.suspected({"s1": FLOOR}) == {}
    run(clock, board, watch, 0.2, set())
    assert set(watch.suspected({"s1": FLOOR})) == {"s1"}


def test_a_supervisor_without_a_beat_lease_is_never_judged(
    clock: FakeClock, board: Board, watch: BeatWatch
) -> None:
    summaries = {
        "hot": SupervisorSummary(id="hot", beat_lease=LEASE),
        "old": SupervisorSummary(id="old"),  # an older release, or the ZooKeeper store
    }
    floors = beat_floors(summaries)
    assert floors == {"hot": pytest.approx(FLOOR)}
    run(clock, board, watch, 1.0, {"hot", "old"})
    run(clock, board, watch, 3.0, set())
    assert set(watch.suspected(floors)) == {"hot"}


def test_a_floor_that_is_no_positive_number_is_refused(watch: BeatWatch) -> None:
    with pytest.raises(ValueError, match="floor of supervisor s1"):
        watch.suspected({"s1": 0.0})


def test_reads_that_go_back_in_time_are_refused(clock: FakeClock, watch: BeatWatch) -> None:
    read = BeatRead({}, 3, 3)
    watch.observe(read, began=clock(), ended=clock() + 0.01)
    with pytest.raises(ValueError, match="goes back in time"):
        watch.observe(read, began=clock() - 1.0, ended=clock())
