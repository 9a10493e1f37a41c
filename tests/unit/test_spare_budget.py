"""The spare budget that standby and warm workers share (``warm_memory.plan_spares``), as
pure logic: standby workers first, warm ones yielding, and refusals that say why."""

from __future__ import annotations

from stratus.api.records import MIB, WarmHeld
from stratus.supervisor.warm_memory import Machine, SpareInputs, WarmInputs, plan_spares

GIB = 1024 * MIB
ROOMY = Machine(total=16 * GIB, available=12 * GIB)
ESTIMATE = 768 * MIB


def spares(
    *,
    standby: tuple[int, ...] = (),
    asking: int = 1,
    warm: tuple[int, ...] = (),
    wanted: int = 2,
    budget: int = 4 * GIB,
    machine: Machine | None = ROOMY,
) -> SpareInputs:
    return SpareInputs(
        standby=standby,
        asking=asking,
        standby_estimate=ESTIMATE,
        warm=WarmInputs(
            wanted=wanted,
            costs=warm,
            starting=0,
            budget=budget,
            estimate=ESTIMATE,
            machine=machine,
        ),
    )


def test_a_standby_worker_that_fits_is_admitted_and_the_warm_workers_plan_in_what_is_left() -> None:
    plan = plan_spares(spares(budget=2 * GIB, warm=(700 * MIB,)))
    assert plan.admitted == 1 and plan.refused is None
    # 2048 - 768 left to the warm workers: the one there stays, a second would pass
    assert plan.warm.keep == 1 and not plan.warm.start and plan.warm.held is WarmHeld.BUDGET


def test_warm_workers_yield_to_a_standby_worker_the_newest_first() -> None:
    plan = plan_spares(spares(budget=2 * GIB, warm=(700 * MIB, 700 * MIB)))
    assert plan.admitted == 1
    assert plan.warm.keep == 1 and plan.warm.held is WarmHeld.BUDGET


def test_a_standby_worker_past_the_spare_budget_is_refused_with_the_reason() -> None:
    plan = plan_spares(spares(standby=(700 * MIB,), budget=1024 * MIB))
    assert plan.admitted == 0
    assert plan.refused == (
        "another standby worker (768 MiB) would pass the spare budget: 700 of 1024 MiB used "
        "by 1 standby worker, warm workers yielding (supervisor.worker.warm.memory.mb)"
    )


def test_a_tiny_budget_refuses_every_standby_worker() -> None:
    plan = plan_spares(spares(asking=2, budget=1 * MIB))
    assert plan.admitted == 0 and plan.refused is not None
    assert "0 of 1 MiB used by 0 standby workers" in plan.refused


def test_standby_workers_are_admitted_until_the_budget_and_the_rest_refused() -> None:
    plan = plan_spares(spares(asking=3, budget=2 * GIB))
    assert plan.admitted == 2
    assert plan.refused is not None and "1536 of 2048 MiB used by 2 standby workers" in plan.refused
    assert plan.warm.keep == 0 and not plan.warm.start  # nothing left for warm workers


def test_a_standby_worker_that_would_leave_the_machine_short_is_refused() -> None:
    short = Machine(total=8 * GIB, available=1 * GIB)  # reserve 819 MiB
    plan = plan_spares(spares(machine=short))
    assert plan.admitted == 0
    assert plan.refused is not None
    assert plan.refused.startswith("the machine's available memory is short: 1024 MiB available")
    assert "a standby worker needs 768 MiB" in plan.refused


def test_memory_the_warm_workers_give_back_counts_for_a_standby_worker() -> None:
    machine = Machine(total=8 * GIB, available=1 * GIB)
    plan = plan_spares(spares(machine=machine, warm=(768 * MIB,)))
    assert plan.admitted == 1 and plan.refused is None
    assert plan.warm.keep == 0  # the warm worker goes for it


def test_nothing_asking_leaves_the_warm_plan_as_plan_warm_makes_it() -> None:
    plan = plan_spares(spares(asking=0))
    assert plan.admitted == 0 and plan.refused is None
    assert plan.warm.start and plan.warm.held is None
