"""A deliberately broken build, for the chaos suite's proof that its oracle catches a promotion
that no failure explains: with this directory on ``PYTHONPATH``, a process that imports the
leader's watch of the fast beats (the leader nimbus's failover lane) gets one whose
``BeatWatch.suspected`` suspects every supervisor it judges (each one holding a hot pipeline's
active worker) at every poll, as if silent for a minute, whatever its beats say. A minute is
past any floor, so the lane reaches a ``floor`` verdict at once, asks no pipeline fence, and
promotes the hot pipeline's standby worker as soon as it is READY, off a supervisor that
beats on time and whose worker still runs.

Only the verdict is forged: the lane's plan and the promotion's fenced transaction are the
real ones, so the promotion is recorded in the trail as any other (``worker_promoted``). The
module is broken as it is imported, not here: the other processes (supervisors, workers,
their Spark's Python) start as fast as ever."""

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

WATCH = "stratus.nimbus.failover.beat_watch"
FORGED_SILENCE_SECS = 60.0


def _break(module: ModuleType) -> None:
    suspicion = module.Suspicion

    def suspect_everyone(self: Any, floors: Mapping[str, float]) -> dict[str, Any]:
        return {
            supervisor: suspicion(
                supervisor,
                phi=self.settings.threshold,
                silence_secs=FORGED_SILENCE_SECS,
                floor_secs=floor,
            )
            for supervisor, floor in sorted(floors.items())
        }

    module.BeatWatch.suspected = suspect_everyone


class _BreakOnImport(importlib.abc.MetaPathFinder):
    """Finds the watch's module as the path finder does, and breaks it once it has run."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != WATCH:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        loader = spec.loader if spec is not None else None
        if not isinstance(loader, importlib.machinery.SourceFileLoader):
            return spec  # not stratus's source: left alone
        run = loader.exec_module

        def run_and_break(module: ModuleType) -> None:
            run(module)
            _break(module)

        loader.exec_module = run_and_break  # type: ignore[method-assign]
        return spec


sys.meta_path.insert(0, _BreakOnImport())
