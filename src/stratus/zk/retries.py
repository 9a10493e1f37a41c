"""The ZooKeeper layer's one retry policy, for every call a session retries, its
reconnections and the ephemeral nodes' upkeep::

    retry_policy(deadline=10.0)(client.get, "/stratus")   # pauses of 0.05 s doubling to 0.5 s
"""

from __future__ import annotations

from collections.abc import Callable

from kazoo.retry import KazooRetry

RETRY_DELAY_SECS = 0.05  # first pause of a retried call or reconnection
RETRY_MAX_DELAY_SECS = 0.5  # longest pause: reconnection after a server restart stays quick


def retry_policy(
    *,
    max_tries: int = -1,
    deadline: float | None = None,
    interrupt: Callable[[], bool] | None = None,
) -> KazooRetry:
    """The ZooKeeper layer's one retry policy: pauses from ``RETRY_DELAY_SECS``, doubling up
    to ``RETRY_MAX_DELAY_SECS``; ``max_tries`` -1 retries until ``deadline`` (seconds, None:
    no end) or until ``interrupt()`` is true."""
    return KazooRetry(
        max_tries=max_tries,
        delay=RETRY_DELAY_SECS,
        backoff=2,
        max_delay=RETRY_MAX_DELAY_SECS,
        deadline=deadline,
        interrupt=interrupt,
    )
