"""Where a client's calls go: leader discovery through the seeds, and the retries around it.

A :class:`NimbusRouter` sends one HTTP request per attempt and retries (tenacity: full-jitter
exponential backoff, at most ``BACKOFF_MAX_SECS`` between attempts) connection failures,
timeouts, ``not_leader`` and ``unavailable`` until ``retry_deadline`` seconds after the call
began. Reads go to any nimbus that answers; leader-only calls to the leader it found last, or
that the seeds name, following ``not_leader`` answers. A nimbus that let a request time out
(a frozen leader holds every request for the whole ``request_timeout``) is a suspect for one
``request_timeout``: it is asked last (for the leader, only if no other nimbus answers), and
a seed or a ``not_leader`` answer that names it as the leader counts as naming nobody, so the
client backs off and asks again rather than waiting on it a second time (the others learn of
the new leader meanwhile). ``on_retry`` is told of every retry and of the end of a call that
was retried (a :class:`RetryNotice`), so that a command can say why it waits::

    router = NimbusRouter(
        ["10.0.0.1:6627", "10.0.0.2:6627"],
        retry_deadline=30.0,
        request_timeout=10.0,
        connect_timeout=2.0,
    )
    response = router.call_leader("POST", "/api/v1/pipelines/etl/activate")
    response = router.read("GET", "/api/v1/cluster")
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import httpx
from pydantic import BaseModel, ValidationError
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_random_exponential

from stratus.api.clock import Clock
from stratus.api.errors import (
    ApiError,
    NotLeaderError,
    UnavailableError,
    error_from_body,
)
from stratus.api.records import ErrorBody, LeaderInfo
from stratus.client.errors import NimbusUnreachableError, NoLeaderError
from stratus.errors import ConfigError, StratusError
from stratus.security.client_auth import NO_AUTH, ClientAuth

log = logging.getLogger(__name__)

API = "/api/v1"
BACKOFF_FIRST_SECS = 0.01  # the first retry waits a random time up to this
BACKOFF_MAX_SECS = 0.25  # small, because the retry cadence adds to every measured failover
MAX_REDIRECTS = 3  # not_leader answers followed at once in one attempt, before backing off
_SNIPPET_CHARS = 200  # of an unexpected response body, quoted in an error message

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")

# Failures of an attempt after which the leader certainly did not apply the request.
_NOT_APPLIED = (
    NotLeaderError,
    NoLeaderError,
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)


@dataclass
class Delivery:
    """Whether an earlier attempt of one call may have reached the leader and been applied."""

    maybe_applied: bool = False

    def note(self, failure: BaseException | None) -> None:
        if failure is not None and not isinstance(failure, _NOT_APPLIED):
            self.maybe_applied = True


@dataclass(frozen=True)
class RetryNotice:
    """One call being retried (``done`` False), or a retried call that ended (``done``
    True, ``error`` None if it succeeded): what it is, how long it has tried, how long it
    may still try, and why the last attempt failed."""

    what: str
    attempt: int
    elapsed_secs: float
    remaining_secs: float
    seeds: tuple[str, ...]
    error: str | None
    done: bool = False


RetryListener = Callable[[RetryNotice], None]


@dataclass(frozen=True)
class _Deadline:
    """The instant after which one call stops retrying, on the client's clock."""

    started: float
    at: float
    clock: Clock

    def expired(self, _state: RetryCallState) -> bool:
        return self.clock() >= self.at

    def remaining(self) -> float:
        return max(0.0, self.at - self.clock())

    def elapsed(self) -> float:
        return self.clock() - self.started


class NimbusRouter:
    """Sends a client's requests to the right nimbus, retrying; see the module docstring.

    A request waits ``connect_timeout`` for a nimbus to take the connection (a dead host
    answers nothing: the next nimbus is asked soon), then ``request_timeout`` for each read,
    write and the TLS handshake (a slow answer is waited for).
    ``auth`` is the bearer token sent with every request and the TLS that makes them https.
    ``on_retry`` hears of retries (see the module docstring); it must not raise.
    ``transport``, ``clock`` and ``sleep`` exist so that tests can drive it without a network
    or a real clock. Thread-safe as httpx's client is; the remembered leader is one attribute.
    """

    def __init__(  # noqa: PLR0913 keyword-only options
        self,
        seeds: Sequence[str],
        *,
        retry_deadline: float,
        request_timeout: float,
        connect_timeout: float,
        auth: ClientAuth = NO_AUTH,
        transport: httpx.BaseTransport | None = None,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        on_retry: RetryListener | None = None,
    ) -> None:
        self.seeds = _unique(_seed_address(seed) for seed in seeds)
        self._on_retry = on_retry
        if not self.seeds:
            raise ConfigError("nimbus.seeds is empty: name at least one nimbus as host:port")
        self.retry_deadline = retry_deadline
        self._clock = clock
        self._sleep = sleep
        self._scheme = auth.scheme
        self._http = httpx.Client(
            timeout=httpx.Timeout(request_timeout, connect=min(connect_timeout, request_timeout)),
            transport=transport,
            trust_env=False,
            follow_redirects=False,
            headers=auth.headers(),
            verify=auth.verify(),
        )
        self._leader: str | None = None  # the nimbus believed to lead
        self._answered: str | None = None  # the nimbus that answered last
        self._suspect_secs = request_timeout
        self._suspects: dict[str, float] = {}  # a nimbus that timed out -> until when

    def close(self) -> None:
        """Close the keep-alive connections."""
        self._http.close()

    @property
    def known_leader(self) -> str | None:
        """The nimbus last found leading (``host:port``), if any."""
        return self._leader

    def leader(self) -> LeaderInfo:
        """The first leader a nimbus names, retried while no nimbus answers at all."""
        return self._retried(f"GET {API}/leader", None, self._ask_for_leader)

    def read(self, method: str, path: str) -> httpx.Response:
        """A read, answered by the first nimbus that can; retried until the deadline."""
        return self._retried(f"{method} {path}", None, self._read_attempt, method, path)

    def open_stream(self, path: str, params: Mapping[str, str]) -> httpx.Response:
        """A streamed GET (a worker's log) from the first nimbus that can answer, retried
        until the deadline; no read timeout (a follow waits for lines). The caller closes
        the response."""
        return self._retried(f"GET {path}", None, self._stream_attempt, path, params)

    def call_leader(
        self, method: str, path: str, *, delivery: Delivery | None = None, **request: Any
    ) -> httpx.Response:
        """A leader-only call, sent to the leader wherever it is; retried until the deadline.

        ``delivery`` learns whether a failed attempt may have been applied all the same.
        """
        return self._retried(
            f"{method} {path}", delivery, self._leader_attempt, method, path, request
        )

    # ------------------------------------------------------------------ retries

    def _retried(
        self, what: str, delivery: Delivery | None, attempt: Callable[..., R], *args: Any
    ) -> R:
        """``attempt(*args)`` under the retry policy, with its own deadline starting now; the
        listener hears how a retried call ended."""
        now = self._clock()
        deadline = _Deadline(now, now + self.retry_deadline, self._clock)
        retried: list[RetryNotice] = []
        try:
            result: R = self._retrying(what, deadline, delivery, retried)(attempt, *args)
        except BaseException as exc:
            self._notify_end(retried, deadline, _describe(exc))
            raise
        self._notify_end(retried, deadline, None)
        return result

    def _notify_end(
        self, retried: list[RetryNotice], deadline: _Deadline, error: str | None
    ) -> None:
        if retried and self._on_retry is not None:
            last = retried[-1]
            self._on_retry(
                RetryNotice(
                    last.what,
                    last.attempt + 1,
                    deadline.elapsed(),
                    deadline.remaining(),
                    self.seeds,
                    error,
                    done=True,
                )
            )

    def _retrying(
        self,
        what: str,
        deadline: _Deadline,
        delivery: Delivery | None,
        retried: list[RetryNotice],
    ) -> Retrying:
        """The retry policy of one call, with its deadline."""
        backoff = wait_random_exponential(multiplier=BACKOFF_FIRST_SECS, max=BACKOFF_MAX_SECS)

        def wait(state: RetryCallState) -> float:
            return min(backoff(state), deadline.remaining())

        def before_sleep(state: RetryCallState) -> None:
            failure = state.outcome.exception() if state.outcome else None
            log.debug("retrying call=%r attempt=%d error=%r", what, state.attempt_number, failure)
            if delivery is not None:
                delivery.note(failure)
            notice = RetryNotice(
                what,
                state.attempt_number,
                deadline.elapsed(),
                deadline.remaining(),
                self.seeds,
                _describe(failure),
            )
            retried[:] = [notice]
            if self._on_retry is not None:
                self._on_retry(notice)

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

    # ------------------------------------------------------------------ one attempt

    def _read_attempt(self, method: str, path: str) -> httpx.Response:
        failure: Exception | None = None
        for address in self._suspects_last([self._leader, self._answered, *self.seeds]):
            try:
                return self._send(address, method, path)
            except (httpx.TransportError, ApiError) as exc:
                if not _is_retryable(exc) and type(exc) is not ApiError:
                    raise  # a definite answer, such as unknown_pipeline
                failure = exc  # this nimbus cannot answer now, or is not one: ask the next
        assert failure is not None  # there is at least one seed
        raise failure

    def _stream_attempt(self, path: str, params: Mapping[str, str]) -> httpx.Response:
        failure: Exception | None = None
        for address in _unique([self._answered, self._leader, *self.seeds]):
            try:
                return self._open(address, path, params)
            except (httpx.TransportError, ApiError) as exc:
                if not _is_retryable(exc) and type(exc) is not ApiError:
                    raise
                failure = exc
        assert failure is not None  # there is at least one seed
        raise failure

    def _open(self, address: str, path: str, params: Mapping[str, str]) -> httpx.Response:
        """One streamed GET to one nimbus; an error response becomes its ApiError."""
        connect = self._http.timeout.connect
        request = self._http.build_request(
            "GET",
            f"{self._scheme}://{address}{path}",
            params=params,
            timeout=httpx.Timeout(connect, read=None),
        )
        try:
            response = self._http.send(request, stream=True)
        except httpx.TransportError:
            self._forget(address)
            raise
        if not response.is_success:
            response.read()
            response.close()
            raise _api_error(response, address)
        self._answered = address
        return response

    def _leader_attempt(self, method: str, path: str, request: dict[str, Any]) -> httpx.Response:
        """One attempt: to the known (or discovered) leader, following not_leader answers."""
        address = self._leader or self._discover_leader()
        for _ in range(MAX_REDIRECTS):
            try:
                response = self._send(address, method, path, **request)
            except NotLeaderError as exc:
                named = _peer_address(exc.leader) if exc.leader else None
                if named is not None and self._suspected(named):
                    named = None  # it timed out moments ago: ask again after a backoff
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
        named = _peer_address(info.address)
        if self._suspected(named):
            self._leader = None
            raise NoLeaderError(
                f"the nimbuses name {named} as the leader, which let a request time out "
                f"moments ago; asking again"
            )
        return named

    def _ask_for_leader(self) -> LeaderInfo:
        """The first leader a nimbus names; a null LeaderInfo if those that answered know none.

        Raises the last failure when no nimbus answered at all.
        """
        nobody = None
        failure: Exception | None = None
        for address in self._suspects_last([self._answered, *self.seeds]):
            if nobody is not None and self._suspected(address):
                break  # one that answers knows no leader: a suspect would only hold the call
            try:
                info = parse(LeaderInfo, self._send(address, "GET", f"{API}/leader"))
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
            response = self._http.request(method, f"{self._scheme}://{address}{path}", **request)
        except httpx.TransportError as exc:
            self._forget(address)
            if isinstance(exc, httpx.TimeoutException):
                self._suspects[address] = self._clock() + self._suspect_secs
            raise
        except httpx.HTTPError as exc:  # not transient: a response httpx cannot decode
            raise ApiError(f"nimbus {address} sent a response that cannot be read: {exc}") from exc
        self._suspects.pop(address, None)  # it answers
        if not response.is_success:
            raise _api_error(response, address)
        self._answered = address
        return response

    def _suspected(self, address: str) -> bool:
        """Whether ``address`` let a request time out less than a request timeout ago."""
        until = self._suspects.get(address)
        return until is not None and self._clock() < until

    def _suspects_last(self, addresses: Iterable[str | None]) -> tuple[str, ...]:
        """``addresses`` without repeats, the suspects moved to the end (in their order)."""
        unique = _unique(addresses)
        return tuple(sorted(unique, key=self._suspected))

    def _forget(self, address: str) -> None:
        """Stop preferring a nimbus that failed to answer."""
        if self._leader == address:
            self._leader = None
        if self._answered == address:
            self._answered = None


def parse(model: type[M], response: httpx.Response) -> M:
    """The response's body as ``model``; ApiError if it is not one (not a nimbus, or too old)."""
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        raise ApiError(
            f"{response.request.url.netloc.decode()} answered {response.request.url.path} "
            f"with a body that is not a {model.__name__}: {exc.errors()[0]['msg']}"
        ) from None


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


def _peer_address(address: str) -> str:
    """``host:port`` of a nimbus named by a nimbus (tolerates an ``http(s)://`` prefix)."""
    return address.removeprefix("http://").removeprefix("https://").rstrip("/")


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
    if isinstance(failure, StratusError):
        return str(failure)
    if isinstance(failure, httpx.TransportError):
        try:
            where = f" from {failure.request.url.netloc.decode()}"
        except RuntimeError:  # no request attached
            where = ""
        return f"{type(failure).__name__}{where}: {failure or 'no detail'}"
    return repr(failure)
