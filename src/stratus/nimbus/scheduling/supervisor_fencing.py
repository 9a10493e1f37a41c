"""The leader's fence of a silent supervisor: its workers are gone before its pipelines move.

Guarantees: a supervisor the leader has not heard from for
``nimbus.supervisor.fence.after.secs`` while it holds pipelines is fenced once per silence,
off the scheduling round's thread and never twice at once: first the graceful stop through
its endpoint (``POST /api/v1/fence`` with the term's epoch and the supervisor's id,
answered once no worker of it is left; over https exactly when this nimbus's configuration
says the cluster speaks TLS, and never through a loopback endpoint of another host:
``stratus.nimbus.scheduling.supervisor_endpoints``), then the methods of
``nimbus.supervisor.fencing.methods`` in order (``shell``, ``process``, ``sshfence`` of
``stratus.ha.fencing``, aimed at its endpoint's address when it may be used). Only a
fence that succeeded, in the same term and the same silence (no heartbeat change since it
began), lets the leader move the pipelines before ``nimbus.supervisor.timeout.secs``; a
method other than the graceful stop counts only ``supervisor.worker.stop.secs`` after it
succeeded, the longest a worker outlives its supervisor. When every way fails the leader
waits out the supervisor's lease, as without a fence::

    fencing = SupervisorFencing(settings.fencing, client_auth(conf))
    verdicts = fence_verdicts(silences, fencing.attempts(), epoch=7, after_secs=5,
                              timeout_secs=10, now=clock())
    for sid in verdicts.start:
        fencing.start(registered[sid], epoch=7, silent_since=silences[sid].since)
    verdicts.fenced                  # supervisors whose pipelines may move now
    fencing.fence_pipelines(registered["s1"], ["etl"], epoch=7, timeout=1.5)  # True: gone
    fencing.close()

The pipeline fence (``fence_pipelines``, ``POST /api/v1/fence/pipelines``) is the failover's:
the same endpoint, client, TLS and credentials stop the workers of some pipelines only, the
supervisor keeping its lease and its other workers; the caller's thread waits for the answer,
bounded by the time it has.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum

import httpx
from pydantic import BaseModel, ValidationError

from stratus.api.clock import Clock
from stratus.api.echo import clip
from stratus.api.errors import UntrustedEndpointError
from stratus.api.records import (
    FenceAnswer,
    FenceRequest,
    PipelineFenceAnswer,
    PipelineFenceRequest,
    SupervisorSummary,
)
from stratus.ha.fencing import Fencer, FenceTarget, FencingContext, StandbyAsker
from stratus.nimbus.scheduling.supervisor_endpoints import endpoint_url, loopback_elsewhere
from stratus.nimbus.settings import FencingSettings
from stratus.security.client_auth import NO_AUTH, ClientAuth

log = logging.getLogger(__name__)

FENCE_PATH = "/api/v1/fence"
PIPELINE_FENCE_PATH = "/api/v1/fence/pipelines"
SUPERVISOR_EVENT = "supervisor_fence_attempt"  # the log line of a fence's failed call
PIPELINES_EVENT = "pipeline_fence_attempt"
CONNECT_TIMEOUT_SECS = 5.0  # at most; never more than nimbus.supervisor.fencing.timeout.secs
MAX_FENCES_AT_ONCE = 4  # supervisors fenced in parallel; more wait their turn
GRACEFUL = "graceful"


class FenceState(StrEnum):
    FENCING = "fencing"  # under way
    FENCED = "fenced"  # its workers are gone (from ``safe_from`` on)
    FAILED = "failed"  # every way failed: the lease is waited out


@dataclass(frozen=True)
class FenceAttempt:
    """One fence of one supervisor, for one silence seen in one term."""

    supervisor: str
    epoch: int
    silent_since: float  # when the leader last saw its heartbeat change, as the fence began
    state: FenceState
    safe_from: float = 0.0  # FENCED: from when no worker of it runs (the leader's clock)

    def of(self, epoch: int, silent_since: float) -> bool:
        """Whether this is the fence of that term's silence."""
        return self.epoch == epoch and self.silent_since == silent_since


@dataclass(frozen=True)
class Silence:
    """A supervisor's silence as the round judges it."""

    since: float  # its heartbeat's last change seen (or the term's or the watch's start)
    secs: float  # how long, at the moment the round's read began


@dataclass(frozen=True)
class FenceVerdicts:
    start: frozenset[str]  # fence these now
    fenced: frozenset[str]  # their workers are gone: move their pipelines now


def fence_verdicts(
    silences: Mapping[str, Silence],
    attempts: Mapping[str, FenceAttempt],
    *,
    epoch: int,
    after_secs: float,
    timeout_secs: float,
    now: float,
) -> FenceVerdicts:
    """Which of the supervisors holding pipelines, silent as ``silences`` say, to fence now
    and which a fence has stopped (pure).

    A fence counts only for the term and the silence it began in: a heartbeat seen since
    means the supervisor is back (it starts nothing before a read of the assignments newer
    than that heartbeat), and a new term or watch judges afresh. Each silence is fenced
    once; a supervisor being fenced is not fenced again; past the timeout the lease covers
    it and no fence starts.
    """
    start, fenced = set(), set()
    for sid, silence in silences.items():
        attempt = attempts.get(sid)
        if attempt is not None and attempt.of(epoch, silence.since):
            if attempt.state is FenceState.FENCED and now >= attempt.safe_from:
                fenced.add(sid)
            continue
        if attempt is not None and attempt.state is FenceState.FENCING:
            continue  # an older silence's fence still runs: never two at once
        if after_secs < silence.secs <= timeout_secs:
            start.add(sid)
    return FenceVerdicts(frozenset(start), frozenset(fenced))


class SupervisorFencing:
    """The fences under way and done, each run on a thread of a small pool; see the module
    docstring. ``start`` and ``attempts`` are called from the scheduling round's thread."""

    def __init__(
        self,
        settings: FencingSettings,
        auth: ClientAuth = NO_AUTH,
        *,
        clock: Clock = time.monotonic,
        on_outcome: Callable[[str, str], None] = lambda _result, _method: None,
    ) -> None:
        self.settings = settings
        self._auth = auth
        self._clock = clock
        self._on_outcome = on_outcome  # (fenced | failed, the method's name or -)
        self._lock = threading.Lock()
        self._attempts: dict[str, FenceAttempt] = {}
        self._pool = ThreadPoolExecutor(MAX_FENCES_AT_ONCE, thread_name_prefix="supervisor-fence")

    def attempts(self) -> dict[str, FenceAttempt]:
        with self._lock:
            return dict(self._attempts)

    def start(self, supervisor: SupervisorSummary, *, epoch: int, silent_since: float) -> bool:
        """Fence ``supervisor`` off this thread, for the term ``epoch``; False if a fence of
        it is under way already."""
        with self._lock:
            current = self._attempts.get(supervisor.id)
            if current is not None and current.state is FenceState.FENCING:
                return False
            self._attempts[supervisor.id] = FenceAttempt(
                supervisor.id, epoch, silent_since, FenceState.FENCING
            )
        log.warning(
            "event=supervisor_fencing supervisor=%s epoch=%d endpoint=%s",
            supervisor.id,
            epoch,
            supervisor.endpoint or "-",
        )
        self._pool.submit(self._fence, supervisor, epoch, silent_since)
        return True

    def forget(self, supervisor: str) -> None:
        """Drop what is known of a supervisor that left (a fence under way stays)."""
        with self._lock:
            current = self._attempts.get(supervisor)
            if current is not None and current.state is not FenceState.FENCING:
                del self._attempts[supervisor]

    def close(self) -> None:
        """Start no more fences; those under way end within their timeouts."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ one fence

    def _fence(self, supervisor: SupervisorSummary, epoch: int, silent_since: float) -> None:
        try:
            fenced_by = self._graceful(supervisor, epoch)
            safe_from = self._clock()
            if fenced_by is None:
                fenced_by = self._methods(supervisor)
                safe_from = self._clock() + self.settings.stop_secs
        except Exception:  # a fence that broke failed: the lease is waited out
            log.exception("event=supervisor_fence_error supervisor=%s", supervisor.id)
            fenced_by = None
        state = FenceState.FAILED if fenced_by is None else FenceState.FENCED
        with self._lock:
            self._attempts[supervisor.id] = FenceAttempt(
                supervisor.id, epoch, silent_since, state, safe_from
            )
        self._on_outcome(state.value, "-" if fenced_by is None else fenced_by.split("(")[0])
        if fenced_by is None:
            log.error(
                "event=supervisor_fence_failed supervisor=%s epoch=%d methods=%s "
                "action=wait_for_its_lease",
                supervisor.id,
                epoch,
                ",".join([GRACEFUL, *(str(spec) for spec in self.settings.methods)]),
            )
        else:
            log.warning(
                "event=supervisor_fenced supervisor=%s method=%s epoch=%d safe_in_secs=%g",
                supervisor.id,
                fenced_by,
                epoch,
                max(0.0, safe_from - self._clock()),
            )

    def _graceful(self, supervisor: SupervisorSummary, epoch: int) -> str | None:
        """Ask its endpoint to stop every worker; GRACEFUL once it said none is left."""
        detail = f"method={GRACEFUL}"
        body = FenceRequest(epoch=epoch, supervisor=supervisor.id)
        response = self._post(
            supervisor, FENCE_PATH, body, self.settings.timeout_secs, SUPERVISOR_EVENT, detail
        )
        if response is None:
            return None
        if response.status_code == 200:
            answer = FenceAnswer.model_validate_json(response.content)
            if answer.supervisor == supervisor.id and answer.epoch == epoch:
                return GRACEFUL
        _failed(SUPERVISOR_EVENT, supervisor, detail, response)
        return None

    # ------------------------------------------------------------------ a pipeline fence

    def fence_pipelines(
        self, supervisor: SupervisorSummary, pipelines: Collection[str], epoch: int, timeout: float
    ) -> bool:
        """Ask ``supervisor``'s endpoint to stop the workers of ``pipelines`` only, in the
        term ``epoch`` (``POST /api/v1/fence/pipelines``), on the caller's thread, with the
        graceful fence's client, TLS and credentials; connecting and waiting for the answer
        each take at most ``timeout``. True once the supervisor answered that no process of
        those workers is left there (and that none starts again before a newer assignment);
        False when it has no endpoint to trust, refused, failed or did not answer in time,
        or ``timeout`` is not positive (nothing is sent).
        ``ValueError`` when ``pipelines`` is empty, too long or names an invalid pipeline."""
        body = pipeline_fence_request(supervisor.id, pipelines, epoch)
        detail = f"pipelines={clip(','.join(body.pipelines))} epoch={epoch}"
        if timeout <= 0:  # no time left: the caller waits for its floor
            log.warning(
                "event=%s supervisor=%s %s result=failed reason=no_time_left",
                PIPELINES_EVENT,
                supervisor.id,
                detail,
            )
            return False
        response = self._post(
            supervisor, PIPELINE_FENCE_PATH, body, timeout, PIPELINES_EVENT, detail
        )
        if response is None:
            return False
        if response.status_code == 200 and pipelines_gone(response.content, body):
            log.warning(
                "event=supervisor_pipelines_fenced supervisor=%s pipelines=%s epoch=%d",
                supervisor.id,
                ",".join(body.pipelines),
                epoch,
            )
            return True
        _failed(PIPELINES_EVENT, supervisor, detail, response)
        return False

    # ------------------------------------------------------------------ the endpoint

    def _post(
        self,
        supervisor: SupervisorSummary,
        path: str,
        body: BaseModel,
        timeout: float,
        event: str,
        detail: str,
    ) -> httpx.Response | None:
        """POST ``body`` to ``path`` on the supervisor's endpoint; None (logged) when it has
        none to trust or the call failed."""
        if supervisor.endpoint is None:
            return None
        try:
            url = endpoint_url(supervisor, path, self._auth)
        except UntrustedEndpointError:
            log.warning(
                "event=%s supervisor=%s %s result=refused reason=untrusted_endpoint",
                event,
                supervisor.id,
                detail,
            )
            return None  # why is logged (event=supervisor_endpoint_refused); nothing was sent
        try:
            with httpx.Client(
                timeout=httpx.Timeout(timeout, connect=min(CONNECT_TIMEOUT_SECS, timeout)),
                verify=self._auth.verify(),
                trust_env=False,
                follow_redirects=False,
            ) as http:
                return http.post(url, json=body.model_dump(), headers=self._auth.headers())
        except httpx.HTTPError as exc:
            log.warning(
                "event=%s supervisor=%s %s result=failed error=%s",
                event,
                supervisor.id,
                detail,
                clip(f"{type(exc).__name__}: {exc}"),
            )
            return None

    def _methods(self, supervisor: SupervisorSummary) -> str | None:
        """The configured methods in order, aimed at the supervisor's endpoint; the name of
        the one that fenced it. Without an endpoint (or with a loopback one of another
        host), only ``shell`` (its host and id) runs: ``process`` and ``sshfence`` find the
        supervisor by its endpoint's port."""
        reachable = _reachable_endpoint(supervisor)
        target = _target(supervisor, reachable)
        specs = [spec for spec in self.settings.methods if reachable or spec.name == "shell"]
        if not specs:
            return None
        results: list[str] = []  # one per method tried, in order

        def heard(_method: str, result: str) -> None:
            results.append(result)

        context = FencingContext(
            timeout=self.settings.timeout_secs,
            graceful_timeout=self.settings.timeout_secs,
            connect=_no_standby_asker,
        )
        if not Fencer(specs, context, heard).fence(target):
            return None
        return str(specs[len(results) - 1])


def pipeline_fence_request(
    supervisor: str, pipelines: Collection[str], epoch: int
) -> PipelineFenceRequest:
    """The body of a pipeline fence: each pipeline once, sorted (pure). ``ValueError`` (a
    ``ValidationError``) when there is none, more than a supervisor runs, or a bad name."""
    return PipelineFenceRequest(
        epoch=epoch, supervisor=supervisor, pipelines=sorted(set(pipelines))
    )


def pipelines_gone(content: bytes, asked: PipelineFenceRequest) -> bool:
    """Whether a supervisor's 200 answer to ``asked`` says the workers of exactly those
    pipelines are gone, there, in that term (pure); an answer that does not parse is not."""
    try:
        answer = PipelineFenceAnswer.model_validate_json(content)
    except ValidationError:
        return False
    return (
        answer.supervisor == asked.supervisor
        and answer.epoch == asked.epoch
        and sorted(answer.pipelines) == sorted(asked.pipelines)
    )


def _failed(
    event: str, supervisor: SupervisorSummary, detail: str, response: httpx.Response
) -> None:
    log.warning(
        "event=%s supervisor=%s %s result=failed status=%d body=%s",
        event,
        supervisor.id,
        detail,
        response.status_code,
        clip(response.text),
    )


def _target(supervisor: SupervisorSummary, reachable: bool) -> FenceTarget:
    """Its endpoint's host and port if ``reachable``, else its registered host (port 0)."""
    if reachable and supervisor.endpoint is not None:
        parsed = FenceTarget.parse(supervisor.endpoint)
        return FenceTarget(parsed.host, parsed.port, supervisor.id)
    return FenceTarget(supervisor.host or supervisor.id, 0, supervisor.id)


def _reachable_endpoint(supervisor: SupervisorSummary) -> bool:
    """Whether its endpoint is one to aim at: registered, and not a loopback address of
    another host (which would aim ``process`` and ``sshfence`` at this host)."""
    return supervisor.endpoint is not None and not loopback_elsewhere(supervisor)


def _no_standby_asker(address: str, _timeout: float) -> StandbyAsker:
    raise AssertionError(f"no HA service to ask at {address}: graceful is not a listed method")
