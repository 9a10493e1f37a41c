"""Whether a supervisor keeps warm workers: the pool it starts with, or why it keeps none.

A start keeps warm workers with ``supervisor.worker.warm`` (as resolved: ``warm_settings``)
and a budget of memory above 0 MiB (``warm_memory.warm_budget``: the setting, the
environment, or a share of the machine); a budget that cannot be read refuses the start
(``SupervisorStartError`` naming it). Either way the choice is logged once
(``event=warm_workers`` or ``event=warm_workers_off``), and when there are none, why is what
the registration shows (``WarmMemory.held``)::

    warm = choose_warm(settings, "s1", local_dir / "warm", command=None, monitor=monitor)
    warm.pool       # a WarmPool (its owner stops it), or None
    warm.memory()   # the warm workers' memory, or why there are none (any thread)
    spare_budget(settings)   # the budget standby workers share with them, warm or not
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from stratus.api.records import MIB, WarmHeld, WarmMemory
from stratus.api.standby_workers import StandbyWorkerBeat, StandbyWorkerState
from stratus.supervisor.errors import SupervisorStartError
from stratus.supervisor.settings import SupervisorSettings
from stratus.supervisor.warm_memory import ESTIMATE_BYTES, Budget, read_machine, warm_budget
from stratus.supervisor.warm_pool import WarmPool
from stratus.supervisor.worker_env import worker_environment
from stratus.supervisor.worker_process import MonitorSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmStart:
    """The pool a supervisor keeps, or why it keeps none (nothing yet: not chosen)."""

    pool: WarmPool | None = None
    off: WarmMemory | None = None  # why there are none, when there are none

    def memory(self) -> WarmMemory | None:
        """The warm workers and their memory, as the registration shows them."""
        return self.pool.memory if self.pool is not None else self.off


def spare_budget(settings: SupervisorSettings) -> Budget:
    """The spare budget standby workers share with the warm workers, whether warm workers
    are kept or not (``warm_budget``); ``SupervisorStartError`` naming what cannot be read."""
    try:
        return warm_budget(settings.warm.memory_mb, read_machine(), os.environ)
    except ValueError as exc:
        raise SupervisorStartError(str(exc)) from None


def with_standby(memory: WarmMemory, budget: Budget, beats: list[StandbyWorkerBeat]) -> WarmMemory:
    """``memory`` with the standby workers of ``beats`` that run (each at its measured
    memory, else the estimate) counted in: they share the spare budget ``budget``."""
    live = [b for b in beats if b.state in (StandbyWorkerState.STARTING, StandbyWorkerState.READY)]
    if not live:
        return memory
    used = sum(ESTIMATE_BYTES // MIB if b.rss_mb is None else b.rss_mb for b in live)
    return memory.model_copy(
        update={
            "budget_mb": max(memory.budget_mb, budget.mb),
            "used_mb": memory.used_mb + used,
            "standby_workers": len(live),
            "standby_mb": used,
        }
    )


def choose_warm(
    settings: SupervisorSettings,
    supervisor: str,
    directory: Path,
    *,
    command: Sequence[str] | None,
    monitor: MonitorSettings,
) -> WarmStart:
    """The warm workers of ``supervisor`` (in ``directory``), or why there are none; see the
    module docstring. ``command`` replaces the warm worker's (a test's stand-in)."""
    warm = settings.warm
    machine = read_machine()
    total = None if machine is None else machine.total // MIB
    if not warm.enabled:
        log.info(
            "event=warm_workers_off supervisor=%s reason=%s why=%r",
            supervisor,
            warm.off.value if warm.off else "-",
            warm.off_why,
        )
        return WarmStart(
            off=WarmMemory(machine_mb=total, budget_mb=0, held=warm.off, why=warm.off_why)
        )
    try:
        budget = warm_budget(warm.memory_mb, machine, os.environ)
    except ValueError as exc:
        raise SupervisorStartError(str(exc)) from None
    log.info(
        "event=warm_workers supervisor=%s budget_mb=%d source=%r machine_mb=%s",
        supervisor,
        budget.mb,
        budget.source,
        total if total is not None else "unknown",
    )
    if budget.bytes == 0:
        why = f"the warm workers' budget is 0 MiB ({budget.source})"
        return WarmStart(
            off=WarmMemory(machine_mb=total, budget_mb=0, held=WarmHeld.BUDGET, why=why)
        )
    spec = settings.spec
    pool = WarmPool(
        warm,
        spec.spark_master,
        directory,
        env=worker_environment(os.environ, spec.env_names, {}),
        log=settings.log,
        command=command,
        monitor=monitor,
        budget=budget,
    )
    return WarmStart(pool=pool)
