"""(f) Promotions explained: never a standby worker promoted without a failure of the
supervisor it took the pipeline from (``docs/reliability.md``)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from stratus.chaos.trail_events import Clocks, Event, Instant, Violation, began_at
from stratus.trail import (
    BATCH_COMMITTED,
    HOST_CUT,
    HOST_STRESSED,
    PROCESS_KILLED,
    PROCESS_PAUSED,
    WORKER_PROMOTED,
    WORKER_STARTED,
    WORKER_STOPPED,
)

PLANNED_STOP = "stopped"  # a promotion's ``how`` when its supervisor was stopped on purpose
FAULT_EVENTS = (PROCESS_KILLED, PROCESS_PAUSED, HOST_CUT, HOST_STRESSED)
# the victims whose supervisor goes silent: its process, its host, or its beat agent (the
# process that sends the beats the failure detector judges)
SILENCING_TARGETS = frozenset({"supervisor", "host", "beat_agent"})
# The longest the leader may hear a supervisor's last beat after it was sent (a beat's interval,
# a pacemaker's answer, a read's poll, with room to spare): a fault that ended this much before
# the silence began may still be its cause.
HEARING_LAG_SECS = 1.0


@dataclass(frozen=True)
class Outage:
    """A fault of the trail that concerns a supervisor (``line``): it began at ``began``, ended
    by its line, and kept the supervisor silent for ``secs`` (a kill: until its process is
    started again, unbounded here; a fault that does not silence it, such as a stress or a
    pause of its worker: zero)."""

    supervisor: str
    began: Instant
    line: Event
    secs: float


def outages(events: Iterable[Event]) -> list[Outage]:
    """The faults the trail records, with the supervisor each concerns: a kill or a pause of
    its process, its beat agent or its host, a cut of its host (each silences it:
    ``Outage.secs``), and what leaves it beating (a stress of its host, a fault of another
    process of its host)."""
    return [
        Outage(str(event.get("supervisor")), began_at(event), event, _silenced_secs(event))
        for event in events
        if event.name in FAULT_EVENTS and event.get("supervisor")
    ]


def _silenced_secs(fault: Event) -> float:
    """How long the fault of line ``fault`` kept its supervisor silent."""
    if fault.name == HOST_CUT:
        return float(fault.get("secs", 0.0))
    if fault.name == HOST_STRESSED or fault.get("target") not in SILENCING_TARGETS:
        return 0.0
    if fault.name == PROCESS_KILLED:
        return math.inf
    return float(fault.get("secs", 0.0))


def check_promotions_explained(
    events: Iterable[Event], clocks: Clocks, lag_secs: float = HEARING_LAG_SECS
) -> list[Violation]:
    """(f) Never a promotion without a failure: every ``worker_promoted`` that took a pipeline
    off a supervisor follows a kill, a cut or a pause of that supervisor (its process, its beat
    agent or its host) that kept it silent for the promotion's ``floor_secs`` at least, or was
    a planned stop (``how: stopped``: a drain, an update). The fault began before it and
    was still going when the supervisor fell silent (``silent_secs`` before the promotion,
    ``lag_secs`` earlier still: see ``HEARING_LAG_SECS``), as far as the clocks tell. A
    promotion also has its failure when the pipeline's worker on that supervisor had stopped
    before the supervisor fell silent, and had not started again by the promotion: its
    supervisor fenced it (its own lease lapsed, say, when ZooKeeper lost its leader with
    another host), the pipeline was down there before the detector judged anything, and no
    fence the detector asked can have stopped it; and when that worker, stopped since its
    last batch there, had started there again, cold, and the leader fenced that start to
    promote the standby worker instead (``cold_starts``), or, where the leader's line says
    when it asked that fence, when that worker had stopped before it (whether or not its
    start in place wrote its line). Any other promotion is a false suspicion: the failure
    detector acted on a silence that no failure made (a loaded host, a pause shorter than
    the floor). Its violation holds the promotion and the faults of that
    supervisor near it. A run without promotions passes."""
    events = list(events)
    by_supervisor: dict[str, list[Outage]] = defaultdict(list)
    for outage in outages(events):
        by_supervisor[outage.supervisor].append(outage)
    violations = []
    for promotion in events:
        if promotion.name != WORKER_PROMOTED or promotion.get("how") == PLANNED_STOP:
            continue
        old = str(promotion.get("from_supervisor", ""))
        floor = float(promotion.get("floor_secs", 0.0))
        silent = float(promotion.get("silent_secs", 0.0))
        fell_silent = _earlier(promotion.at, silent + lag_secs)
        near = [
            outage
            for outage in by_supervisor.get(old, [])
            if not clocks.before(promotion.at, outage.began)
            and not clocks.before(outage.line.at, fell_silent)
        ]
        if any(outage.secs >= floor for outage in near):
            continue
        if _stopped_before(events, clocks, promotion, old, fell_silent):
            continue
        if _started_cold(events, clocks, promotion) or _stopped_before_its_fence(
            events, clocks, promotion
        ):
            continue
        violations.append(
            Violation(
                "promotions_explained",
                f"pipeline {promotion.get('pipeline')!r} was promoted from supervisor {old!r} "
                f"to {promotion.get('to_supervisor')!r} at {_utc(promotion.at.wall)} (how: "
                f"{promotion.get('how')}, silent {silent:.3f} s) with no kill, cut or pause "
                f"of {old!r} lasting its floor of {floor:g} s: an unexplained promotion",
                (promotion, *(outage.line for outage in near)),
            )
        )
    return violations


def _stopped_before(
    events: list[Event], clocks: Clocks, promotion: Event, supervisor: str, fell_silent: Instant
) -> bool:
    """Whether the promoted pipeline's worker on ``supervisor`` stopped before
    ``fell_silent`` and none started there again before ``promotion``."""
    pipeline = promotion.get("pipeline")
    last: Event | None = None  # its newest start or stop there before the promotion
    for event in events:
        if (
            event.name in (WORKER_STARTED, WORKER_STOPPED)
            and event.get("pipeline") == pipeline
            and event.get("supervisor") == supervisor
            and clocks.before(event.at, promotion.at)
            and (last is None or clocks.before(last.at, event.at))
        ):
            last = event
    return last is not None and last.name == WORKER_STOPPED and clocks.before(last.at, fell_silent)


def _started_cold(events: list[Event], clocks: Clocks, promotion: Event) -> bool:
    """Whether the promoted pipeline's worker on its old supervisor had stopped since its
    last batch committed there, started there again, and stopped again before the
    promotion, committing nothing: the leader fenced a start in place, cold, and promoted
    the standby worker (``cold_starts``). The pipeline was down there since the first stop,
    which no fence of this promotion made (a pipeline fence holds the pipeline: nothing
    starts after it). A kill of that worker since its last batch there (the injector's
    ``process_killed``: a killed worker writes no line) is such a first stop, whether or not
    its start in place got as far as its own ``worker_started`` before the fence."""
    since_batch: list[str] = []  # its starts and stops there since its last batch there
    for event in _worker_lines_before(events, clocks, promotion):
        if event.name == BATCH_COMMITTED:
            since_batch.clear()
        else:
            since_batch.append(event.name)
    if PROCESS_KILLED in since_batch:
        return True  # down there since its kill
    if not since_batch or since_batch[-1] != WORKER_STOPPED:
        return False  # never stopped there since, or started again and running
    return WORKER_STARTED in since_batch[since_batch.index(WORKER_STOPPED) :]


def _stopped_before_its_fence(events: list[Event], clocks: Clocks, promotion: Event) -> bool:
    """Whether the promotion followed the leader's fence of a cold start (its line's
    ``fence_asked_wall`` and ``fence_asked_mono``: the leader fences a start in place only
    once the supervisor reports the worker starting) and the pipeline's worker on its old
    supervisor had stopped there (or was killed) since its last batch there, before that
    fence was asked: the pipeline was down there before the leader acted, whether or not
    the start in place got as far as its own ``worker_started``."""
    wall, mono = promotion.get("fence_asked_wall"), promotion.get("fence_asked_mono")
    if wall is None or mono is None:
        return False
    asked = Instant(promotion.at.host, float(wall), float(mono))
    down = False  # stopped since its last batch there, before the fence was asked
    for event in _worker_lines_before(events, clocks, promotion):
        if event.name == BATCH_COMMITTED:
            down = False
        elif event.name != WORKER_STARTED and clocks.before(event.at, asked):
            down = True
    return down


def _worker_lines_before(events: list[Event], clocks: Clocks, promotion: Event) -> list[Event]:
    """The starts, stops, batches and kills of the promoted pipeline's worker on its old
    supervisor before ``promotion``, in order."""
    pipeline, supervisor = promotion.get("pipeline"), promotion.get("from_supervisor")
    return sorted(
        (
            event
            for event in events
            if (
                event.name in (WORKER_STARTED, WORKER_STOPPED, BATCH_COMMITTED)
                or (event.name == PROCESS_KILLED and event.get("target") == "worker")
            )
            and event.get("pipeline") == pipeline
            and event.get("supervisor") == supervisor
            and clocks.before(event.at, promotion.at)
        ),
        key=lambda event: event.at.mono,  # one machine's clock: the chaos suite's hosts
    )


def _earlier(moment: Instant, secs: float) -> Instant:
    """``moment`` less ``secs`` on both of its host's clocks."""
    return Instant(moment.host, moment.wall - secs, moment.mono - secs)


def _utc(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds")
