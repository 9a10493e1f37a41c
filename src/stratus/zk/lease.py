"""The lease of a ZooKeeper session: until when this process may trust that its session lives.

ZooKeeper expires a session only after hearing nothing from it for the session timeout. So a
reply to a request sent at ``t`` proves the session alive at ``t``, and nobody else can take
over what the session holds before ``t`` plus the session timeout. The lease vouches for the
session until ``t + LEASE_FRACTION * timeout``, well before that, and it is:

- tied to the session that renewed it: a new session starts with no lease, so a term won by
  an expired session never looks alive again, whatever order events arrive in;
- over at once when the connection is suspended (``connection_changed(False)``);
- never stale by more than kazoo's connection-loss detection time: a process that was frozen
  finds the lease past on waking, before kazoo tells it anything.

Pure and thread-safe; the session renews it (``probe`` before a request, ``confirm`` after
its reply)::

    lease = SessionLease(clock=time.monotonic)
    lease.connection_changed(connected=True)
    probe = lease.probe()
    client.exists("/")                                   # any reply proves the session alive
    lease.confirm(probe, session_id=42, length=6.0)
    lease.end(42)                                        # probe.sent + 6.0
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from stratus.api.clock import Clock

LEASE_FRACTION = 2 / 3  # of the session timeout: how long one confirmed contact vouches for us
RENEW_FRACTION = 1 / 6  # of the session timeout: how often the session renews its lease


@dataclass(frozen=True)
class LeaseProbe:
    """A request about to be sent: when, and in which connection generation."""

    generation: int
    sent: float


class SessionLease:
    """Until when the lease vouches for which session; see the module docstring."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._connected = False
        self._generation = 0  # bumped at every connection state change
        self._session: int | None = None  # the session the lease vouches for
        self._until = 0.0

    def connection_changed(self, connected: bool) -> None:
        """The connection state changed; a lost connection ends the lease at once."""
        with self._lock:
            self._generation += 1
            self._connected = connected
            if not connected:
                self._until = 0.0

    def probe(self) -> LeaseProbe:
        """Note the time before a request whose reply will renew the lease."""
        with self._lock:
            return LeaseProbe(self._generation, self._clock())

    def confirm(self, probe: LeaseProbe, session_id: int | None, length: float) -> None:
        """ZooKeeper answered the probed request: vouch for ``session_id`` until sent + length.

        A reply from before a connection change proves nothing about the connection since.
        """
        until = probe.sent + length
        with self._lock:
            if not self._connected or probe.generation != self._generation:
                return
            if session_id != self._session:
                self._session, self._until = session_id, until
            else:
                self._until = max(self._until, until)

    def end(self, session_id: int | None) -> float:
        """Until when the lease vouches for ``session_id``; 0 for any other session."""
        with self._lock:
            return self._until if session_id == self._session else 0.0
