"""The fencing decisions of a scheduling round: which silent supervisors to fence, which are fenced.

With a ``SupervisorFencing``, the round fences (off its thread) each registered supervisor
that holds pipelines and was silent for ``nimbus.supervisor.fence.after.secs``, gives it no
new pipeline meanwhile, and judges it dead as soon as a fence of that silence succeeded, in
a round whose read began after it (``fence_verdicts``). One whose last heartbeat said it
was stopping is not fenced: a restart, whose workers run on, is waited out up to its lease,
since a fence would stop exactly what the restart keeps. Without one, silent supervisors are
only waited out and every method here is a no-op. Kept apart from the round: the verdicts
read the silences the ``HeartbeatJudge`` keeps, and act through the fencing alone::

    fencing = RoundFencing(supervisor_fencing, judge, supervisor_timeout_secs=30.0)
    silences = fencing.silences(registered, assignments, dead, heartbeats, judged_at)
    dead |= fencing.fenced(term, registered, silences, judged_at)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from stratus.api.records import Assignment, SupervisorSummary
from stratus.coordination.leadership import Leadership
from stratus.nimbus.duties.heartbeat_judge import HeartbeatJudge
from stratus.nimbus.scheduling.supervisor_fencing import Silence, SupervisorFencing, fence_verdicts
from stratus.state.heartbeats import HeartbeatRead

log = logging.getLogger(__name__)


class RoundFencing:
    """A round's fences of silent supervisors; see the module docstring."""

    def __init__(
        self,
        fencing: SupervisorFencing | None,
        judge: HeartbeatJudge,
        *,
        supervisor_timeout_secs: float,
    ) -> None:
        self._fencing = fencing  # None: silent supervisors are only waited out
        self._judge = judge
        self._supervisor_timeout = supervisor_timeout_secs

    def silences(
        self,
        registered: Mapping[str, SupervisorSummary],
        assignments: Mapping[str, Assignment],
        dead: set[str],
        heartbeats: HeartbeatRead,
        judged_at: float,
    ) -> dict[str, Silence]:
        """The silences of the registered supervisors that hold pipelines and are not dead
        yet, but for those an incomplete read leaves unknown and those stopping."""
        if self._fencing is None:
            return {}
        silences = {}
        for sid in {a.supervisor for a in assignments.values()} - dead:
            if sid not in registered:
                continue  # no address to fence it at: its lease is waited out
            beat = heartbeats.supervisors.get(sid)
            if beat is None and not heartbeats.complete:
                continue  # unknown, not silent
            if beat is not None and beat.stopping:
                continue  # restarting, its workers running on: its lease is waited out
            since = self._judge.supervisor_changed_at(sid)
            silences[sid] = Silence(since=since, secs=max(0.0, judged_at - since))
        return silences

    def fenced(
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

    def due(self, sid: str, judged_at: float) -> bool:
        """Whether ``sid`` is silent past the fence threshold: it gets no new pipeline."""
        if self._fencing is None:
            return False
        silent = self._judge.supervisor_silent_for(sid, at=judged_at)
        return silent > self._fencing.settings.after_secs

    def forget(self, sid: str) -> None:
        """``sid`` left for good: its fences are forgotten."""
        if self._fencing is not None:
            self._fencing.forget(sid)
