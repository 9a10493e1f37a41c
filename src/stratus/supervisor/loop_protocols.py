"""What the control loop takes from the supervisor's other parts, as protocols.

The daemon hands it the real ones (``WorkerLauncher``, ``WarmPool``, ``WorkerPaths.of``);
a unit test hands it fakes that do only what it checks::

    loop = ControlLoop("s1", 2, launcher=FakeLauncher(), paths_of=paths_of, warm=None, ...)
"""

from __future__ import annotations

from collections.abc import Callable, Set
from typing import Protocol

from stratus.supervisor.launch_protocols import Launcher
from stratus.supervisor.standby_worker import StandbyLauncher
from stratus.supervisor.warm_memory import WarmInputs, WarmPlan
from stratus.supervisor.worker_process import WorkerPaths


class CodeLauncher(Launcher, StandbyLauncher, Protocol):
    """A launcher that also keeps the code of the digests still needed, and starts and
    promotes standby workers."""

    def retain(self, digests: Set[str]) -> None: ...


class WarmKeeper(Protocol):
    """The warm workers (``WarmPool``): kept to a number, stopped with the supervisor."""

    def keep(
        self,
        wanted: int,
        *,
        pipelines_starting: bool = False,
        plan: Callable[[WarmInputs], WarmPlan] = ...,
    ) -> None: ...

    def stop(self) -> None: ...


class WorkerPathsFactory(Protocol):
    """Where a pipeline's worker keeps its files (``WorkerPaths.of`` the local directory)."""

    def __call__(self, pipeline: str) -> WorkerPaths: ...
