"""Adoption: a supervisor started again takes over the workers its predecessor left running.

Guarantees: a process is adopted, or signalled, only once it is proven to be the one a
worker's monitor recorded (``worker_monitor``'s ``process.json``): the same boot of the
machine, and both the monitor and the worker alive under their pid *with the start time
recorded* (a pid reused by another process starts later). The local directory belongs to
one supervisor id of one cluster: ``check_owner`` refuses a directory whose ``owner.json``,
or any of whose ``process.json``, names another, before anything in it is touched. A
``LocalDirLock`` (an exclusive ``flock`` of ``<local>/supervisor.lock``, never inherited by
a child) makes one supervisor process the only user of its directory; holding it proves that
every earlier one is dead::

    lock = LocalDirLock.take(local_dir)          # else LocalDirLockedError naming the pid
    check_owner(local_dir, "s1", cluster)        # else AdoptionRefusedError
    found = survey(local_dir / "workers", "s1", cluster)
    found.running["etl"].record                  # a ProcessRecord, proven
    found.ended["etl"].exit                       # a worker that ended while no one watched

A cluster is its ZooKeeper root and servers (``ClusterIdentity``: one cluster when the
roots are equal and they share at least one server, so that a configuration change that adds
or removes a ZooKeeper server still adopts).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from stratus.api.records import Assignment, ClusterIdentity, FencingToken
from stratus.files import write_atomically
from stratus.process import boot_id, same_process
from stratus.supervisor.errors import AdoptionRefusedError, LocalDirLockedError
from stratus.supervisor.worker_monitor import EXIT_FILE, PROCESS_FILE, ExitRecord, read_exit
from stratus.worker.spec import WorkerSpec

log = logging.getLogger(__name__)

LOCK_FILE = "supervisor.lock"
OWNER_FILE = "owner.json"


class Pid(BaseModel):
    model_config = ConfigDict(frozen=True)

    pid: int
    start: int | None


class ProcessRecord(BaseModel):
    """``process.json``: who a running worker is, and the proof of its processes."""

    model_config = ConfigDict(frozen=True)

    supervisor: str
    cluster: ClusterIdentity
    pipeline: str
    epoch: int
    generation: int
    token: FencingToken | None
    digest: str
    user: str | None = None  # the worker user it runs as (None: the supervisor's)
    monitor: Pid
    worker: Pid
    boot_id: str
    role: Literal["active", "standby"] = "active"  # a standby worker is adopted as one

    @classmethod
    def read(cls, directory: Path) -> ProcessRecord | None:
        try:
            return cls.model_validate_json((directory / PROCESS_FILE).read_bytes())
        except (OSError, ValidationError):
            return None

    def monitor_alive(self) -> bool:
        return self._proven(self.monitor)

    def worker_alive(self) -> bool:
        return self._proven(self.worker)

    def this_boot(self) -> bool:
        return self.boot_id == boot_id()

    def _proven(self, process: Pid) -> bool:
        return (
            self.this_boot()
            and process.start is not None
            and same_process(process.pid, process.start)
        )

    def runs(self, assignment: Assignment) -> bool:
        """Whether this worker may go on as ``assignment``'s: the same pipeline, generation
        and code, and an assignment no older than the one it started with (a newer epoch or
        token is a new leader's stamp on the same run, which a supervisor that never left
        would not restart either). A standby worker runs no assignment until it is promoted."""
        return (
            self.role == "active"
            and assignment.pipeline == self.pipeline
            and assignment.generation == self.generation
            and assignment.digest == self.digest
            and assignment.epoch >= self.epoch
            and _token_key(assignment.token) >= _token_key(self.token)
        )


def identity(cluster: ClusterIdentity, spec: WorkerSpec, user: str | None) -> dict[str, object]:
    """The fields of ``process.json`` that the supervisor gives its worker's monitor."""
    return {
        "supervisor": spec.supervisor,
        "cluster": cluster.model_dump(),
        "pipeline": spec.pipeline,
        "epoch": spec.epoch,
        "generation": spec.generation,
        "token": spec.token.model_dump(),
        "digest": spec.digest,
        "user": user,
        "role": spec.role,
    }


def warm_identity(cluster: ClusterIdentity, supervisor: str) -> dict[str, object]:
    """The fields of a warm worker's ``process.json`` before a hand-over: no pipeline yet
    (the hand-over records the pipeline's, ``identity``)."""
    return {
        "supervisor": supervisor,
        "cluster": cluster.model_dump(),
        "pipeline": "",
        "epoch": 0,
        "generation": 0,
        "token": None,
        "digest": "",
        "user": None,
    }


def _token_key(token: FencingToken | None) -> tuple[int, int]:
    return token.key() if token is not None else (-1, -1)


# ------------------------------------------------------------------ what a start finds


@dataclass(frozen=True)
class Found:
    """One worker directory's last run: the record, and its end if it ended."""

    directory: Path
    record: ProcessRecord
    exit: ExitRecord | None  # None: its monitor still runs


@dataclass
class Survey:
    """The workers a start found: adoptable (their monitor runs, or their end is known),
    and directories whose processes cannot be proven (left alone, never signalled)."""

    found: dict[str, Found] = field(default_factory=dict)  # pipeline -> its last run
    unproven: list[Path] = field(default_factory=list)


def survey(workers_dir: Path, supervisor: str, cluster: ClusterIdentity) -> Survey:
    """Prove every ``<workers_dir>/*/process.json``; AdoptionRefusedError at the first that
    belongs to another supervisor or cluster (nothing is touched then)."""
    result = Survey()
    for directory in sorted(workers_dir.glob("*")):
        record = _record_of(directory)
        if record is None:
            continue
        _check_identity(
            directory / PROCESS_FILE, record.supervisor, record.cluster, supervisor, cluster
        )
        ended = read_exit(directory)
        if ended is not None:
            result.found[record.pipeline] = Found(directory, record, ended)
        elif record.monitor_alive():  # its worker runs, or ended and exit.json comes now
            result.found[record.pipeline] = Found(directory, record, None)
        else:
            result.unproven.append(directory)
            log.warning(
                "event=worker_not_adopted pipeline=%s supervisor=%s monitor_pid=%d "
                "worker_pid=%d reason=%r",
                record.pipeline,
                supervisor,
                record.monitor.pid,
                record.worker.pid,
                "its processes are gone (or their pids are others' now) and it left no "
                f"{EXIT_FILE}: never signalled",
            )
    return result


def check_owner(local_dir: Path, supervisor: str, cluster: ClusterIdentity) -> None:
    """Refuse a directory of another supervisor id or cluster (``owner.json`` and every
    ``workers/*/process.json``); record this one as its owner otherwise."""
    owner_file = local_dir / OWNER_FILE
    try:
        owner = json.loads(owner_file.read_bytes())
        _check_identity(
            owner_file,
            str(owner["supervisor"]),
            ClusterIdentity.model_validate(owner["cluster"]),
            supervisor,
            cluster,
        )
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError, ValidationError) as exc:
        raise AdoptionRefusedError(
            f"cannot read {owner_file} ({exc}): the supervisor cannot tell whose local "
            "directory this is; remove the file if this directory is this supervisor's"
        ) from None
    for directory in sorted((local_dir / "workers").glob("*")):
        record = _record_of(directory)
        if record is not None:
            _check_identity(
                directory / PROCESS_FILE, record.supervisor, record.cluster, supervisor, cluster
            )
    mine = {"supervisor": supervisor, "cluster": cluster.model_dump()}
    write_atomically(owner_file, json.dumps(mine).encode())


def _record_of(directory: Path) -> ProcessRecord | None:
    """The worker record in ``directory``, None if it has none; AdoptionRefusedError if it
    has one that cannot be read: its worker may still run, and a worker started beside it
    would run the pipeline twice."""
    path = directory / PROCESS_FILE
    if not path.exists():
        return None
    record = ProcessRecord.read(directory)
    if record is None:
        raise AdoptionRefusedError(
            f"cannot read {path}: the worker it records may still run, so the supervisor "
            "touches nothing and starts nothing. If no process of it runs (its monitor is "
            f"`python -m stratus.supervisor.worker_monitor {directory}`), remove {path}"
        )
    return record


def owned_by(local_dir: Path, supervisor: str, cluster: ClusterIdentity) -> bool:
    """Whether ``local_dir``'s ``owner.json`` names supervisor ``supervisor`` of
    ``cluster`` (False when there is none, or it cannot be read)."""
    try:
        owner = json.loads((local_dir / OWNER_FILE).read_bytes())
        their = ClusterIdentity.model_validate(owner["cluster"])
        return str(owner["supervisor"]) == supervisor and their.same(cluster)
    except (OSError, ValueError, KeyError, TypeError, ValidationError):
        return False


def _check_identity(
    where: Path,
    their_id: str,
    their_cluster: ClusterIdentity,
    supervisor: str,
    cluster: ClusterIdentity,
) -> None:
    if their_id != supervisor or not their_cluster.same(cluster):
        raise AdoptionRefusedError(
            f"{where} belongs to supervisor {their_id!r} of {their_cluster}, and this is "
            f"supervisor {supervisor!r} of {cluster}: nothing in supervisor.local.dir "
            f"{where.parent} was touched; give each supervisor a local directory of its own "
            "(supervisor.local.dir), or start the supervisor it belongs to"
        )


# ------------------------------------------------------------------ one process per directory


class LocalDirLock:
    """An exclusive ``flock`` of ``<local>/supervisor.lock``, held for the process's life."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd = fd
        self.path = path

    @classmethod
    def take(cls, local_dir: Path) -> LocalDirLock:
        """The lock, or LocalDirLockedError naming the live process that holds it."""
        path = local_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise LocalDirLockedError(
                f"supervisor.local.dir {local_dir} is in use by the supervisor process "
                f"{holder} (it holds {path}): stop that one first, or give this supervisor "
                "a local directory of its own"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
