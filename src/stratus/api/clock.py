"""The clock type that every component of stratus is given (leases, terms, timeouts, heartbeats).

One type, injected the same way everywhere (a ``clock`` argument, default ``time.monotonic``),
so that a test can drive a lease with a fake clock and a deadline computed by one part is
compared against the same clock by another.
"""

from __future__ import annotations

from collections.abc import Callable

Clock = Callable[[], float]
"""Seconds from an arbitrary origin that never goes backwards (``time.monotonic``)."""
