"""The pipeline records in ZooKeeper (``pipelines/<name>``) as the leader's operations read
and write them: every change is one read, a pure change of the record, and a write back
fenced by the leader's epoch and the record's version, retried when another request won the
race (``PipelineOps`` is made of them)::

    records = PipelineRecords(client, ClusterPaths("/stratus"), wall=time.time)
    record = records.current(term, "etl")   # UnknownPipelineError if there is none
    everything = records.read_all()         # a record that does not decode is left out

A record is at most ``max_record_bytes`` (``nimbus.max.record.bytes``), below ZooKeeper's
``jute.maxbuffer``: ZooKeeper answers a larger write by closing the session's connection,
which would look like a lost leadership and be retried forever. Such a change is refused
before it is sent, as ``RecordTooLargeError`` (413).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from pydantic import ValidationError

from stratus.api.clock import Clock
from stratus.api.errors import (
    NotLeaderError,
    RecordTooLargeError,
    UnavailableError,
    UnknownPipelineError,
)
from stratus.api.names import check_pipeline_name
from stratus.api.records import PipelineRecord
from stratus.coordination.errors import (
    CommitOutcomeUnknownError,
    LeadershipLostError,
    TransactionFailedError,
    ZooKeeperUnavailableError,
)
from stratus.coordination.leadership import Leadership
from stratus.zk.paths import ClusterPaths

log = logging.getLogger(__name__)

VERSION_RACE_RETRIES = 5  # another request changed the record between our read and write
DEFAULT_MAX_RECORD_BYTES = 512 * 1024  # nimbus.max.record.bytes


class PipelineRecords:
    """Reads of the pipeline records, and the fenced read-change-write of one."""

    def __init__(
        self,
        client: KazooClient,
        paths: ClusterPaths,
        *,
        wall: Clock,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        self._client = client
        self._paths = paths
        self._wall = wall  # wall clock: kill times must mean the same on every nimbus
        self._max_record_bytes = max_record_bytes

    def digests_in_use(self) -> set[str]:
        """The package digests that some pipeline record names (its code, a kept version's,
        or its update's waiting), read from ZooKeeper itself."""
        in_use = set()
        for record in self.read_all().values():
            in_use.add(record.digest)
            in_use.update(kept.digest for kept in record.versions)
            if record.update is not None:
                in_use.add(record.update.digest)
        return in_use

    def read(self, name: str) -> PipelineRecord | None:
        """One pipeline's record read from ZooKeeper itself, or None if there is none."""
        try:
            raw, _ = self._client.get(self._paths.pipeline(name))
        except NoNodeError:
            return None
        return PipelineRecord.model_validate_json(raw)

    def current(self, term: Leadership, name: str) -> PipelineRecord:
        """One pipeline's record read from ZooKeeper itself, for a decision of the leader;
        UnknownPipelineError if there is none, the API's retryable errors if ZooKeeper fails."""
        check_pipeline_name(name)
        with zookeeper_errors(term):
            return self._read(name)[0]

    def read_all(self) -> dict[str, PipelineRecord]:
        """Every valid pipeline record, read from ZooKeeper itself (not a view), pipelined.

        A record that does not decode is logged, naming the pipeline, and left out, as the
        watched view leaves it out: one bad record must not make every read of the whole
        set fail (a nimbus that cannot read them cannot lead).
        """
        names = self._client.get_children(self._paths.pipelines)
        pending = {name: self._client.get_async(self._paths.pipeline(name)) for name in names}
        records = {}
        for name, result in pending.items():
            try:
                raw, _ = result.get()
            except NoNodeError:
                continue  # removed since the listing
            try:
                records[name] = PipelineRecord.model_validate_json(raw)
            except ValidationError as exc:
                error = exc.errors(include_input=False)[0]  # the input may hold secrets
                log.warning("event=bad_record pipeline=%s error=%s", name, error)
        return records

    def _changed(self, record: PipelineRecord, term: Leadership, **changes: Any) -> PipelineRecord:
        updated = max(self._wall(), record.updated)
        return record.model_copy(update={**changes, "epoch": term.epoch, "updated": updated})

    def _update(
        self,
        term: Leadership,
        name: str,
        action: str,
        change: Callable[[PipelineRecord], PipelineRecord | None],
    ) -> PipelineRecord:
        """Read the record, apply ``change`` (None: nothing to do), write it back fenced."""
        check_pipeline_name(name)
        path = self._paths.pipeline(name)
        with zookeeper_errors(term):
            for _ in range(VERSION_RACE_RETRIES):
                record, version = self._read(name)
                updated = change(record)
                if updated is None:
                    return record
                data = self._encode(updated)
                try:
                    term.transaction().set_data(path, data, version).commit()
                except TransactionFailedError:
                    continue  # changed by a concurrent request, or removed: read again
                log.info(
                    "event=%s pipeline=%s epoch=%d status=%s",
                    action,
                    name,
                    term.epoch,
                    updated.status.value,
                )
                return updated
        raise UnavailableError(f"pipeline {name!r} kept changing under {action}; retry")

    def _encode(self, record: PipelineRecord) -> bytes:
        """The record's bytes; RecordTooLargeError past ``max_record_bytes``."""
        data = record.encode()
        if len(data) > self._max_record_bytes:
            raise RecordTooLargeError(
                f"pipeline {record.name}'s record would be {len(data)} bytes, over "
                f"nimbus.max.record.bytes ({self._max_record_bytes}); make its conf smaller"
            )
        return data

    def _read(self, name: str) -> tuple[PipelineRecord, int]:
        try:
            raw, stat = self._client.get(self._paths.pipeline(name))
        except NoNodeError:
            raise UnknownPipelineError(f"unknown pipeline {name!r}") from None
        return PipelineRecord.model_validate_json(raw), stat.version


@contextmanager
def zookeeper_errors(term: Leadership) -> Iterator[None]:
    """Turn coordination and kazoo failures into the API's retryable errors."""
    try:
        yield
    except LeadershipLostError as exc:
        raise NotLeaderError(f"this nimbus stopped leading (epoch {term.epoch}): {exc}") from None
    except CommitOutcomeUnknownError as exc:
        raise UnavailableError(f"{exc}; the operation is safe to retry") from None
    except (ZooKeeperUnavailableError, KazooException) as exc:
        raise UnavailableError(f"ZooKeeper is unreachable ({type(exc).__name__}); retry") from None
