"""How the hot pipelines' standby workers stand, from one scheduling round's read: the metrics'.

Pure: the leader's round hands its read here (``standby_census``) and the metrics show the
result (``stratus_nimbus_standby_workers{state}``, ``stratus_nimbus_hot_pipelines``,
``stratus_nimbus_standby_coverage``). A hot pipeline is **covered** when a failover of its
active worker's host would promote a standby worker now: its placement names a supervisor
whose heartbeat reports the standby worker READY, for the generation and code the pipeline
runs now. One that is not (none placed yet, placed nowhere, starting, refused, failed, ready
for older code) fails over the warm or cold way::

    census = standby_census(pipelines, placements, heartbeats)
    census.states     # {"ready": 3, "starting": 1, "unplaced": 1, ...}: every state, 0 or more
    census.hot, census.covered, census.coverage       # 5, 3, 0.6
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from stratus.api.records import PipelineRecord, SupervisorHeartbeat
from stratus.api.standby_workers import (
    StandbyWorkerPlacement,
    StandbyWorkerState,
    wants_standby_worker,
)
from stratus.nimbus.scheduling.standby_plan import placement_beat

UNREPORTED = "unreported"  # placed, and its supervisor reports nothing of it yet
UNPLACED = "unplaced"  # a placement naming no supervisor (``unplaced_because`` says why)
CENSUS_STATES = (*(state.value.lower() for state in StandbyWorkerState), UNREPORTED, UNPLACED)


@dataclass(frozen=True)
class StandbyCensus:
    """The standby workers' placements by state (every one of ``CENSUS_STATES``), the hot
    pipelines and how many of them are covered."""

    states: Mapping[str, int]
    hot: int
    covered: int

    @property
    def coverage(self) -> float:
        """The fraction of hot pipelines covered; 1 when none is hot (none is uncovered)."""
        return self.covered / self.hot if self.hot else 1.0


def standby_census(
    pipelines: Mapping[str, PipelineRecord],
    placements: Mapping[str, tuple[StandbyWorkerPlacement | None, int]],
    heartbeats: Mapping[str, SupervisorHeartbeat],
) -> StandbyCensus:
    """The census of a round's read: the pipelines, the placements with their versions (one
    that does not decode, None, counts in no state) and every supervisor's heartbeat. A hot
    pipeline is ACTIVE with ``pipeline.standby: hot``, assigned or not."""
    states = dict.fromkeys(CENSUS_STATES, 0)
    for placement, _ in placements.values():
        if placement is not None:
            states[_state(placement, heartbeats)] += 1
    hot = [
        record
        for record in pipelines.values()
        if record.status.runs and wants_standby_worker(record.conf)
    ]
    covered = sum(1 for record in hot if _covered(record, placements, heartbeats))
    return StandbyCensus(states=states, hot=len(hot), covered=covered)


def _state(placement: StandbyWorkerPlacement, heartbeats: Mapping[str, SupervisorHeartbeat]) -> str:
    if placement.supervisor is None:
        return UNPLACED
    beat = placement_beat(placement, heartbeats)
    return UNREPORTED if beat is None else beat.state.value.lower()


def _covered(
    record: PipelineRecord,
    placements: Mapping[str, tuple[StandbyWorkerPlacement | None, int]],
    heartbeats: Mapping[str, SupervisorHeartbeat],
) -> bool:
    placement = placements.get(record.name, (None, 0))[0]
    if placement is None or placement.supervisor is None:
        return False
    if (placement.generation, placement.digest) != (record.generation, record.digest):
        return False
    beat = placement_beat(placement, heartbeats)
    return beat is not None and beat.state is StandbyWorkerState.READY
