"""The heartbeat board: typed heartbeats on the cluster state store, for both sides.

Supervisors put their own heartbeat and their workers'; the leader reads them all each
round and removes those of pipelines and supervisors that are gone::

    board = HeartbeatBoard(store)
    board.put_worker(worker_heartbeat)        # /workers/<pipeline>/<supervisor>
    board.put_supervisor(supervisor_heartbeat)  # /supervisors/<id>
    board.put_round(supervisor_heartbeat, [worker_heartbeat])  # all of them, one message
    board.workers()["etl"]["supervisor-1"]    # WorkerHeartbeat
    board.workers_on("supervisor-1")["etl"]   # the same, from that supervisor's alone
    board.supervisors()["supervisor-1"]       # SupervisorHeartbeat
    board.read()                              # both at once, and whether the read is complete
    board.remove_pipeline("etl")              # every worker heartbeat of the pipeline

A heartbeat that cannot be decoded (a writer of another version, a torn value) is skipped
with a warning naming its path, so one bad entry never hides the others. Every call may
raise ``StateStoreUnavailableError``.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

from pydantic import TypeAdapter, ValidationError

from stratus.api.records import SupervisorHeartbeat, WorkerHeartbeat
from stratus.state.errors import BadRoundError
from stratus.state.rounds import EMPTY_ARRAY, PackedRound, Round, RoundsRead
from stratus.state.store import ClusterStateStore

log = logging.getLogger(__name__)

WORKERS = "/workers"
SUPERVISORS = "/supervisors"

_Beat = TypeVar("_Beat", WorkerHeartbeat, SupervisorHeartbeat)
_WORKER_LIST = TypeAdapter(list[WorkerHeartbeat])
_SUPERVISOR_LIST = TypeAdapter(list[SupervisorHeartbeat])


@runtime_checkable
class _TreeReader(Protocol):
    """A store that reads two levels at once (``ZooKeeperStateStore``); another store is read
    one pipeline at a time, two round trips each."""

    def grandchildren_data(self, path: str) -> dict[str, dict[str, bytes]]: ...


@runtime_checkable
class _RoundStore(Protocol):
    """A store that keeps each supervisor's round as one value (``PacemakerStateStore``):
    a round replaces the last, so the heartbeats it lacks are gone with it, and a read
    returns rounds, which the board groups without parsing a path per heartbeat. Another
    store sets and reads the round's paths one by one (in one message where it can)."""

    def set_round(self, owner: str, round_: Round) -> None: ...

    def read_rounds(self) -> RoundsRead: ...

    def read_round(self, owner: str) -> PackedRound | None: ...


@dataclass(frozen=True)
class HeartbeatRead:
    """Every heartbeat at one read. ``complete`` is False when the store may be missing some
    (every pacemaker that answered is warming up): a heartbeat missing from it is unknown,
    not gone. ``partial`` is True when a configured pacemaker did not answer: a heartbeat
    in it may be older than the newest its writer wrote, so a silence is unknown too."""

    workers: dict[str, dict[str, WorkerHeartbeat]]
    supervisors: dict[str, SupervisorHeartbeat]
    complete: bool = True
    partial: bool = False


class HeartbeatBoard:
    """Worker and supervisor heartbeats by pipeline and supervisor id."""

    def __init__(self, store: ClusterStateStore) -> None:
        self._store = store

    def close(self) -> None:
        """Close the store (a pacemaker store's connections; never a ZooKeeper client)."""
        self._store.close()

    def put_worker(self, heartbeat: WorkerHeartbeat) -> None:
        self._store.set(_worker_path(heartbeat.pipeline, heartbeat.supervisor), heartbeat.encode())

    def put_round(
        self, supervisor: SupervisorHeartbeat, workers: Iterable[WorkerHeartbeat]
    ) -> None:
        """A supervisor's whole period: its workers' heartbeats, then its own, one message.
        On the pacemakers the round replaces the supervisor's last one; on ZooKeeper a worker
        heartbeat it lacks stays until removed (the supervisor removes those of workers it
        no longer holds either way)."""
        if isinstance(self._store, _RoundStore):
            beats = {}
            for beat in workers:
                _worker_path(beat.pipeline, beat.supervisor)  # both names checked
                if beat.supervisor != supervisor.id:
                    raise ValueError(
                        f"the heartbeat of {beat.pipeline!r} on {beat.supervisor!r} is not "
                        f"of supervisor {supervisor.id!r}'s round"
                    )
                beats[beat.pipeline] = beat.encode()
            self._store.set_round(_segment(supervisor.id), Round(supervisor.encode(), beats))
            return
        entries = {_worker_path(beat.pipeline, beat.supervisor): beat.encode() for beat in workers}
        entries[f"{SUPERVISORS}/{_segment(supervisor.id)}"] = supervisor.encode()
        self._store.set_many(entries)

    def read(self) -> HeartbeatRead:
        """Every worker and supervisor heartbeat, in one read of the store."""
        if isinstance(self._store, _RoundStore):
            return _read_rounds(self._store)
        workers: dict[str, dict[str, bytes]] = {}
        supervisors: dict[str, bytes] = {}
        tree = self._store.read_tree("/")
        for rel, data in tree.data.items():
            parts = rel.split("/")
            if len(parts) == 3 and parts[0] == WORKERS[1:]:
                workers.setdefault(parts[1], {})[parts[2]] = data
            elif len(parts) == 2 and parts[0] == SUPERVISORS[1:]:
                supervisors[parts[1]] = data
        with collector_paused():
            decoded_workers = _decoded_workers(workers)
            decoded_supervisors = _decoded_supervisors(supervisors)
        return HeartbeatRead(
            workers={pipeline: beats for pipeline, beats in decoded_workers.items() if beats},
            supervisors=decoded_supervisors,
            complete=tree.complete,
            partial=tree.partial,
        )

    def workers(self) -> dict[str, dict[str, WorkerHeartbeat]]:
        """Every worker heartbeat: pipeline -> supervisor -> heartbeat (no empty pipelines)."""
        if isinstance(self._store, _RoundStore):
            return _read_rounds(self._store).workers
        if isinstance(self._store, _TreeReader):
            raw = self._store.grandchildren_data(WORKERS)  # every read pipelined
        else:
            raw = {
                p: self._store.children_data(f"{WORKERS}/{p}")
                for p in self._store.children(WORKERS)
            }
        found = {}
        for pipeline, data in raw.items():
            beats = _decoded(WorkerHeartbeat, f"{WORKERS}/{pipeline}", data)
            if beats:
                found[pipeline] = beats
        return found

    def workers_on(self, supervisor: str) -> dict[str, WorkerHeartbeat]:
        """The worker heartbeats of supervisor ``supervisor``, by pipeline: on the pacemakers
        one read of its round alone, which the failover lane makes between two of the
        leader's rounds."""
        if isinstance(self._store, _RoundStore):
            packed = self._store.read_round(_segment(supervisor))
            if packed is None or packed.workers == EMPTY_ARRAY:
                return {}
            with collector_paused():
                return {beat.pipeline: beat for beat in _round_workers(packed)}
        return {name: beats[supervisor] for name, beats in self.workers().items()
                if supervisor in beats}  # fmt: skip

    def remove_worker(self, pipeline: str, supervisor: str) -> None:
        self._store.delete(_worker_path(pipeline, supervisor))

    def remove_pipeline(self, pipeline: str) -> None:
        """Remove the heartbeats of every worker of ``pipeline``."""
        self._store.delete(f"{WORKERS}/{_segment(pipeline)}")

    def put_supervisor(self, heartbeat: SupervisorHeartbeat) -> None:
        self._store.set(f"{SUPERVISORS}/{_segment(heartbeat.id)}", heartbeat.encode())

    def supervisors(self) -> dict[str, SupervisorHeartbeat]:
        """Every supervisor heartbeat, by supervisor id."""
        if isinstance(self._store, _RoundStore):
            return _read_rounds(self._store).supervisors
        return _decoded(SupervisorHeartbeat, SUPERVISORS, self._store.children_data(SUPERVISORS))

    def remove_supervisor(self, supervisor: str) -> None:
        self._store.delete(f"{SUPERVISORS}/{_segment(supervisor)}")


def _worker_path(pipeline: str, supervisor: str) -> str:
    return f"{WORKERS}/{_segment(pipeline)}/{_segment(supervisor)}"


def _segment(name: str) -> str:
    """``name`` if it can be one path segment, else ``ValueError``."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"invalid heartbeat name {name!r}: one path segment, without '/'")
    return name


def _read_rounds(store: _RoundStore) -> HeartbeatRead:
    """Every heartbeat from a store of rounds: each round's worker heartbeats in one parse
    (``_round_workers``), the supervisors' in one."""
    read = store.read_rounds()
    workers: dict[str, dict[str, WorkerHeartbeat]] = {}
    supervisors: dict[str, bytes] = {}
    with collector_paused():
        for sid, packed in read.rounds.items():
            if packed.supervisor is not None:
                supervisors[sid] = packed.supervisor
            if packed.workers != EMPTY_ARRAY:
                for beat in _round_workers(packed):
                    workers.setdefault(beat.pipeline, {})[sid] = beat
        decoded_supervisors = _decoded_supervisors(supervisors)
    return HeartbeatRead(workers, decoded_supervisors, complete=read.complete, partial=read.partial)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the block (if it was on). Decoding the
    heartbeats of 10,000 workers allocates some 30,000 containers, which would run the
    collector dozens of times, each pass over the young objects and some over the whole
    heap, for nothing: records hold no reference cycles. It doubled the leader's read
    (docs/benchmarks.md). Reference counting frees everything as usual meanwhile."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _round_workers(packed: PackedRound) -> list[WorkerHeartbeat]:
    """The worker heartbeats of one round: its array in one parse when every record of it
    is good and names the round's supervisor, else one by one, skipping the bad ones (a
    record naming another supervisor is bad: a round holds its own supervisor's only)."""
    try:
        beats = _WORKER_LIST.validate_json(packed.workers)
    except ValidationError:
        beats = None
    if beats is not None and all(beat.supervisor == packed.owner for beat in beats):
        return beats
    try:
        round_ = packed.unpacked()
    except BadRoundError as exc:
        log.warning("event=bad_heartbeat_round supervisor=%s error=%s", packed.owner, exc.reason)
        return []
    good = []
    where = f"{SUPERVISORS}/{packed.owner} round, pipeline"
    for pipeline, beat in _decoded(WorkerHeartbeat, where, round_.workers).items():
        if (beat.pipeline, beat.supervisor) == (pipeline, packed.owner):
            good.append(beat)
        else:
            log.warning(
                "event=bad_heartbeat path=%s/%s kind=WorkerHeartbeat error=it names %s on %s",
                where,
                pipeline,
                beat.pipeline,
                beat.supervisor,
            )
    return good


def _decoded_workers(raw: dict[str, dict[str, bytes]]) -> dict[str, dict[str, WorkerHeartbeat]]:
    """Worker heartbeats by pipeline and supervisor: all in one parse when each is good and
    names its own pipeline and supervisor, else pipeline by pipeline, skipping bad ones."""
    names = [(pipeline, name) for pipeline, beats in raw.items() for name in beats]
    batch = _batch(_WORKER_LIST, [data for beats in raw.values() for data in beats.values()])
    if batch is not None and all(
        (beat.pipeline, beat.supervisor) == where for beat, where in zip(batch, names, strict=True)
    ):
        found: dict[str, dict[str, WorkerHeartbeat]] = {}
        for (pipeline, name), beat in zip(names, batch, strict=True):
            found.setdefault(pipeline, {})[name] = beat
        return found
    return {pipeline: _decoded(WorkerHeartbeat, f"{WORKERS}/{pipeline}", beats)
            for pipeline, beats in raw.items()}  # fmt: skip


def _decoded_supervisors(raw: dict[str, bytes]) -> dict[str, SupervisorHeartbeat]:
    """Supervisor heartbeats by id: in one parse, or one by one as ``_decoded_workers``."""
    batch = _batch(_SUPERVISOR_LIST, list(raw.values()))
    if batch is not None and all(beat.id == name for beat, name in zip(batch, raw, strict=True)):
        return dict(zip(raw, batch, strict=True))
    return _decoded(SupervisorHeartbeat, SUPERVISORS, raw)


def _batch(adapter: TypeAdapter[list[_Beat]], values: list[bytes]) -> list[_Beat] | None:
    """``values`` decoded in one call (pydantic's cost is mostly per call), or None if any is
    bad or they do not decode one record each. Each caller also checks that every record
    names its own path, so values that are fragments of JSON cannot shift a record onto
    another's name."""
    try:
        beats = adapter.validate_json(b"[" + b",".join(values) + b"]")
    except ValidationError:
        return None
    return beats if len(beats) == len(values) else None


def _decoded(kind: type[_Beat], parent: str, raw: dict[str, bytes]) -> dict[str, _Beat]:
    """The entries of ``raw`` that decode as ``kind``; the others are logged and skipped."""
    decoded = {}
    for name, data in raw.items():
        try:
            decoded[name] = kind.model_validate_json(data)
        except ValidationError as exc:
            log.warning(
                "event=bad_heartbeat path=%s/%s kind=%s error=%s",
                parent,
                name,
                kind.__name__,
                exc.errors()[0]["msg"],
            )
    return decoded
