"""The verbs of the nimbus HTTP API as Python calls: reads, submit and the other leader-only calls.

Each verb checks its arguments first (names and conf in ``request_checks.py``, the package
here), then leaves where the request goes and how it is retried to
:class:`~stratus.client.routing.NimbusRouter`. See the package docstring (``stratus.client``)
for what the client guarantees::

    with NimbusClient(["10.0.0.1:6627", "10.0.0.2:6627"]) as client:
        client.activate("wordcount")
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from stratus.api.clock import Clock
from stratus.api.errors import (
    InvalidConfError,
    InvalidRequestError,
    UnknownPipelineError,
)
from stratus.api.names import check_pipeline_name
from stratus.api.overview import WorkersOverview
from stratus.api.purges import PurgeState, PurgeStatus
from stratus.api.records import (
    AssignmentHistory,
    ClusterSummary,
    CordonStatus,
    KillRequest,
    LeaderInfo,
    LeaderTerms,
    PipelineList,
    PipelineRecord,
    PipelineRuns,
    PipelineStatus,
    PipelineWorkers,
    RollbackRequest,
)
from stratus.client.errors import (
    DrainNoRoomError,
    DrainTimeoutError,
    PurgeFailedError,
    PurgeWaitTimeoutError,
    RolloutFailedError,
    RolloutTimeoutError,
)
from stratus.client.request_checks import conf_json, pipeline_path, validated
from stratus.client.rollout import Rollout, judge_rollout
from stratus.client.routing import API, Delivery, NimbusRouter, RetryListener, parse
from stratus.client_settings import client_auth
from stratus.client_settings import package_limits as limits_of
from stratus.codedist.package_build import build_package
from stratus.codedist.package_check import PackageLimits, check_package
from stratus.config import StratusConfig
from stratus.security.client_auth import NO_AUTH, ClientAuth

T = TypeVar("T")


class NimbusClient:
    """A client of the nimbuses named by ``seeds`` (``host:port``); see ``stratus.client``.

    ``on_retry`` hears of every retry and of how a retried call ended (a ``RetryNotice``).
    ``transport``, ``clock`` and ``sleep`` exist so that tests can drive the client without a
    network or a real clock. One client may be shared by threads: httpx's client is
    thread-safe, and the remembered leader is a single attribute.
    """

    def __init__(  # noqa: PLR0913 keyword-only options
        self,
        seeds: Sequence[str],
        *,
        retry_deadline: float = 30.0,
        request_timeout: float = 10.0,
        connect_timeout: float = 2.0,
        auth: ClientAuth = NO_AUTH,
        transport: httpx.BaseTransport | None = None,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        package_limits: PackageLimits | None = None,
        on_retry: RetryListener | None = None,
    ) -> None:
        self._router = NimbusRouter(
            seeds,
            retry_deadline=retry_deadline,
            request_timeout=request_timeout,
            connect_timeout=connect_timeout,
            auth=auth,
            transport=transport,
            clock=clock,
            sleep=sleep,
            on_retry=on_retry,
        )
        self.seeds = self._router.seeds
        self.retry_deadline = retry_deadline
        self.package_limits = package_limits or limits_of(StratusConfig())
        self._clock = clock
        self._sleep = sleep

    @classmethod
    def from_config(
        cls,
        conf: StratusConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        on_retry: RetryListener | None = None,
    ) -> NimbusClient:
        """A client for ``nimbus.seeds`` with ``client.retry.deadline.secs``,
        ``client.request.timeout.secs``, ``client.connect.timeout.secs``, and the token and
        TLS of ``client.auth.*`` and ``client.tls.*`` (or ``STRATUS_TOKEN``); ``on_retry``
        hears of its retries."""
        return cls(
            conf.nimbus_seeds,
            retry_deadline=conf.client_retry_deadline_secs,
            request_timeout=conf.client_request_timeout_secs,
            connect_timeout=conf.client_connect_timeout_secs,
            auth=client_auth(conf),
            transport=transport,
            package_limits=limits_of(conf),
            on_retry=on_retry,
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
        self._router.close()

    @property
    def known_leader(self) -> str | None:
        """The nimbus this client last found leading (``host:port``), if any."""
        return self._router.known_leader

    # ------------------------------------------------------------------ reads (any nimbus)

    def cluster(self) -> ClusterSummary:
        """Every nimbus (the leader marked), supervisor and pipeline, from any nimbus."""
        return parse(ClusterSummary, self._router.read("GET", f"{API}/cluster"))

    def leader(self) -> LeaderInfo:
        """Who leads now: the first leader a nimbus names.

        Nimbuses that know no leader do not end the search; when none of those that answered
        knows one, the answer is a LeaderInfo with a null address (this call does not wait for
        an election to end).
        """
        return self._router.leader()

    def leader_terms(self) -> LeaderTerms:
        """The newest terms of leadership (at most 100), newest first, from any nimbus."""
        return parse(LeaderTerms, self._router.read("GET", f"{API}/leader/terms"))

    def list_pipelines(self) -> list[PipelineRecord]:
        """Every pipeline, sorted by name, from any nimbus."""
        return parse(PipelineList, self._router.read("GET", f"{API}/pipelines")).pipelines

    def status(self, name: str) -> PipelineRecord:
        """One pipeline's record, from any nimbus; UnknownPipelineError if there is none."""
        return parse(PipelineRecord, self._router.read("GET", pipeline_path(name)))

    def logs(
        self,
        name: str,
        *,
        previous: bool = False,
        follow: bool = False,
        run: int | None = None,
        tail: int | None = None,
    ) -> Generator[bytes, None, None]:
        """A run's log as it arrives, from any nimbus (which reads it from the supervisor
        that ran it, wherever the pipeline is now): run ``run``, else the newest, or with
        ``previous`` the one before it; ``tail`` its last lines only; ``follow`` goes on with
        new lines until the run ends or the iterator is closed. Needs the role ``submit``
        (or to read the pipeline); NoLogError when there is no log to show, UnknownRunError
        for a run not kept."""
        check_pipeline_name(name)
        params = {"previous": str(previous).lower(), "follow": str(follow).lower()}
        if run is not None:
            params["run"] = str(run)
        if tail is not None:
            params["tail"] = str(tail)
        response = self._router.open_stream(f"{pipeline_path(name)}/logs", params)
        try:
            yield from response.iter_raw()
        finally:
            response.close()

    def history(self, name: str) -> AssignmentHistory:
        """A pipeline's newest assignment changes (at most 50), newest first, from any
        nimbus; UnknownPipelineError if there is no such pipeline."""
        return parse(AssignmentHistory, self._router.read("GET", f"{pipeline_path(name)}/history"))

    def runs(self, name: str, *, limit: int | None = None) -> PipelineRuns:
        """A pipeline's runs kept, newest first (at most ``limit``), from any nimbus;
        UnknownPipelineError if there is no such pipeline and no run of its name."""
        path = f"{pipeline_path(name)}/runs" + (f"?limit={limit}" if limit else "")
        return parse(PipelineRuns, self._router.read("GET", path))

    def workers(self, name: str) -> PipelineWorkers:
        """Where a pipeline runs and its workers' last heartbeats, from any nimbus."""
        return parse(PipelineWorkers, self._router.read("GET", f"{pipeline_path(name)}/workers"))

    def workers_overview(self) -> WorkersOverview:
        """Where every pipeline runs and its workers' last heartbeats, in one call, from any
        nimbus: every pipeline placed or heard from, errors redacted."""
        return parse(WorkersOverview, self._router.read("GET", f"{API}/workers"))

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
            check_pipeline_name(name)
        content = self._checked_package(package)
        fields = {
            "name": name or "",
            "conf": conf_json(conf or {}),
            "request_id": request_id or uuid.uuid4().hex,
        }
        filename = package.name if isinstance(package, Path) else "package"
        files = {"package": (f"{filename}.zip", content, "application/zip")}
        response = self._router.call_leader("POST", f"{API}/pipelines", data=fields, files=files)
        return parse(PipelineRecord, response)

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

    def update(
        self,
        name: str,
        package: Path | bytes,
        conf: Mapping[str, Any] | None = None,
        *,
        request_id: str | None = None,
    ) -> PipelineRecord:
        """Give pipeline ``name`` new code: ``package`` checked here and uploaded, as a
        submit's. Its conf is the new manifest's, with the values the user set (at submit,
        in rebalances and updates) over it and ``conf`` over both. The pipeline keeps its
        name and checkpoints.

        The record answered has the update applied (a higher ``version``), or waiting in
        ``update`` for its code's replication: ``wait_updated`` waits for it. Every attempt
        sends the same request id (a new uuid4 unless given), so a retry after a failover
        changes nothing twice.
        """
        check_pipeline_name(name)
        content = self._checked_package(package)
        fields = {"conf": conf_json(conf or {}), "request_id": request_id or uuid.uuid4().hex}
        filename = package.name if isinstance(package, Path) else "package"
        files = {"package": (f"{filename}.zip", content, "application/zip")}
        path = pipeline_path(name, "update")
        response = self._router.call_leader("POST", path, data=fields, files=files)
        return parse(PipelineRecord, response)

    def wait_updated(
        self,
        record: PipelineRecord,
        *,
        poll_secs: float = 0.2,
        on_progress: Callable[[PipelineRecord], None] | None = None,
    ) -> PipelineRecord:
        """Wait while the update that ``record`` (an answer of ``update``) shows waiting is
        not applied; the record once it is (or once the pipeline no longer runs code)."""
        waiting = record.update
        if waiting is None:
            return record
        while True:
            seen = self.status(record.name)
            if on_progress is not None:
                on_progress(seen)
            pending = seen.update
            still = pending is not None and pending.request_id == waiting.request_id
            if not still or not seen.status.needs_code:
                return seen
            self._sleep(poll_secs)

    def wait_running(
        self,
        record: PipelineRecord,
        *,
        timeout: float | None,
        poll_secs: float = 0.5,
        on_progress: Callable[[Rollout], None] | None = None,
    ) -> PipelineRecord:
        """Wait until the generation ``record`` shows (an update applied, a rollback, a
        restart) runs: its worker on the assigned supervisor reports RUNNING (or FINISHED)
        with it. RolloutFailedError with the reason when it was rolled back, or it or the
        pipeline FAILED; RolloutTimeoutError past ``timeout`` (None: no limit)."""

        def rollout() -> tuple[PipelineRecord, Rollout]:
            seen = self.status(record.name)
            return seen, judge_rollout(record, seen, self.workers(record.name))

        def settled(seen: tuple[PipelineRecord, Rollout]) -> bool:
            if on_progress is not None:
                on_progress(seen[1])
            if seen[1].failure is not None:
                raise RolloutFailedError(seen[1].failure)
            return seen[1].done

        def timed_out(seen: tuple[PipelineRecord, Rollout]) -> Exception:
            return RolloutTimeoutError(
                f"gave up waiting after {timeout:g}s: {seen[1].waiting}; the change goes on "
                f"(stratus status {record.name})"
            )

        return self._poll(rollout, settled, timeout, poll_secs, timed_out)[0]

    def _poll(
        self,
        read: Callable[[], T],
        settled: Callable[[T], bool],
        timeout: float | None,
        poll_secs: float,
        timed_out: Callable[[T], Exception],
    ) -> T:
        """``read()`` every ``poll_secs`` until ``settled`` says so (it may raise to fail);
        ``timed_out``'s error past ``timeout`` (None: no limit)."""
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            seen = read()
            if settled(seen):
                return seen
            if deadline is not None and self._clock() >= deadline:
                raise timed_out(seen)
            self._sleep(poll_secs)

    def rollback(
        self, name: str, to_version: int | None = None, *, request_id: str | None = None
    ) -> PipelineRecord:
        """Run a kept version of ``name`` again: ``to_version``, or the version that ran
        before the current. UnknownVersionError, listing the kept ones, if it is not kept
        (nothing changes). Every attempt sends the same request id: a retry after a
        failover rolls back once."""
        body = validated(
            RollbackRequest,
            InvalidRequestError,
            to_version=to_version,
            request_id=request_id or uuid.uuid4().hex,
        )
        response = self._router.call_leader("POST", pipeline_path(name, "rollback"), json=body)
        return parse(PipelineRecord, response)

    def restart(self, name: str, *, request_id: str | None = None) -> PipelineRecord:
        """Run ``name`` again with its current version and checkpoint: a FAILED or FINISHED
        pipeline becomes ACTIVE, an ACTIVE one's worker restarts. Every attempt sends the
        same request id: a retry after a failover restarts once."""
        body = {"request_id": request_id or uuid.uuid4().hex}
        response = self._router.call_leader("POST", pipeline_path(name, "restart"), json=body)
        return parse(PipelineRecord, response)

    def kill(
        self, name: str, wait_secs: float | None = None, *, purge: bool = False
    ) -> PipelineRecord | None:
        """Mark ``name`` KILLED; the leader removes its record ``wait_secs`` later
        (``pipeline.kill.wait.secs`` when None). Killing a KILLED pipeline changes nothing.
        Its checkpoints are kept (a later submit of the name resumes from them) unless
        ``purge``: the record's removal then records their purge, which whoever can write
        them carries out; ``wait_purged`` waits for both.

        Returns the KILLED record, or None when an attempt that may have reached the leader
        was retried and the retry found no such pipeline: the earlier attempt killed it and
        its record was already removed (short ``wait_secs``), so the kill counts as done.
        UnknownPipelineError is raised only when no attempt can have applied the kill.
        """
        body = validated(KillRequest, InvalidRequestError, wait_secs=wait_secs, purge=purge)
        if not purge:
            del body["purge"]  # the body an older nimbus knows
        delivery = Delivery()
        try:
            response = self._router.call_leader(
                "POST", pipeline_path(name, "kill"), delivery=delivery, json=body
            )
        except UnknownPipelineError:
            if delivery.maybe_applied:
                return None
            raise
        return parse(PipelineRecord, response)

    def purge_status(self, name: str) -> PurgeStatus:
        """Where ``name``'s removal and the purge of its checkpoints stand, read by any
        nimbus from ZooKeeper itself."""
        return parse(PurgeStatus, self._router.read("GET", f"{pipeline_path(name)}/purge"))

    def wait_purged(
        self,
        name: str,
        *,
        timeout: float | None,
        poll_secs: float = 0.5,
        on_progress: Callable[[PurgeStatus], None] | None = None,
    ) -> PurgeStatus:
        """Wait until ``name``, killed with ``purge``, is removed and its checkpoints are
        deleted: the status once done. PurgeFailedError with the reasons when everyone who
        could delete them failed (the purge stays recorded and is tried again);
        PurgeWaitTimeoutError past ``timeout`` (None: no limit), saying what is pending."""
        deadline = None if timeout is None else self._clock() + timeout
        while True:
            seen = self.purge_status(name)
            if on_progress is not None:
                on_progress(seen)
            if seen.done:
                return seen
            order = seen.purge
            if order is not None and order.state is PurgeState.FAILED:
                raise PurgeFailedError(
                    f"pipeline {name} is removed, but its checkpoints ({order.root.rstrip('/')}/"
                    f"{name}) are not deleted: {order.reason}. The purge stays recorded and is "
                    "tried again; the name cannot be submitted until it is done"
                )
            if deadline is not None and self._clock() >= deadline:
                raise PurgeWaitTimeoutError(f"gave up waiting after {timeout:g}s: {pending(seen)}")
            self._sleep(poll_secs)

    def activate(self, name: str) -> PipelineRecord:
        """Make ``name`` ACTIVE (unchanged if it is); InvalidTransitionError if KILLED."""
        path = pipeline_path(name, "activate")
        return parse(PipelineRecord, self._router.call_leader("POST", path))

    def deactivate(self, name: str) -> PipelineRecord:
        """Make ``name`` INACTIVE (unchanged if it is); InvalidTransitionError if KILLED."""
        path = pipeline_path(name, "deactivate")
        return parse(PipelineRecord, self._router.call_leader("POST", path))

    def rebalance(
        self, name: str, conf: Mapping[str, Any], *, request_id: str | None = None
    ) -> PipelineRecord:
        """Merge ``conf`` (at least one key) into the pipeline's conf; it restarts with it.

        Every attempt sends the same request id (a new uuid4 unless given): a retry after a
        failover changes nothing twice.
        """
        if not conf:
            raise InvalidConfError(f"rebalance of {name!r} needs at least one conf key")
        body = {"conf": json.loads(conf_json(conf)), "request_id": request_id or uuid.uuid4().hex}
        response = self._router.call_leader("POST", pipeline_path(name, "rebalance"), json=body)
        return parse(PipelineRecord, response)

    # ------------------------------------------------------------------ supervisors (admin)

    def cordon(self, supervisor: str) -> CordonStatus:
        """Give ``supervisor`` no new pipeline; it keeps its own. Idempotent."""
        return self._supervisor_call("POST", supervisor, "cordon")

    def uncordon(self, supervisor: str) -> CordonStatus:
        """Let ``supervisor`` take new pipelines again (a drain under way stops)."""
        return self._supervisor_call("POST", supervisor, "uncordon")

    def drain(self, supervisor: str) -> CordonStatus:
        """Cordon ``supervisor`` and have the leader move its pipelines away; returns at once
        (``wait_drained`` follows it)."""
        return self._supervisor_call("POST", supervisor, "drain")

    def drain_status(self, supervisor: str) -> CordonStatus:
        """The cordon of ``supervisor`` and how far its drain is (from the leader)."""
        return self._supervisor_call("GET", supervisor, "drain")

    def wait_drained(
        self,
        supervisor: str,
        *,
        timeout: float | None = None,
        poll_secs: float = 0.5,
        on_progress: Callable[[CordonStatus], None] | None = None,
    ) -> CordonStatus:
        """Wait until ``supervisor`` holds no pipeline and none is on the way from it.

        DrainNoRoomError naming the pipelines when the leader's last round found no room
        for them and nothing else is moving; DrainTimeoutError after ``timeout`` seconds.
        Each poll's status goes to ``on_progress``. The drain goes on in the leader either way.
        """

        def settled(status: CordonStatus) -> bool:
            if on_progress is not None:
                on_progress(status)
            if status.done:
                return True
            if status.no_room and not status.moving:
                raise DrainNoRoomError(supervisor, status.no_room)
            return False

        def timed_out(status: CordonStatus) -> Exception:
            assert timeout is not None
            return DrainTimeoutError(supervisor, status.remaining + status.moving, timeout)

        return self._poll(
            lambda: self.drain_status(supervisor), settled, timeout, poll_secs, timed_out
        )

    def _supervisor_call(self, method: str, supervisor: str, action: str) -> CordonStatus:
        if not supervisor or "/" in supervisor:
            raise InvalidRequestError(f"invalid supervisor id {supervisor!r}")
        path = f"{API}/supervisors/{quote(supervisor, safe='')}/{action}"
        return parse(CordonStatus, self._router.call_leader(method, path))


def pending(status: PurgeStatus) -> str:
    """What a kill with purge still waits for, in words."""
    name = status.pipeline
    if status.record is not None:
        return (
            f"pipeline {name} is {status.record.value}; its record is removed once its wait "
            "is over and no worker runs it, then its checkpoints are purged"
        )
    order = status.purge
    if order is None:
        return f"pipeline {name} is removed and its checkpoints deleted"
    where = f"{order.root.rstrip('/')}/{name}"
    why = f": {order.reason}" if order.reason else ""
    return f"pipeline {name} is removed; the purge of {where} is {order.state.value}{why}"
