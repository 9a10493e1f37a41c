"""Python client of the nimbus HTTP API, with leader discovery through ``nimbus.seeds``.

It guarantees that a leader-only call (submit, kill, activate, deactivate, rebalance) reaches
the nimbus that leads now, across a failover, or fails with a ``StratusError`` once the retry
deadline has passed; and that a retried ``submit`` never creates a second pipeline, because
every attempt of one call carries the same request id. Reads go to any nimbus that answers::

    with NimbusClient(["10.0.0.1:6627", "10.0.0.2:6627"]) as client:
        client.submit("wordcount", Path("wordcount/"), {"spark.sql.shuffle.partitions": 4})
        client.wait_replicated("wordcount")     # while PENDING: min replication not reached
        client.deactivate("wordcount")
        print(client.leader().address, client.status("wordcount").status)
        client.kill("wordcount", wait_secs=0)

Leader discovery asks the seeds ``GET /api/v1/leader`` one after another. Unlike Storm's
client, a seed that is down, times out or knows no leader does not end the search: the next
seed is asked, and when none knows a leader the client backs off and asks again. The leader
found is remembered and asked directly until it stops answering or says it does not lead
(``not_leader``, whose ``leader`` field the client follows). The client never talks to
ZooKeeper.

Retries (tenacity: full-jitter exponential backoff, at most ``BACKOFF_MAX_SECS`` between
attempts) cover connection failures, timeouts, ``not_leader`` and ``unavailable``, until
``retry_deadline`` seconds after the call began; the deadline bounds when the last attempt
starts, and each attempt is bounded by ``request_timeout``; its connect by the shorter
``connect_timeout``, so that a nimbus on a dead host is left soon for the next. Every other
API error is raised at once as its class from ``stratus.api.errors`` (re-exported here).
"""

from stratus.api.errors import (
    ApiError,
    ForbiddenError,
    InvalidConfError,
    InvalidNameError,
    InvalidRequestError,
    InvalidTransitionError,
    NotLeaderError,
    PackageRejectedError,
    PackageTooLargeError,
    PipelineExistsError,
    RecordTooLargeError,
    RequestTooLargeError,
    UnauthenticatedError,
    UnavailableError,
    UnknownPipelineError,
)
from stratus.client.errors import NimbusUnreachableError, NoLeaderError
from stratus.client.nimbus_client import NimbusClient
from stratus.client.routing import BACKOFF_MAX_SECS, RetryNotice
from stratus.codedist.errors import InvalidPackageError

__all__ = [
    "BACKOFF_MAX_SECS",
    "ApiError",
    "ForbiddenError",
    "InvalidConfError",
    "InvalidNameError",
    "InvalidPackageError",
    "InvalidRequestError",
    "InvalidTransitionError",
    "NimbusClient",
    "NimbusUnreachableError",
    "NoLeaderError",
    "NotLeaderError",
    "PackageRejectedError",
    "PackageTooLargeError",
    "PipelineExistsError",
    "RecordTooLargeError",
    "RequestTooLargeError",
    "RetryNotice",
    "UnauthenticatedError",
    "UnavailableError",
    "UnknownPipelineError",
]
