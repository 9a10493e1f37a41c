"""What an app's function receives beside its Spark session: ``run(spark, context)``.

The context says which pipeline runs, under which assignment (epoch, generation), with
which conf, and where its checkpoints live; it also carries the worker's stop request, so a
long batch function can end early and cleanly::

    def run(spark, context):
        query = (df.writeStream
                 .option("checkpointLocation", context.checkpoint("counts"))
                 .start(context.conf["spark.stratus.example.output"]))
        # returning with the query active: the worker keeps it running until told to stop

    def run(spark, context):          # a batch that checks for a stop between steps
        for day in days:
            if context.should_stop():
                return
            process(spark, day)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from stratus.worker.checkpoint_owner import OWNERS_DIR
from stratus.worker.spec import WorkerSpec


@dataclass(frozen=True)
class PipelineContext:
    """The pipeline's identity, conf and checkpoint location, and its stop request."""

    pipeline: str
    conf: Mapping[str, Any]
    epoch: int
    generation: int
    checkpoint_location: str
    trigger_interval_secs: float | None
    stop_event: threading.Event = field(repr=False, compare=False)

    @classmethod
    def from_spec(cls, spec: WorkerSpec, stop_event: threading.Event) -> PipelineContext:
        return cls(
            pipeline=spec.pipeline,
            conf=MappingProxyType(dict(spec.conf)),
            epoch=spec.epoch,
            generation=spec.generation,
            checkpoint_location=spec.checkpoint_location,
            trigger_interval_secs=spec.trigger_interval_secs,
            stop_event=stop_event,
        )

    def checkpoint(self, name: str) -> str:
        """``<checkpoint_location>/<name>``: a query's own checkpoint, kept across restarts
        and moves; give every query its own name."""
        parts = name.split("/")
        if not name or name.startswith("/") or "" in parts or ".." in parts or "." in parts:
            raise ValueError(
                f"checkpoint name {name!r}: must be a relative name such as 'counts' or "
                "'stage1/counts', without '.', '..' or empty parts"
            )
        if parts[0] == OWNERS_DIR:
            raise ValueError(
                f"checkpoint name {name!r}: {OWNERS_DIR} holds the workers' claims on the "
                "location (stratus's own); choose another name"
            )
        return f"{self.checkpoint_location.rstrip('/')}/{name}"

    def should_stop(self) -> bool:
        """Whether the worker was asked to stop (SIGTERM, or its supervisor went away)."""
        return self.stop_event.is_set()

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking early on a stop request; whether one came."""
        return self.stop_event.wait(timeout)
