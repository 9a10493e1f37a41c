"""The pacemaker's Prometheus metrics, in a registry of its own, scraped at ``GET /metrics``:
what every daemon shows (``stratus.web.metrics``: build info, process) and its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge

from stratus.web.metrics import CONTENT_TYPE_LATEST, CallbackCounter, daemon_registry, exposition

__all__ = ["CONTENT_TYPE_LATEST", "PacemakerMetrics"]

MAX_LABEL_PAIRS = 200


class PacemakerMetrics:
    """Requests by operation and outcome, refusals, and the store's live size."""

    def __init__(
        self,
        *,
        entries: Callable[[], int],
        stored_bytes: Callable[[], int],
        evicted: Callable[[], int],
        connections: Callable[[], int],
        warming: Callable[[], bool],
    ) -> None:
        self.registry = daemon_registry("pacemaker")
        self._children: dict[tuple[str, str], Any] = {}
        self.requests = Counter(
            "stratus_pacemaker_requests",
            "requests answered, by operation and outcome (ok or an error code)",
            ["op", "outcome"],
            registry=self.registry,
        )
        self.refused_connections = Counter(
            "stratus_pacemaker_refused_connections",
            "connections closed at once because pacemaker.max.connections were open",
            registry=self.registry,
        )
        self.bad_frames = Counter(
            "stratus_pacemaker_bad_frames",
            "oversized, truncated or malformed frames (their connection was closed)",
            registry=self.registry,
        )
        for name, doc, read in (
            ("stratus_pacemaker_entries", "nodes in the store", entries),
            ("stratus_pacemaker_bytes", "bytes of pulses and node names held", stored_bytes),
            ("stratus_pacemaker_connections", "open client connections", connections),
            ("stratus_pacemaker_warming", "1 during the first TTL after start", warming),
        ):
            Gauge(name, doc, registry=self.registry).set_function(
                lambda read=read: float(read())  # type: ignore[misc]
            )
        CallbackCounter(
            "stratus_pacemaker_evicted",
            "pulses evicted by their TTL since start",
            evicted,
            self.registry,
        )

    def count(self, op: str, outcome: str) -> None:
        """One answered request (the labelled child is looked up once per pair)."""
        child = self._children.get((op, outcome))
        if child is None:
            if len(self._children) >= MAX_LABEL_PAIRS:
                op = "other"  # a client inventing ops must not grow the registry
            child = self._children.setdefault((op, outcome), self.requests.labels(op, outcome))
        child.inc()

    def exposition(self) -> bytes:
        """The text format of every metric."""
        return exposition(self.registry)
