"""The HA service protocol's four routes on a nimbus (``stratus.ha.protocol``), role ``admin``.

Thin: each route calls the nimbus's ``NimbusHAService``, whose refusals are API errors
(409 ``transition_failed`` or ``stale_epoch``, 503 ``unhealthy``). The routes are plain
functions, so a transition that waits for the leadership controller waits on a worker
thread, never on the event loop.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from stratus.api.records import ErrorBody
from stratus.ha.protocol import (
    HEALTH_PATH,
    STATUS_PATH,
    TO_ACTIVE_PATH,
    TO_STANDBY_PATH,
    HealthReport,
    RequestSource,
    ServiceStatus,
    TransitionToActive,
    TransitionToStandby,
)
from stratus.nimbus.leadership.ha_service import NimbusHAService

HA_TAG = "ha service (admin)"
_REFUSED: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorBody, "description": "transition_failed or stale_epoch: why not"}
}
_UNHEALTHY: dict[int | str, dict[str, Any]] = {
    503: {"model": ErrorBody, "description": "unhealthy: every problem found"}
}


def add_ha_routes(app: FastAPI, ha: NimbusHAService) -> None:
    @app.get(STATUS_PATH, tags=[HA_TAG])
    def ha_status() -> ServiceStatus:
        """The nimbus's HA state, the epoch it acts under, and whether it could become active."""
        return ha.status()

    @app.get(HEALTH_PATH, tags=[HA_TAG], responses=_UNHEALTHY)
    def ha_health() -> HealthReport:
        """200 while healthy; 503 ``unhealthy`` naming every problem."""
        return ha.health()

    @app.post(TO_ACTIVE_PATH, tags=[HA_TAG], responses=_REFUSED)
    def ha_transition_to_active(body: TransitionToActive) -> ServiceStatus:
        """Act as leader under ``epoch``, the term this nimbus's zkfc won (``zkfc`` mode only)."""
        return ha.to_active(body.epoch, body.source)

    @app.post(TO_STANDBY_PATH, tags=[HA_TAG], responses=_REFUSED)
    def ha_transition_to_standby(body: TransitionToStandby | None = None) -> ServiceStatus:
        """Stop acting as leader now; idempotent (``zkfc`` mode only)."""
        return ha.to_standby(body.source if body is not None else RequestSource.ZKFC)
