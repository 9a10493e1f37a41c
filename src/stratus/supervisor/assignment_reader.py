"""Reading the assignments from ZooKeeper for the supervisor's control loop.

Guarantees: every read goes to ZooKeeper itself, after a ``sync`` (so a server that lags
behind the leader catches up first), with the children listed and then every assignment
fetched in one pipelined batch, each with its ``FencingToken`` taken from the stats read
(the assignment znode's ``mzxid``, the ``assignments`` znode's ``ctime``), and the standby
worker placements under ``standby-workers`` in the same read and batch; a read is
bounded in time and never runs on the control loop's thread, which gets the outcome as a
message (``AssignmentsRead`` stamped with the time the read *started*, or
``ReadFailed``). Watches only ask for a read::

    reader = AssignmentReader(client, paths, deliver=loop.post)
    reader.start()
    reader.request()     # from any thread, kazoo's included: never blocks
    reader.close()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from pydantic import ValidationError

from stratus.api.clock import Clock
from stratus.api.records import Assignment, FencingToken
from stratus.api.standby_workers import StandbyWorkerPlacement
from stratus.supervisor.errors import AssignmentsUnavailableError
from stratus.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

READ_TIMEOUT_SECS = 5.0  # one whole read; a slower one is tried again


@dataclass(frozen=True)
class AssignmentsRead:
    """Every assignment and standby worker placement in ZooKeeper, as read by a read that
    started at ``started``; ``era`` is the ``assignments`` znode's creation time (the era
    of every fencing token), None when the read did not get it."""

    started: float  # monotonic
    assignments: dict[str, Assignment]
    placements: dict[str, StandbyWorkerPlacement] = field(default_factory=dict)
    era: int | None = None


@dataclass(frozen=True)
class ClusterRead:
    """What ``read_assignments`` returns: the assignments, the placements and the era."""

    assignments: dict[str, Assignment]
    placements: dict[str, StandbyWorkerPlacement]
    era: int


@dataclass(frozen=True)
class ReadFailed:
    error: str


def read_assignments(
    client: KazooClient, paths: ClusterPaths, timeout: float = READ_TIMEOUT_SECS
) -> ClusterRead:
    """Every valid assignment by pipeline, and every valid standby worker placement, read
    after one ``sync``: each parent's children listed, then every child fetched in one
    pipelined batch; ``AssignmentsUnavailableError`` past ``timeout``."""
    deadline = time.monotonic() + timeout

    def left() -> float:
        return max(0.01, deadline - time.monotonic())

    try:
        client.sync_async(paths.assignments).get(timeout=left())
        names_async = client.get_children_async(paths.assignments, include_data=True)
        placed_async = client.get_children_async(paths.standby_workers)
        names, parent = names_async.get(timeout=left())
        try:
            placed = placed_async.get(timeout=left())
        except NoNodeError:  # a cluster created by an older release, not upgraded yet
            placed = []
        pending = {name: client.get_async(paths.assignment(name)) for name in names}
        pending_placed = {name: client.get_async(paths.standby_worker(name)) for name in placed}
        found = {}
        for name, result in pending.items():
            try:
                raw, stat = result.get(timeout=left())
            except NoNodeError:
                continue  # deleted since the listing
            assignment = _decode(name, raw)
            if assignment is not None:
                token = FencingToken(era=parent.ctime, zxid=stat.mzxid)
                found[name] = assignment.model_copy(update={"token": token})
        placements = {}
        for name, result in pending_placed.items():
            try:
                raw, _ = result.get(timeout=left())
            except NoNodeError:
                continue
            placement = _decode_placement(name, raw)
            if placement is not None:
                placements[name] = placement
        return ClusterRead(found, placements, parent.ctime)
    except (KazooException, KazooTimeoutError) as exc:
        raise AssignmentsUnavailableError(
            f"cannot read the assignments under {paths.assignments} ({type(exc).__name__}); "
            "the running workers are kept and the read is tried again"
        ) from None


def _decode_placement(name: str, raw: bytes) -> StandbyWorkerPlacement | None:
    try:
        placement = StandbyWorkerPlacement.model_validate_json(raw)
    except ValidationError as exc:
        log.warning(
            "event=bad_standby_placement pipeline=%s error=%s", name, exc.errors()[0]["msg"]
        )
        return None
    if placement.pipeline != name:
        log.warning("event=bad_standby_placement pipeline=%s names=%s", name, placement.pipeline)
        return None
    return placement


def _decode(name: str, raw: bytes) -> Assignment | None:
    try:
        assignment = Assignment.model_validate_json(raw)
    except ValidationError as exc:
        log.warning("event=bad_assignment pipeline=%s error=%s", name, exc.errors()[0]["msg"])
        return None
    if assignment.pipeline != name:
        log.warning("event=bad_assignment pipeline=%s names=%s", name, assignment.pipeline)
        return None
    return assignment


class AssignmentReader:
    """Reads on request, on a thread of its own; see the module docstring."""

    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        *,
        deliver: Callable[[AssignmentsRead | ReadFailed], None],
        clock: Clock = time.monotonic,
        timeout: float = READ_TIMEOUT_SECS,
    ) -> None:
        self._client = client
        self._paths = paths
        self._deliver = deliver
        self._clock = clock
        self._timeout = timeout
        self._wanted = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="assignment-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self) -> None:
        """Ask for a read soon; requests made while one runs make one more read."""
        self._wanted.set()

    def close(self) -> None:
        self._closed.set()
        self._wanted.set()
        self._thread.join(timeout=self._timeout + 1.0)

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            if self._closed.is_set():
                return
            self._wanted.clear()
            self._deliver(self._read_once())

    def _read_once(self) -> AssignmentsRead | ReadFailed:
        if not self._client.connected:
            return ReadFailed("not connected to ZooKeeper")  # a read would only queue
        started = self._clock()
        try:
            read = read_assignments(self._client, self._paths, self._timeout)
        except AssignmentsUnavailableError as exc:
            return ReadFailed(str(exc))
        return AssignmentsRead(started, read.assignments, read.placements, read.era)
