"""The health monitor's state machine, driven check by check against a scripted service."""

from __future__ import annotations

from dataclasses import dataclass, field

from stratus.ha.health_monitor import (
    HealthMonitor,
    HealthSettings,
    HealthState,
    backoff_delay,
)
from stratus.ha.protocol import (
    HAState,
    HealthReport,
    ServiceNotRespondingError,
    ServiceStatus,
    ServiceUnhealthyError,
)
from tests.harness.zkfixtures import wait_until

SETTINGS = HealthSettings(check_interval=0.5, max_backoff=3.0)


@dataclass
class ScriptedService:
    """Answers as ``answer`` says: "healthy", "unhealthy", "down" or "initializing"."""

    answer: str = "healthy"
    closed: int = 0
    address: str = "127.0.0.1:1"

    def status(self) -> ServiceStatus:
        if self.answer == "down":
            raise ServiceNotRespondingError("connection refused", self.address)
        state = HAState.INITIALIZING if self.answer == "initializing" else HAState.STANDBY
        return ServiceStatus(state=state, ready_to_become_active=True, address=self.address)

    def check_health(self) -> HealthReport:
        if self.answer == "unhealthy":
            raise ServiceUnhealthyError("disk full", self.address)
        return HealthReport()

    def close(self) -> None:
        self.closed += 1


@dataclass
class Recorder:
    states: list[HealthState] = field(default_factory=list)
    statuses: list[HAState] = field(default_factory=list)

    def enter_health_state(self, state: HealthState) -> None:
        self.states.append(state)

    def service_status(self, status: ServiceStatus) -> None:
        self.statuses.append(status.state)


def monitor_of(service: ScriptedService) -> tuple[HealthMonitor, Recorder, list[int]]:
    recorder, connects = Recorder(), [0]

    def connect() -> ScriptedService:
        connects[0] += 1
        return service

    return HealthMonitor(connect, recorder, SETTINGS), recorder, connects


def test_states_follow_the_answers_and_each_change_is_reported_once() -> None:
    service = ScriptedService()
    monitor, recorder, _ = monitor_of(service)
    for answer in ("initializing", "healthy", "healthy", "unhealthy", "down", "down", "healthy"):
        service.answer = answer
        monitor.check()
    assert recorder.states == [  # the first "initializing" is the monitor's own start state
        HealthState.SERVICE_HEALTHY,
        HealthState.SERVICE_UNHEALTHY,
        HealthState.SERVICE_NOT_RESPONDING,
        HealthState.SERVICE_HEALTHY,
    ]
    # every status answered is passed on, even when the state does not change
    assert recorder.statuses == [HAState.INITIALIZING] + [HAState.STANDBY] * 4


def test_a_service_that_restarts_initializing_takes_the_monitor_back_to_initializing() -> None:
    service = ScriptedService()
    monitor, recorder, _ = monitor_of(service)
    monitor.check()
    service.answer = "initializing"
    monitor.check()
    assert recorder.states == [HealthState.SERVICE_HEALTHY, HealthState.INITIALIZING]


def test_a_service_that_does_not_answer_is_reconnected_with_a_growing_back_off() -> None:
    service = ScriptedService(answer="down")
    monitor, _, connects = monitor_of(service)
    delays = [monitor.check() for _ in range(5)]
    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert connects[0] == 5 and service.closed == 5  # a fresh client for every attempt
    service.answer = "healthy"
    assert monitor.check() == SETTINGS.check_interval  # answered: back to the plain interval
    assert monitor.check() == SETTINGS.check_interval and connects[0] == 6


def test_back_off_starts_at_the_interval_and_is_capped() -> None:
    assert backoff_delay(0, SETTINGS) == 0.5
    assert backoff_delay(1, SETTINGS) == 0.5
    assert backoff_delay(10, SETTINGS) == 3.0


def test_a_broken_monitor_ends_in_health_monitor_failed() -> None:
    recorder = Recorder()

    def connect() -> ScriptedService:
        raise RuntimeError("a bug in the monitor")

    monitor = HealthMonitor(connect, recorder, SETTINGS)
    monitor.start()
    wait_until(lambda: recorder.states == [HealthState.HEALTH_MONITOR_FAILED], 5, "failed")
    monitor.stop()


def test_the_thread_checks_until_stopped() -> None:
    service = ScriptedService()
    recorder = Recorder()
    monitor = HealthMonitor(lambda: service, recorder, HealthSettings(check_interval=0.01))
    monitor.start()
    wait_until(lambda: len(recorder.statuses) >= 3, 5, "three checks")
    monitor.stop()
    assert recorder.states == [HealthState.SERVICE_HEALTHY]
    assert service.closed == 1


@dataclass
class DiesDuringACheck(ScriptedService):
    """Dies (its supervisor tells the monitor) between its status and its health answers."""

    monitor: HealthMonitor | None = None
    dying: bool = False

    def check_health(self) -> HealthReport:
        if self.dying and self.monitor is not None:
            self.dying = False
            self.monitor.service_gone()  # the answer below came from the process now dead
        return super().check_health()


def test_a_service_gone_is_not_responding_at_once_and_the_check_it_crossed_reports_nothing() -> (
    None
):
    service = DiesDuringACheck()
    monitor, recorder, _ = monitor_of(service)
    service.monitor = monitor
    monitor.check()
    assert recorder.states == [HealthState.SERVICE_HEALTHY]
    monitor.service_gone()  # its supervisor reaped it: no check needed
    assert recorder.states == [HealthState.SERVICE_HEALTHY, HealthState.SERVICE_NOT_RESPONDING]
    monitor.check()  # restarted and healthy
    service.dying = True
    monitor.check()
    assert monitor.state is HealthState.SERVICE_NOT_RESPONDING
    assert recorder.states[-2:] == [
        HealthState.SERVICE_HEALTHY,
        HealthState.SERVICE_NOT_RESPONDING,
    ]
    monitor.check()  # restarted again
    assert recorder.states[-1] is HealthState.SERVICE_HEALTHY
