"""The health monitor: one thread that checks the managed service and reports its state.

Hadoop's HealthMonitor. Every ``check_interval`` it asks the service for its status and its
health (each call bounded by the client's RPC timeout) and turns the answers into one of five
states; every change of state, and every status the service reports, goes to its callbacks::

    monitor = HealthMonitor(connect, callbacks, HealthSettings(check_interval=1.0))
    monitor.start()          # callbacks.enter_state(HealthState.SERVICE_HEALTHY), ...
    monitor.service_gone()   # its process exited: SERVICE_NOT_RESPONDING now
    monitor.stop()

A service that does not answer is reconnected (a new client) after a back-off that doubles
from ``check_interval`` up to ``max_backoff``, so a dead service is not hammered while a
restarted one is found again quickly. A monitor whose service is its zkfc's child is told
when the child exits (``service_gone``): it turns ``SERVICE_NOT_RESPONDING`` at once, and a
check that was under way when the child died reports nothing. An error of the monitor itself
(a bug, not the service) ends the thread in ``HEALTH_MONITOR_FAILED``, which the controller
treats as fatal.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from stratus.ha.protocol import (
    HAServiceError,
    HAState,
    HealthReport,
    ServiceStatus,
    ServiceUnhealthyError,
)

log = logging.getLogger(__name__)


class HealthState(Enum):
    """What the monitor knows of its service (Hadoop's ``HealthMonitor.State``)."""

    INITIALIZING = "initializing"  # not contacted yet, or the service says it is starting
    SERVICE_HEALTHY = "service_healthy"
    SERVICE_UNHEALTHY = "service_unhealthy"  # it answered: it is not healthy
    SERVICE_NOT_RESPONDING = "service_not_responding"  # no answer, or nonsense, in time
    HEALTH_MONITOR_FAILED = "health_monitor_failed"  # the monitor itself broke: fatal


class CheckedService(Protocol):
    """The calls the monitor makes (``HAServiceClient`` has them)."""

    address: str

    def status(self) -> ServiceStatus: ...

    def check_health(self) -> HealthReport: ...

    def close(self) -> None: ...


class HealthCallbacks(Protocol):
    """Where the monitor reports (the failover controller)."""

    def enter_health_state(self, state: HealthState) -> None:
        """The monitor's state changed to ``state``."""

    def service_status(self, status: ServiceStatus) -> None:
        """The service answered its status (every check that got one)."""


@dataclass(frozen=True)
class HealthSettings:
    """``ha.health.check.interval.secs`` and ``ha.health.max.backoff.secs``."""

    check_interval: float = 1.0
    max_backoff: float = 10.0


def backoff_delay(failures: int, settings: HealthSettings) -> float:
    """The wait after ``failures`` unanswered checks in a row: the interval, doubling, capped."""
    if failures <= 0:
        return settings.check_interval
    return min(settings.check_interval * 2.0 ** (failures - 1), settings.max_backoff)


def verdict(status: ServiceStatus) -> HealthState:
    """The state of a service that answered its health check as healthy, given its status."""
    if status.state is HAState.INITIALIZING:
        return HealthState.INITIALIZING
    return HealthState.SERVICE_HEALTHY


class HealthMonitor:
    """Checks one service on a thread of its own; see the module docstring."""

    def __init__(
        self,
        connect: Callable[[], CheckedService],
        callbacks: HealthCallbacks,
        settings: HealthSettings,
    ) -> None:
        self._connect = connect
        self._callbacks = callbacks
        self.settings = settings
        self._service: CheckedService | None = None
        self._failures = 0
        self._state_lock = threading.Lock()  # the monitor's thread and service_gone's caller
        self._generation = 0  # one more at every service_gone: a check across it is void
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health-monitor", daemon=True)
        self.state = HealthState.INITIALIZING
        self.last_status: ServiceStatus | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        if self._service is not None:
            self._service.close()
            self._service = None

    def service_gone(self) -> None:
        """The service's process exited (its supervisor reaped it): not responding, now."""
        with self._state_lock:
            self._generation += 1
            self._enter_locked(HealthState.SERVICE_NOT_RESPONDING)

    def check(self) -> float:
        """One check: report what it found; returns the seconds to wait before the next one."""
        generation = self._generation
        if self._service is None:
            self._service = self._connect()
        try:
            status = self._service.status()
            self.last_status = status
            self._callbacks.service_status(status)
            self._service.check_health()
        except ServiceUnhealthyError as exc:
            self._failures = 0
            log.warning("event=service_unhealthy service=%s why=%s", self._service.address, exc)
            self._enter(HealthState.SERVICE_UNHEALTHY, generation)
            return self.settings.check_interval
        except HAServiceError as exc:
            self._failures += 1
            log.warning(
                "event=service_not_responding service=%s failures=%d error=%s",
                self._service.address,
                self._failures,
                exc,
            )
            self._service.close()
            self._service = None  # reconnect: a restarted service gets a fresh client
            self._enter(HealthState.SERVICE_NOT_RESPONDING, generation)
            return backoff_delay(self._failures, self.settings)
        self._failures = 0
        self._enter(verdict(status), generation)
        return self.settings.check_interval

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                delay = self.check()
                self._stop.wait(delay)
        except Exception:
            log.exception("event=health_monitor_failed")
            self._enter(HealthState.HEALTH_MONITOR_FAILED)

    def _enter(self, state: HealthState, generation: int | None = None) -> None:
        """Report ``state``, unless the service went (``service_gone``) during the check
        that found it: that check's answer may come from the process that is now dead."""
        with self._state_lock:
            if generation is not None and generation != self._generation:
                return
            self._enter_locked(state)

    def _enter_locked(self, state: HealthState) -> None:
        if state is self.state:
            return
        log.info("event=health_state from=%s to=%s", self.state.name, state.name)
        self.state = state
        self._callbacks.enter_health_state(state)
