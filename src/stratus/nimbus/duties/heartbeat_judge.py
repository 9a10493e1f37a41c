"""The scheduling round's heartbeats: read, what changed noted, silences judged, the unknown spared.

The leader compares what it saw change (``Liveness``), never wall clocks across machines: a
supervisor is dead when none of its heartbeats changed for the supervisor timeout, a worker
silent when its heartbeat did not for the task timeout. Heartbeats the leader cannot see are
unknown, never dead: a store that cannot be read judges nothing (and restarts every silence
once it can be read again), an incomplete read spares what is missing from it, a partial one
spares the supervisors still registered. Kept apart from the round because it owns the
memory of the silences, which starts afresh with every term::

    judge = HeartbeatJudge(board, settings, clock=time.monotonic)
    judge.begin_round(term)
    read = judge.read(term)            # None: the store could not be read
    dead = judge.dead(registered, read.supervisors, assignments, judged_at)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from stratus.api.clock import Clock
from stratus.api.records import Assignment, PipelineRecord, SupervisorHeartbeat, SupervisorSummary
from stratus.coordination.leadership import Leadership
from stratus.nimbus.duties.worker_outcomes import Workers, current_beat
from stratus.nimbus.scheduling.liveness import Liveness
from stratus.nimbus.scheduling.pipeline_metrics import ObservedRound
from stratus.nimbus.settings import SchedulingSettings
from stratus.state.errors import StateStoreUnavailableError
from stratus.state.heartbeats import HeartbeatBoard, HeartbeatRead

log = logging.getLogger(__name__)

# What a round whose heartbeats were unknown is counted as, and the reason it logs.
_UNKNOWN_REASONS = {"warming": "pacemakers_warming", "unreachable": "pacemaker_unreachable"}


class HeartbeatJudge:
    """The silences of one leader's scheduling rounds; see the module docstring.

    ``on_unknown`` counts a round whose heartbeats were unknown ("unavailable", "warming",
    "unreachable"). The failover lane keeps silences of its own and does not restart them
    with these (``stratus.nimbus.failover.lane``)."""

    def __init__(
        self,
        board: HeartbeatBoard,
        settings: SchedulingSettings,
        *,
        clock: Clock = time.monotonic,
        on_unknown: Callable[[str], None] = lambda _reason: None,
    ) -> None:
        self._board = board
        self._supervisor_timeout = settings.supervisor_timeout_secs
        self._task_timeout = settings.task_timeout_secs
        self._clock = clock
        self._liveness = Liveness(clock=clock)
        self._epoch: int | None = None  # the term the liveness memory belongs to
        self._on_unknown = on_unknown
        self._blind = False  # the last read of the heartbeats failed
        self._unregistered_since: dict[str, float] = {}  # this term's first round without it

    def begin_round(self, term: Leadership) -> None:
        """A new term judges nothing dead before its own timeout."""
        if term.epoch != self._epoch:
            self._liveness.reset()
            self._unregistered_since.clear()
            self._epoch = term.epoch

    def restart_silences(self) -> None:
        """Every silence of the round starts again now."""
        self._liveness.reset()

    # ------------------------------------------------------------------ reading

    def read(self, term: Leadership) -> HeartbeatRead | None:
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
            self.restart_silences()  # the stretch without heartbeats was blindness
            log.warning(
                "event=heartbeats_known_again epoch=%d action=every_silence_restarts", term.epoch
            )
        return read

    def observe(
        self,
        assignments: Mapping[str, Assignment],
        workers: Workers,
        supervisors: Mapping[str, SupervisorHeartbeat],
    ) -> None:
        """Note every heartbeat of the read, and each assignment's worker's."""
        for sid, supervisor in supervisors.items():
            self._liveness.observe(_supervisor_key(sid), supervisor.time)
        for name, assignment in assignments.items():
            beat = current_beat(assignment, workers)
            token = (assignment.supervisor, assignment.assigned, beat.time if beat else None)
            self._liveness.observe(_worker_key(name), token)

    def observed(
        self,
        term: Leadership,
        pipelines: Mapping[str, PipelineRecord],
        assignments: Mapping[str, Assignment],
        workers: Workers,
    ) -> ObservedRound:
        """What the round saw, for the per-pipeline metrics."""
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

    # ------------------------------------------------------------------ judging

    def dead(
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

    def timed_out(
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

    def supervisor_silent_for(self, sid: str, at: float | None = None) -> float:
        """How long ``sid``'s heartbeats have not changed (until ``at``, or now)."""
        return self._liveness.silent_for(_supervisor_key(sid), at=at)

    def supervisor_changed_at(self, sid: str) -> float:
        """When ``sid``'s heartbeats last changed."""
        return self._liveness.changed_at(_supervisor_key(sid))

    # ------------------------------------------------------------------ unknown heartbeats

    def note_registrations(
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

    def unknown_spared(
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

    def unseen_spared(
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

    # ------------------------------------------------------------------ forgetting

    def forget_worker(self, pipeline: str) -> None:
        """``pipeline`` is no longer assigned: its worker's silence is forgotten."""
        self._liveness.forget(_worker_key(pipeline))

    def forget_supervisor(self, sid: str) -> None:
        """``sid`` left for good: its silence is forgotten."""
        self._liveness.forget(_supervisor_key(sid))


def _supervisor_key(supervisor: str) -> str:
    return f"supervisor/{supervisor}"


def _worker_key(pipeline: str) -> str:
    return f"worker/{pipeline}"
