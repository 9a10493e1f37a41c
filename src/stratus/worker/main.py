"""``python -m stratus.worker.main SPEC_PATH``: one process that runs one pipeline.

The supervisor writes the ``WorkerSpec`` and its monitor (``stratus.supervisor.worker_monitor``)
starts this module in a process group of its own, stdin a pipe the monitor holds. The worker:

1. writes a STARTING heartbeat at once, then one every ``heartbeat_interval_secs`` from a
   thread of its own (a slow Spark start still heartbeats), and one at every change;
2. refuses a checkpoint location that holds another pipeline's or cluster's checkpoints
   (``checkpoint_origin``), claims it with the spec's fencing token, and does not
   start if a higher token claimed it (``checkpoint_owner``); then runs the pipeline in
   ``work_dir``: an app (``spark_app``) or an sdp project (``sdp_run``), checking the claims
   again after every micro-batch committed (before every sdp run), and stopping, FENCED, at
   the first higher one;
3. stops on SIGTERM (or SIGINT), on EOF on stdin (its monitor is gone: it must not
   outlive it), or once its supervisor's lease has ended unrenewed (``lease_file``: a
   supervisor frozen or stalled cannot fence its workers, so they fence themselves); a
   worker of a pipeline with a standby worker also once its beat lease has ended
   (``beat_lease_path``), its process group SIGKILLed ``beat_stop_secs`` after that:
   streaming queries stop with their checkpoints kept, an sdp run's process group is taken
   down, Spark stops. A stop while STARTING (Spark still starting, nothing
   ran) exits at once. A run that has not ended ``stop_grace_secs`` after the request is
   abandoned: the STOPPED heartbeat is written, the rest of the worker's process group (its
   JVM) is SIGKILLed and the process exits. Either way the pipes
   its JVM and sdp guard watch close with the process, so they go too;
4. records its start, each micro-batch and its stop in ``history.file`` when its supervisor
   set one (``run_trail``);
5. writes the final heartbeat and exits:

   =========  ====  ==============================================================
   state      exit  when
   =========  ====  ==============================================================
   FINISHED   0     a batch function returned with no query active; an sdp ran once
   STOPPED    0     stopped on order (checkpoints kept)
   FAILED     1     the entrypoint could not be loaded or raised, a query failed,
                    Spark did not start, an sdp run failed; ``error`` says which
   (none)     2     the spec file is missing or invalid: no heartbeat path to write
   FENCED     3     a worker of a newer assignment claimed the checkpoint location
                    (``checkpoint_owner``): before the run, or after a batch
   FAILED     4     the checkpoint location holds another pipeline's or cluster's
                    checkpoints (``checkpoint_origin``): refused before the claim;
                    its supervisor does not restart it
   =========  ====  ==============================================================

``--ignore-stdin`` is for running a worker by hand, with stdin that is not a pipe.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError
from pyspark.sql import SparkSession

from stratus.logs import configure_daemon_logging
from stratus.process import kill_others_in_group
from stratus.worker.checkpoint_origin import (
    CheckpointOrigin,
    adopt_legacy,
    check_origin,
    record_origin,
)
from stratus.worker.checkpoint_owner import CheckpointOwners, OwnerFence
from stratus.worker.heartbeat_file import HeartbeatReporter
from stratus.worker.lease_file import POLL_SECS, LeaseWatch, watch_beat_lease
from stratus.worker.outcome import OK_EXIT, USAGE_EXIT, Outcome
from stratus.worker.run_trail import WorkerTrail
from stratus.worker.sdp_run import run_sdp
from stratus.worker.spark_app import PreparedApp, run_app
from stratus.worker.spec import WorkerSpec
from stratus.worker.stop_request import StopRequest

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    """Run the worker of the spec file named on the command line; the exit code."""
    args = worker_parser(
        "python -m stratus.worker.main", "Run one pipeline as its supervisor's spec file says."
    ).parse_args(argv)
    spec = read_worker_spec(args.spec)
    if spec is None:
        return USAGE_EXIT
    configure_worker_logging(spec)
    return run_worker(spec, stdin_fd=None if args.ignore_stdin else sys.stdin.fileno())


def run_worker(
    spec: WorkerSpec,
    *,
    stdin_fd: int | None,
    stop: StopRequest | None = None,
    session: SparkSession | None = None,
    prepared: PreparedApp | None = None,
) -> int:
    """Run ``spec``'s pipeline to its outcome (see the module docstring); the exit code.

    A warm worker (``stratus.worker.warm``) passes its own ``stop`` (it watches stdin
    itself) and the ``session`` it started before the pipeline was handed to it. A promoted
    standby worker (``stratus.worker.standby``) passes its ``stop``, the session it started
    for this pipeline and what it ``prepared`` (the entry point imported): the run skips
    those steps, and claims the checkpoint and calls the function as any worker."""
    reporter = HeartbeatReporter(spec)
    reporter.start()
    history = WorkerTrail.open(spec)
    stop = stop or StopRequest()
    stop.install_signal_handlers()
    if stdin_fd is not None:
        stop.watch(stdin_fd)
    stop.on_request(lambda: _exit_now_if_starting(reporter, history))
    stop.on_request(lambda: _exit_after_grace(reporter, history, stop, spec.stop_grace_secs))
    if spec.lease_path is not None:
        LeaseWatch(spec.lease_path, on_lapsed=stop.request).start()
    if spec.beat_lease_path is not None:  # a hot worker: gone soon after its beats stopped
        watch_beat_lease(
            spec.beat_lease_path,
            poll_secs=spec.beat_poll_secs or POLL_SECS,
            stop_secs=spec.beat_stop_secs or 0.0,
            stop=stop.request,
            kill=lambda: _abandon(reporter, history, stop, "its beat lease ended"),
        )
    log.info(
        "event=worker_started generation=%d token=%s kind=%s master=%s pid=%d",
        spec.generation,
        spec.token,
        spec.kind,
        spec.spark_master,
        os.getpid(),
    )
    history.started()
    outcome = _run(spec, stop, reporter, history, session=session, prepared=prepared)
    reporter.finish(outcome)
    history.stopped(outcome.state)
    log.info(
        "event=worker_exiting state=%s error=%r",
        outcome.state,
        outcome.error,
    )
    return outcome.exit_code


def configure_worker_logging(spec: WorkerSpec) -> None:
    """Lines on stderr as the supervisor writes its own (``log.level``, ``log.format``), each
    naming the pipeline and the epoch: a worker runs one."""
    configure_daemon_logging(
        spec.log_settings(),
        context={"pipeline": spec.pipeline, "epoch": spec.epoch},
        replace=True,  # a warm worker logged before it knew its pipeline
    )


def _run(
    spec: WorkerSpec,
    stop: StopRequest,
    reporter: HeartbeatReporter,
    history: WorkerTrail,
    *,
    session: SparkSession | None,
    prepared: PreparedApp | None,
) -> Outcome:
    """The pipeline's outcome; a bug of the worker itself is a FAILED outcome too."""
    try:
        spec.work_dir.mkdir(parents=True, exist_ok=True)
        os.chdir(spec.work_dir)
        problem = _checkpoint_problem(spec)
        if problem is not None:
            log.error(
                "event=checkpoint_refused location=%s error=%s", spec.checkpoint_location, problem
            )
            return Outcome.refused(problem)
        owners = CheckpointOwners(spec.checkpoint_location, spec.token)
        fence = OwnerFence(owners, stop, spec.checkpoint_location)
        refused = fence.claim(_claim_note(spec))
        if refused is not None:
            return refused
        if spec.cluster is not None:
            origin = CheckpointOrigin.now(spec.cluster, spec.pipeline, spec.token.era)
            record_origin(spec.checkpoint_location, origin)
        if spec.kind == "app":
            return run_app(
                spec,
                stop,
                reporter,
                session=session,
                prepared=prepared,
                history=history,
                fence=fence,
            )
        return run_sdp(spec, stop, reporter, fence=fence)
    except Exception as exc:
        traceback.print_exc()
        return Outcome.failed(f"the worker failed: {type(exc).__name__}: {exc}")


def _checkpoint_problem(spec: WorkerSpec) -> str | None:
    """Before the claim: this cluster's checkpoints moved from the default root of 0.2.0
    and earlier, then the location refused if another pipeline's or cluster's
    (``checkpoint_origin``); the error, or None."""
    if spec.legacy_checkpoint_location is not None:
        failed = adopt_legacy(spec.legacy_checkpoint_location, spec.checkpoint_location, spec.token)
        if failed is not None:
            return failed
    if spec.cluster is None:
        return None
    return check_origin(spec.checkpoint_location, spec.cluster, spec.pipeline, spec.token.era)


def _claim_note(spec: WorkerSpec) -> dict[str, object]:
    """What a claim's file says of its worker, for an operator who reads it."""
    return {
        "pipeline": spec.pipeline,
        "supervisor": spec.supervisor,
        "epoch": spec.epoch,
        "generation": spec.generation,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "claimed": time.time(),
    }


def _exit_now_if_starting(reporter: HeartbeatReporter, history: WorkerTrail) -> None:
    """A stop before the pipeline ran (Spark still starting): nothing to stop, exit at once.
    The JVM being started follows: its stdin pipe closes with this process."""
    if reporter.finish_if_starting(Outcome.stopped()):
        history.stopped(reporter.state)
        log.info("event=worker_stopped_while_starting")
        _exit(OK_EXIT)


def exit_with_group(code: int) -> NoReturn:
    """Leave now, from any thread, with the rest of this worker's process group (its Spark
    JVM): a warm worker gone before its hand-over, a standby worker stopped before its
    promotion, have nothing to stop gracefully."""
    _kill_the_rest_of_the_group()
    _exit(code)


def _exit(code: int) -> NoReturn:
    """Leave now, from any thread, without waiting for the main thread's work."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _exit_after_grace(
    reporter: HeartbeatReporter, history: WorkerTrail, stop: StopRequest, grace: float
) -> None:
    """Exit ``grace`` seconds from now if the run has not ended by then."""

    note = f"the run did not end within {grace:g} s of the stop request"
    timer = threading.Timer(grace, lambda: _abandon(reporter, history, stop, note))
    timer.daemon = True
    timer.start()


def _abandon(
    reporter: HeartbeatReporter, history: WorkerTrail, stop: StopRequest, note: str
) -> None:
    """Give the run up now: its final heartbeat, SIGKILL of the rest of the group, exit."""
    reporter.finish(stop.outcome(note))
    log.warning("event=worker_abandoned_run reason=%r", note)
    _kill_the_rest_of_the_group()
    final = reporter.outcome
    history.stopped(final.state if final is not None else None)
    _exit(final.exit_code if final is not None else OK_EXIT)


def _kill_the_rest_of_the_group() -> None:
    """SIGKILL the rest of this worker's process group (its Spark JVM): a run abandoned
    because its supervisor is gone must stop now, not when its JVM next reads stdin."""
    if os.getpgrp() == os.getpid():  # else started by hand: the group is not the worker's
        kill_others_in_group()


def read_worker_spec(path: Path) -> WorkerSpec | None:
    """The spec in ``path``; None, the error on stderr, if it is missing or invalid."""
    try:
        return WorkerSpec.read(path)
    except (OSError, ValidationError) as exc:
        print(f"error: cannot use the worker spec {path}: {exc}", file=sys.stderr)
        return None


def worker_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The command line of a process started on a spec file: the file, ``--ignore-stdin``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("spec", type=Path, help="the WorkerSpec file (spec.json)")
    parser.add_argument(
        "--ignore-stdin",
        action="store_true",
        help="do not stop at EOF on stdin (by default, EOF means its monitor is gone)",
    )
    return parser


if __name__ == "__main__":
    sys.exit(main())
