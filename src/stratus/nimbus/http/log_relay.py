"""A run's log, relayed by any nimbus from the endpoint of the supervisor that ran it.

Every nimbus relays, standbys included: the log is a read, the supervisor's address is in
its registration (which every nimbus watches), and a log is wanted most when something is
wrong, perhaps with the leader. The caller's own ``Authorization`` header goes on to the
supervisor, which checks the same token file: the supervisor judges the caller, not the
nimbus, and a nimbus's own token gains no right to read logs. A caller known by its client
certificate alone is relayed with the nimbus's own credentials (``client.auth.*``,
``client.tls.*``), which then need the role ``submit``. The endpoint is reached over
https exactly when this nimbus's own configuration says the cluster speaks TLS; a
registration that says otherwise is ``502 untrusted_endpoint``, and nothing is sent to it
(``stratus.nimbus.scheduling.supervisor_endpoints``). The supervisor's refusals and errors come back
as they are (its message prefixed with its id); an unreachable supervisor is ``503
unavailable``; a ``no_log`` answer about a run names that run's log directory on the
supervisor's host (``LogSource.log_dir``, from its run record), where an operator can still
read it. The supervisor redacts every line against the pipeline's conf; the nimbus
redacts them once more, against the conf it stores (a supervisor of an older version may
have missed a form of secret)::

    relay = LogRelay(client_auth(conf))
    upstream = await relay.open(LogSource(supervisor, conf, run=7, log_dir=...), "etl",
                                previous=False, follow=True, tail=None,
                                authorization=request.headers.get("authorization"))
    StreamingResponse(upstream.chunks(), media_type=upstream.media_type)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
from pydantic import ValidationError

from stratus.api.echo import clip
from stratus.api.errors import ApiError, NoLogError, UnavailableError, error_from_body
from stratus.api.records import ErrorBody
from stratus.api.redaction import LineRedactor
from stratus.nimbus.scheduling.supervisor_endpoints import endpoint_url
from stratus.nimbus.service import LogSource
from stratus.security.client_auth import NO_AUTH, ClientAuth

LOGS_PATH = "/api/v1/logs"
CONNECT_TIMEOUT_SECS = 5.0
READ_TIMEOUT_SECS = 30.0  # between two chunks of a log read whole (a follow waits forever)
MAX_ERROR_BYTES = 16 * 1024


@dataclass
class Upstream:
    """An open answer of a supervisor's endpoint, streamed on by ``chunks``."""

    client: httpx.AsyncClient
    response: httpx.Response
    media_type: str
    redactor: LineRedactor

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's lines, redacted, as they arrive; the connection is closed at the end or
        when the caller leaves (the generator is closed)."""
        try:
            async for chunk in self.response.aiter_raw():
                if lines := self.redactor.feed(chunk):
                    yield lines
            if rest := self.redactor.flush():
                yield rest
        finally:
            await self.response.aclose()
            await self.client.aclose()


class LogRelay:
    """Opens a worker's log on its supervisor's endpoint; see the module docstring."""

    def __init__(self, auth: ClientAuth = NO_AUTH) -> None:
        self._auth = auth

    async def open(
        self,
        source: LogSource,
        pipeline: str,
        *,
        previous: bool,
        follow: bool,
        authorization: str | None,
        tail: int | None = None,
    ) -> Upstream:
        """The supervisor's answer, once it said 200; its error (an ApiError) otherwise."""
        supervisor = source.supervisor
        url = endpoint_url(supervisor, f"{LOGS_PATH}/{pipeline}", self._auth)
        headers = {"Authorization": authorization} if authorization else self._auth.headers()
        read = None if follow else READ_TIMEOUT_SECS
        client = httpx.AsyncClient(
            timeout=httpx.Timeout(CONNECT_TIMEOUT_SECS, read=read),
            verify=self._auth.verify(),
            trust_env=False,
            follow_redirects=False,
        )
        params = {"previous": str(previous).lower(), "follow": str(follow).lower()}
        if source.run is not None:
            params["run"] = str(source.run)
        if tail is not None:
            params["tail"] = str(tail)
        try:
            response = await client.send(
                client.build_request("GET", url, params=params, headers=headers), stream=True
            )
        except httpx.HTTPError as exc:
            await client.aclose()
            raise UnavailableError(
                f"cannot reach supervisor {supervisor.id}'s endpoint at {supervisor.endpoint}: "
                f"{type(exc).__name__}: {clip(str(exc)) or 'no detail'}; retry"
            ) from None
        if response.is_success:
            media_type = response.headers.get("content-type", "text/plain; charset=utf-8")
            return Upstream(client, response, media_type, LineRedactor(source.conf))
        try:
            body = await _bounded_body(response)
        finally:
            await response.aclose()
            await client.aclose()
        raise _supervisor_error(supervisor.id, response.status_code, body, source.log_dir)


async def _bounded_body(response: httpx.Response) -> bytes:
    body = b""
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) > MAX_ERROR_BYTES:
            break
    return body[:MAX_ERROR_BYTES]


def _supervisor_error(
    supervisor: str, status: int, body: bytes, log_dir: str | None = None
) -> ApiError:
    """The supervisor's error, as the API's own, its message saying where it came from (and,
    for a log it no longer keeps, where the run's log was)."""
    try:
        error = ErrorBody.model_validate_json(body)
    except ValidationError:
        return UnavailableError(f"supervisor {supervisor}'s endpoint answered HTTP {status}")
    message = f"supervisor {supervisor}: {error.message}"
    if error.error == NoLogError.code and log_dir:
        message += f"; the run's log was in {log_dir} on that supervisor's host"
    return error_from_body(error.error, message)
