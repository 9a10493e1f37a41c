"""The chaos suite's fault plans: drawn from a seed, replayable, within the cluster's shape."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

import pytest

from stratus.chaos.faults import (
    WEIGHTS,
    Action,
    ClusterShape,
    Fault,
    Target,
    plan_faults,
)

SHAPE = ClusterShape(hosts=("h1", "h2", "h3"), pacemakers=("h1", "h2"), zkfc=True)


def test_the_same_seed_gives_the_same_plan_and_another_seed_another() -> None:
    assert plan_faults(7, 50, SHAPE) == plan_faults(7, 50, SHAPE)
    assert plan_faults(7, 50, SHAPE) != plan_faults(8, 50, SHAPE)
    assert plan_faults(7, 10, SHAPE) == plan_faults(7, 50, SHAPE)[:10]  # a prefix replays


def test_a_long_plan_draws_every_action_and_every_kind_of_process() -> None:
    plan = plan_faults(1, 2000, SHAPE)
    assert {fault.action for fault in plan} == set(Action) - {Action.STRESS, Action.PAUSE}
    signalled = {fault.target for fault in plan if fault.action is Action.KILL}
    assert signalled == {
        Target.ZOOKEEPER,
        Target.NIMBUS,
        Target.ZKFC,
        Target.SUPERVISOR,
        Target.PACEMAKER,
        Target.WORKER,
    }


def test_faults_stay_within_the_cluster_and_their_bounds() -> None:
    shape = ClusterShape(
        hosts=("a", "b", "c"), pacemakers=("c",), zkfc=False, max_cut_secs=7, max_quorum_loss_secs=9
    )
    for fault in plan_faults(3, 2000, shape):
        assert fault.target is not Target.ZKFC
        if fault.target is Target.PACEMAKER:
            assert fault.host == "c"
        if fault.action is Action.FREEZE:
            assert shape.session_secs < fault.hold_secs <= shape.session_secs + 4
        if fault.action is Action.CUT:
            assert fault.host in shape.hosts and 3 <= fault.hold_secs <= 7
        if fault.action is Action.QUORUM_LOSS:
            assert fault.host in shape.hosts and 5 <= fault.hold_secs <= 9
        if fault.target is Target.WORKER or fault.target is Target.CLIENT:
            assert fault.host == ""


def test_stress_and_pauses_are_drawn_when_weighted_pauses_shorter_than_the_floor() -> None:
    shape = ClusterShape(hosts=("a", "b", "c"), floor_secs=2.0, max_stress_secs=6)
    weights = {**WEIGHTS, Action.STRESS: 3, Action.PAUSE: 5}
    plan = plan_faults(9, 2000, shape, weights)
    pauses = [fault for fault in plan if fault.action is Action.PAUSE]
    stresses = [fault for fault in plan if fault.action is Action.STRESS]
    assert {fault.target for fault in pauses} == {Target.SUPERVISOR, Target.WORKER}
    for pause in pauses:
        assert 0.6 <= pause.hold_secs <= 1.8  # 0.3 to 0.9 of the floor
        assert (pause.host in shape.hosts) == (pause.target is Target.SUPERVISOR)
    assert {fault.host for fault in stresses} == set(shape.hosts)
    assert all(fault.target is Target.HOST and 1 <= fault.hold_secs <= 6 for fault in stresses)
    only_pauses = plan_faults(9, 50, shape, {Action.PAUSE: 1})
    assert {fault.action for fault in only_pauses} == {Action.PAUSE}


def test_a_hot_cluster_signals_and_pauses_the_beat_agent_where_the_worker_runs() -> None:
    hot = ClusterShape(hosts=("a", "b", "c"), pacemakers=("a", "b", "c"), hot=True)
    plan = plan_faults(4, 2000, hot, {**WEIGHTS, Action.PAUSE: 5})
    agents = [fault for fault in plan if fault.target is Target.BEAT_AGENT]
    assert {fault.action for fault in agents} == {
        Action.KILL,
        Action.FREEZE,
        Action.TERMINATE,
        Action.PAUSE,
    }
    assert all(fault.host == "" for fault in agents)  # its worker's supervisor's, when applied
    assert str(Fault(Action.PAUSE, Target.BEAT_AGENT, hold_secs=0.5)) == (
        "pause beat_agent for 0.5 s"
    )
    cold = ClusterShape(hosts=("a", "b", "c"), pacemakers=("a", "b", "c"))
    assert Target.BEAT_AGENT not in cold.targets() + cold.pause_targets()


def test_the_short_runs_seeds_draw_the_plans_they_drew_before_beat_agents() -> None:
    """``make test``'s short chaos run (seed 4556, three faults per mode) replays as before:
    a cluster without a hot pipeline never draws a beat agent."""
    short = replace(SHAPE, session_secs=2.0, max_quorum_loss_secs=10)
    assert [str(fault) for fault in plan_faults(4556, 3, short)] == [
        "kill nimbus on h3",
        "client submit",
        "cut host on h3 for 6 s",
    ]
    assert [str(fault) for fault in plan_faults(4557, 3, short)] == [
        "freeze supervisor on h3 for 4 s",
        "quorum_loss ensemble but h3 for 10 s",
        "kill zkfc on h3",
    ]


def test_a_cluster_without_pacemakers_gets_no_pacemaker_fault() -> None:
    shape = ClusterShape(hosts=("a", "b", "c"))
    targets = Counter(fault.target for fault in plan_faults(5, 1000, shape))
    assert targets[Target.PACEMAKER] == 0 and targets[Target.ZKFC] == 0


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"hosts": ("a", "b")}, "three hosts"),
        ({"hosts": ("a", "b", "c"), "pacemakers": ("d",)}, "unknown hosts: ['d']"),
        ({"hosts": ("a", "b", "c"), "max_cut_secs": 0}, "one second at least"),
        ({"hosts": ("a", "b", "c"), "max_stress_secs": 0.5}, "a stress lasts 1 s at least"),
        ({"hosts": ("a", "b", "c"), "floor_secs": 0}, "floor is a positive time, not 0"),
    ],
)
def test_a_shape_that_cannot_hold_a_plan_is_refused(
    arguments: dict[str, object], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        ClusterShape(**arguments)  # type: ignore[arg-type]


def test_a_negative_count_is_refused() -> None:
    with pytest.raises(ValueError, match="zero faults or more"):
        plan_faults(1, -1, SHAPE)


@pytest.mark.parametrize("weights", [{Action.KILL: -1, Action.CUT: 2}, {Action.KILL: 0}])
def test_weights_that_cannot_draw_a_fault_are_refused(weights: dict[Action, int]) -> None:
    with pytest.raises(ValueError, match=re.escape("one at least above zero: {'kill'")):
        plan_faults(1, 3, SHAPE, weights)


def test_a_fault_reads_as_what_it_does() -> None:
    assert str(Fault(Action.KILL, Target.NIMBUS, "h2")) == "kill nimbus on h2"
    assert str(Fault(Action.FREEZE, Target.WORKER, hold_secs=4)) == "freeze worker for 4 s"
    assert (
        str(Fault(Action.QUORUM_LOSS, Target.ENSEMBLE, "h1", 30))
        == "quorum_loss ensemble but h1 for 30 s"
    )
    assert str(Fault(Action.SUBMIT, Target.CLIENT)) == "client submit"
    assert str(Fault(Action.PAUSE, Target.SUPERVISOR, "h1", 0.61)) == (
        "pause supervisor on h1 for 0.61 s"
    )
    assert str(Fault(Action.STRESS, Target.HOST, "h3", 5)) == "stress host on h3 for 5 s"
