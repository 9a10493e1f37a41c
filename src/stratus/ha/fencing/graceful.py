"""``graceful``: ask the old active to go standby through the HA protocol."""

from __future__ import annotations

import logging

from stratus.ha.fencing.host import stopped_locally
from stratus.ha.fencing.protocol import (
    Fence,
    FenceTarget,
    FencingContext,
    Usage,
    refuse_argument,
)
from stratus.ha.protocol import HAServiceError, HAState, RequestSource, ServiceTimedOutError

log = logging.getLogger(__name__)


class GracefulFence:
    """Ask the old active to go standby, with a timeout and one retry.

    A graceful fence that cannot succeed should not hold the failover for its timeout when
    the next method can act: a timeout is not retried (a service that let a whole timeout
    pass without answering is frozen or overloaded, and a second wait only delays the next
    method), and a service whose listening socket is held by a stopped process of this host
    (SIGSTOP, a debugger) is not asked at all.
    """

    ATTEMPTS = 2

    def __init__(self, context: FencingContext) -> None:
        self._context = context

    def fence(self, target: FenceTarget) -> bool:
        if stopped_locally(target):
            log.warning("event=graceful_fence_skipped target=%s reason=stopped", target.address)
            return False
        for attempt in range(1, self.ATTEMPTS + 1):
            client = self._context.connect(target.address, self._context.graceful_timeout)
            try:
                status = client.transition_to_standby(RequestSource.ZKFC)
            except HAServiceError as exc:
                log.warning(
                    "event=graceful_fence_failed target=%s attempt=%d error=%s",
                    target.address,
                    attempt,
                    exc,
                )
                if isinstance(exc, ServiceTimedOutError):
                    return False
                continue
            finally:
                client.close()
            if status.state is not HAState.ACTIVE:
                return True
        return False


class GracefulMethod:
    name = "graceful"
    usages = (
        Usage(
            "graceful",
            "asks the old active to go standby (`transition-to-standby`), with "
            "`ha.fencing.graceful.timeout.secs`, retried once after a refusal (not after a "
            "timeout); not asked at all when it is a process of this host that is stopped "
            "(SIGSTOP, `/proc` state `T`), since it could not answer",
        ),
    )
    not_for_supervisors = (
        "the graceful stop through the supervisor's endpoint is always tried first"
    )

    def check_argument(self, argument: str | None, entry: str, key: str) -> None:
        refuse_argument(self.name, argument, entry, key)

    def create(self, argument: str | None, context: FencingContext) -> Fence:
        return GracefulFence(context)


METHOD = GracefulMethod()
