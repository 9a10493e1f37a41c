"""Errors of the nimbus API, each with the stable code and HTTP status it travels as.

The server raises them and renders ``{"error": code, "message": ..., "leader": ...}``; the
client turns that body back into the same class (``error_from_body``), so a caller catches
``UnknownPipelineError`` whichever side of the wire found the problem.
"""

from __future__ import annotations

from typing import ClassVar

from stratus.errors import StratusError


class ApiError(StratusError):
    """An error that the nimbus API reports with a code and an HTTP status."""

    code: ClassVar[str] = "internal"
    status: ClassVar[int] = 500
    retryable: ClassVar[bool] = False  # true if a client may retry, maybe on another nimbus


class NotLeaderError(ApiError, RuntimeError):
    """A leader-only call reached a nimbus that does not lead; ``leader`` is who does, if known."""

    code = "not_leader"
    status = 421  # Misdirected Request: ask the leader instead
    retryable = True

    def __init__(self, message: str, leader: str | None = None) -> None:
        super().__init__(message)
        self.leader = leader


class UnauthenticatedError(ApiError):
    """The call carries no credential, or one the nimbus does not know (``WWW-Authenticate``)."""

    code = "unauthenticated"
    status = 401


class ForbiddenError(ApiError):
    """The caller is known, but its role does not allow this call."""

    code = "forbidden"
    status = 403


class UnknownPipelineError(ApiError):
    code = "unknown_pipeline"
    status = 404


class UnknownSupervisorError(ApiError):
    """No supervisor of that id is registered, heartbeats, holds a pipeline or is cordoned."""

    code = "unknown_supervisor"
    status = 404


class PipelineExistsError(ApiError):
    code = "pipeline_exists"
    status = 409


class PurgePendingError(PipelineExistsError):
    """The name's checkpoints are being deleted (a kill --purge, or their retention ended):
    a pipeline of that name would resume from them; submit it once the purge is done."""

    code = "purge_pending"
    status = 409


class InvalidTransitionError(ApiError):
    code = "invalid_transition"
    status = 409


class UpdateInProgressError(InvalidTransitionError):
    """Another update of the pipeline waits for its code's replication: one at a time."""

    code = "update_in_progress"
    status = 409


class InvalidNameError(ApiError):
    code = "invalid_name"
    status = 422


class InvalidConfError(ApiError):
    code = "invalid_conf"
    status = 422


class InvalidRequestError(ApiError):
    code = "invalid_request"
    status = 422


class PackageRejectedError(ApiError):
    """The package is malformed or unsafe; the message names the entry at fault."""

    code = "invalid_package"
    status = 422


class PackageTooLargeError(ApiError):
    code = "package_too_large"
    status = 413


class RequestTooLargeError(ApiError):
    """A request body over ``nimbus.max.request.bytes``; refused before it is read."""

    code = "request_too_large"
    status = 413


class HeadTooLargeError(ApiError):
    """A request line and headers over ``nimbus.http.max.header.bytes``."""

    code = "request_head_too_large"
    status = 431  # Request Header Fields Too Large


class RecordTooLargeError(ApiError):
    """A pipeline record that would pass ``nimbus.max.record.bytes``: a smaller conf fits."""

    code = "record_too_large"
    status = 413


class UnknownCodeError(ApiError):
    """This nimbus holds no package with that digest (GET /api/v1/code/{digest})."""

    code = "unknown_code"
    status = 404


class UnknownVersionError(ApiError):
    """A rollback to a version the pipeline does not keep (any more): nothing changed."""

    code = "unknown_version"
    status = 404


class NoLogError(ApiError):
    """No worker log to show: the pipeline runs nowhere, or its supervisor has none."""

    code = "no_log"
    status = 404


class UnknownRunError(ApiError):
    """No run of that number is kept for the pipeline (the message names those that are)."""

    code = "unknown_run"
    status = 404


class UnavailableError(ApiError):
    """ZooKeeper is unreachable or the leadership is changing; retry shortly."""

    code = "unavailable"
    status = 503
    retryable = True


class StaleEpochError(ApiError):
    """An order of an older epoch than one already seen (a deposed leader's): 409."""

    code = "stale_epoch"
    status = 409


class WrongSupervisorError(ApiError):
    """A leader's fence that names another supervisor than the one it reached: 409."""

    code = "wrong_supervisor"
    status = 409


class UntrustedEndpointError(ApiError):
    """A supervisor's registration disagrees with this nimbus's own configuration about how
    its endpoint is reached (TLS): nothing was sent to it. 502, not retried: an operator
    must fix the supervisor's configuration, or find who rewrote its registration."""

    code = "untrusted_endpoint"
    status = 502


class UploadsBusyError(UnavailableError):
    """``nimbus.max.concurrent.uploads`` submits are being read; retry after ``Retry-After``."""


class NoLeaderError(UnavailableError, RuntimeError):
    """Nobody holds the leadership right now: an election is under way, or none can lead.

    Raised by the election library (``LeaderElector.get_leader_address``) and by the client
    when no nimbus it asked knows a leader; over HTTP it travels as ``unavailable`` (503).
    """


_BY_CODE: dict[str, type[ApiError]] = {
    cls.code: cls
    for cls in (
        NotLeaderError,
        UnauthenticatedError,
        ForbiddenError,
        UnknownPipelineError,
        UnknownSupervisorError,
        PipelineExistsError,
        PurgePendingError,
        InvalidTransitionError,
        UpdateInProgressError,
        InvalidNameError,
        InvalidConfError,
        InvalidRequestError,
        PackageRejectedError,
        PackageTooLargeError,
        RequestTooLargeError,
        HeadTooLargeError,
        RecordTooLargeError,
        UnknownCodeError,
        UnknownVersionError,
        NoLogError,
        UnknownRunError,
        UnavailableError,
        StaleEpochError,
        WrongSupervisorError,
        UntrustedEndpointError,
    )
}


def error_from_body(code: str, message: str, leader: str | None = None) -> ApiError:
    """The exception that an error body of the API stands for."""
    if code == NotLeaderError.code:
        return NotLeaderError(message, leader)
    cls = _BY_CODE.get(code, ApiError)
    return cls(message)
