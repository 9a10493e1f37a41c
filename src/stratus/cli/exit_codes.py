"""What a failed ``stratus`` command tells a script: an exit code by class of failure, and
under ``--json`` one JSON object instead of text.

A script tells "fix the command" from "try again later" by the exit code alone, and reads
the stable ``error`` code (the API's, or one of the client's own) for the detail::

    $ stratus status nosuch --json; echo "exit $?"
    {"error": "unknown_pipeline", "message": "unknown pipeline 'nosuch'", "exit_code": 3}
    exit 3

The table is in ``docs/cli.md``; ``stratus haadmin`` keeps Hadoop's codes (0 and 255).
"""

from __future__ import annotations

import json
from enum import IntEnum
from typing import IO, Any

import click

from stratus.api.errors import (
    ApiError,
    ForbiddenError,
    HeadTooLargeError,
    InvalidConfError,
    InvalidNameError,
    InvalidRequestError,
    InvalidTransitionError,
    NoLeaderError,
    NoLogError,
    NotLeaderError,
    PackageRejectedError,
    PackageTooLargeError,
    PipelineExistsError,
    RecordTooLargeError,
    RequestTooLargeError,
    UnauthenticatedError,
    UnavailableError,
    UnknownCodeError,
    UnknownPipelineError,
    UnknownRunError,
    UnknownSupervisorError,
    UnknownVersionError,
)
from stratus.client.errors import (
    DrainNoRoomError,
    DrainTimeoutError,
    NimbusUnreachableError,
    PurgeFailedError,
    PurgeWaitTimeoutError,
    RolloutFailedError,
    RolloutTimeoutError,
)
from stratus.codedist.errors import InvalidPackageError
from stratus.errors import ConfigError
from stratus.zk.errors import ZooKeeperHistoryBehindError, ZooKeeperUnavailableError


class ExitCode(IntEnum):
    """The exit code of each class of failure."""

    OK = 0
    FAILED = 1  # anything else: a nimbus's internal error, a daemon that cannot go on
    USAGE = 2  # the command can never work as given: arguments, configuration, invalid input
    NOT_FOUND = 3  # no such pipeline, run, log or package
    REFUSED = 4  # no credential, an unknown one, or a role that does not allow the call
    CONFLICT = 5  # the pipeline's state does not allow it now: exists, killed, update waiting
    UNAVAILABLE = 6  # no nimbus answered, none leads, or ZooKeeper is out of reach


# The most specific class first: a subclass must come before the class it derives from.
_CLASSES: tuple[tuple[type[BaseException], ExitCode], ...] = (
    (ConfigError, ExitCode.USAGE),
    (InvalidPackageError, ExitCode.USAGE),
    (InvalidNameError, ExitCode.USAGE),
    (InvalidConfError, ExitCode.USAGE),
    (InvalidRequestError, ExitCode.USAGE),
    (PackageRejectedError, ExitCode.USAGE),
    (PackageTooLargeError, ExitCode.USAGE),
    (RequestTooLargeError, ExitCode.USAGE),
    (HeadTooLargeError, ExitCode.USAGE),
    (RecordTooLargeError, ExitCode.USAGE),
    (UnknownPipelineError, ExitCode.NOT_FOUND),
    (UnknownSupervisorError, ExitCode.NOT_FOUND),
    (NoLogError, ExitCode.NOT_FOUND),
    (UnknownRunError, ExitCode.NOT_FOUND),
    (UnknownCodeError, ExitCode.NOT_FOUND),
    (UnknownVersionError, ExitCode.NOT_FOUND),
    (UnauthenticatedError, ExitCode.REFUSED),
    (ForbiddenError, ExitCode.REFUSED),
    (PipelineExistsError, ExitCode.CONFLICT),
    (InvalidTransitionError, ExitCode.CONFLICT),
    (DrainNoRoomError, ExitCode.CONFLICT),
    (NimbusUnreachableError, ExitCode.UNAVAILABLE),
    (PurgeWaitTimeoutError, ExitCode.UNAVAILABLE),  # the kill and purge go on: wait again
    (PurgeFailedError, ExitCode.FAILED),  # an operator must make the root writable
    (RolloutTimeoutError, ExitCode.UNAVAILABLE),  # the change goes on: follow it with status
    (RolloutFailedError, ExitCode.FAILED),  # rolled back or failed: the reason says why
    (NotLeaderError, ExitCode.UNAVAILABLE),
    (UnavailableError, ExitCode.UNAVAILABLE),  # NoLeaderError too
    (ZooKeeperHistoryBehindError, ExitCode.FAILED),  # retrying cannot help: an operator must
    (ZooKeeperUnavailableError, ExitCode.UNAVAILABLE),
)

# The ``error`` of failures that carry no API code of their own.
_CLIENT_CODES: tuple[tuple[type[BaseException], str], ...] = (
    (NoLeaderError, "no_leader"),
    (NimbusUnreachableError, "unreachable"),
    (DrainNoRoomError, "no_room"),
    (DrainTimeoutError, "drain_timeout"),
    (PurgeFailedError, "purge_failed"),
    (PurgeWaitTimeoutError, "purge_wait_timeout"),
    (RolloutFailedError, "rollout_failed"),
    (RolloutTimeoutError, "rollout_timeout"),
    (ConfigError, "invalid_config"),
    (InvalidPackageError, "invalid_package"),
    (ZooKeeperHistoryBehindError, "zookeeper_history_behind"),
    (ZooKeeperUnavailableError, "zookeeper_unavailable"),
)


def exit_code_of(exc: BaseException) -> ExitCode:
    """The exit code that ``exc`` stands for (``FAILED`` for any error not in the table)."""
    if isinstance(exc, click.UsageError):
        return ExitCode.USAGE
    return next((code for cls, code in _CLASSES if isinstance(exc, cls)), ExitCode.FAILED)


def error_code_of(exc: BaseException) -> str:
    """The stable ``error`` code of ``exc``: the API's, or the client's own."""
    if isinstance(exc, click.UsageError):
        return "usage"
    own = next((code for cls, code in _CLIENT_CODES if isinstance(exc, cls)), None)
    if own is not None:
        return own
    return exc.code if isinstance(exc, ApiError) else "failed"


def error_body(exc: BaseException) -> dict[str, Any]:
    """The JSON object that reports ``exc`` under ``--json``."""
    message = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
    body: dict[str, Any] = {
        "error": error_code_of(exc),
        "message": message,
        "exit_code": int(exit_code_of(exc)),
    }
    if isinstance(exc, NotLeaderError):
        body["leader"] = exc.leader
    return body


class CommandFailed(click.ClickException):
    """A failure as the command reports it: ``Error: message`` on stderr, or with ``--json``
    its JSON object on stdout; the exit code is its class's."""

    def __init__(self, cause: BaseException, *, as_json: bool) -> None:
        message = cause.format_message() if isinstance(cause, click.ClickException) else str(cause)
        super().__init__(message)
        self.cause = cause
        self.as_json = as_json
        self.exit_code = int(exit_code_of(cause))  # type: ignore[misc]  # click: a ClassVar

    def show(self, file: IO[Any] | None = None) -> None:
        if not self.as_json:
            if isinstance(self.cause, click.UsageError):
                self.cause.show(file)  # with its usage line and hint
            else:
                super().show(file)
            return
        click.echo(json.dumps(error_body(self.cause)))  # stdout: what a script parses
