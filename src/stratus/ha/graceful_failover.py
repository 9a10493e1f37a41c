"""Graceful manual failover, run by the TARGET's zkfc (Hadoop's ``ZKFailoverController.
gracefulFailoverToYou``), with any number of other nodes::

    failover = GracefulFailover(controller, others, ask_to_cede, active=leader, timeout=30.0)
    failover.run()      # this zkfc's service is active, and nobody was fenced

1. Refuse unless this zkfc's service is healthy, ready to become active and in the election.
2. If it is active already, succeed at once.
3. Ask every other zkfc of the group to cede for twice ``timeout``, the standbys first and
   the active last (a standby still in the election would take the lock the active gives
   up): the standbys quit, then the active one makes its service standby and quits deleting
   its breadcrumb (nobody needs to fence it), so that this node, the only candidate left,
   takes the lock.
4. Wait up to ``timeout`` for this zkfc to make its service active.
5. Either way, tell the zkfcs that ceded to rejoin now (a cede of 0 ms): on success they
   come back as standbys; on failure the old active campaigns again and comes back.

A zkfc that cannot be reached to cede fails the failover (the others rejoin): the node it
manages might still be active, and a graceful failover never fences.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol

from stratus.ha.health_monitor import HealthState
from stratus.ha.protocol import HAState, ServiceStatus
from stratus.ha.zkfc_protocol import FailoverFailedError, FailoverRefusedError, FailoverResult

log = logging.getLogger(__name__)


class Controller(Protocol):
    """What the failover needs of its local controller (``FailoverController`` has it)."""

    address: str | None
    health: HealthState
    status: ServiceStatus | None
    joined: bool
    given: HAState | None

    def wait_active(self, timeout: float) -> bool: ...


def refusal(controller: Controller) -> str | None:
    """Why the controller's service cannot be a failover target now; None if it can."""
    name = controller.address
    if controller.health is not HealthState.SERVICE_HEALTHY:
        return (
            f"the local service {name} is not currently healthy ({controller.health.name}); "
            "it cannot be the failover target: fix it, or fail over to another node"
        )
    status = controller.status
    if status is None or not status.ready_to_become_active:
        why = status.not_ready_reason if status is not None else None
        return (
            f"the local service {name} is not ready to become active"
            f"{f' ({why})' if why else ''}; it cannot be the failover target"
        )
    if not controller.joined:
        return (
            f"the zkfc of {name} is not in the election (it ceded or is waiting to rejoin); "
            "retry once it has rejoined"
        )
    return None


class GracefulFailover:
    """One graceful failover to the controller's service at a time; see the module doc."""

    def __init__(
        self,
        controller: Controller,
        others: Callable[[], dict[str, str]],
        ask_to_cede: Callable[[str, int], None],
        *,
        active: Callable[[], str | None],
        timeout: float,
    ) -> None:
        self._controller = controller
        self._others = others  # {service: zkfc endpoint} of the group's other zkfcs
        self._ask_to_cede = ask_to_cede  # (endpoint, millis); raises if it could not
        self._active = active  # the service that holds the lock now, if any
        self.timeout = timeout
        self._one_at_a_time = threading.Lock()

    def run(self) -> FailoverResult:
        with self._one_at_a_time:
            return self._run()

    def _run(self) -> FailoverResult:
        controller = self._controller
        service = controller.address or "?"
        why = refusal(controller)
        if why is not None:
            log.warning("event=graceful_failover_refused service=%s why=%s", service, why)
            raise FailoverRefusedError(why)
        if controller.given is HAState.ACTIVE:
            log.info("event=graceful_failover service=%s already_active=True", service)
            return FailoverResult(service=service, already_active=True)
        others = self._active_last(self._others())
        log.info("event=graceful_failover service=%s others=%s", service, ",".join(others))
        ceded: dict[str, str] = {}
        try:
            for other, endpoint in others.items():
                try:
                    self._ask_to_cede(endpoint, int(self.timeout * 2000))
                except Exception as exc:
                    raise FailoverFailedError(
                        f"the zkfc of {other} ({endpoint}) did not cede: {exc}; the failover "
                        f"to {service} was abandoned and the nodes that ceded rejoin"
                    ) from exc
                ceded[other] = endpoint
            if not controller.wait_active(self.timeout):
                raise FailoverFailedError(
                    f"{service} did not become active within {self.timeout:g} s "
                    "(ha.zkfc.failover.timeout.secs); the nodes that ceded rejoin, so the "
                    "previous active can come back: see this zkfc's log for why"
                )
        finally:
            self._rejoin(ceded)
        log.info("event=graceful_failover_done service=%s ceded=%s", service, ",".join(ceded))
        return FailoverResult(service=service, ceded=sorted(ceded))

    def _active_last(self, others: dict[str, str]) -> dict[str, str]:
        active = self._active()
        return dict(sorted(others.items(), key=lambda item: item[0] == active))

    def _rejoin(self, ceded: dict[str, str]) -> None:
        for other, endpoint in ceded.items():
            try:
                self._ask_to_cede(endpoint, 0)
            except Exception as exc:  # it rejoins by itself when its cede ends
                log.warning("event=rejoin_request_failed service=%s error=%s", other, exc)
