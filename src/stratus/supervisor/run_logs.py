"""Each run's log in a directory of its own, the newest kept, on the supervisor's host.

A run that has a number (``RunRecord``) writes its log to
``<local>/workers/<pipeline>/runs/<number>/worker.log`` (rotated there: ``worker_log``),
and the pipeline's directory says which run its worker is (``run.json``), so that a
supervisor started again adopts the worker with its run. The logs of the newest
``supervisor.worker.log.runs.keep`` runs of a pipeline are kept; a new run deletes the
older ones, and a purge of the pipeline's checkpoints deletes them all::

    run_dir(directory, 7)                  # .../workers/etl/runs/7
    make_run_dir(directory, 7)             # made, private to the supervisor
    write_run_number(directory, 7)         # the worker now running is run 7
    read_run_number(directory)             # 7 (None: none recorded)
    prune(directory, keep=10)              # the newest ten run directories stay
    kept_runs(directory)                   # [.., 6, 7], oldest first
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

from stratus.files import private_dirs, write_atomically

RUNS_DIR = "runs"
RUN_FILE = "run.json"


def run_dir(directory: Path, number: int) -> Path:
    """The directory of run ``number``'s log under a pipeline's worker ``directory``."""
    return directory / RUNS_DIR / str(number)


def make_run_dir(directory: Path, number: int) -> Path:
    """Make run ``number``'s log directory and the runs directory above it, each 0700 (one
    an earlier start made wider too): a worker of another user may enter the pipeline's
    directory (``worker_access``) but neither list its runs nor read their logs."""
    private_dirs(directory / RUNS_DIR)
    return private_dirs(run_dir(directory, number))


def kept_runs(directory: Path) -> list[int]:
    """The numbers of the runs whose log directory is kept, oldest first."""
    try:
        names = [entry.name for entry in (directory / RUNS_DIR).iterdir() if entry.is_dir()]
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def to_prune(numbers: list[int], keep: int) -> list[int]:
    """The runs beyond the newest ``keep`` of ``numbers``, whose logs go."""
    return sorted(numbers)[: max(0, len(numbers) - keep)]


def prune(directory: Path, keep: int) -> list[int]:
    """Delete the log directories of all but the newest ``keep`` runs; the runs deleted."""
    gone = to_prune(kept_runs(directory), keep)
    for number in gone:
        shutil.rmtree(run_dir(directory, number), ignore_errors=True)
    return gone


def pick_kept(kept: list[int], run: int | None, *, previous: bool) -> int | None:
    """The run whose log is read: ``run`` if named, else the newest of ``kept`` (oldest
    first), or with ``previous`` the one before it; None when there is none such."""
    if run is not None:
        return run
    wanted = 2 if previous else 1
    return kept[-wanted] if len(kept) >= wanted else None


def run_over(directory: Path, run: int, exit_file: str) -> bool:
    """Whether run ``run`` of the worker in ``directory`` has ended: a newer run is the
    worker's now, or its monitor recorded its exit (``exit_file``)."""
    return read_run_number(directory) != run or (directory / exit_file).exists()


def forget_runs(directory: Path) -> None:
    """Delete every run log of the pipeline whose worker ``directory`` this is (a purge)."""
    shutil.rmtree(directory / RUNS_DIR, ignore_errors=True)
    (directory / RUN_FILE).unlink(missing_ok=True)


def write_run_number(directory: Path, number: int | None) -> None:
    """Record which run the pipeline's worker is (None: an unrecorded run), in a file only
    the supervisor reads (0600), replaced at once."""
    path = directory / RUN_FILE
    if number is None:
        path.unlink(missing_ok=True)
        return
    write_atomically(path, json.dumps({"run": number}).encode())  # the supervisor's only


def read_run_number(directory: Path) -> int | None:
    """The run the worker in ``directory`` is, as its supervisor recorded it; None if none."""
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        number = json.loads((directory / RUN_FILE).read_text())["run"]
        if isinstance(number, int) and number >= 0:
            return number
    return None
