"""What a nimbus does for each API call, between the HTTP layer and ZooKeeper.

Reads are answered from the ``ClusterView`` (no ZooKeeper request); leader-only calls take
the current term from the elector, or fail with ``NotLeaderError`` naming the leader, and
run through ``PipelineOps`` with that term.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

from kazoo.exceptions import KazooException

from stratus.coordination.leader_elector import LeaderElector
from stratus.coordination.leadership import Leadership
from stratus.nimbus.cluster_view import ClusterView
from stratus.nimbus.errors import (
    InvalidRequestError,
    NotLeaderError,
    PipelineExistsError,
    UnknownPipelineError,
)
from stratus.codedist.package_store import PackageStore
from stratus.nimbus.pipeline_conf import validate_pipeline_conf
from stratus.nimbus.pipeline_ops import PipelineOps, check_pipeline_name
from stratus.nimbus.records import (
    ClusterSummary,
    LeaderInfo,
    NimbusSummary,
    PipelineRecord,
    PipelineStatus,
    SupervisorSummary,
)

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
        store: PackageStore,
        elector: LeaderElector,
        kill_wait_secs: float,
        max_upload_bytes: int,
        clock: Callable[[], float],
    ) -> None:
        self.address = address
        self.view = view
        self._ops = ops
        self._store = store
        self._elector = elector
        self._kill_wait_secs = kill_wait_secs
        self.max_upload_bytes = max_upload_bytes
        self._clock = clock
        self._submit_lock = threading.Lock()
        self._summary_cache: tuple[tuple[int, int], bytes] | None = None
        self.kill_requested = threading.Event()  # wakes the removal of killed pipelines
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

    def pipeline(self, name: str) -> PipelineRecord:
        check_pipeline_name(name)
        record = self.view.pipelines().get(name)
        if record is None:
            raise UnknownPipelineError(f"unknown pipeline {name!r}")
        return record

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
        """Store the package and create the pipeline; (record, created)."""
        term = self.leader_term()
        check_pipeline_name(name)
        conf = validate_pipeline_conf(_parse_conf(conf_json))
        if len(request_id) > MAX_REQUEST_ID_LENGTH:
            raise InvalidRequestError(f"request_id longer than {MAX_REQUEST_ID_LENGTH} characters")
        with self._submit_lock:
            stored = self._store.put(package)
            try:
                return self._ops.submit(term, name, conf, request_id, stored)
            except (PipelineExistsError, NotLeaderError):
                self._drop_if_unused({stored.digest})  # definitely not written: keep no orphan
                raise

    def kill(self, name: str, wait_secs: float | None) -> PipelineRecord:
        wait = self._kill_wait_secs if wait_secs is None else wait_secs
        record = self._ops.kill(self.leader_term(), name, wait)
        with self._kills_lock:
            self._recent_kills[name] = record
        self.kill_requested.set()
        return record

    def activate(self, name: str) -> PipelineRecord:
        return self._ops.activate(self.leader_term(), name)

    def deactivate(self, name: str) -> PipelineRecord:
        return self._ops.deactivate(self.leader_term(), name)

    def rebalance(self, name: str, conf: dict[str, Any]) -> PipelineRecord:
        return self._ops.rebalance(self.leader_term(), name, conf)

    def remove_killed(self) -> None:
        """As leader: remove the killed pipelines whose wait is over, and their packages."""
        term = self._elector.leadership
        if term is None:
            return
        killed = {
            name: record
            for name, record in self.view.pipelines().items()
            if record.status is PipelineStatus.KILLED
        }
        with self._kills_lock:
            killed.update(self._recent_kills)
            self._recent_kills.clear()
        if not killed:
            return
        removed = self._ops.remove_due(term, killed)
        self._drop_if_unused({killed[name].digest for name in removed})

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
            self._store.remove(digest)


def _parse_conf(conf_json: str) -> dict[str, Any]:
    try:
        conf = json.loads(conf_json) if conf_json.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidRequestError(f"conf is not valid JSON: {exc}") from None
    if not isinstance(conf, dict):
        raise InvalidRequestError(f"conf must be a JSON object, not {type(conf).__name__}")
    return conf
