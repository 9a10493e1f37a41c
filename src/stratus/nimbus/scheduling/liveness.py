"""The leader's memory of when it last saw each heartbeat *change*.

A heartbeat carries its writer's wall-clock time, and wall clocks differ between machines.
Like Storm's nimbus, the leader therefore never compares that time with its own: it compares
each heartbeat with the one it saw before, and times the silence on its own monotonic
clock from the last change it observed::

    liveness = Liveness()                       # clock=time.monotonic
    liveness.reset()                            # at every gain of leadership
    liveness.observe("supervisor/s1", beat.time)  # each round, for every heartbeat read
    if liveness.silent_for("supervisor/s1") > conf.nimbus_supervisor_timeout_secs:
        ...                                     # judged dead

``reset()`` empties the memory and restarts every silence at zero. Called at every gain of
leadership, not only the first as Storm does, it guarantees that no term judges anything
dead before one whole timeout of its own has passed, however old the heartbeats it inherits
look. Not thread-safe: one thread (the leader's duties) owns it.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from stratus.api.clock import Clock


class Liveness:
    """When each key's token last changed, on an injected monotonic clock."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[str, tuple[Hashable, float]] = {}  # key -> (token, when it changed)
        self._since = clock()  # the last reset

    def observe(self, key: str, token: Hashable) -> None:
        """Note ``key``'s current ``token``; a token unlike the last one seen renews the key.

        The first token seen of a key (since it was forgotten or the memory reset) counts as
        a change.
        """
        last = self._seen.get(key)
        if last is None or last[0] != token:
            self._seen[key] = (token, self._clock())

    def silent_for(self, key: str, at: float | None = None) -> float:
        """Seconds from ``key``'s last change to ``at`` (default: now); a key not observed
        since the last ``reset()`` (or forgotten) counts from that reset.

        A caller judging from a read passes the moment the read *began*: a read that waited
        out a lost connection saw nothing while it waited, and that wait is not silence.
        Changes count from when they were observed, after the read: both ends err towards
        a shorter silence."""
        return max(0.0, (self._clock() if at is None else at) - self.changed_at(key))

    def changed_at(self, key: str) -> float:
        """When ``key`` last changed as observed (the last ``reset()`` if not since): the
        start of its silence, which stays the same for as long as the silence lasts."""
        last = self._seen.get(key)
        return self._since if last is None else last[1]

    def reset(self) -> None:
        """Forget every key and restart the silence of all of them now."""
        self._seen.clear()
        self._since = self._clock()

    def forget(self, key: str) -> None:
        """Drop ``key`` (a pipeline or supervisor that is gone); unknown keys are ignored."""
        self._seen.pop(key, None)

    def keys(self) -> set[str]:
        """The keys observed since the last reset and not forgotten."""
        return set(self._seen)
