"""What a nimbus does for each API call, between the HTTP layer and ZooKeeper.

Reads are answered from the ``ClusterView`` (no ZooKeeper request); leader-only calls take
the current term from the elector, or fail with ``NotLeaderError`` naming the leader, and
run through ``PipelineOps`` with that term. A submitted package is received into a temporary
file, checked (``check_package``) before anything is stored, then handed to the code
distributor once the pipeline's record exists; the leader's duties activate pipelines whose
code has reached its replication, fail pipelines whose code is lost, remove killed ones (with
their heartbeats and checkpoints), and run the scheduling round (``SchedulingDuty``).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from kazoo.exceptions import KazooException

from stratus.api.errors import (
    InvalidRequestError,
    NotLeaderError,
    PackageRejectedError,
    UnavailableError,
    UnknownPipelineError,
)
from stratus.api.pipeline_conf import validate_pipeline_conf
from stratus.api.records import (
    ClusterSummary,
    LeaderInfo,
    NimbusSummary,
    PipelineRecord,
    PipelineStatus,
    PipelineWorkers,
    SupervisorSummary,
)
from stratus.codedist.code_sync import CodeSync
from stratus.codedist.distributor import CodeDistributor, CodeMeta
from stratus.codedist.errors import InvalidPackageError
from stratus.codedist.package_check import CheckedPackage, PackageLimits, check_package
from stratus.codedist.package_store import PackageStore, StoredPackage
from stratus.config import StratusConfig
from stratus.coordination.leader_elector import LeaderElector
from stratus.coordination.leadership import Leadership
from stratus.errors import StratusError
from stratus.nimbus.assignments import AssignmentTable
from stratus.nimbus.cluster_view import ClusterView
from stratus.nimbus.pipeline_ops import PipelineOps, ReplicationPolicy, check_pipeline_name
from stratus.nimbus.scheduling_duty import SchedulingDuty
from stratus.state.errors import StateStoreUnavailableError
from stratus.state.heartbeats import HeartbeatBoard
from stratus.worker.checkpoints import checkpoint_location, remove_checkpoints

log = logging.getLogger(__name__)

MAX_REQUEST_ID_LENGTH = 128


class NimbusService:
    """The API's operations on one nimbus; see the module docstring."""

    def __init__(
        self,
        *,
        address: str,
        view: ClusterView,
        ops: PipelineOps,
        incoming: PackageStore,
        distributor: CodeDistributor,
        elector: LeaderElector,
        scheduling: SchedulingDuty,
        assignments: AssignmentTable,
        board: HeartbeatBoard,
        conf: StratusConfig,
        clock: Callable[[], float],
    ) -> None:
        self.address = address
        self.view = view
        self._ops = ops
        self.incoming = incoming
        self._distributor = distributor
        self._elector = elector
        self._scheduling = scheduling
        self._assignments = assignments
        self._board = board
        self._conf = conf
        self._limits = PackageLimits.from_config(conf)
        self.max_upload_bytes = conf.nimbus_max_upload_bytes
        self._clock = clock
        self._submit_lock = threading.Lock()
        self._summary_cache: tuple[tuple[int, int], bytes] | None = None
        self.duties_due = threading.Event()  # wakes the leader's duties before their period
        self._kills_lock = threading.Lock()
        self._recent_kills: dict[str, PipelineRecord] = {}  # killed, maybe not in the view yet

    # ------------------------------------------------------------------ reads (any nimbus)

    def is_leader(self) -> bool:
        return self._elector.is_leader()

    def leader(self) -> LeaderInfo:
        return self.view.leader()

    def cluster_summary(self) -> ClusterSummary:
        now = self._clock()
        leader = self.view.leader().address
        nimbuses = [
            NimbusSummary(
                host=reg.host,
                port=reg.port,
                uptime_secs=max(0, int(now - reg.started)),
                is_leader=reg.address == leader,
                version=reg.version,
            )
            for _, reg in sorted(self.view.nimbuses().items())
        ]
        supervisors: list[SupervisorSummary] = [
            s for _, s in sorted(self.view.supervisors().items())
        ]
        return ClusterSummary(
            nimbuses=nimbuses,
            supervisors=supervisors,
            pipelines=self.pipelines(),
            leader=self.view.leader(),
        )

    def cluster_summary_json(self) -> bytes:
        """The summary as JSON, rebuilt only when the view changed or a second went by."""
        key = (self.view.version, int(self._clock()))
        cached = self._summary_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        body = self.cluster_summary().model_dump_json().encode()
        self._summary_cache = (key, body)
        return body

    def pipelines(self) -> list[PipelineRecord]:
        return [record for _, record in sorted(self.view.pipelines().items())]

    def read_pipelines(self) -> dict[str, PipelineRecord]:
        """Every pipeline record read from ZooKeeper itself, for decisions a stale view
        must not make (whether a newly elected nimbus holds all the code)."""
        return self._ops.read_all()

    def pipeline(self, name: str) -> PipelineRecord:
        check_pipeline_name(name)
        record = self.view.pipelines().get(name)
        if record is None:
            raise UnknownPipelineError(f"unknown pipeline {name!r}")
        return record

    def workers(self, name: str) -> PipelineWorkers:
        """Where the pipeline runs and its workers' last heartbeats, read from the stores."""
        self.pipeline(name)
        try:
            assignment = self._assignments.read(name)
            beats = self._board.workers().get(name, {})
        except KazooException as exc:
            raise UnavailableError(
                f"ZooKeeper is unreachable ({type(exc).__name__}); retry"
            ) from None
        except StateStoreUnavailableError as exc:
            raise UnavailableError(f"{exc}; retry") from None
        return PipelineWorkers(
            pipeline=name,
            assignment=assignment,
            workers=[beat for _, beat in sorted(beats.items())],
        )

    # ------------------------------------------------------------------ leader-only

    def leader_term(self) -> Leadership:
        """This nimbus's current term, or NotLeaderError naming the leader (None if unknown)."""
        term = self._elector.leadership
        if term is not None:
            return term
        leader = self.view.leader().address
        if leader == self.address:
            leader = None  # the view lags behind our own loss of leadership
        where = f"the leader is {leader}" if leader else "no leader is elected right now"
        raise NotLeaderError(f"nimbus {self.address} is not the leader; {where}", leader)

    def submit(
        self, name: str, conf_json: str, request_id: str, package: BinaryIO
    ) -> tuple[PipelineRecord, bool]:
        """Check and store the package, create the pipeline; (record, created).

        ``name`` defaults to the manifest's; the submit's conf overrides the manifest's.
        """
        term = self.leader_term()
        if name:
            check_pipeline_name(name)
        submit_conf = validate_pipeline_conf(_parse_conf(conf_json))
        if len(request_id) > MAX_REQUEST_ID_LENGTH:
            raise InvalidRequestError(f"request_id longer than {MAX_REQUEST_ID_LENGTH} characters")
        received = self.incoming.receive(package)
        try:
            manifest = self._checked(received.path).manifest
            name = name or manifest.name
            conf = validate_pipeline_conf({**manifest.pipeline_conf(), **submit_conf})
            stored = StoredPackage(received.digest, received.size_bytes, received.blake3)
            with self._submit_lock:
                record, created = self._ops.submit(
                    term,
                    name,
                    conf,
                    request_id,
                    stored,
                    replication=ReplicationPolicy.of(conf, self._conf),
                )
                if record.digest == received.digest:
                    self._hand_over(received.path, name)
        finally:
            received.path.unlink(missing_ok=True)
        self.duties_due.set()
        return record, created

    def _hand_over(self, package: Path, name: str) -> None:
        """Give the checked package to the distributor; a failure there is worth a retry.

        The record exists already: a retry with the same request id finds it and uploads
        again, so an unwritable disk or an unreachable shared store loses nothing.
        """
        try:
            self._distributor.upload(package, name)
        except (OSError, StratusError) as exc:
            raise UnavailableError(
                f"pipeline {name!r} is recorded but its package could not be stored ({exc}); "
                "retry the submit with the same request id"
            ) from None

    def _checked(self, path: Path) -> CheckedPackage:
        try:
            return check_package(path, self._limits)
        except InvalidPackageError as exc:
            raise PackageRejectedError(str(exc)) from None

    def kill(self, name: str, wait_secs: float | None) -> PipelineRecord:
        wait = self._conf.pipeline_kill_wait_secs if wait_secs is None else wait_secs
        record = self._ops.kill(self.leader_term(), name, wait)
        with self._kills_lock:
            self._recent_kills[name] = record
        self.duties_due.set()
        return record

    def activate(self, name: str) -> PipelineRecord:
        return self._ops.activate(self.leader_term(), name)

    def deactivate(self, name: str) -> PipelineRecord:
        return self._ops.deactivate(self.leader_term(), name)

    def rebalance(self, name: str, conf: dict[str, Any]) -> PipelineRecord:
        return self._ops.rebalance(self.leader_term(), name, conf)

    # ------------------------------------------------------------------ leader duties

    def run_duties(self, term: Leadership, code: CodeSync) -> list[str]:
        """One round of the leader's duties; the pipelines whose code this leader lacks.

        A non-empty answer means this nimbus must stop leading (SPEC 000). The check runs
        under the submit lock: a submit between its record and its upload is not a loss.
        """
        with self._submit_lock:
            missing = code.missing()
        if missing:
            return missing
        self.remove_killed(term)
        self.activate_replicated(term)
        self.fail_lost(term, code.lost())
        self._scheduling.run(term, self.view.supervisors())
        return []

    def activate_replicated(self, term: Leadership) -> None:
        """Note the replication of PENDING pipelines; activate those with enough copies."""
        for name, record in self.view.pipelines().items():
            if record.status is not PipelineStatus.PENDING:
                continue
            holders = self._distributor.replication_count(
                name, CodeMeta(record.digest, record.size_bytes)
            )
            self._ops.note_replication(term, name, holders)

    def fail_lost(self, term: Leadership, lost: Mapping[str, float]) -> None:
        """Mark FAILED the pipelines whose code has been on no live nimbus for too long."""
        for name, seconds in lost.items():
            reason = (
                f"its code is on no live nimbus (lost for {seconds:.0f} s, past "
                "nimbus.code.lost.fail.secs); kill it and submit it again"
            )
            self._ops.fail(term, name, reason)

    def remove_killed(self, term: Leadership) -> None:
        """Remove the killed pipelines whose wait is over, and their packages."""
        killed = {
            name: record
            for name, record in self.view.pipelines().items()
            if record.status is PipelineStatus.KILLED
        }
        with self._kills_lock:
            killed.update(self._recent_kills)
            self._recent_kills.clear()
        killed = {name: r for name, r in killed.items() if name not in self._still_running()}
        if not killed:
            return
        removed = self._ops.remove_due(term, killed)
        self._drop_if_unused({killed[name].digest for name in removed})
        for name in removed:
            self._clean_up(killed[name])

    def _still_running(self) -> set[str]:
        """Pipelines with a worker that has not reported its end: their removal (and the
        deletion of their checkpoints) waits for it, or for its supervisor to be judged dead."""
        return {
            name
            for name, beats in self._board.workers().items()
            if any(not beat.state.final for beat in beats.values())
        }

    def _clean_up(self, removed: PipelineRecord) -> None:
        """A removed pipeline's heartbeats and checkpoints go too; a failure is only logged."""
        location = checkpoint_location(self._conf, removed.conf, removed.name)
        try:
            self._board.remove_pipeline(removed.name)
            remove_checkpoints(location)
        except (OSError, StratusError) as exc:
            log.warning(
                "event=cleanup_incomplete pipeline=%s checkpoints=%s error=%r",
                removed.name,
                location,
                exc,
            )

    def _drop_if_unused(self, digests: set[str]) -> None:
        """Delete these packages unless a pipeline still names them; keep them if unsure."""
        if not digests:
            return
        try:
            in_use = self._ops.digests_in_use()
        except KazooException as exc:  # never let cleanup hide the error being reported
            log.warning("event=package_cleanup_skipped digests=%s error=%r", sorted(digests), exc)
            return
        for digest in digests - in_use:
            self._distributor.purge(digest)


def _parse_conf(conf_json: str) -> dict[str, Any]:
    try:
        conf = json.loads(conf_json) if conf_json.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"conf is not valid JSON: {exc}") from None
    if not isinstance(conf, dict):
        raise InvalidRequestError(f"conf must be a JSON object, not {type(conf).__name__}")
    return conf
