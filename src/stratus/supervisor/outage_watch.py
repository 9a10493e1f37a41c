"""Rides out an outage of ZooKeeper: while the session is down, prove that no quorum serves.

A supervisor that writes no heartbeat for ``supervisor.fence.timeout.secs`` fences itself,
because it cannot tell an outage of ZooKeeper from its own partition, and the leader may move
its pipelines. With ``supervisor.zookeeper.outage: ride`` (the default) this thread asks the
members themselves every heartbeat period while the session is disconnected
(``stratus.zk.quorum_probe``); each probe that proves no quorum serves extends the lease from
the moment the probe began (``HeartbeatLease.outage_proven``, through the control loop). Nobody
can move a pipeline without a quorum, and a leader that finds ZooKeeper under a new leader epoch
when it reconnects waits a whole supervisor timeout before judging anyone: the workers keep
running through the outage. A supervisor cut off alone reaches no majority that says so, proves
nothing, and fences on time. While connected, the watch checks that ``zookeeper.servers`` names
every voting member of the ensemble's configuration once; until it has, no probe proves
anything. A list that does not match is logged once
(``event=zookeeper_outage_ride_unavailable``, again only if the verdict changes) and told to
``on_membership``, which the supervisor shows in its registration (``outage_verdict``: ride,
or fence and why)::

    watch = OutageWatch("s1", settings.zk, connected=lambda: session.connected,
                        on_proven=loop.outage_proven, interval_secs=1.0)
    watch.check_membership()   # at start, connected: why riding is off, or None
    outage_verdict(watch)      # {"mode": "ride", "unavailable": None}; without a watch, fence
    watch.start()
    watch.stop()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Literal, TypedDict

from stratus.api.clock import Clock
from stratus.zk.quorum_probe import QuorumProbe, membership_mismatch, probe_quorum
from stratus.zk.session import ZkSettings

log = logging.getLogger(__name__)

PROBE_TIMEOUT_SECS = 1.0  # per member; a member slower than this is unknown
MEMBERSHIP_CHECK_SECS = 60.0  # while connected, the ensemble's membership is read this often


class OutageVerdict(TypedDict):
    """What a supervisor does through an outage of ZooKeeper, and why it fences if told to
    ride (``SupervisorRegistration.update_outage``'s arguments)."""

    mode: Literal["ride", "fence"]
    unavailable: str | None


def outage_mode(ride_unavailable: str | None) -> Literal["ride", "fence"]:
    """What a supervisor told to ride does through an outage of ZooKeeper."""
    return "ride" if ride_unavailable is None else "fence"


def outage_verdict(watch: OutageWatch | None) -> OutageVerdict:
    """What the registration says of outages of ZooKeeper, as of now: without a watch
    (``supervisor.zookeeper.outage: fence``) the supervisor fences."""
    if watch is None:
        return {"mode": "fence", "unavailable": None}
    return {"mode": outage_mode(watch.unavailable), "unavailable": watch.unavailable}


class OutageWatch:
    """One thread that probes the ensemble while the session is down; see the module
    docstring."""

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        supervisor: str,
        zk: ZkSettings,
        *,
        connected: Callable[[], bool],
        on_proven: Callable[[float], None],
        interval_secs: float,
        read_config: Callable[[], bytes] | None = None,
        probe: Callable[[], QuorumProbe] | None = None,
        on_membership: Callable[[str | None], None] = lambda _unavailable: None,
        clock: Clock = time.monotonic,
    ) -> None:
        self._supervisor = supervisor
        self._connected = connected
        self._on_proven = on_proven
        self._interval = interval_secs
        self._probe = probe or (lambda: _probe(zk))
        self._clock = clock
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="outage-watch", daemon=True)
        self._last_verdict: bool | None = None  # for logging changes only
        self._hosts = zk.hosts
        self._read_config = read_config  # /zookeeper/config, read while connected
        # Why a probe would prove nothing (None: it may); unchecked means nothing is proven.
        self._mismatch: str | None = None if read_config is None else "not checked yet"
        self._checked_at: float | None = None  # the last read of the membership
        self._checked_before = False  # a read of the membership gave a verdict once
        self._on_membership = on_membership  # told each new verdict of a check

    @property
    def unavailable(self) -> str | None:
        """Why no probe can prove an outage now (the list does not match the ensemble, or
        was not checked yet), or None: a proof may keep the workers running."""
        return self._mismatch

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            # A wait, then one probe (every member at once) or one read of the membership:
            self._thread.join(timeout=self._interval + 2 * PROBE_TIMEOUT_SECS)

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            if self._connected():
                self._last_verdict = None
                due = (
                    self._checked_at is None
                    or self._clock() >= self._checked_at + MEMBERSHIP_CHECK_SECS
                )
                if due:
                    self.check_membership()
                continue
            self.probe_once()

    def check_membership(self) -> str | None:
        """While connected: does ``zookeeper.servers`` name every voting member once? Why
        not (a probe of it would prove nothing), or None."""
        if self._read_config is None:
            self._mismatch = None
            return None
        try:
            config = self._read_config()
        except Exception as exc:  # the connection just dropped, say: the last verdict stands
            log.debug(
                "event=zookeeper_membership_unread supervisor=%s error=%r", self._supervisor, exc
            )
            return self._mismatch
        self._checked_at = self._clock()
        mismatch = membership_mismatch(self._hosts, config)
        if mismatch == self._mismatch:
            return mismatch
        if mismatch is not None:
            log.warning(
                "event=zookeeper_outage_ride_unavailable supervisor=%s reason=%r "
                "action=fence_on_outages servers=%s fix=%r",
                self._supervisor,
                mismatch,
                self._hosts,
                "list every voting member of the ensemble once in zookeeper.servers",
            )
        elif self._checked_before:
            log.warning(
                "event=zookeeper_outage_ride_available supervisor=%s action=ride_outages",
                self._supervisor,
            )
        self._checked_before = True
        self._mismatch = mismatch
        self._on_membership(mismatch)
        return mismatch

    def probe_once(self) -> bool:
        """Probe now; report a proof to ``on_proven`` with the probe's start. Whether it was.
        With a server list that was not (or could not be) checked, nothing can be proven,
        and the members are not asked."""
        if self._mismatch is not None:
            return False
        started = self._clock()
        try:
            probe = self._probe()
        except Exception:  # an unsure probe proves nothing; the lease runs out on time
            log.exception("event=zookeeper_outage_probe_failed supervisor=%s", self._supervisor)
            return False
        proven = probe.proves_no_quorum()
        if proven:
            self._on_proven(started)
        if proven is not self._last_verdict:
            self._last_verdict = proven
            log.warning(
                "event=zookeeper_outage_probe supervisor=%s proven=%s members=%s action=%s",
                self._supervisor,
                str(proven).lower(),
                probe.summary(),
                "workers_keep_running" if proven else "lease_runs_out_on_time",
            )
        return proven


def _probe(zk: ZkSettings) -> QuorumProbe:
    return probe_quorum(
        zk.hosts, PROBE_TIMEOUT_SECS, zk.tls.ssl_context(), refusals=zk.outage_refusals
    )
