"""What a nimbus does for each API call, between the HTTP layer and the pipeline operations.

Reads are answered from the ``ClusterView`` (no ZooKeeper request), but for where a pipeline
runs (``Placement``); leader-only calls take the term the leadership controller accepted, or
fail with ``NotLeaderError`` naming the leader, and run with that term: a submit and an
update through the ``Submitter``, the others through ``PipelineOps``. After a submit, an
update or a kill, ``on_change`` tells the leader's duties (the leadership controller) to look
at the pipeline now; every write is answered once this nimbus's view shows it, so a client
reads its own writes. Every record it answers with has its secret-looking conf values
redacted (``stratus.api.redaction``): the API, the status page and the CLI built on them
never show a secret.

A call on one pipeline names its caller (``Caller``; None on a cluster without a token
file), whom ``stratus.security.authorizer`` judges against the pipeline's owners and
readers before anything is done: a change against the record as ZooKeeper holds it, a log
against this nimbus's view. A submit records its caller as the pipeline's owner.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from kazoo.exceptions import KazooException

from stratus.api.clock import Clock
from stratus.api.echo import echo
from stratus.api.errors import (
    InvalidRequestError,
    NoLogError,
    NotLeaderError,
    UnavailableError,
    UnknownPipelineError,
    UnknownSupervisorError,
)
from stratus.api.names import check_pipeline_name
from stratus.api.overview import SupervisorList, SupervisorStatus, WorkersOverview
from stratus.api.pipeline_conf import validate_pipeline_conf
from stratus.api.purges import PurgeStatus
from stratus.api.records import (
    Assignment,
    ClusterSummary,
    CordonStatus,
    LeaderInfo,
    NimbusSummary,
    PipelineRecord,
    PipelineSummary,
    PipelineWorkers,
    RunRecord,
    SupervisorSummary,
)
from stratus.api.redaction import redact_record, redact_workers
from stratus.api.strict_json import loads_strict
from stratus.codedist.package_store import PackageStore
from stratus.coordination.leadership import Leadership
from stratus.nimbus.cluster_view import ClusterView
from stratus.nimbus.records.pipeline_ops import PipelineOps
from stratus.nimbus.scheduling.cordons import CordonTable, DrainMemory, DrainRound
from stratus.nimbus.scheduling.placement import Placement
from stratus.nimbus.settings import ServiceSettings
from stratus.nimbus.submission import Submitter
from stratus.security.access import Caller
from stratus.security.authorizer import (
    PipelineAccess,
    Verb,
    check_pipeline_access,
    pipeline_summary,
)
from stratus.security.roles import Role

log = logging.getLogger(__name__)

MAX_REQUEST_ID_LENGTH = 128
VIEW_CATCH_UP_SECS = 2.0  # how long a write's answer waits for the view to show it
REQUEST_ID = re.compile(r"^[!-~]*$")  # stored in the record and shown: no control characters


@dataclass(frozen=True)
class LogSource:
    """Where a pipeline's worker log is served, and the pipeline's real conf (secrets and
    all), whose secrets its lines are redacted of."""

    supervisor: SupervisorSummary
    conf: Mapping[str, Any]
    run: int | None = None  # the run whose log is read (None: the supervisor's newest)
    log_dir: str | None = None  # that run's log directory on the supervisor's host


class NimbusService:
    """The API's operations on one nimbus; see the module docstring."""

    def __init__(  # noqa: PLR0913 keyword-only: collaborators, callbacks, clocks
        self,
        settings: ServiceSettings,
        *,
        address: str,
        view: ClusterView,
        ops: PipelineOps,
        submitter: Submitter,
        placement: Placement,
        leadership: Callable[[], Leadership | None],
        on_change: Callable[[PipelineRecord], None],
        wall: Clock,
        cordons: CordonTable | None = None,
        drains: DrainMemory | None = None,
    ) -> None:
        self.address = address  # host:port of this nimbus
        self.limits = settings.limits
        self.ui_refresh_secs = settings.ui_refresh_secs
        self._settings = settings
        self.view = view
        self._ops = ops
        self._submitter = submitter
        self._placement = placement
        self._leadership = leadership  # the term the controller accepted, None unless leading
        self._on_change = on_change
        self._wall = wall  # wall clock: uptimes from the registrations' start times
        self._summary_cache: tuple[tuple[int, int], bytes] | None = None
        self._listed: tuple[int, list[PipelineSummary]] | None = None  # by view version
        self._cordons = cordons  # None: this nimbus cordons nothing (tests of other parts)
        self._drains = drains or DrainMemory()

    @property
    def incoming(self) -> PackageStore:
        """The store that receives uploads (the code routes serve it)."""
        return self._submitter.incoming

    # ------------------------------------------------------------------ reads (any nimbus)

    def is_leader(self) -> bool:
        return self._leadership() is not None

    def leader(self) -> LeaderInfo:
        return self.view.leader()

    def cluster_summary(self) -> ClusterSummary:
        now = self._wall()
        leader = self.view.leader().address
        nimbuses = [
            NimbusSummary(
                host=reg.host,
                port=reg.port,
                uptime_secs=max(0, int(now - reg.started)),
                is_leader=reg.address == leader,
                version=reg.version,
                insecure=reg.insecure,
            )
            for _, reg in sorted(self.view.nimbuses().items())
        ]
        supervisors: list[SupervisorSummary] = [
            s for _, s in sorted(self.view.supervisors().items())
        ]
        return ClusterSummary(
            nimbuses=nimbuses,
            supervisors=supervisors,
            pipelines=self._listed_pipelines(),
            leader=self.view.leader(),
            cordons=[cordon for _, cordon in sorted(self.view.cordons().items())],
        )

    def cluster_summary_json(self) -> bytes:
        """The summary as JSON, rebuilt only when the view changed or a second went by."""
        key = (self.view.version, int(self._wall()))
        cached = self._summary_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        body = self.cluster_summary().model_dump_json().encode()
        self._summary_cache = (key, body)
        return body

    def _listed_pipelines(self) -> list[PipelineSummary]:
        """Every pipeline as the summary lists it, redacted: built again only when the view
        changed, not every second with the uptimes (the version is read first, so a change
        that lands meanwhile is built again at the next call)."""
        version = self.view.version
        cached = self._listed
        if cached is None or cached[0] != version:
            cached = self._listed = (version, [pipeline_summary(r) for r in self.pipelines()])
        return cached[1]

    def pipelines(self) -> list[PipelineRecord]:
        return [redact_record(record) for _, record in sorted(self.view.pipelines().items())]

    def pipeline(self, name: str) -> PipelineRecord:
        return redact_record(self._stored(name))

    def _stored(self, name: str) -> PipelineRecord:
        """The record as ZooKeeper holds it, secrets and all: never answered as it is."""
        check_pipeline_name(name)
        record = self.view.pipelines().get(name)
        if record is None:
            raise UnknownPipelineError(f"unknown pipeline {name!r}")
        return record

    def purge(self, name: str) -> PurgeStatus:
        """Where ``name``'s removal and the purge of its checkpoints stand, read from
        ZooKeeper itself (any nimbus answers as the leader would, whatever its view)."""
        check_pipeline_name(name)
        try:
            return self._ops.purge_status(name)
        except KazooException as exc:
            why = f"ZooKeeper is unreachable ({type(exc).__name__}); retry"
            raise UnavailableError(why) from None

    def workers(self, name: str) -> PipelineWorkers:
        """Where the pipeline runs and its workers' last heartbeats, read from the stores;
        a worker's error (its log tail) redacted against the pipeline's real conf."""
        record = self._stored(name)
        return redact_workers(self._placement.of(name), record.conf)

    def workers_overview(self) -> WorkersOverview:
        """Every pipeline's placement, errors redacted against its real conf: what the web
        UI polls, one read of each store whatever the number of pipelines."""
        records = self.view.pipelines()
        return WorkersOverview(
            pipelines=[
                redact_workers(where, records[name].conf if name in records else {})
                for name, where in self._placement.everywhere().items()
            ]
        )

    def supervisors(self) -> SupervisorList:
        """Every registered supervisor with the age of its last heartbeat (this nimbus's
        wall clock against the supervisor's: a skew between them shows in the age)."""
        beats = self._placement.supervisor_beats()
        cordons = self.view.cordons()
        now = self._wall()
        found = []
        for sid, reg in sorted(self.view.supervisors().items()):
            beat = beats.get(sid)
            cordon = cordons.get(sid)
            found.append(
                SupervisorStatus(
                    id=sid,
                    host=reg.host,
                    slots=reg.slots,
                    used=reg.used,
                    started=reg.started,
                    endpoint=reg.endpoint,
                    heartbeat_age_secs=None
                    if beat is None
                    else round(max(0.0, now - beat.time), 1),
                    running=beat.running if beat is not None else [],
                    stopping=beat.stopping if beat is not None else False,
                    cordoned=cordon is not None,
                    draining=cordon is not None and cordon.drain,
                    warm_ready=beat.warm_ready if beat is not None else 0,
                    warm=reg.warm,
                    beat_lease=reg.beat_lease,
                )
            )
        return SupervisorList(supervisors=found)

    def log_source(self, name: str, caller: Caller | None = None) -> LogSource:
        """The supervisor whose endpoint serves ``name``'s worker log: the one it is assigned
        to, else the last one a heartbeat names; NoLogError when there is none, and when
        that supervisor serves no endpoint. With the conf its lines are redacted against.
        ForbiddenError unless ``caller`` owns or reads the pipeline (or is an admin)."""
        record = self._stored(name)
        check_pipeline_access(caller, Verb.LOGS, name, PipelineAccess.of(record.owner, record.conf))
        placement = self._placement.of(name)
        where = placement.assignment.supervisor if placement.assignment else None
        if where is None and placement.workers:
            where = max(placement.workers, key=lambda beat: beat.time).supervisor
        if where is None:
            raise NoLogError(
                f"pipeline {name!r} runs on no supervisor now; a worker's log stays in "
                "<supervisor.local.dir>/workers/<pipeline>/ on the supervisor that ran it"
            )
        supervisor = self.view.supervisors().get(where)
        if supervisor is None or supervisor.endpoint is None:
            why = "is not registered" if supervisor is None else "serves no endpoint"
            raise NoLogError(
                f"pipeline {name!r} runs on supervisor {where}, which {why} "
                "(supervisor.http.port); read its log there"
            )
        assigned = placement.assignment.conf if placement.assignment else {}
        return LogSource(supervisor, {**assigned, **record.conf})

    def run_log_source(self, name: str, run: RunRecord, caller: Caller | None) -> LogSource:
        """The endpoint of the supervisor that ran ``run`` of ``name``, wherever the pipeline
        is now; NoLogError naming that supervisor and the run's log directory on its host
        when it is not registered or serves no endpoint. ForbiddenError as ``log_source``."""
        record = self._stored(name)
        check_pipeline_access(caller, Verb.LOGS, name, PipelineAccess.of(record.owner, record.conf))
        supervisor = self.view.supervisors().get(run.supervisor)
        if supervisor is None or supervisor.endpoint is None:
            why = "is not registered now" if supervisor is None else "serves no endpoint"
            where = run.log_dir or "its supervisor.local.dir"
            raise NoLogError(
                f"run {run.run} of pipeline {name!r} ran on supervisor {run.supervisor}, which "
                f"{why}; its log stays in {where} on that supervisor's host"
            )
        placement = self._placement.of(name)
        assigned = placement.assignment.conf if placement.assignment else {}
        return LogSource(supervisor, {**assigned, **record.conf}, run.run, run.log_dir)

    # ------------------------------------------------------------------ leader-only

    def leader_term(self) -> Leadership:
        """The term this nimbus leads in, or NotLeaderError naming the leader (None if unknown)."""
        term = self._leadership()
        if term is not None:
            return term
        raise not_leader(self.address, self.view.leader().address)

    def submit(
        self,
        name: str,
        conf_json: str,
        request_id: str,
        package: BinaryIO,
        caller: Caller | None = None,
    ) -> tuple[PipelineRecord, bool]:
        """Check and store the package, create the pipeline, owned by ``caller``; (record,
        created).

        ``name`` defaults to the manifest's; the submit's conf overrides the manifest's.
        """
        term = self.leader_term()
        if name:
            check_pipeline_name(name)
        submit_conf = validate_pipeline_conf(_parse_conf(conf_json))
        _check_request_id(request_id)
        record, created = self._submitter.submit(
            term,
            name,
            submit_conf,
            request_id,
            package,
            caller=caller,
        )
        self._on_change(record)
        return self._answer(record), created

    def update(
        self,
        name: str,
        conf_json: str,
        request_id: str,
        package: BinaryIO,
        caller: Caller | None = None,
    ) -> tuple[PipelineRecord, bool]:
        """Check and store ``name``'s new package, and stage or apply the update; (record,
        staged now). The update's conf goes over the conf the user set, over the new manifest's."""
        term = self.leader_term()
        check_pipeline_name(name)
        self._check_owner(term, caller, Verb.UPDATE, name)
        update_conf = validate_pipeline_conf(_parse_conf(conf_json))
        _check_request_id(request_id)
        record, staged = self._submitter.update(term, name, update_conf, request_id, package)
        self._on_change(record)
        return self._answer(record), staged

    def kill(
        self,
        name: str,
        wait_secs: float | None,
        *,
        purge: bool = False,
        caller: Caller | None = None,
    ) -> PipelineRecord:
        wait = self._settings.kill_wait_secs if wait_secs is None else wait_secs
        term = self.leader_term()
        self._check_owner(term, caller, Verb.KILL, name)
        record = self._ops.kill(term, name, wait, purge=purge)
        self._on_change(record)
        return self._answer(record)

    def activate(self, name: str, caller: Caller | None = None) -> PipelineRecord:
        term = self.leader_term()
        self._check_owner(term, caller, Verb.ACTIVATE, name)
        return self._answer(self._ops.activate(term, name))

    def deactivate(self, name: str, caller: Caller | None = None) -> PipelineRecord:
        term = self.leader_term()
        self._check_owner(term, caller, Verb.DEACTIVATE, name)
        return self._answer(self._ops.deactivate(term, name))

    def rebalance(
        self,
        name: str,
        conf: dict[str, Any],
        request_id: str = "",
        caller: Caller | None = None,
    ) -> PipelineRecord:
        term = self.leader_term()
        self._settings.locations.check(conf)
        _check_request_id(request_id)
        self._check_owner(term, caller, Verb.REBALANCE, name)
        return self._answer(self._ops.rebalance(term, name, conf, request_id))

    def rollback(
        self,
        name: str,
        to_version: int | None,
        request_id: str = "",
        caller: Caller | None = None,
    ) -> PipelineRecord:
        """Run a kept version of ``name`` again (``to_version``, or the one that ran before)."""
        term = self.leader_term()
        _check_request_id(request_id)
        self._check_owner(term, caller, Verb.ROLLBACK, name)
        who = caller.principal if caller is not None else "a user"
        record = self._ops.roll_back(
            term, name, to_version=to_version, why=f"asked by {who}", request_id=request_id
        )
        self._on_change(record)
        return self._answer(record)

    def restart(
        self, name: str, request_id: str = "", caller: Caller | None = None
    ) -> PipelineRecord:
        """Run ``name`` again with its current version and checkpoint."""
        term = self.leader_term()
        _check_request_id(request_id)
        self._check_owner(term, caller, Verb.RESTART, name)
        record = self._ops.restart(term, name, request_id)
        self._on_change(record)
        return self._answer(record)

    # ------------------------------------------------------------------ cordon and drain

    def cordon(
        self, supervisor: str, caller: Caller | None = None, *, drain: bool = False
    ) -> CordonStatus:
        """Cordon ``supervisor`` (no new pipeline goes there), and with ``drain`` move its
        pipelines away; idempotent. UnknownSupervisorError naming the known ids if no
        supervisor of that id is registered, heartbeats, holds a pipeline or is cordoned."""
        term, cordons = self._cordon_term()
        self._check_supervisor(supervisor, cordons.read_all(), self._placement.assignments())
        by = caller.principal if caller is not None else None
        cordons.put(term, supervisor, by=by, drain=drain, now=self._wall())
        log.info(
            "event=supervisor_cordoned supervisor=%s epoch=%d drain=%s by=%s",
            supervisor,
            term.epoch,
            str(drain).lower(),
            by or "-",
        )
        return self.cordon_status(supervisor)

    def uncordon(self, supervisor: str) -> CordonStatus:
        """Let ``supervisor`` take new pipelines again (a drain under way stops; what it
        already moved stays where it went); idempotent."""
        term, cordons = self._cordon_term()
        self._check_supervisor(supervisor, cordons.read_all(), self._placement.assignments())
        if cordons.remove(term, supervisor):
            log.info("event=supervisor_uncordoned supervisor=%s epoch=%d", supervisor, term.epoch)
        return self.cordon_status(supervisor)

    def cordon_status(self, supervisor: str) -> CordonStatus:
        """The cordon of ``supervisor`` and its drain's progress, as the leader's last round
        saw it (read from ZooKeeper: leader only, like the rounds it reports)."""
        term, cordons = self._cordon_term()
        every = cordons.read_all()
        assignments = self._placement.assignments()
        self._check_supervisor(supervisor, every, assignments)
        cordon = every.get(supervisor)
        last = self._drains.last(term.epoch)
        if last is None and cordon is not None and cordon.drain:  # what moves is not known yet
            raise UnavailableError(
                f"the leader of epoch {term.epoch} has not finished its first scheduling "
                "round: the drain's progress is known after it (seconds)"
            )
        last = last or DrainRound(term.epoch)
        return CordonStatus(
            supervisor=supervisor,
            cordoned=cordon is not None,
            draining=cordon is not None and cordon.drain,
            remaining=sorted(n for n, a in assignments.items() if a.supervisor == supervisor),
            moving=sorted(n for n, source in last.moving.items() if source == supervisor),
            no_room=sorted(n for n, source in last.no_room.items() if source == supervisor),
        )

    def _cordon_term(self) -> tuple[Leadership, CordonTable]:
        term = self.leader_term()
        if self._cordons is None:
            raise InvalidRequestError(f"nimbus {self.address} does not cordon supervisors")
        return term, self._cordons

    def _check_supervisor(
        self,
        supervisor: str,
        cordons: Mapping[str, object],
        assignments: Mapping[str, Assignment],
    ) -> None:
        """UnknownSupervisorError unless ``supervisor`` is registered, heartbeats, holds a
        pipeline or is cordoned."""
        known = (
            set(self.view.supervisors())
            | set(self._placement.supervisor_beats())
            | {assignment.supervisor for assignment in assignments.values()}
            | set(cordons)
        )
        if supervisor not in known:
            raise UnknownSupervisorError(
                f"unknown supervisor {echo(supervisor)}; the supervisors known are: "
                f"{', '.join(sorted(known)) or 'none'}"
            )

    def _check_owner(self, term: Leadership, caller: Caller | None, verb: Verb, name: str) -> None:
        """ForbiddenError unless ``caller`` may ``verb`` the pipeline, judged against its
        record as ZooKeeper holds it (UnknownPipelineError if there is none)."""
        if caller is None or caller.role is Role.ADMIN:
            return  # allowed whoever owns it: no read needed
        record = self._ops.current(term, name)
        check_pipeline_access(caller, verb, name, PipelineAccess.of(record.owner, record.conf))

    def _answer(self, written: PipelineRecord) -> PipelineRecord:
        """The written record as answered, once this nimbus's reads show it: a client that
        writes and then reads the same nimbus sees its write (the wait is bounded: past it the
        write stands all the same, and the view follows within moments)."""
        if not self.view.await_pipeline(written, VIEW_CATCH_UP_SECS):
            log.warning("event=view_behind pipeline=%s secs=%s", written.name, VIEW_CATCH_UP_SECS)
        return redact_record(written)


def _check_request_id(request_id: str) -> None:
    if len(request_id) > MAX_REQUEST_ID_LENGTH:
        raise InvalidRequestError(f"request_id longer than {MAX_REQUEST_ID_LENGTH} characters")
    if not REQUEST_ID.fullmatch(request_id):
        raise InvalidRequestError(
            f"request_id {echo(request_id)} must be printable ASCII without spaces (a UUID, say)"
        )


def _parse_conf(conf_json: str) -> dict[str, Any]:
    conf = loads_strict(conf_json, "conf") if conf_json.strip() else {}
    if not isinstance(conf, dict):
        raise InvalidRequestError(f"conf must be a JSON object, not {type(conf).__name__}")
    return conf


def not_leader(address: str, elected: str | None) -> NotLeaderError:
    """The refusal of a leader-only call by the nimbus at ``address``, which leads no term,
    naming the leader the election names (``elected``) when another nimbus is.

    When the election names this very nimbus, its term has not begun (it is checking that it
    holds every pipeline's code) or has just ended (the election has not caught up): no
    leader to follow is named, and a client asks again after a moment."""
    if elected == address:
        return NotLeaderError(
            f"nimbus {address} is elected but leads no term right now: its term has not "
            "begun yet or has just ended; retry in a moment",
            None,
        )
    where = f"the leader is {elected}" if elected else "no leader is elected right now"
    return NotLeaderError(f"nimbus {address} is not the leader; {where}", elected)
