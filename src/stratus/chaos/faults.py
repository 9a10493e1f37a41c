"""The chaos suite's faults: a plan drawn from a seed, so that a run replays from its seed.

Pure logic: what to break, where, and for how long; the suite's injector does it to real
processes and hosts. Every fault of a plan is undone before the next one (a process killed
is started again, a frozen one continued, a host healed, the quorum restored), so a plan is
a sequence of independent faults, each judged by the oracle afterwards::

    shape = ClusterShape(hosts=("h1", "h2", "h3"), pacemakers=("h1", "h2"), zkfc=True)
    plan = plan_faults(seed=42, count=200, shape=shape)
    plan[0]        # Fault(action='kill', target='nimbus', host='h2', hold_secs=0.0)
    str(plan[0])   # 'kill nimbus on h2'

Two faults stay out of the default draw (``WEIGHTS``), for the runs that judge the failure
detector: ``stress`` (a host's CPU and disk loaded) and ``pause`` (a supervisor, a worker or,
in a cluster running a hot pipeline, a beat agent stopped for less than the detector's floor).
A plan draws them when its weights name them::

    plan = plan_faults(seed=42, count=50, shape=shape, weights={**WEIGHTS, Action.PAUSE: 4})
    [str(fault) for fault in plan if fault.action is Action.PAUSE][0]
    # e.g. 'pause supervisor on h1 for 0.61 s'

The same seed and shape give the same plan on any machine (``random.Random``, seeded, and no
other source of choice). What the plan cannot fix is timing: processes start, elect and
recover at the speed of the machine, so a replay runs the same faults in the same order,
not the same interleavings.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Action(StrEnum):
    """What a fault does."""

    KILL = "kill"  # SIGKILL, then the process is started again (a pacemaker: empty)
    FREEZE = "freeze"  # SIGSTOP for hold_secs (past the session timeout), then SIGCONT
    TERMINATE = "terminate"  # SIGTERM (the graceful stop), then started again
    QUORUM_LOSS = "quorum_loss"  # every ZooKeeper member but the host's stopped for hold_secs
    CUT = "cut"  # the host off the network for hold_secs, then healed
    SUBMIT = "submit"  # a client submits a batch pipeline
    KILL_PIPELINE = "kill_pipeline"  # a client kills a batch pipeline it submitted
    UPDATE = "update"  # a client rebalances the streaming pipeline (a new generation)
    STRESS = "stress"  # CPU burners and direct writes to the host's data directory for hold_secs
    PAUSE = "pause"  # SIGSTOP for hold_secs, a fraction of the detector's floor, then SIGCONT


class Target(StrEnum):
    """The kind of process a signal fault hits."""

    ZOOKEEPER = "zookeeper"
    NIMBUS = "nimbus"
    ZKFC = "zkfc"
    SUPERVISOR = "supervisor"
    PACEMAKER = "pacemaker"
    WORKER = "worker"  # the streaming pipeline's worker, wherever it runs
    BEAT_AGENT = "beat_agent"  # the beat agent of the streaming worker's supervisor (hot only)
    HOST = "host"  # every process of a host (a cut, a stress)
    ENSEMBLE = "ensemble"  # ZooKeeper as a whole (a quorum loss)
    CLIENT = "client"  # a client's request


SIGNALS = (Action.KILL, Action.FREEZE, Action.TERMINATE)
CLIENT_ACTIONS = (Action.SUBMIT, Action.KILL_PIPELINE, Action.UPDATE)
PAUSE_TARGETS = (Target.SUPERVISOR, Target.WORKER)  # the processes a pause stops
WHERE_IT_RUNS = (Target.WORKER, Target.BEAT_AGENT)  # found when the fault is applied: no host
PAUSE_FRACTIONS = (0.3, 0.9)  # a pause lasts this fraction of the floor: never a silence to act on
MIN_STRESS_SECS = 1.0


@dataclass(frozen=True)
class ClusterShape:
    """What the plan can hit: the hosts, those with a pacemaker, whether nimbuses run under
    zkfcs; and the bounds of the faults that last (seconds). ``floor_secs`` is the failure
    detector's floor for a supervisor (the silence it needs before it acts): a pause is drawn
    shorter. Its default is the floor of the default settings (beat lease 0.8 s, beat stop,
    worker poll and a 0.1 s margin); a cluster with other settings passes its own. ``hot``:
    the streaming pipeline keeps a standby worker (``pipeline.standby: hot``), so its
    worker's supervisor runs a beat agent, which signals and pauses may hit too."""

    hosts: tuple[str, ...]
    pacemakers: tuple[str, ...] = ()
    zkfc: bool = False
    hot: bool = False
    session_secs: float = 2.0  # ZooKeeper's session timeout: a freeze outlasts it
    max_cut_secs: float = 15.0
    max_quorum_loss_secs: float = 60.0
    floor_secs: float = 1.02
    max_stress_secs: float = 10.0

    def __post_init__(self) -> None:
        if len(self.hosts) < 3:
            raise ValueError(f"a chaos cluster needs three hosts or more, not {self.hosts!r}")
        strangers = set(self.pacemakers) - set(self.hosts)
        if strangers:
            raise ValueError(f"pacemakers on unknown hosts: {sorted(strangers)}")
        if self.max_cut_secs < 1 or self.max_quorum_loss_secs < 1:
            raise ValueError("a cut and a quorum loss last one second at least")
        if self.max_stress_secs < MIN_STRESS_SECS:
            raise ValueError(f"a stress lasts {MIN_STRESS_SECS:g} s at least")
        if not self.floor_secs > 0:
            raise ValueError(f"the detector's floor is a positive time, not {self.floor_secs!r}")

    def targets(self) -> tuple[Target, ...]:
        """The kinds of process a signal can hit in this cluster."""
        kinds = [Target.ZOOKEEPER, Target.NIMBUS, Target.SUPERVISOR, Target.WORKER]
        if self.zkfc:
            kinds.append(Target.ZKFC)
        if self.pacemakers:
            kinds.append(Target.PACEMAKER)
        if self.hot:
            kinds.append(Target.BEAT_AGENT)
        return tuple(kinds)

    def pause_targets(self) -> tuple[Target, ...]:
        """The kinds of process a pause can stop in this cluster."""
        return (*PAUSE_TARGETS, Target.BEAT_AGENT) if self.hot else PAUSE_TARGETS


@dataclass(frozen=True)
class Fault:
    """One fault: what, on which kind of process, on which host, for how long."""

    action: Action
    target: Target
    host: str = ""  # a quorum loss: the member left running; empty for a client, a worker
    # and a beat agent (``WHERE_IT_RUNS``)
    hold_secs: float = 0.0

    def __str__(self) -> str:
        where = f" on {self.host}" if self.host else ""
        if self.action is Action.QUORUM_LOSS:
            where = f" but {self.host}"
        held = f" for {self.hold_secs:g} s" if self.hold_secs else ""
        if self.action in CLIENT_ACTIONS:
            return f"client {self.action.value}"
        return f"{self.action.value} {self.target.value}{where}{held}"


# How often each kind of fault is drawn: signals most, since they hit six kinds of process.
WEIGHTS: dict[Action, int] = {
    Action.KILL: 6,
    Action.FREEZE: 3,
    Action.TERMINATE: 4,
    Action.QUORUM_LOSS: 1,
    Action.CUT: 2,
    Action.SUBMIT: 2,
    Action.KILL_PIPELINE: 1,
    Action.UPDATE: 1,
}


def plan_faults(
    seed: int, count: int, shape: ClusterShape, weights: Mapping[Action, int] = WEIGHTS
) -> list[Fault]:
    """``count`` faults drawn from ``seed``, each action as often as its weight: the same plan
    for the same arguments."""
    if count < 0:
        raise ValueError(f"a plan has zero faults or more, not {count}")
    if any(weight < 0 for weight in weights.values()) or not any(weights.values()):
        named = {action.value: weight for action, weight in weights.items()}
        raise ValueError(f"a plan's weights are zero or more, one at least above zero: {named}")
    rng = random.Random(seed)
    actions = list(weights)
    chances = [weights[action] for action in actions]
    return [_fault(rng, rng.choices(actions, chances)[0], shape) for _ in range(count)]


def _fault(rng: random.Random, action: Action, shape: ClusterShape) -> Fault:
    if action in CLIENT_ACTIONS:
        return Fault(action, Target.CLIENT)
    if action is Action.QUORUM_LOSS:
        survivor = rng.choice(shape.hosts)
        return Fault(action, Target.ENSEMBLE, survivor, _secs(rng, 5, shape.max_quorum_loss_secs))
    if action is Action.CUT:
        return Fault(
            action, Target.HOST, rng.choice(shape.hosts), _secs(rng, 3, shape.max_cut_secs)
        )
    if action is Action.STRESS:
        hold = _secs(rng, MIN_STRESS_SECS, shape.max_stress_secs)
        return Fault(action, Target.HOST, rng.choice(shape.hosts), hold)
    if action is Action.PAUSE:
        target = rng.choice(shape.pause_targets())
        host = "" if target in WHERE_IT_RUNS else rng.choice(shape.hosts)
        hold = round(rng.uniform(*PAUSE_FRACTIONS) * shape.floor_secs, 2)
        return Fault(action, target, host, hold)
    target = rng.choice(shape.targets())
    host = "" if target in WHERE_IT_RUNS else _host_of(rng, target, shape)
    frozen = action is Action.FREEZE
    hold = _secs(rng, shape.session_secs + 1, shape.session_secs + 4) if frozen else 0.0
    return Fault(action, target, host, hold)


def _host_of(rng: random.Random, target: Target, shape: ClusterShape) -> str:
    hosts: Sequence[str] = shape.pacemakers if target is Target.PACEMAKER else shape.hosts
    return rng.choice(hosts)


def _secs(rng: random.Random, low: float, high: float) -> float:
    """A whole number of seconds in [low, high] (high at least low): short to print."""
    return float(rng.randint(round(low), max(round(low), round(high))))
