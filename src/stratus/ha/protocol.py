"""The HA service protocol: how a failover controller reads and steers the service it manages.

Four calls over HTTP(S), authenticated like the rest of the service's API (the ``admin``
role), so that any service can be managed by ``stratus zkfc`` by implementing them:

==========================================  ============================================
``GET  /ha/v1/status``                      ``ServiceStatus``: state, epoch, readiness
``GET  /ha/v1/health``                      200 ``HealthReport`` if healthy, else 503 with
                                            an ``ErrorBody`` (``unhealthy``) saying why
``POST /ha/v1/transition-to-active``        body ``TransitionToActive`` (the fencing epoch
                                            won by the controller); 200 ``ServiceStatus``
``POST /ha/v1/transition-to-standby``       body ``TransitionToStandby``; 200 ``ServiceStatus``
==========================================  ============================================

A transition the service cannot make answers 409 ``transition_failed``; a transition to
active with an epoch older than one it was already given answers 409 ``stale_epoch``. Both
transitions are idempotent: asking for the state the service is already in (with the same
epoch) succeeds and changes nothing::

    service = HAServiceClient("n1.example:6627", auth, timeout=1.0)
    service.check_health()                   # raises ServiceUnhealthyError / NotRespondingError
    service.transition_to_active(epoch=12)   # the service acts, every write fenced by epoch 12
    service.status().state                   # HAState.ACTIVE
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stratus.api.errors import ApiError, StaleEpochError
from stratus.api.records import ErrorBody
from stratus.errors import StratusError
from stratus.security.client_auth import NO_AUTH, ClientAuth

STATUS_PATH = "/ha/v1/status"
HEALTH_PATH = "/ha/v1/health"
TO_ACTIVE_PATH = "/ha/v1/transition-to-active"
TO_STANDBY_PATH = "/ha/v1/transition-to-standby"

M = TypeVar("M", bound=BaseModel)

UNHEALTHY = "unhealthy"  # the error code of a failed health check (HTTP 503)
TRANSITION_FAILED = "transition_failed"  # HTTP 409
STALE_EPOCH = StaleEpochError.code  # HTTP 409


class HAState(StrEnum):
    """The states of a managed service (Hadoop's ``HAServiceState``)."""

    INITIALIZING = "initializing"  # starting: neither standby nor active yet
    STANDBY = "standby"
    ACTIVE = "active"
    STOPPING = "stopping"


class RequestSource(StrEnum):
    """Who asks for a transition: the controller, or an operator (forced past the controller)."""

    ZKFC = "zkfc"
    USER = "user"
    USER_FORCED = "user_forced"


class ServiceStatus(BaseModel):
    """What ``/ha/v1/status`` answers."""

    model_config = ConfigDict(extra="ignore")

    state: HAState
    epoch: int | None = Field(None, description="the fencing epoch the service acts under")
    term_suspended: bool = Field(
        False,
        description="standby only while its ZooKeeper connection is suspended: it holds the term "
        "it was given and acts under it again once the session is back",
    )
    ready_to_become_active: bool = False
    not_ready_reason: str | None = None
    address: str | None = Field(None, description="the service's advertised host:port")
    pid: int | None = Field(None, description="the service's process id (for a local fence)")


class HealthReport(BaseModel):
    """A healthy answer of ``/ha/v1/health``; an unhealthy one is an ``ErrorBody`` with 503."""

    model_config = ConfigDict(extra="ignore")

    healthy: bool = True
    detail: str | None = None


class TransitionToActive(BaseModel):
    """The body of ``/ha/v1/transition-to-active``."""

    model_config = ConfigDict(extra="forbid")

    epoch: int = Field(ge=0, description="the epoch of the election the controller won")
    source: RequestSource = RequestSource.ZKFC


class TransitionToStandby(BaseModel):
    """The body of ``/ha/v1/transition-to-standby``."""

    model_config = ConfigDict(extra="forbid")

    source: RequestSource = RequestSource.ZKFC


# ---------------------------------------------------------------------- errors


class HAServiceError(StratusError):
    """A call of the HA service protocol failed; ``address`` is the service's."""

    def __init__(self, message: str, address: str) -> None:
        super().__init__(message)
        self.address = address


class ServiceNotRespondingError(HAServiceError):
    """The service did not answer in time, refused the connection, or answered nonsense."""


class ServiceTimedOutError(ServiceNotRespondingError):
    """The service let a whole timeout pass without answering (frozen, or overloaded)."""


class ServiceUnhealthyError(HAServiceError):
    """The service answered its health check: it is not healthy (the message says why)."""


class TransitionFailedError(HAServiceError):
    """The service refused or failed a transition (``code`` is the error code it sent)."""

    def __init__(self, message: str, address: str, code: str) -> None:
        super().__init__(message, address)
        self.code = code


# ---------------------------------------------------------------------- the service's refusals


class UnhealthyServiceError(ApiError):
    """A service's answer to a health check that fails: 503 ``unhealthy``, saying why."""

    code = UNHEALTHY
    status = 503


class TransitionRefusedError(ApiError):
    """A service's refusal of a transition it cannot make: 409 ``transition_failed``."""

    code = TRANSITION_FAILED
    status = 409


# ---------------------------------------------------------------------- the client


class HAServiceClient:
    """The HA service protocol's client for one service; every call bounded by ``timeout``."""

    def __init__(
        self,
        address: str,
        auth: ClientAuth = NO_AUTH,
        *,
        timeout: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.address = address
        self._base = f"{auth.scheme}://{address}"
        self._http = httpx.Client(
            headers=auth.headers(), timeout=timeout, verify=auth.verify(), transport=transport
        )

    def status(self) -> ServiceStatus:
        return self._parse(ServiceStatus, self._call("GET", STATUS_PATH))

    def check_health(self) -> HealthReport:
        """The health report; ``ServiceUnhealthyError`` if the service says it is not healthy."""
        return self._parse(HealthReport, self._call("GET", HEALTH_PATH))

    def transition_to_active(
        self, epoch: int, source: RequestSource = RequestSource.ZKFC
    ) -> ServiceStatus:
        body = TransitionToActive(epoch=epoch, source=source).model_dump(mode="json")
        return self._parse(ServiceStatus, self._call("POST", TO_ACTIVE_PATH, body))

    def transition_to_standby(self, source: RequestSource = RequestSource.ZKFC) -> ServiceStatus:
        body = TransitionToStandby(source=source).model_dump(mode="json")
        return self._parse(ServiceStatus, self._call("POST", TO_STANDBY_PATH, body))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> HAServiceClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _call(
        self, method: str, path: str, body: dict[str, object] | None = None
    ) -> httpx.Response:
        try:
            response = self._http.request(method, self._base + path, json=body)
        except httpx.HTTPError as exc:
            error = (
                ServiceTimedOutError
                if isinstance(exc, httpx.TimeoutException)
                else ServiceNotRespondingError
            )
            raise error(
                f"{self.address} did not answer {method} {path}: {type(exc).__name__}: {exc}",
                self.address,
            ) from exc
        if response.is_success:
            return response
        raise self._error(method, path, response)

    def _error(self, method: str, path: str, response: httpx.Response) -> HAServiceError:
        try:
            body = ErrorBody.model_validate_json(response.content)
        except ValidationError:
            return ServiceNotRespondingError(
                f"{self.address} answered {method} {path} with HTTP {response.status_code} "
                "and no error body: is it a stratus service?",
                self.address,
            )
        message = f"{self.address}: {body.message}"
        if body.error == UNHEALTHY:
            return ServiceUnhealthyError(message, self.address)
        if path in (TO_ACTIVE_PATH, TO_STANDBY_PATH):
            return TransitionFailedError(message, self.address, body.error)
        return HAServiceError(
            f"{message} (HTTP {response.status_code}, {body.error})", self.address
        )

    def _parse(self, model: type[M], response: httpx.Response) -> M:
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            raise ServiceNotRespondingError(
                f"{self.address} answered {response.request.url.path} with a body that is not "
                f"a {model.__name__}: {exc.errors()[0]['msg']}",
                self.address,
            ) from None
