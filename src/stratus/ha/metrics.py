"""The zkfc's Prometheus metrics, in a registry of its own, scraped at its endpoint's
``GET /metrics``: what every daemon shows (``stratus.web.metrics``: build info, process),
the health of the service it watches, whether it made that service active, its ZooKeeper
connection, and every fencing attempt by method and result::

    metrics = ZkfcMetrics(health=lambda: controller.health, active=..., zookeeper_connected=...)
    fencer = Fencer(specs, context, on_attempt=metrics.fence_attempt("other"))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import Counter, Gauge

from stratus.ha.fencing import FenceAttempt, MethodSpec
from stratus.ha.health_monitor import HealthState
from stratus.web.metrics import CONTENT_TYPE_LATEST, daemon_registry, exposition, state_gauge

__all__ = ["CONTENT_TYPE_LATEST", "FENCE_RESULTS", "ZkfcMetrics"]

FENCE_RESULTS = ("fenced", "failed", "error")


class ZkfcMetrics:
    """Every metric of one zkfc; gauges read live state through the callables given."""

    def __init__(
        self,
        *,
        health: Callable[[], HealthState],
        active: Callable[[], bool],
        zookeeper_connected: Callable[[], bool],
        fencing_methods: Iterable[MethodSpec] = (),
    ) -> None:
        self.registry = daemon_registry("zkfc")
        state_gauge(
            "stratus_zkfc_health_state",
            "1 for the health state of the watched service (initializing, service_healthy, "
            "service_unhealthy, service_not_responding, health_monitor_failed)",
            HealthState,
            health,
            self.registry,
        )
        Gauge(
            "stratus_zkfc_service_active",
            "1 while this zkfc has made its service active (it holds the election)",
            registry=self.registry,
        ).set_function(lambda: float(active()))
        Gauge(
            "stratus_zkfc_zookeeper_connected",
            "1 while the zkfc's ZooKeeper session is connected",
            registry=self.registry,
        ).set_function(lambda: float(zookeeper_connected()))
        self.fences = Counter(
            "stratus_zkfc_fences",
            "fencing attempts, by target (other: the old active; self: its own service after "
            "its session was lost), method and result (fenced, failed, error)",
            ["target", "method", "result"],
            registry=self.registry,
        )
        for method in {spec.name for spec in fencing_methods} | {"graceful"}:
            for result in FENCE_RESULTS:
                self.fences.labels("other", method, result)

    def fence_attempt(self, target: str) -> FenceAttempt:
        """The callback a ``Fencer`` of ``target`` ("other" or "self") reports to."""

        def attempt(method: str, result: str) -> None:
            self.fences.labels(target, method, result).inc()

        return attempt

    def exposition(self) -> bytes:
        return exposition(self.registry)
