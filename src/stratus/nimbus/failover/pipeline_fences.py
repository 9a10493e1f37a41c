"""The pipeline fences the failover lane asks in one term, and the pipelines they hold.

Guarantees: a suspected supervisor is asked at most once per suspicion to stop the workers
of its hot pipelines, on a thread of its own (the lane reads on meanwhile); its answer counts
whenever it comes, and only for the assignment versions it was asked at. A pipeline whose
fence answered but that was not promoted (the promotion refused, or its supervisor heard
again first) is **held**: its supervisor keeps it stopped until a newer assignment, so the
scheduling round moves it the ordinary way (``held``) and the lane promotes none of it. Each
time pipelines are held, ``on_held`` is called (the leader runs a round at once: a fenced
pipeline is stopped, and waits for that round alone)::

    fences = PipelineFences(supervisor_fencing.fence_pipelines, answer_secs=10.0,
                            on_held=controller.cluster_changed)
    fences.ask(summary, {"orders": 11}, epoch=9, within=0.2)   # once per suspicion
    fences.ask_for_round(summary, {"clicks": 4}, epoch=9)      # a cold start: held when answered
    fences.answered("s1", assignments)     # frozenset({"orders"}) once s1 answered
    fences.keep_asked(suspected={"s2"})    # s1 heard again: a later suspicion asks anew
    fences.hold("s1", {"orders": 11})      # answered, promotion refused: the round moves it
    fences.held(current)                   # the round's view (any thread)
    fences.close()                         # the nimbus stops: the threads too

Owned by the lane's thread but for ``held``, which the round calls, and the answers to
``ask_for_round``, held on the fence's thread as they come.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping, Set
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Protocol

from stratus.api.records import Assignment, SupervisorSummary

log = logging.getLogger(__name__)

FENCE_THREADS = 4  # each call bounded by the time left to a floor, or the answer's wait

Assignments = Mapping[str, tuple[Assignment, int]]  # pipeline -> (assignment, znode version)


class FencePipelines(Protocol):
    """Stop the workers of ``pipelines`` on ``supervisor`` for the term at ``epoch``, waiting
    ``timeout`` seconds at most: True once the supervisor answered that they are gone
    (``SupervisorFencing.fence_pipelines``)."""

    def __call__(
        self, supervisor: SupervisorSummary, pipelines: Collection[str], epoch: int, timeout: float
    ) -> bool: ...


class PipelineFences:
    """The fences of one term; see the module docstring. ``answer_secs``: how long an
    answer is waited for at least (the leader's ``nimbus.supervisor.fencing.timeout.secs``);
    ``executor``: where the fences wait (a pool of ``FENCE_THREADS`` made here if None);
    ``on_held``: called (on any thread, never blocking) once pipelines are held."""

    def __init__(
        self,
        fence: FencePipelines,
        *,
        answer_secs: float = 0.0,
        executor: Executor | None = None,
        on_held: Callable[[], None] = lambda: None,
    ) -> None:
        self._fence = fence
        self._answer_secs = answer_secs
        self._on_held = on_held
        self._own_executor = executor is None  # made here: shut down by close()
        self._executor = executor or ThreadPoolExecutor(
            max_workers=FENCE_THREADS, thread_name_prefix="pipeline-fence"
        )
        self._asked: dict[str, Future[Mapping[str, int]]] = {}  # supervisor -> the pipelines
        # its fence answered for, with the versions asked at (empty: no answer)
        self._late: list[tuple[str, Future[Mapping[str, int]]]] = []  # of supervisors no
        # longer suspected: what they answer is held for the round
        self._lock = threading.Lock()  # guards _held, which the round reads, and _term
        self._held: dict[str, tuple[str, int]] = {}  # pipeline -> (supervisor, version)
        self._term = 0  # counts the clears: an answer asked for before one is not held

    def clear(self) -> None:
        """Forget every fence: a new term asks its own."""
        self._asked.clear()
        self._late.clear()
        with self._lock:
            self._held = {}
            self._term += 1

    def close(self) -> None:
        """Shut the fences' threads down (the nimbus stops): a fence still waiting finishes
        on its own, never waited for, and none queued starts."""
        if self._own_executor and isinstance(self._executor, ThreadPoolExecutor):
            self._executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ the lane's thread

    def asked(self, supervisor: str) -> bool:
        """Whether ``supervisor``'s fence was asked in its current suspicion."""
        return supervisor in self._asked

    def ask(
        self, supervisor: SupervisorSummary, pipelines: Mapping[str, int], epoch: int, within: float
    ) -> None:
        """Ask ``supervisor`` to stop ``pipelines`` (each with its assignment's version),
        waiting ``within`` seconds or ``answer_secs``, whichever is longer, on a fence thread."""
        self._asked[supervisor.id] = self._executor.submit(
            self._call, supervisor, pipelines, epoch, max(within, self._answer_secs)
        )

    def ask_for_round(
        self, supervisor: SupervisorSummary, pipelines: Mapping[str, int], epoch: int
    ) -> None:
        """Ask ``supervisor`` to stop ``pipelines`` (each with its assignment's version) for
        the round, outside any suspicion: what it answers is held for the round as it comes,
        which promotes them; the lane promotes none of them itself."""
        with self._lock:
            term = self._term
        asked = self._executor.submit(self._call, supervisor, pipelines, epoch, self._answer_secs)
        asked.add_done_callback(lambda done: self._hold_answer(supervisor.id, done, term))

    def answered(self, supervisor: str, assignments: Assignments) -> frozenset[str]:
        """The pipelines ``supervisor``'s fence answered for that ``assignments`` still holds
        at the version the fence was asked at (a rewrite since is not fenced); empty while
        no answer came."""
        asked = self._asked.get(supervisor)
        if asked is None or not asked.done():
            return frozenset()
        return frozenset(
            name
            for name, version in asked.result().items()
            if name in assignments and assignments[name][1] == version
        )

    def keep_asked(self, suspected: Set[str]) -> None:
        """Keep the fences of the supervisors still ``suspected``; the others' (heard again,
        or nobody judged) are asked anew at a later suspicion, and what they answer, now or
        late, is held for the round: the lane promotes nothing off a supervisor it does not
        suspect."""
        for sid in set(self._asked) - suspected:
            self._late.append((sid, self._asked.pop(sid)))
        pending = []
        for sid, asked in self._late:
            if asked.done():
                self.hold(sid, asked.result())
            else:
                pending.append((sid, asked))
        self._late = pending

    def hold(self, supervisor: str, pipelines: Mapping[str, int], term: int | None = None) -> None:
        """Hold ``pipelines`` (each at the assignment version its fence stopped) for the
        round: their workers are gone and ``supervisor`` keeps them stopped. ``term``: the
        count of clears when the fence was asked (None: now); an earlier one holds nothing."""
        if not pipelines:
            return
        with self._lock:
            if term is not None and term != self._term:
                return
            for name, version in pipelines.items():
                self._held[name] = (supervisor, version)
        self._on_held()

    def holds(self, name: str, assignment: Assignment, version: int) -> bool:
        """Whether the round moves ``name``, assigned as given: the lane promotes none of it."""
        with self._lock:
            held = self._held.get(name)
        return held is not None and held == (assignment.supervisor, version)

    # ------------------------------------------------------------------ the round's thread

    def held(self, current: Assignments) -> frozenset[str]:
        """The pipelines held, still assigned as their fence found them in ``current`` (the
        round's read); any other is forgotten: moved, rewritten or gone (any thread)."""
        with self._lock:
            self._held = {
                name: (sid, version)
                for name, (sid, version) in self._held.items()
                if name in current
                and current[name][0].supervisor == sid
                and current[name][1] == version
            }
            return frozenset(self._held)

    # ------------------------------------------------------------------ a fence's thread

    def _hold_answer(self, supervisor: str, asked: Future[Mapping[str, int]], term: int) -> None:
        """Hold what a fence asked for the round answered for (``ask_for_round``)."""
        if not asked.cancelled():  # the nimbus stopped first
            self.hold(supervisor, asked.result(), term)

    def _call(
        self, supervisor: SupervisorSummary, pipelines: Mapping[str, int], epoch: int, within: float
    ) -> Mapping[str, int]:
        """``pipelines`` if ``supervisor`` answered their fence ``within`` seconds, else none."""
        try:
            return pipelines if self._fence(supervisor, frozenset(pipelines), epoch, within) else {}
        except Exception:  # a fence that fails is one that got no answer
            log.exception("event=pipeline_fence_failed supervisor=%s", supervisor.id)
            return {}
