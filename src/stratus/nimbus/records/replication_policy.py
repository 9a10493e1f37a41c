"""How many nimbuses must hold a pipeline's code before it runs, and for how long it waits
for them: the cluster's ``pipeline.min.replication.count`` and
``pipeline.max.replication.wait.time.sec``, which a pipeline's own conf may set for itself.
A submit waits PENDING, and an update waits staged, until the code is on ``required``
nimbuses, or the wait is over with at least one copy::

    policy = ReplicationPolicy(required=2, wait_secs=60).of(record.conf)
    deadline = policy.deadline(now)   # None: it waits as long as it takes (-1)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReplicationPolicy:
    """``pipeline.min.replication.count`` and ``pipeline.max.replication.wait.time.sec``."""

    required: int
    wait_secs: int  # -1: forever

    def of(self, conf: Mapping[str, Any]) -> ReplicationPolicy:
        """The pipeline's own settings where its conf has them, else these (the cluster's)."""
        return ReplicationPolicy(
            required=conf.get("pipeline.min.replication.count", self.required),
            wait_secs=conf.get("pipeline.max.replication.wait.time.sec", self.wait_secs),
        )

    def deadline(self, now: float) -> float | None:
        return None if self.wait_secs < 0 else now + self.wait_secs
