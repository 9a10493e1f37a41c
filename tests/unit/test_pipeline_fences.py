"""The failover lane's pipeline fences (``PipelineFences``): asked once per suspicion, an
answer counted only for the assignment versions it was asked at, late answers held for the
round, and the fence threads shut down with the nimbus. Pure logic: the fence is a stand-in
(the real one is tested in tests/cluster/test_pipeline_fence.py)."""

from __future__ import annotations

import threading
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
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


def test_a_fence_asked_for_the_round_is_held_as_it_answers_and_wakes_the_round() -> None:
    released = threading.Event()
    woken = threading.Event()

    def slow(
        supervisor: SupervisorSummary, pipelines: Collection[str], epoch: int, timeout: float
    ) -> bool:
        return released.wait(5)

    fences = PipelineFences(slow, on_held=woken.set)
    try:
        fences.ask_for_round(S1, {"orders": 11}, epoch=9)
        assert not woken.is_set() and fences.held(assigned(11)) == frozenset()
        released.set()
        assert woken.wait(5), "the answer woke the round"
        assert fences.held(assigned(11)) == {"orders"}  # no poll of the lane in between
    finally:
        fences.close()


def test_holding_wakes_the_round_and_an_answer_asked_in_an_earlier_term_holds_nothing() -> None:
    released = threading.Event()
    woken: list[None] = []

    def slow(
        supervisor: SupervisorSummary, pipelines: Collection[str], epoch: int, timeout: float
    ) -> bool:
        return released.wait(5)

    pool = ThreadPoolExecutor(max_workers=1)
    fences = PipelineFences(slow, executor=pool, on_held=lambda: woken.append(None))
    fences.hold("s1", {})
    assert woken == []  # nothing held, nothing to run a round for
    fences.hold("s1", {"orders": 11})
    assert len(woken) == 1
    fences.clear()
    fences.ask_for_round(S1, {"orders": 12}, epoch=9)
    fences.clear()  # a new term before the answer
    released.set()
    pool.shutdown(wait=True)  # the answer came, and its callback ran
    assert fences.held(assigned(12)) == frozenset()
    assert len(woken) == 1


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
