"""The failover lane's pipeline fences (``PipelineFences``): asked once per suspicion, an
answer counted only for the assignment versions it was asked at, late answers held for the
round, and the fence threads shut down with the nimbus. Pure logic: the fence is a stand-in
(the real one is tested in tests/cluster/test_pipeline_fence.py)."""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any

import pytest

from stratus.api.records import SupervisorSummary
from stratus.nimbus.failover.pipeline_fences import FencePipelines, PipelineFences
from tests.harness.zkfixtures import wait_until
from tests.unit.test_failover_lane import Fence, Immediate
from tests.unit.test_promotion_plan import assignment, record

S1 = SupervisorSummary(id="s1")
ORDERS = record("orders")


def assigned(version: int, supervisor: str = "s1") -> dict[str, Any]:
    return {"orders": (assignment(ORDERS, supervisor), version)}


def test_an_answer_counts_only_for_the_assignment_version_it_was_asked_at() -> None:
    fence = Fence(answers=True)
    fences = PipelineFences(fence, answer_secs=10.0, executor=Immediate())
    assert not fences.asked("s1")
    fences.ask(S1, {"orders": 11}, epoch=9, within=0.2)
    assert fences.asked("s1")
    assert fence.asked == [("s1", frozenset({"orders"}), 9, 10.0)]  # the answer's wait, longer
    assert fences.answered("s1", assigned(11)) == {"orders"}
    assert fences.answered("s1", assigned(12)) == frozenset()  # rewritten since: not fenced
    assert fences.answered("s2", assigned(11)) == frozenset()  # never asked


def test_a_fence_that_got_no_answer_or_failed_answers_nothing() -> None:
    def failing(
        supervisor: SupervisorSummary, pipelines: Collection[str], epoch: int, timeout: float
    ) -> bool:
        raise OSError("connection refused")

    fences_of: tuple[FencePipelines, ...] = (Fence(answers=False), failing)
    for fence in fences_of:
        fences = PipelineFences(fence, executor=Immediate())
        fences.ask(S1, {"orders": 11}, epoch=9, within=0.2)
        assert fences.answered("s1", assigned(11)) == frozenset()


def test_the_fence_of_a_supervisor_heard_again_is_held_for_the_round_when_it_answers() -> None:
    released = threading.Event()

    def slow(
        supervisor: SupervisorSummary, pipelines: Collection[str], epoch: int, timeout: float
    ) -> bool:
        return released.wait(5)

    fences = PipelineFences(slow)
    try:
        fences.ask(S1, {"orders": 11}, epoch=9, within=0.2)
        fences.keep_asked(suspected=set())  # s1 heard again before the answer came
        assert not fences.asked("s1")  # a later suspicion asks anew
        assert fences.held(assigned(11)) == frozenset()
        released.set()

        def handed() -> bool:
            fences.keep_asked(suspected=set())
            return bool(fences.held(assigned(11)))

        wait_until(handed, 5.0, "the late answer held for the round")
        assert fences.held(assigned(11)) == {"orders"}  # stopped on s1: the round moves it
        assert fences.holds("orders", assignment(ORDERS, "s1"), 11)
        assert fences.held(assigned(11, "s2")) == frozenset()  # moved: forgotten
        assert fences.held(assigned(11)) == frozenset()
    finally:
        fences.close()


def test_a_new_term_forgets_every_fence_and_every_hold() -> None:
    fences = PipelineFences(Fence(answers=True), executor=Immediate())
    fences.ask(S1, {"orders": 11}, epoch=9, within=0.2)
    fences.hold("s1", {"orders": 11})
    fences.clear()
    assert not fences.asked("s1")
    assert fences.held(assigned(11)) == frozenset()


def test_closing_shuts_the_fence_threads_it_made_down() -> None:
    fences = PipelineFences(Fence(answers=True))
    fences.close()
    with pytest.raises(RuntimeError, match="after shutdown"):
        fences.ask(S1, {"orders": 11}, epoch=9, within=0.2)
