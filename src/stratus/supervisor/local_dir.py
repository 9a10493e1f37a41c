"""The supervisor's local directory at start: made, held, its owner checked, and what a
previous supervisor left running there kept for adoption or killed.

Guarantees: one supervisor process uses the directory (``adoption.LocalDirLock``, held for the
process's life); a directory of another supervisor id or cluster is refused with nothing in it
touched (``adoption.check_owner``, ``adoption.survey``), and the lock is let go again; a
process is kept or killed only once it is proven to be the one its monitor recorded. With
``supervisor.worker.adopt`` the workers found are handed to the control loop before its first
reconcile (``TakenDir.adopted``), which adopts those its assignments still name; without it
their monitors and workers are killed here, and their runs are left for the run book to
close::

    taken = take_local_dir(local_dir, "s1", cluster, adopt=True, separate_users=False)
    ...                                  # the worker users, the session, the parts
    adopted = taken.adopted(users, "s1")  # for the control loop
    taken.killed_runs                     # pipeline -> run, without supervisor.worker.adopt
    taken.lock.release()                  # the last thing a stop closes
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stratus.api.records import ClusterIdentity
from stratus.supervisor.adoption import LocalDirLock, Survey, check_owner, survey
from stratus.supervisor.errors import SupervisorStartError
from stratus.supervisor.loop_messages import Adopted
from stratus.supervisor.run_as import UserPool
from stratus.supervisor.run_logs import read_run_number
from stratus.supervisor.worker_access import TRAVERSE_DIR_MODE
from stratus.supervisor.worker_process import ProvenProcess, WorkerProcess

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TakenDir:
    """The local directory, held: its lock, the workers kept for adoption, and the runs of
    those killed because ``supervisor.worker.adopt`` is false."""

    lock: LocalDirLock
    kept: Survey = field(default_factory=Survey)
    killed_runs: Mapping[str, int | None] = field(default_factory=dict)

    def adopted(self, users: UserPool | None, supervisor: str) -> dict[str, Adopted]:
        """Handles of the workers kept, for the control loop to adopt or stop (each gets
        back the worker user it ran as)."""
        adopted = {}
        for name, found in self.kept.found.items():
            user = found.record.user
            run_as = users.claim(name, user) if users is not None and user else None
            process = WorkerProcess.adopt(found, run_as)
            adopted[name] = Adopted(found.record, process, read_run_number(found.directory))
            log.info(
                "event=worker_found pipeline=%s epoch=%d generation=%d supervisor=%s pid=%d "
                "ended=%s",
                name,
                found.record.epoch,
                found.record.generation,
                supervisor,
                found.record.worker.pid,
                "no" if found.exit is None else f"code {found.exit.code}",
            )
        return adopted


def take_local_dir(
    local_dir: Path,
    supervisor: str,
    cluster: ClusterIdentity,
    *,
    adopt: bool,
    separate_users: bool,
) -> TakenDir:
    """Make the directory (with ``separate_users``, one other users pass and never list),
    hold its lock (LocalDirLockedError if a live supervisor holds it), refuse a directory of
    another supervisor id or cluster (AdoptionRefusedError, nothing touched), and prove what
    a previous supervisor left running: kept, or killed without ``adopt``. A refusal lets
    the lock go."""
    _make(local_dir, separate_users=separate_users)
    lock = LocalDirLock.take(local_dir)
    try:
        check_owner(local_dir, supervisor, cluster)
        found = survey(local_dir / "workers", supervisor, cluster)
        if adopt:
            return TakenDir(lock, kept=found)
        return TakenDir(lock, killed_runs=_kill(found, supervisor))
    except BaseException:
        lock.release()
        raise


def _make(local_dir: Path, *, separate_users: bool) -> None:
    try:
        (local_dir / "workers").mkdir(parents=True, exist_ok=True)
        if separate_users:  # workers of other users pass, never list
            for directory in (local_dir, local_dir / "workers"):
                directory.chmod(TRAVERSE_DIR_MODE)
    except OSError as exc:
        raise SupervisorStartError(
            f"cannot use supervisor.local.dir {local_dir}: {exc.strerror}; "
            "point supervisor.local.dir at a writable directory"
        ) from None


def _kill(found: Survey, supervisor: str) -> dict[str, int | None]:
    """Kill the monitors and workers still running (``supervisor.worker.adopt`` false),
    proven first; the run of every worker found, for the run book to close."""
    runs = {}
    for left in found.found.values():
        runs[left.record.pipeline] = read_run_number(left.directory)
        if left.exit is None:  # its monitor runs: it and its worker go, proven first
            log.warning(
                "event=worker_killed_at_start pipeline=%s supervisor=%s pid=%d reason=%r",
                left.record.pipeline,
                supervisor,
                left.record.worker.pid,
                "supervisor.worker.adopt is false",
            )
            for process in (left.record.worker, left.record.monitor):
                proven = ProvenProcess(process.pid, process.start)
                proven.signal_group(signal.SIGKILL)
                proven.signal(signal.SIGKILL)
                proven.close()
    return runs
