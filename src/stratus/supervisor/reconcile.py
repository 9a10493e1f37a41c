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

Standby workers (docs/standby-workers.md) are planned beside them: ``standby_workers_for``
filters the placements as ``assignments_for`` does the assignments, and
``plan_with_standby`` adds START_STANDBY, STOP_STANDBY and PROMOTE to ``plan``'s actions,
actives first::

    placed, seen_placed = standby_workers_for("s1", placements, seen_placed)
    decided = plan_with_standby(mine, held, 4, placed, standby_held)
    decided.actions, decided.standby, decided.waiting
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from stratus.api.records import Assignment
from stratus.api.standby_workers import StandbyWorkerPlacement


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


# ------------------------------------------------------------------ standby workers


def standby_workers_for(
    supervisor: str, placements: Mapping[str, StandbyWorkerPlacement], seen: Mapping[str, int]
) -> tuple[dict[str, StandbyWorkerPlacement], dict[str, int]]:
    """The standby workers placed on ``supervisor``, without stale placements; the epochs
    seen since. The filter of ``assignments_for``, over placements: ``seen`` is the highest
    epoch of a placement seen per pipeline (kept apart from the assignments', which a new
    leader re-stamps while a placement is written only when it changes)."""
    newest = dict(seen)
    mine = {}
    for name, placement in placements.items():
        if placement.epoch < seen.get(name, placement.epoch):
            continue  # written in an older term than one this supervisor has seen
        newest[name] = placement.epoch
        if placement.supervisor == supervisor:
            mine[name] = placement
    return mine, newest


class StandbyKind(StrEnum):
    START_STANDBY = "start_standby"  # placed here, none running: start one
    STOP_STANDBY = "stop_standby"  # its placement is gone, moved or of another generation
    PROMOTE = "promote"  # assigned here: the READY standby worker becomes its worker


@dataclass(frozen=True)
class HeldStandby:
    """A standby worker a supervisor holds: the placement it runs for (None: stopping),
    and whether it is READY (its process up, ``standby.json`` seen)."""

    placement: StandbyWorkerPlacement | None
    ready: bool = False
    takes_slot: bool = True  # a FAILED one holds no process, and no slot


@dataclass(frozen=True)
class StandbyAction:
    kind: StandbyKind
    pipeline: str
    placement: StandbyWorkerPlacement | None = None  # START_STANDBY's
    assignment: Assignment | None = None  # PROMOTE's: the worker's assignment, with its token


@dataclass(frozen=True)
class StandbyPlan:
    """What ``plan_with_standby`` decided: the actions on the pipelines' workers (as
    ``plan``), then those on standby workers; and the pipelines assigned here that wait
    for their standby worker to stop before their worker starts."""

    actions: list[Action]
    standby: list[StandbyAction]
    waiting: list[str]


def vanished_placements_kept(
    placed: Mapping[str, StandbyWorkerPlacement],
    standby: Mapping[str, HeldStandby],
    desired: Mapping[str, Assignment],
    vanished_before: frozenset[str],
) -> tuple[dict[str, StandbyWorkerPlacement], frozenset[str]]:
    """``placed``, with the placement of each standby worker held here that this read lacks
    (and whose pipeline is not assigned here) kept for one more read; the pipelines so kept.

    A read lists the assignments, then the placements: one that falls between them may see
    a promotion's transaction (the assignment here, the placement deleted) by halves, the
    placement gone and the assignment not yet here. Its standby worker would stop and the
    promotion start cold. A placement is taken as gone when two reads in a row lack it."""
    kept = dict(placed)
    vanished = set()
    for name, held in standby.items():
        if held.placement is None or name in placed or name in desired:
            continue
        if name not in vanished_before:
            kept[name] = held.placement
            vanished.add(name)
    return kept, frozenset(vanished)


def promotable(held: HeldStandby | None, assignment: Assignment) -> bool:
    """Whether ``assignment`` can be run by promoting the standby worker ``held``: READY for
    the same generation and code, and an assignment read with its fencing token."""
    return (
        held is not None
        and held.ready
        and held.placement is not None
        and held.placement.generation == assignment.generation
        and held.placement.digest == assignment.digest
        and assignment.token is not None
    )


def plan_with_standby(
    desired: Mapping[str, Assignment],
    held: Mapping[str, Held],
    slots: int,
    placed: Mapping[str, StandbyWorkerPlacement],
    standby: Mapping[str, HeldStandby],
) -> StandbyPlan:
    """``plan``, with the standby workers placed here (``placed``) and held (``standby``).

    Actives come first: an assignment here with no worker PROMOTEs its standby worker when
    ``promotable``, else starts (as ``plan``) once no standby worker of that pipeline is
    left in its directory (one that is stops first: the assignment waits). The slots the
    workers leave go to standby workers, oldest placement first; a standby worker beyond
    them stops (its slot yields to an assignment), and so does one whose placement is gone,
    names another supervisor, or is of another generation or code.
    """
    promoted = [
        StandbyAction(StandbyKind.PROMOTE, name, assignment=assignment)
        for name, assignment in sorted(desired.items())
        if name not in held and promotable(standby.get(name), assignment)
    ]
    promoting = {action.pipeline for action in promoted}
    # an assignment whose standby worker cannot be promoted starts once that one is gone
    blocked = sorted(n for n in desired if n not in held and n in standby and n not in promoting)
    startable = {n: a for n, a in desired.items() if n not in blocked and n not in promoting}
    actions = plan(startable, held, slots - len(promoted))
    used = sum(h.takes_slot for h in held.values()) + len(promoted)
    used += sum(action.kind is ActionKind.START for action in actions)

    stops, kept = [], []
    for name in sorted(standby, key=lambda n: _placed_order(standby[n].placement, n)):
        worker = standby[name]
        if name in promoting:
            continue
        if worker.placement is None:  # stopping already
            used += worker.takes_slot
        elif name in desired or not _same_placement(worker.placement, placed.get(name)):
            stops.append(StandbyAction(StandbyKind.STOP_STANDBY, name))
            used += worker.takes_slot
        elif worker.takes_slot:
            kept.append(name)
    room = max(0, slots - used)
    stops += [StandbyAction(StandbyKind.STOP_STANDBY, n) for n in kept[room:]]  # they yield
    room -= min(room, len(kept))
    new = sorted(
        (p for n, p in placed.items() if n not in standby and n not in held and n not in desired),
        key=lambda p: _placed_order(p, p.pipeline),
    )
    starts = [StandbyAction(StandbyKind.START_STANDBY, p.pipeline, p) for p in new[:room]]
    waiting = waiting_for_slots(startable, held, actions) + blocked
    return StandbyPlan(actions, promoted + stops + starts, sorted(waiting))


def _same_placement(
    held: StandbyWorkerPlacement | None, now: StandbyWorkerPlacement | None
) -> bool:
    """Whether the standby worker of ``held`` still serves the placement ``now``: the same
    generation and code (a new epoch alone re-stamps it)."""
    if held is None or now is None:
        return False
    return held.generation == now.generation and held.digest == now.digest


def _placed_order(placement: StandbyWorkerPlacement | None, name: str) -> tuple[float, str]:
    return (placement.placed if placement is not None else 0.0, name)
