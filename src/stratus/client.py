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
starts, and each attempt is bounded by ``request_timeout``. Every other API error is raised
at once as its class from ``stratus.api.errors`` (re-exported here).
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_random_exponential

from stratus.api.errors import (
    ApiError,
    InvalidConfError,
    InvalidNameError,
    InvalidRequestError,
    InvalidTransitionError,
    NoLeaderError,
    NotLeaderError,
    PackageRejectedError,
    PackageTooLargeError,
    PipelineExistsError,
    UnavailableError,
    UnknownPipelineError,
    error_from_body,
)
from stratus.api.records import (
    PIPELINE_NAME,
    PIPELINE_NAME_RULE,
    ClusterSummary,
    ErrorBody,
    KillRequest,
    LeaderInfo,
    PipelineList,
    PipelineRecord,
    PipelineStatus,
    PipelineWorkers,
)
from stratus.codedist.errors import InvalidPackageError
from stratus.codedist.package_build import build_package
from stratus.codedist.package_check import PackageLimits, check_package
from stratus.config import StratusConfig
from stratus.errors import ConfigError, StratusError

__all__ = [
    "ApiError",
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
    "UnavailableError",
    "UnknownPipelineError",
]

log = logging.getLogger(__name__)

API = "/api/v1"
BACKOFF_FIRST_SECS = 0.01  # the first retry waits a random time up to this
BACKOFF_MAX_SECS = 0.25  # small, because the retry cadence adds to every measured failover
MAX_REDIRECTS = 3  # not_leader answers followed at once in one attempt, before backing off
_SNIPPET_CHARS = 200  # of an unexpected response body, quoted in an error message

M = TypeVar("M", bound=BaseModel)


class NimbusUnreachableError(StratusError):
    """No nimbus answered (refused, reset or timed out) before the retry deadline passed."""


# Failures of an attempt after which the leader certainly did not apply the request.
_NOT_APPLIED = (
    NotLeaderError,
    NoLeaderError,
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)


@dataclass
class _Delivery:
    """Whether an earlier attempt of one call may have reached the leader and been applied."""

    maybe_applied: bool = False

    def note(self, failure: BaseException | None) -> None:
        if failure is not None and not isinstance(failure, _NOT_APPLIED):
            self.maybe_applied = True


@dataclass(frozen=True)
class _Deadline:
    """The instant after which one call stops retrying, on the client's clock."""

    at: float
    clock: Callable[[], float]

    def expired(self, _state: RetryCallState) -> bool:
        return self.clock() >= self.at

    def remaining(self) -> float:
        return max(0.0, self.at - self.clock())


class NimbusClient:
    """A client of the nimbuses named by ``seeds`` (``host:port``); see the module docstring.

    ``transport``, ``clock`` and ``sleep`` exist so that tests can drive the client without a
    network or a real clock. One client may be shared by threads: httpx's client is
    thread-safe, and the remembered leader is a single attribute.
    """

    def __init__(
        self,
        seeds: Sequence[str],
        *,
        retry_deadline: float = 30.0,
        request_timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        package_limits: PackageLimits | None = None,
    ) -> None:
        self.seeds = _unique(_seed_address(seed) for seed in seeds)
        self.package_limits = package_limits or PackageLimits.from_config(StratusConfig())
        if not self.seeds:
            raise ConfigError("nimbus.seeds is empty: name at least one nimbus as host:port")
        self.retry_deadline = retry_deadline
        self._clock = clock
        self._sleep = sleep
        self._http = httpx.Client(
            timeout=request_timeout, transport=transport, trust_env=False, follow_redirects=False
        )
        self._leader: str | None = None  # the nimbus believed to lead
        self._answered: str | None = None  # the nimbus that answered last

    @classmethod
    def from_config(
        cls, conf: StratusConfig, *, transport: httpx.BaseTransport | None = None
    ) -> NimbusClient:
        """A client for ``nimbus.seeds`` with ``client.retry.deadline.secs`` and
        ``client.request.timeout.secs``."""
        return cls(
            conf.nimbus_seeds,
            retry_deadline=conf.client_retry_deadline_secs,
            request_timeout=conf.client_request_timeout_secs,
            transport=transport,
            package_limits=PackageLimits.from_config(conf),
        )

    def __enter__(self) -> NimbusClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the keep-alive connections."""
        self._http.close()

    @property
    def known_leader(self) -> str | None:
        """The nimbus this client last found leading (``host:port``), if any."""
        return self._leader

    # ------------------------------------------------------------------ reads (any nimbus)

    def cluster(self) -> ClusterSummary:
        """Every nimbus (the leader marked), supervisor and pipeline, from any nimbus."""
        return _parse(ClusterSummary, self._read("GET", f"{API}/cluster"))

    def leader(self) -> LeaderInfo:
        """Who leads now: the first leader a nimbus names.

        Nimbuses that know no leader do not end the search; when none of those that answered
        knows one, the answer is a LeaderInfo with a null address (this call does not wait for
        an election to end).
        """
        return self._retrying(f"GET {API}/leader")(self._ask_for_leader)

    def list_pipelines(self) -> list[PipelineRecord]:
        """Every pipeline, sorted by name, from any nimbus."""
        return _parse(PipelineList, self._read("GET", f"{API}/pipelines")).pipelines

    def status(self, name: str) -> PipelineRecord:
        """One pipeline's record, from any nimbus; UnknownPipelineError if there is none."""
        return _parse(PipelineRecord, self._read("GET", _pipeline_path(name)))

    def workers(self, name: str) -> PipelineWorkers:
        """Where a pipeline runs and its workers' last heartbeats, from any nimbus."""
        return _parse(PipelineWorkers, self._read("GET", f"{_pipeline_path(name)}/workers"))

    # ------------------------------------------------------------------ leader-only calls

    def submit(
        self,
        name: str | None,
        package: Path | bytes,
        conf: Mapping[str, Any] | None = None,
        *,
        request_id: str | None = None,
    ) -> PipelineRecord:
        """Check and upload ``package``, and create pipeline ``name`` with ``conf``.

        ``package`` is a directory (zipped here, deterministically), a ``.zip`` file or zip
        bytes; it is checked before any upload (InvalidPackageError naming the entry).
        ``name`` None takes the manifest's; ``conf`` overrides the manifest's. The pipeline
        is ACTIVE, or PENDING until its code reaches ``pipeline.min.replication.count``
        nimbuses: ``wait_replicated`` waits for that.

        Every attempt sends the same request id (a new uuid4 unless given) and the same bytes,
        so a retry after a failover returns the pipeline the first attempt created instead of
        creating another or failing with PipelineExistsError.
        """
        if name is not None:
            _check_name(name)
        content = self._checked_package(package)
        fields = {
            "name": name or "",
            "conf": _conf_json(conf or {}),
            "request_id": request_id or uuid.uuid4().hex,
        }
        filename = package.name if isinstance(package, Path) else "package"
        files = {"package": (f"{filename}.zip", content, "application/zip")}
        response = self._call_leader("POST", f"{API}/pipelines", data=fields, files=files)
        return _parse(PipelineRecord, response)

    def wait_replicated(
        self,
        name: str,
        *,
        poll_secs: float = 0.2,
        on_progress: Callable[[PipelineRecord], None] | None = None,
    ) -> PipelineRecord:
        """Wait while ``name`` is PENDING (its code short of the minimum replication).

        Returns the record once it is not PENDING; the nimbus decides when, within the
        pipeline's ``pipeline.max.replication.wait.time.sec`` (-1: no limit). Each poll's
        record goes to ``on_progress``. A nimbus whose view has not caught up with the
        submit yet may not know the pipeline: that is retried until the retry deadline.
        """
        unknown_until = self._clock() + self.retry_deadline
        while True:
            try:
                record = self.status(name)
            except UnknownPipelineError:
                if self._clock() >= unknown_until:
                    raise
                self._sleep(poll_secs)
                continue
            if on_progress is not None:
                on_progress(record)
            if record.status is not PipelineStatus.PENDING:
                return record
            self._sleep(poll_secs)

    def _checked_package(self, package: Path | bytes) -> bytes:
        """The zip to upload, checked as the nimbus will check it."""
        with tempfile.TemporaryDirectory(prefix="stratus-submit-") as tmp:
            if isinstance(package, Path):
                archive = build_package(package, Path(tmp) / "package.zip")
            else:
                archive = Path(tmp) / "package.zip"
                archive.write_bytes(package)
            check_package(archive, self.package_limits)
            return archive.read_bytes()

    def kill(self, name: str, wait_secs: float | None = None) -> PipelineRecord | None:
        """Mark ``name`` KILLED; the leader removes its record ``wait_secs`` later
        (``pipeline.kill.wait.secs`` when None). Killing a KILLED pipeline changes nothing.

        Returns the KILLED record, or None when an attempt that may have reached the leader
        was retried and the retry found no such pipeline: the earlier attempt killed it and
        its record was already removed (short ``wait_secs``), so the kill counts as done.
        UnknownPipelineError is raised only when no attempt can have applied the kill.
        """
        body = _validated(KillRequest, InvalidRequestError, wait_secs=wait_secs)
        delivery = _Delivery()
        try:
            response = self._call_leader(
                "POST", _pipeline_path(name, "kill"), delivery=delivery, json=body
            )
        except UnknownPipelineError:
            if delivery.maybe_applied:
                return None
            raise
        return _parse(PipelineRecord, response)

    def activate(self, name: str) -> PipelineRecord:
        """Make ``name`` ACTIVE (unchanged if it is); InvalidTransitionError if KILLED."""
        return _parse(PipelineRecord, self._call_leader("POST", _pipeline_path(name, "activate")))

    def deactivate(self, name: str) -> PipelineRecord:
        """Make ``name`` INACTIVE (unchanged if it is); InvalidTransitionError if KILLED."""
        path = _pipeline_path(name, "deactivate")
        return _parse(PipelineRecord, self._call_leader("POST", path))

    def rebalance(self, name: str, conf: Mapping[str, Any]) -> PipelineRecord:
        """Merge ``conf`` (at least one key) into the pipeline's conf; it restarts with it.

        A retry after a failover may apply the same merge twice: the conf is the same, and
        the record's ``rebalances`` count may grow by two.
        """
        if not conf:
            raise InvalidConfError(f"rebalance of {name!r} needs at least one conf key")
        body = {"conf": json.loads(_conf_json(conf))}
        response = self._call_leader("POST", _pipeline_path(name, "rebalance"), json=body)
        return _parse(PipelineRecord, response)

    # ------------------------------------------------------------------ retries and routing

    def _retrying(self, what: str, delivery: _Delivery | None = None) -> Retrying:
        """The retry policy of one call, with its own deadline starting now."""
        deadline = _Deadline(self._clock() + self.retry_deadline, self._clock)
        backoff = wait_random_exponential(multiplier=BACKOFF_FIRST_SECS, max=BACKOFF_MAX_SECS)

        def wait(state: RetryCallState) -> float:
            return min(backoff(state), deadline.remaining())

        def before_sleep(state: RetryCallState) -> None:
            failure = state.outcome.exception() if state.outcome else None
            log.debug("retrying call=%r attempt=%d error=%r", what, state.attempt_number, failure)
            if delivery is not None:
                delivery.note(failure)

        def give_up(state: RetryCallState) -> NoReturn:
            failure = state.outcome.exception() if state.outcome else None
            raise self._exhausted(what, failure) from failure

        return Retrying(
            retry=retry_if_exception(_is_retryable),
            stop=deadline.expired,
            wait=wait,
            sleep=self._sleep,
            before_sleep=before_sleep,
            retry_error_callback=give_up,
        )

    def _exhausted(self, what: str, failure: BaseException | None) -> StratusError:
        """The error that ends a call whose retries ran out: it names the seeds."""
        spent = f"gave up on {what} after {self.retry_deadline:g} s of retries"
        seeds = ", ".join(self.seeds)
        if isinstance(failure, NoLeaderError):
            return NoLeaderError(f"{spent}: {failure}")
        if isinstance(failure, NotLeaderError):
            return NotLeaderError(f"{spent} (seeds: {seeds}): {failure}", failure.leader)
        if isinstance(failure, ApiError):
            return type(failure)(f"{spent} (seeds: {seeds}): {failure}")
        return NimbusUnreachableError(
            f"no nimbus answered {what} within {self.retry_deadline:g} s "
            f"(seeds: {seeds}); last error: {_describe(failure)}"
        )

    def _read(self, method: str, path: str) -> httpx.Response:
        """A read, answered by the first nimbus that can; retried until the deadline."""
        return self._retrying(f"{method} {path}")(self._read_attempt, method, path)

    def _read_attempt(self, method: str, path: str) -> httpx.Response:
        failure: Exception | None = None
        for address in _unique([self._leader, self._answered, *self.seeds]):
            try:
                return self._send(address, method, path)
            except (httpx.TransportError, ApiError) as exc:
                if not _is_retryable(exc) and type(exc) is not ApiError:
                    raise  # a definite answer, such as unknown_pipeline
                failure = exc  # this nimbus cannot answer now, or is not one: ask the next
        assert failure is not None  # there is at least one seed
        raise failure

    def _call_leader(
        self, method: str, path: str, *, delivery: _Delivery | None = None, **request: Any
    ) -> httpx.Response:
        """A leader-only call, sent to the leader wherever it is; retried until the deadline."""
        retrying = self._retrying(f"{method} {path}", delivery)
        return retrying(self._leader_attempt, method, path, request)

    def _leader_attempt(self, method: str, path: str, request: dict[str, Any]) -> httpx.Response:
        """One attempt: to the known (or discovered) leader, following not_leader answers."""
        address = self._leader or self._discover_leader()
        for _ in range(MAX_REDIRECTS):
            try:
                response = self._send(address, method, path, **request)
            except NotLeaderError as exc:
                named = _peer_address(exc.leader) if exc.leader else None
                self._leader = named if named != address else None
                if self._leader is None:
                    raise  # nobody known leads: back off, then discover again
                log.debug("following not_leader from=%s to=%s", address, self._leader)
                address = self._leader
                continue
            except UnavailableError:
                self._leader = None  # it may be losing its term: discover again
                raise
            self._leader = address
            return response
        raise NotLeaderError(
            f"{method} {path} was redirected {MAX_REDIRECTS} times without reaching the "
            f"leader (last to {address}); the leadership is changing",
            self._leader,
        )

    def _discover_leader(self) -> str:
        """The leader's address from the seeds, or NoLeaderError (retryable)."""
        info = self._ask_for_leader()
        if info.address is None:
            asked = ", ".join(_unique([self._answered, *self.seeds]))
            raise NoLeaderError(f"no nimbus knows a leader right now (asked {asked})")
        return _peer_address(info.address)

    def _ask_for_leader(self) -> LeaderInfo:
        """The first leader a nimbus names; a null LeaderInfo if those that answered know none.

        Raises the last failure when no nimbus answered at all.
        """
        nobody = None
        failure: Exception | None = None
        for address in _unique([self._answered, *self.seeds]):
            try:
                info = _parse(LeaderInfo, self._send(address, "GET", f"{API}/leader"))
            except (httpx.TransportError, ApiError) as exc:
                failure = exc  # down, timed out or broken: it does not end the search
                continue
            if info.address is not None:
                self._leader = _peer_address(info.address)
                return info
            nobody = info
        if nobody is not None:
            return nobody
        assert failure is not None  # there is at least one seed
        raise failure

    def _send(self, address: str, method: str, path: str, **request: Any) -> httpx.Response:
        """One HTTP request to one nimbus; an error response becomes its ApiError."""
        try:
            response = self._http.request(method, f"http://{address}{path}", **request)
        except httpx.TransportError:
            self._forget(address)
            raise
        except httpx.HTTPError as exc:  # not transient: a response httpx cannot decode
            raise ApiError(f"nimbus {address} sent a response that cannot be read: {exc}") from exc
        if not response.is_success:
            raise _api_error(response, address)
        self._answered = address
        return response

    def _forget(self, address: str) -> None:
        """Stop preferring a nimbus that failed to answer."""
        if self._leader == address:
            self._leader = None
        if self._answered == address:
            self._answered = None


# ---------------------------------------------------------------------- helpers


def _is_retryable(exc: BaseException) -> bool:
    """Connection failures and timeouts, not_leader and unavailable: a later try may work."""
    if isinstance(exc, ApiError):
        return exc.retryable
    return isinstance(exc, httpx.TransportError)


def _api_error(response: httpx.Response, address: str) -> ApiError:
    """The ApiError an error response stands for, even when it carries no ErrorBody."""
    try:
        body = ErrorBody.model_validate_json(response.content)
    except ValidationError:
        status = response.status_code
        if status in (502, 503, 504):
            return UnavailableError(f"nimbus {address} answered HTTP {status}")
        snippet = response.text[:_SNIPPET_CHARS]
        return ApiError(
            f"nimbus {address} answered HTTP {status} to {response.request.method} "
            f"{response.request.url.path}: {snippet!r}"
        )
    return error_from_body(body.error, body.message, body.leader)


def _parse(model: type[M], response: httpx.Response) -> M:
    """The response's body as ``model``; ApiError if it is not one (not a nimbus, or too old)."""
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        raise ApiError(
            f"{response.request.url.netloc.decode()} answered {response.request.url.path} "
            f"with a body that is not a {model.__name__}: {exc.errors()[0]['msg']}"
        ) from None


def _validated(model: type[M], error: type[ApiError], **fields: Any) -> dict[str, Any]:
    """A request body checked against the shared model here, before any network call."""
    try:
        return model(**fields).model_dump(mode="json")
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise error(f"{where}: {problem['msg']} (got {problem.get('input')!r})") from None


def _conf_json(conf: Mapping[str, Any]) -> str:
    """``conf`` as a JSON object, refused here when it cannot be one."""
    try:
        return json.dumps(dict(conf), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidConfError(f"pipeline conf must be a JSON object: {exc}") from None


def _check_name(name: str) -> None:
    if not PIPELINE_NAME.fullmatch(name):
        raise InvalidNameError(f"invalid pipeline name {name!r}: {PIPELINE_NAME_RULE}")


def _pipeline_path(name: str, action: str | None = None) -> str:
    _check_name(name)
    path = f"{API}/pipelines/{quote(name, safe='')}"
    return f"{path}/{action}" if action else path


def _peer_address(address: str) -> str:
    """``host:port`` of a nimbus named by a nimbus (tolerates an ``http://`` prefix)."""
    return address.removeprefix("http://").rstrip("/")


def _seed_address(seed: str) -> str:
    """A seed as ``host:port``; ConfigError when it is not one."""
    address = _peer_address(seed.strip())
    try:
        url = httpx.URL(f"http://{address}")
    except httpx.InvalidURL:
        url = None
    if url is None or not url.host or url.port is None or url.path not in ("", "/"):
        raise ConfigError(f"nimbus.seeds: {seed!r} is not host:port")
    return address


def _unique(addresses: Iterable[str | None]) -> tuple[str, ...]:
    """The addresses in order, without None and repeats."""
    return tuple(dict.fromkeys(a for a in addresses if a))


def _describe(failure: BaseException | None) -> str:
    if isinstance(failure, httpx.TransportError):
        try:
            where = f" from {failure.request.url.netloc.decode()}"
        except RuntimeError:  # no request attached
            where = ""
        return f"{type(failure).__name__}{where}: {failure or 'no detail'}"
    return repr(failure)
