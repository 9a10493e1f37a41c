"""The clock type that every component of stratus is given (leases, terms, timeouts, heartbeats).

One type, injected the same way everywhere, so that a test can drive a lease with a fake clock
and a deadline computed by one part is compared against the same clock by another. Two kinds
of time pass through it: ``time.monotonic`` (the default) for every timeout, period and lease,
and a wall clock (``time.time``) only where a time is written down for other machines to read
(start times, kill times, heartbeat stamps). The argument's name says which: ``clock`` is
always monotonic, ``wall`` always the wall clock, in every component.
"""

from __future__ import annotations

from collections.abc import Callable

Clock = Callable[[], float]
"""Seconds as a float: ``time.monotonic`` unless the argument says it is a wall clock."""
