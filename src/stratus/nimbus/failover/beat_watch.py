"""The leader's watch of the fast beats: which supervisors of hot pipelines are suspected.

Guarantees: a supervisor is suspected only from reads that a majority of the pacemakers
answered, with a silence measured from a moment no earlier than its last beat's start to the
start of the read that judges it (the beats counted before a read began are all in it), and
only once that silence reached its floor and its phi the threshold
(``stratus.nimbus.failover.phi``). A stretch in which the store did not answer (reads that
failed, or that fewer than a majority answered) restarts every window once it lasted more than
``BLIND_AFTER_POLLS`` polls; a stretch in which the leader merely read late (a pause of its
own) restarts nothing (**Blindness** below). Each term starts empty::

    watch = BeatWatch(settings.detector, board.read)    # clock=time.monotonic
    watch.reset()                          # at every gain of leadership, and when the round
                                           # restarts its silences
    watch.poll()                           # every nimbus.detector.poll.ms: ReadOutcome.JUDGED
    floors = beat_floors(registered)       # {supervisor: floor}, from each one's beat lease
    watch.suspected(floors)                # {"s1": Suspicion("s1", phi=12.3, silence_secs=1.1,
                                           #  floor_secs=1.02)}
    watch.phis()                           # {"s1": 12.3, "s2": 0.4}: every one judged, for a metric
    watch.silences()                       # {"s1": 1.1, "s2": 0.05}: every one judged

**Arrivals.** A beat is ``[boot_id, seq]``; a read that shows a supervisor's beat with a
higher ``seq`` than the last one seen, or another ``boot_id`` (its beat agent started again,
from 0), is an arrival, timed when that read *returned* (the beat surely started by then).
So is the first beat seen of a supervisor in a term: it may be older than the term, but it
may also have started just before that read, and a silence must never count from before a
beat it cannot rule out. A supervisor whose beat no read of the term showed is silent since
the term began.

**Judgement.** Silences are judged at the start of the last read that a majority answered
(``BeatRead.from_majority``), and not only of warming pacemakers: a beat missing from such a
read was not counted before it began. A read answered by fewer, or that failed, notes nothing
and judges nothing; the judgement of the last good read stands, and the gap to the next good
read counts towards blindness.

**Blindness.** Only a stretch of the *store's* silence is blindness: two good reads more than
``BLIND_AFTER_POLLS`` polls apart with a read between them that failed, or that fewer than a
majority (or only warming pacemakers) answered. The pacemakers did not answer the leader, so
they may not have answered the supervisors either, whose hot workers then stop on their beat
leases and start again in place once the beats count again: restarting every window at the
first good read gives each a whole floor to be heard, rather than promoting every hot
pipeline at once. A stretch in which the leader merely read late (its thread not scheduled on
a loaded machine, a pause of its process) is not: a majority read proves that no beat newer
than the last one seen was counted before it began, however long ago the read before it was,
so the silence counted from the last arrival is one the supervisor really kept, and a live
supervisor's newer beat in that read is an arrival at its return, after the judging read's
start. Restarting there would only delay the verdict on a dead host, by a whole floor each
time (every second or two on a loaded machine).

**Who is judged.** Exactly the supervisors the caller passes floors for: those that hold the
active worker of a hot pipeline and advertise a beat lease (``beat_floors``). One that was not
judged before is watched from the term's start (or the last blindness) at the first
judgement, and from the judging read's start later, or from its last arrival if later: a
supervisor that begins to hold a hot worker mid-term gets a whole floor to be heard. One
left out of the floors is forgotten, with what its window learnt.

No thread and no clock of its own beyond the injected ones: the failover lane's thread owns
it (not thread-safe) and calls ``poll`` every ``nimbus.detector.poll.ms``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from stratus.api.clock import Clock
from stratus.api.standby_workers import BeatLease
from stratus.nimbus.failover.phi import PhiWindow, blind, phis, restart, suspicions
from stratus.nimbus.settings import DetectorSettings
from stratus.pacemaker.errors import PacemakerRequestError
from stratus.state.beats import BeatRead
from stratus.state.errors import StateStoreUnavailableError

FLOOR_MARGIN_SECS = 0.1  # added to a supervisor's beat lease, stop and poll: its floor


class ReadOutcome(StrEnum):
    """What one read of the beats did to the watch."""

    JUDGED = "judged"  # a majority answered: arrivals noted, silences judged at its start
    BLIND = "blind"  # judged, after reads that judged nothing for too long: windows restarted
    MINORITY = "minority"  # fewer than a majority of the pacemakers answered: nothing judged
    WARMING = "warming"  # only warming pacemakers answered: a missing beat is unknown
    FAILED = "failed"  # no answer at all (``BeatWatch.error`` says why)


@dataclass(frozen=True)
class Suspicion:
    """A supervisor suspected at the judging read: its phi, its silence and its floor."""

    supervisor: str
    phi: float
    silence_secs: float
    floor_secs: float


class AdvertisesBeatLease(Protocol):
    """A supervisor's registration or heartbeat: both say the beat lease it runs with."""

    @property
    def beat_lease(self) -> BeatLease | None: ...


def beat_floors(
    supervisors: Mapping[str, AdvertisesBeatLease], *, margin_secs: float = FLOOR_MARGIN_SECS
) -> dict[str, float]:
    """Each supervisor's floor, from the beat lease its registration or its heartbeat
    advertises (``BeatLease.floor_secs``); one without a beat lease (the ZooKeeper state
    store, an older release) is left out: the watch never judges it."""
    return {
        supervisor: summary.beat_lease.floor_secs(margin_secs)
        for supervisor, summary in supervisors.items()
        if summary.beat_lease is not None
    }


class BeatWatch:
    """The phi windows of the supervisors judged, fed by reads of the beats.

    ``read`` is ``BeatBoard.read``; ``clock`` the leader's monotonic clock; ``seed_secs`` the
    interval a window expects before it has learnt one (default: one detector poll, since
    the leader sees a supervisor's beats no more often than it reads them).
    """

    def __init__(
        self,
        settings: DetectorSettings,
        read: Callable[[], BeatRead],
        *,
        clock: Clock = time.monotonic,
        seed_secs: float | None = None,
    ) -> None:
        self.settings = settings
        self._read = read
        self._clock = clock
        self._seed = settings.poll_secs if seed_secs is None else seed_secs
        self._windows: dict[str, PhiWindow] = {}  # the supervisors judged
        self._seen: dict[str, tuple[str, int]] = {}  # newest (boot_id, seq) of each, this term
        self._heard: dict[str, float] = {}  # when each one's newest beat arrived, this term
        self._good_at = 0.0  # the start of the last good read (or the reset)
        self._judged_at: float | None = None  # the start of the read judged from, this term
        self._watch_from: float | None = None  # where a new window's silence starts; None: now
        self._missed = False  # a read since the last good one judged nothing (the store's)
        self.error: str | None = None  # why the last read failed
        self.reset()

    @property
    def judged_at(self) -> float | None:
        """The start of the read the suspicions are judged at; None before the first good
        read of the term."""
        return self._judged_at

    def phis(self) -> dict[str, float]:
        """The phi of every supervisor judged at the last ``suspected``, at the judging read
        (suspected or not); empty before the first judged read of the term."""
        if self._judged_at is None:
            return {}
        return phis(self._windows, self._judged_at)

    def silences(self) -> dict[str, float]:
        """The silence of every supervisor judged at the last ``suspected``, at the judging
        read (suspected or not); empty before the first judged read of the term."""
        if self._judged_at is None:
            return {}
        return {sid: window.silence(self._judged_at) for sid, window in self._windows.items()}

    def reset(self) -> None:
        """Forget everything and start every silence now: at every gain of leadership (a new
        term judges nothing from what an earlier one saw) and whenever the round restarts its
        silences."""
        now = self._clock()
        self._windows.clear()
        self._seen.clear()
        self._heard.clear()
        self._good_at = now
        self._judged_at = None
        self._watch_from = now
        self._missed = False
        self.error = None

    def poll(self) -> ReadOutcome:
        """Read the beats once and note what the read says (``observe``); a read that cannot
        be made (``StateStoreUnavailableError``, or a refusal by the pacemakers) is
        ``ReadOutcome.FAILED``, with its reason in ``error``."""
        began = self._clock()
        try:
            read = self._read()
        except (StateStoreUnavailableError, PacemakerRequestError) as exc:
            self.error = str(exc)
            self._missed = True
            return ReadOutcome.FAILED
        self.error = None
        return self.observe(read, began=began, ended=self._clock())

    def observe(self, read: BeatRead, *, began: float, ended: float) -> ReadOutcome:
        """Note one read of the beats, begun at ``began`` and returned at ``ended`` on the
        watch's clock; ``ValueError`` if those go back in time."""
        if began < self._good_at or ended < began:
            raise ValueError(
                f"a read of the beats from {began!r} to {ended!r} goes back in time (the last "
                f"good read began at {self._good_at!r}): pass one monotonic clock's times, in order"
            )
        if not read.from_majority:
            self._missed = True
            return ReadOutcome.MINORITY
        if read.warming:
            self._missed = True
            return ReadOutcome.WARMING
        outcome = ReadOutcome.JUDGED
        if self._missed and blind(self._good_at, began, self.settings.poll_secs):
            restart(self._windows, began)
            self._watch_from = began
            outcome = ReadOutcome.BLIND
        self._good_at = self._judged_at = began
        self._missed = False
        for supervisor, beat in read.beats.items():
            mark = (beat.boot_id, beat.seq)
            last = self._seen.get(supervisor)
            if last is not None and mark[0] == last[0] and mark[1] <= last[1]:
                continue  # no newer beat (an older one: a pacemaker that lags)
            self._seen[supervisor] = mark  # the first this term too: it may be recent
            self._heard[supervisor] = ended
            window = self._windows.get(supervisor)
            if window is not None:
                window.heard(ended)
        return outcome

    def suspected(self, floors: Mapping[str, float]) -> dict[str, Suspicion]:
        """The supervisors of ``floors`` suspected at the last judging read (phi at least the
        threshold and silence at least the floor), by id; empty before any read of the term
        was judged. ``floors`` names exactly who is judged (module docstring); ``ValueError``
        for a floor that is not a positive number."""
        for supervisor, floor in floors.items():
            if isinstance(floor, bool) or not (math.isfinite(floor) and floor > 0):
                raise ValueError(
                    f"the floor of supervisor {supervisor} must be a positive number of "
                    f"seconds, not {floor!r}: compute it from its beat lease (beat_floors)"
                )
        for supervisor in self._windows.keys() - floors.keys():
            del self._windows[supervisor]
        now = self._judged_at
        if now is None:
            return {}
        start = now if self._watch_from is None else self._watch_from
        for supervisor in floors.keys() - self._windows.keys():
            window = PhiWindow(self.settings, seed_secs=self._seed, since=start)
            heard = self._heard.get(supervisor)
            if heard is not None and heard >= start:
                window.heard(heard)
            self._windows[supervisor] = window
        self._watch_from = None
        judged = suspicions(self._windows, now, floors)
        return {
            supervisor: Suspicion(
                supervisor,
                phi=self._windows[supervisor].phi(now),
                silence_secs=self._windows[supervisor].silence(now),
                floor_secs=floors[supervisor],
            )
            for supervisor in sorted(judged)
        }
