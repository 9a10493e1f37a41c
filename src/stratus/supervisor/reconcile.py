"""Desired against held: which workers a supervisor starts, stops, restarts or re-stamps.

Pure functions of the assignments read from ZooKeeper and of what the supervisor holds, so
each rule is tested alone. Guarantees: a supervisor never runs an assignment that names
another supervisor, nor one of an older epoch than it has seen for that pipeline (a write of
a deposed leader); a new generation (a rebalance) or digest restarts the worker; a new epoch
alone (a new leader re-stamping the same run) does not; no more than ``slots`` workers are
started::

    mine, seen = assignments_for("s1", assignments, seen)   # the epoch filter
    for action in plan(mine, held, slots=4):
        ...                                                  # Action(kind, pipeline, assignment)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from stratus.api.records import Assignment


def assignments_for(
    supervisor: str, assignments: Mapping[str, Assignment], seen: Mapping[str, int]
) -> tuple[dict[str, Assignment], dict[str, int]]:
    """The assignments naming ``supervisor``, without stale ones; the epochs seen since.

    ``seen`` is the highest epoch seen so far per pipeline (on any supervisor). An assignment
    whose epoch is below it is ignored, as if it were absent. Epochs of pipelines no longer
    assigned are kept: an old assignment that reappeared would still be refused.
    """
    newest = dict(seen)
    mine = {}
    for name, assignment in assignments.items():
        if assignment.epoch < seen.get(name, assignment.epoch):
            continue  # written in an older term than one this supervisor has seen
        newest[name] = assignment.epoch
        if assignment.supervisor == supervisor:
            mine[name] = assignment
    return mine, newest


def stale_assignments(
    assignments: Mapping[str, Assignment], seen: Mapping[str, int]
) -> dict[str, Assignment]:
    """The assignments that ``assignments_for`` ignores, for the logs."""
    return {
        name: assignment
        for name, assignment in assignments.items()
        if assignment.epoch < seen.get(name, assignment.epoch)
    }


class ActionKind(StrEnum):
    START = "start"  # no worker yet: start one
    STOP = "stop"  # the assignment is gone or names another supervisor
    RESTART = "restart"  # stop the worker, then start it for the new assignment
    UPDATE = "update"  # the same run under a new stamp (epoch, conf): keep the worker


@dataclass(frozen=True)
class Held:
    """What a supervisor holds for one pipeline.

    ``assignment``: the one its worker runs, or will run once a restart is through; None
    when the worker is being stopped for good. ``done``: it FAILED (given up) or FINISHED,
    with no process; it keeps no slot and waits for its assignment to change.
    """

    assignment: Assignment | None
    done: bool = False

    @property
    def takes_slot(self) -> bool:
        return not self.done


@dataclass(frozen=True)
class Action:
    kind: ActionKind
    pipeline: str
    assignment: Assignment | None = None  # the new assignment (None for STOP)


def same_run(held: Assignment, desired: Assignment, *, done: bool) -> bool:
    """Whether ``desired`` asks for the run ``held`` is: same generation and digest.

    A worker that is done (FAILED, FINISHED) runs again only for a new assignment, so for
    it a new ``assigned`` time (the pipeline deactivated and activated again) counts too.
    """
    same = held.generation == desired.generation and held.digest == desired.digest
    return same and (not done or held.assigned == desired.assigned)


def plan(desired: Mapping[str, Assignment], held: Mapping[str, Held], slots: int) -> list[Action]:
    """The actions that bring ``held`` to ``desired``: stops and restarts first, then starts.

    Starts fill the free slots (``slots`` minus the workers held that are not done, stopping
    ones included, as their processes still run), oldest assignment first, then by name; the
    rest wait for a later reconcile.
    """
    actions = [
        action
        for name in sorted(held)
        if (action := _change(name, held[name], desired.get(name))) is not None
    ]
    free = slots - sum(h.takes_slot for h in held.values())
    new = sorted(
        (a for name, a in desired.items() if name not in held),
        key=lambda a: (a.assigned, a.pipeline),
    )
    actions += [Action(ActionKind.START, a.pipeline, a) for a in new[: max(free, 0)]]
    return actions


def waiting_for_slots(
    desired: Mapping[str, Assignment], held: Mapping[str, Held], actions: list[Action]
) -> list[str]:
    """Pipelines assigned here that ``plan`` could not start for lack of a slot."""
    started = {a.pipeline for a in actions if a.kind is ActionKind.START}
    return sorted(name for name in desired if name not in held and name not in started)


def _change(name: str, held: Held, desired: Assignment | None) -> Action | None:
    if desired is None:
        return None if held.assignment is None else Action(ActionKind.STOP, name)
    if held.assignment is None:
        return Action(ActionKind.RESTART, name, desired)  # assigned again while it stops
    if not same_run(held.assignment, desired, done=held.done):
        return Action(ActionKind.RESTART, name, desired)
    if desired != held.assignment:
        return Action(ActionKind.UPDATE, name, desired)
    return None
