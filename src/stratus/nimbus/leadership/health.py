"""A nimbus's health verdict, as its failover controller's health monitor asks for it.

A pure function of what the daemon observes (``HealthFacts``) returns the problems found,
none when healthy. Unhealthy means the nimbus cannot do a leader's work, whatever its role:

- it is stopping;
- its ZooKeeper session is not connected (it can neither write fenced nor see the cluster),
  unless the connection is only suspended, for less than the session timeout: ZooKeeper electing
  a new leader of its own, or a server restarting, suspends every client at once, and the
  session (with the term a leader holds) comes back with the connection. No other nimbus
  could do better meanwhile, and a failover would cost a whole takeover for a blip;
- its leadership controller's thread is dead (it would never act on a transition);
- its package server is down (with ``nimbus.code.distributor: local``, the other nimbuses
  cannot fetch the code it holds, nor supervisors the code it assigns);
- its leader duties failed ``FAILED_ROUNDS_UNHEALTHY`` rounds in a row (it leads and does
  nothing useful: a standby should take over)::

    problems = verdict(HealthFacts(stopping=False, zookeeper="connected", ...))
    problems == []            # healthy
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

FAILED_ROUNDS_UNHEALTHY = 3  # duty rounds in a row with a failed duty that make a nimbus unhealthy


@dataclass(frozen=True)
class HealthFacts:
    """What the verdict looks at, read from the daemon's parts at one moment."""

    stopping: bool
    zookeeper: str  # the session's state: connected, suspended, expired, ...
    zookeeper_may_resume: bool  # suspended for less than the session timeout
    controller_running: bool
    package_server_serving: bool | None  # None: this nimbus serves no packages (by config)
    failing_duties: Sequence[str]  # the duties that failed in each of the last rounds
    failed_rounds: int  # rounds in a row in which some duty failed


def verdict(facts: HealthFacts) -> list[str]:
    """The problems that make the nimbus unhealthy, each ``what: why``; empty when healthy."""
    problems = []
    if facts.stopping:
        problems.append("stopping: the nimbus is shutting down")
    if facts.zookeeper != "connected" and not facts.zookeeper_may_resume:
        problems.append(f"zookeeper_disconnected: the ZooKeeper session is {facts.zookeeper}")
    if not facts.controller_running:
        problems.append("controller_stopped: the leadership controller's thread is not running")
    if facts.package_server_serving is False:
        problems.append("package_server_down: the package server (nimbus.code.port) stopped")
    if facts.failed_rounds >= FAILED_ROUNDS_UNHEALTHY:
        problems.append(
            f"duties_failing: {', '.join(facts.failing_duties) or 'a duty'} failed in "
            f"{facts.failed_rounds} rounds in a row"
        )
    return problems


class HealthWatch:
    """The verdict's facts, read live from the daemon's parts; counts failed duty rounds."""

    def __init__(
        self,
        *,
        stopping: Callable[[], bool],
        zookeeper: Callable[[], str],
        zookeeper_may_resume: Callable[[], bool],
        controller_running: Callable[[], bool],
        package_server_serving: Callable[[], bool | None],
    ) -> None:
        self._stopping = stopping
        self._zookeeper = zookeeper
        self._zookeeper_may_resume = zookeeper_may_resume
        self._controller_running = controller_running
        self._package_server_serving = package_server_serving
        self._mutex = threading.Lock()
        self._failed_rounds = 0
        self._failing: tuple[str, ...] = ()

    def note_round(self, failed: Sequence[str]) -> None:
        """One duty round ended; ``failed`` names its duties that raised."""
        with self._mutex:
            if failed:
                self._failed_rounds += 1
                self._failing = tuple(failed)
            else:
                self._failed_rounds, self._failing = 0, ()

    def term_ended(self) -> None:
        """A standby is not judged by the failures of its last term."""
        self.note_round([])

    def facts(self) -> HealthFacts:
        with self._mutex:
            failed_rounds, failing = self._failed_rounds, self._failing
        return HealthFacts(
            stopping=self._stopping(),
            zookeeper=self._zookeeper(),
            zookeeper_may_resume=self._zookeeper_may_resume(),
            controller_running=self._controller_running(),
            package_server_serving=self._package_server_serving(),
            failing_duties=failing,
            failed_rounds=failed_rounds,
        )

    def problems(self) -> list[str]:
        return verdict(self.facts())
