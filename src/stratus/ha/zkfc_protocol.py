"""The zkfc's own protocol: how an operator (``haadmin -failover``) and other zkfcs steer a zkfc.

Two calls over HTTP(S), authenticated like a nimbus's API (the ``admin`` role), served by
every ``stratus zkfc`` on ``ha.zkfc.port`` (Hadoop's ``ZKFCProtocol``):

==========================================  ============================================
``POST /zkfc/v1/cede-active``               body ``CedeActive``: its service goes standby
                                            (if active), it quits the election without
                                            asking to be fenced and stays out ``millis``
                                            ms (0: a zkfc that ceded rejoins now);
                                            200 ``CedeResult``
``POST /zkfc/v1/graceful-failover``         make this zkfc's service active: 200
                                            ``FailoverResult``; 409 ``failover_refused``
                                            (the service is not a fit target), 500
                                            ``failover_failed`` (it did not become active)
==========================================  ============================================

::

    zkfc = ZkfcClient("n2.example:8019", auth, timeout=60.0)
    zkfc.graceful_failover()          # n2's service is active once this returns
"""

from __future__ import annotations

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stratus.api.errors import ApiError
from stratus.api.records import ErrorBody
from stratus.errors import StratusError
from stratus.security.client_auth import NO_AUTH, ClientAuth

CEDE_PATH = "/zkfc/v1/cede-active"
FAILOVER_PATH = "/zkfc/v1/graceful-failover"
FAILOVER_REFUSED = "failover_refused"
FAILOVER_FAILED = "failover_failed"


class CedeActive(BaseModel):
    """The body of ``cede-active``."""

    model_config = ConfigDict(extra="forbid")

    millis: int = Field(ge=0, description="how long the zkfc stays out of the election")


class CedeResult(BaseModel):
    model_config = ConfigDict(extra="ignore")

    service: str
    was_active: bool


class FailoverResult(BaseModel):
    model_config = ConfigDict(extra="ignore")

    service: str = Field(description="the service that is active now")
    already_active: bool = False
    ceded: list[str] = Field(default_factory=list, description="the services that ceded")


# ---------------------------------------------------------------------- the zkfc's refusals


class FailoverRefusedError(ApiError):
    """The target's zkfc refuses a graceful failover: its service is not healthy and ready."""

    code = FAILOVER_REFUSED
    status = 409


class FailoverFailedError(ApiError):
    """A graceful failover was tried and did not make the target active (the others rejoin)."""

    code = FAILOVER_FAILED
    status = 500


# ---------------------------------------------------------------------- the client


class ZkfcCallError(StratusError):
    """A call of a zkfc's endpoint failed; the message says which zkfc and why."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class ZkfcClient:
    """The zkfc protocol's client for one zkfc; every call bounded by ``timeout``."""

    def __init__(self, address: str, auth: ClientAuth = NO_AUTH, *, timeout: float) -> None:
        self.address = address
        self._base = f"{auth.scheme}://{address}"
        self._http = httpx.Client(headers=auth.headers(), timeout=timeout, verify=auth.verify())

    def cede_active(self, millis: int) -> CedeResult:
        body = CedeActive(millis=millis).model_dump(mode="json")
        return CedeResult.model_validate_json(self._call(CEDE_PATH, body).content)

    def graceful_failover(self) -> FailoverResult:
        return FailoverResult.model_validate_json(self._call(FAILOVER_PATH, {}).content)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ZkfcClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _call(self, path: str, body: dict[str, object]) -> httpx.Response:
        try:
            response = self._http.post(self._base + path, json=body)
        except httpx.HTTPError as exc:
            raise ZkfcCallError(
                f"the zkfc at {self.address} did not answer POST {path}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if response.is_success:
            return response
        try:
            error = ErrorBody.model_validate_json(response.content)
        except ValidationError:
            raise ZkfcCallError(
                f"the zkfc at {self.address} answered POST {path} with HTTP "
                f"{response.status_code} and no error body: is it a stratus zkfc?"
            ) from None
        raise ZkfcCallError(error.message, error.error)
