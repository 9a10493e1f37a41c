"""The two files between a standby worker and its supervisor: ``standby.json`` out, the
promotion in.

A standby worker (``stratus.worker.standby``) runs for one pipeline with its code imported and
its SparkSession up, and claims nothing until it is promoted. Once ready it writes
``<work_dir>/standby.json`` (``StandbyReady``: its pid, READY, since when, and the pipeline,
generation and code it is ready for). Its supervisor promotes it by writing, atomically, the
active worker's ``WorkerSpec`` (role active, the new assignment's token, epoch and generation)
to the file the standby spec's ``promote_path`` names (``<work_dir>/promote.json``). The
standby worker takes it only if it fits what it prepared (``promotion_problem``: the same
pipeline, code, entry point, master and static Spark settings); else it refuses it, claims
nothing and exits::

    write_standby_ready(spec.work_dir, StandbyReady.now(spec))  # the standby worker, READY
    read_standby_ready(work_dir)                               # its supervisor: None, not yet
    active_spec.write(standby_spec.promote_path)               # its supervisor promotes it
    promoted = read_promotion(standby_spec)                    # PromotionError: refused

Files, not the monitor's stdin that hands a warm worker its pipeline: that pipe carries one
hand-over and is closed after it, and a supervisor that restarts and adopts the worker's
monitor never holds it again, while a file is there for whichever supervisor reads the
worker's directory. Importing this module does not import pyspark: the supervisor imports it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stratus.api.standby_workers import StandbyWorkerState
from stratus.files import write_atomically
from stratus.worker.errors import PromotionError
from stratus.worker.session_conf import is_runtime_key, spark_conf
from stratus.worker.spec import WorkerSpec

STANDBY_FILE = "standby.json"
PROMOTE_FILE = "promote.json"  # where a supervisor points a standby spec's promote_path
# Read by its supervisor through the group of the worker's directory, as the heartbeat is
STANDBY_FILE_MODE = 0o640
DIGEST_SHOWN = 12


class StandbyReady(BaseModel):
    """``standby.json``: a standby worker that can be promoted now."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    pipeline: str
    generation: int = Field(description="the standby spec's generation")
    digest: str = Field(description="the code it imported")
    pid: int
    state: StandbyWorkerState = StandbyWorkerState.READY
    since: float = Field(description="wall-clock time it became READY")

    @classmethod
    def now(cls, spec: WorkerSpec) -> StandbyReady:
        return cls(
            pipeline=spec.pipeline,
            generation=spec.generation,
            digest=spec.digest,
            pid=os.getpid(),
            since=time.time(),
        )


def standby_file(work_dir: Path) -> Path:
    return work_dir / STANDBY_FILE


def write_standby_ready(work_dir: Path, ready: StandbyReady) -> None:
    write_atomically(
        standby_file(work_dir), ready.model_dump_json().encode(), mode=STANDBY_FILE_MODE
    )


def read_standby_ready(work_dir: Path) -> StandbyReady | None:
    """The standby worker's READY record, or None: not ready (yet), or an unreadable file."""
    try:
        return StandbyReady.model_validate_json(standby_file(work_dir).read_bytes())
    except (OSError, ValidationError):
        return None


def clear_standby_ready(work_dir: Path) -> None:
    """Remove ``standby.json``: at a start (a previous process's) and once promoted."""
    standby_file(work_dir).unlink(missing_ok=True)


def standby_spec_problem(spec: WorkerSpec) -> str | None:
    """Why ``spec`` cannot run as a standby worker; None if it can. Pure."""
    if spec.role != "standby":
        return f"its role is {spec.role!r}: a standby worker runs a spec of role 'standby'"
    if spec.promote_path is None:
        return "it names no promote_path: a standby worker waits for that file"
    if spec.kind != "app" or spec.entrypoint is None:
        return f"its pipeline is of kind {spec.kind!r}: only an app can have a standby worker"
    return None


def read_promotion(standby: WorkerSpec) -> WorkerSpec:
    """The active worker's spec in ``standby.promote_path``, if it fits ``standby``;
    ``PromotionError`` naming what is wrong otherwise."""
    path = standby.promote_path
    if path is None:
        raise PromotionError("this standby worker's spec names no promote_path")
    try:
        promoted = WorkerSpec.read(path)
    except (OSError, ValidationError) as exc:
        raise PromotionError(
            f"the promotion {path} cannot be read as a worker spec: {exc}; nothing was claimed"
        ) from exc
    problem = promotion_problem(standby, promoted)
    if problem is not None:
        raise PromotionError(
            f"the promotion {path} is refused: {problem}; nothing was claimed, and its "
            "supervisor starts the pipeline's worker as for any other assignment"
        )
    return promoted


def promotion_problem(standby: WorkerSpec, promoted: WorkerSpec) -> str | None:
    """Why the promotion ``promoted`` does not fit the standby worker of ``standby`` (its
    imported code and the session it started); None if it does. Pure.

    A new generation, epoch and token are the point of a promotion; runtime Spark keys and
    the pipeline's own keys are set on the session (``adopt_session``); what a running
    session cannot take, and the code already imported, must be the same."""
    if promoted.role != "active":
        return f"it is the spec of a worker of role {promoted.role!r}, not of an active one"
    if promoted.pipeline != standby.pipeline:
        return (
            f"it names pipeline {promoted.pipeline!r}, not this standby worker's "
            f"{standby.pipeline!r}"
        )
    if promoted.digest != standby.digest:
        return (
            f"it runs code {promoted.digest[:DIGEST_SHOWN]}, this standby worker imported "
            f"{standby.digest[:DIGEST_SHOWN]}"
        )
    if promoted.kind != standby.kind or promoted.entrypoint != standby.entrypoint:
        return (
            f"it runs {promoted.kind} {promoted.entrypoint!r}, this standby worker imported "
            f"{standby.entrypoint!r}"
        )
    if promoted.spark_master != standby.spark_master:
        return (
            f"its Spark master is {promoted.spark_master!r}, this standby worker's session "
            f"runs on {standby.spark_master!r}"
        )
    if promoted.deps_archive != standby.deps_archive:
        return (
            f"its requirements' archive is {promoted.deps_archive}, this standby worker's "
            f"session shipped {standby.deps_archive}"
        )
    key = _static_key_changed(standby, promoted)
    if key is not None:  # its value may be a secret: named, not shown
        return (
            f"its Spark setting {key} is not the one this standby worker's session started "
            "with, and a running session cannot change it"
        )
    return None


def _static_key_changed(standby: WorkerSpec, promoted: WorkerSpec) -> str | None:
    """The first static ``spark.*`` key set differently (or only) in one of the two confs."""
    before, after = spark_conf(standby.conf), spark_conf(promoted.conf)
    for key in sorted(before.keys() | after.keys()):
        if not is_runtime_key(key) and before.get(key) != after.get(key):
            return key
    return None
