"""What every stratus daemon's ``/metrics`` shows, whatever the daemon: one registry each.

A daemon's registry starts with ``stratus_build_info`` (1, labelled with the stratus and
Python versions and the daemon's kind), the process's own metrics (``process_*``: CPU,
memory, open files, start time; Linux) and the Python platform's (``python_info``), so that
the four daemons (nimbus, supervisor, zkfc, pacemaker) are scraped and dashboarded alike.
A registry per daemon, not the global one: several daemons may share one test process::

    registry = daemon_registry("nimbus")
    Gauge("stratus_nimbus_is_leader", "...", registry=registry)
    CallbackCounter("stratus_nimbus_code_sync_rounds", "...", sync.rounds, registry)
    body = exposition(registry)      # served with CONTENT_TYPE_LATEST

Counters are named without ``_total``: the client library adds it to the exposed name.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Iterator
from enum import Enum

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from stratus import __version__

__all__ = [
    "CONTENT_TYPE_LATEST",
    "CallbackCounter",
    "daemon_registry",
    "exposition",
    "state_gauge",
]

BUILD_INFO = "stratus_build_info"


def daemon_registry(daemon: str) -> CollectorRegistry:
    """A new registry holding what every daemon exposes: build info, process, platform."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    Gauge(
        BUILD_INFO,
        "1, labelled with the stratus version, the Python version and the daemon's kind",
        ["version", "python", "daemon"],
        registry=registry,
    ).labels(__version__, platform.python_version(), daemon).set(1)
    return registry


class CallbackCounter(Collector):
    """A counter whose value another component keeps (read at each scrape), exposed as
    ``<name>_total``; for counts that exist anyway, such as a loop's rounds."""

    def __init__(
        self, name: str, documentation: str, read: Callable[[], float], registry: CollectorRegistry
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._read = read
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self._name, self._documentation, value=float(self._read()))

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self._name, self._documentation)


def state_gauge(
    name: str,
    documentation: str,
    states: Iterable[Enum],
    current: Callable[[], Enum],
    registry: CollectorRegistry,
) -> Gauge:
    """One series per state (label ``state``, the state's value): 1 for the one ``current()``
    names at the scrape, 0 for the others; a state machine as Prometheus shows one."""
    gauge = Gauge(name, documentation, ["state"], registry=registry)
    for state in states:
        gauge.labels(state.value).set_function(
            lambda state=state: float(current() is state)  # type: ignore[misc]
        )
    return gauge


def exposition(registry: CollectorRegistry) -> bytes:
    """The Prometheus text format of every metric of ``registry``."""
    return generate_latest(registry)
