"""``python -m stratus.worker.standby SPEC_PATH``: a pipeline's standby worker.

A pipeline with ``pipeline.standby: hot`` keeps one beside its active worker, on another
supervisor (docs/standby-workers.md). Its supervisor writes a ``WorkerSpec`` of role
``standby`` with a ``promote_path`` and starts this module under a monitor, as it starts a
worker. Its phases, in the main thread, one after the other (``StandbyPhase``)::

    PREPARING  import the entry point (load_entrypoint); read the checkpoint location's
               origin (check_origin), writing nothing there (a worker of another user than
               the active worker's may not read it before its promotion: checked then)
    STARTING   start the pipeline's SparkSession as its active worker would (start_session:
               its master and conf, its code shipped to a cluster's executors); the first
               micro-batch of its warm-up (WarmUp, spec.warm_up_batches in all)
    READY      write <work_dir>/standby.json; look for promote_path every 20 ms, until it
               appears, a stop, or its supervisor's lease over for ORPHAN_SECS; the warm-up's
               other batches run meanwhile, and a promotion ends them
    PROMOTED   read the promotion (promotion.read_promotion: the active worker's spec, of
               the same pipeline and code) and become that worker: run_worker with the
               session and the entry point prepared, which heartbeats, claims the checkpoint
               with the promotion's token and calls the function

Before PROMOTED it claims nothing, writes no heartbeat and records nothing in the trail: a stop
(SIGTERM or SIGINT, EOF on stdin: its monitor is gone) ends it at once with its Spark JVM,
exit 0, and so does its supervisor's lease once it has been over for ``ORPHAN_SECS`` (an
orphan: its supervisor is gone and no new one adopted it). A lapse shorter than that does not
end it: its supervisor lost the lease for a moment (its ZooKeeper session was cut while its
member died, say) and stopped its workers, but a standby worker runs nothing of the
pipeline's, and its promotion is written only by a supervisor holding the lease again. From
PROMOTED on it is an ordinary worker (``stratus.worker.main``): its heartbeats, stops,
fencing (its supervisor's lease at once) and exit codes. Exit codes before the promotion:

    ====  ===================================================================
    exit  when
    ====  ===================================================================
    0     stopped, or an orphan (its supervisor's lease long over): nothing claimed
    1     the entry point could not be imported, or Spark did not start
    2     the spec is missing or not a standby worker's (role, promote_path, an app);
          the promotion is unreadable or does not fit (another pipeline, other code,
          another master or static Spark setting): nothing claimed
    4     the checkpoint location holds another pipeline's or cluster's checkpoints
    ====  ===================================================================

A promotion that finds a higher claim already there ends FENCED, exit 3, as any worker's
(``checkpoint_owner``). ``--ignore-stdin`` is for running one by hand.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

from stratus.worker.checkpoint_origin import check_origin
from stratus.worker.entrypoint import load_entrypoint
from stratus.worker.errors import EntrypointError, PromotionError, SparkStartError
from stratus.worker.lease_file import LeaseWatch
from stratus.worker.main import (
    configure_worker_logging,
    exit_with_group,
    read_worker_spec,
    run_worker,
    worker_parser,
)
from stratus.worker.outcome import FAILED_EXIT, OK_EXIT, REFUSED_EXIT, USAGE_EXIT
from stratus.worker.promotion import (
    StandbyReady,
    clear_standby_ready,
    read_promotion,
    standby_spec_problem,
    write_standby_ready,
)
from stratus.worker.spark_app import PreparedApp, start_session, stop_session
from stratus.worker.spec import WorkerSpec
from stratus.worker.stop_request import StopRequest
from stratus.worker.warm_up import WarmUp

log = logging.getLogger(__name__)

PROMOTE_POLL_SECS = 0.02  # how often a READY standby worker looks for its promotion
ORPHAN_SECS = 60.0  # its supervisor's lease over this long: gone, and no supervisor adopted it


class StandbyPhase(StrEnum):
    """Where a standby worker process is; it only moves forward."""

    PREPARING = "PREPARING"  # importing the code, reading the checkpoint's origin
    STARTING = "STARTING"  # starting and warming up its SparkSession
    READY = "READY"  # standby.json written: waiting for its promotion
    PROMOTED = "PROMOTED"  # the pipeline's worker now: run_worker


class StandbyWorker:
    """A standby worker's phase, and what a stop does in it.

    The main thread moves the phase forward (``enter``); a stop request (on a thread of
    ``StopRequest``) ends the process at once unless the worker is PROMOTED, with nothing
    claimed. One lock orders the two: a stop that comes first ends the process before the
    promotion begins; a promotion that comes first leaves the stop to the worker it became,
    which stops as any worker does."""

    def __init__(
        self,
        *,
        leave: Callable[[int], None] = exit_with_group,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._leave = leave
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._phase = StandbyPhase.PREPARING

    @property
    def phase(self) -> StandbyPhase:
        return self._phase

    def enter(self, phase: StandbyPhase) -> None:
        with self._lock:
            self._phase = phase
        log.info(
            "event=standby_worker_phase phase=%s secs=%.3f", phase, self._clock() - self._started
        )

    def stopped(self, reason: str | None) -> None:
        """A stop request: leave now, unless promoted (``leave`` runs with the lock held,
        so no promotion begins meanwhile)."""
        with self._lock:
            if self._phase is StandbyPhase.PROMOTED:
                return
            log.info("event=standby_worker_stopped phase=%s reason=%r", self._phase, reason)
            self._leave(OK_EXIT)


def orphan_watch(
    lease_path: Path,
    on_orphaned: Callable[[str], None],
    *,
    clock: Callable[[], float] = time.monotonic,
) -> LeaseWatch:
    """The watch (not started) of a standby worker's supervisor's lease: ``on_orphaned``
    once that lease has been over for ``ORPHAN_SECS``, not at a shorter lapse (module
    docstring)."""
    return LeaseWatch(lease_path, on_lapsed=on_orphaned, clock=clock, grace_secs=ORPHAN_SECS)


def main(argv: list[str] | None = None) -> int:
    """Run the standby worker of the spec file named on the command line; the exit code."""
    args = worker_parser(
        "python -m stratus.worker.standby", "Prepare a pipeline's worker; run it once promoted."
    ).parse_args(argv)
    spec = read_worker_spec(args.spec)
    if spec is None:
        return USAGE_EXIT
    problem = standby_spec_problem(spec)
    if problem is not None:
        print(f"error: the spec {args.spec} is not a standby worker's: {problem}", file=sys.stderr)
        return USAGE_EXIT
    configure_worker_logging(spec)
    return run_standby(spec, stdin_fd=None if args.ignore_stdin else sys.stdin.fileno())


def run_standby(spec: WorkerSpec, *, stdin_fd: int | None) -> int:
    """Run the standby worker of ``spec`` through its phases (see the module docstring); the
    exit code, its promoted worker's once promoted."""
    assert spec.entrypoint is not None and spec.promote_path is not None  # standby_spec_problem
    standby = StandbyWorker()
    stop = StopRequest()
    stop.install_signal_handlers()
    stop.on_request(lambda: standby.stopped(stop.reason))
    if stdin_fd is not None:
        stop.watch(stdin_fd)
    lease = None
    if spec.lease_path is not None:
        lease = orphan_watch(spec.lease_path, on_orphaned=stop.request)
        lease.start()
    log.info(
        "event=standby_worker_started generation=%d master=%s pid=%d",
        spec.generation,
        spec.spark_master,
        os.getpid(),
    )
    spec.work_dir.mkdir(parents=True, exist_ok=True)
    os.chdir(spec.work_dir)
    clear_standby_ready(spec.work_dir)  # a previous process's
    try:
        function = load_entrypoint(spec.entrypoint, spec.code_dir)
    except EntrypointError as exc:
        traceback.print_exc()
        log.error("event=standby_worker_failed phase=%s error=%s", standby.phase, exc)
        return FAILED_EXIT
    refused = _origin_refused(spec)
    if refused is not None:
        log.error(
            "event=checkpoint_refused location=%s error=%s", spec.checkpoint_location, refused
        )
        return REFUSED_EXIT
    standby.enter(StandbyPhase.STARTING)
    try:
        spark = start_session(spec)
    except SparkStartError as exc:
        traceback.print_exc()
        log.error("event=standby_worker_failed phase=%s error=%s", standby.phase, exc)
        return FAILED_EXIT
    try:
        stop.install_signal_handlers()  # pyspark replaced SIGINT's handler with its own
        warming = WarmUp.begin(spark, batches=spec.warm_up_batches)
        write_standby_ready(spec.work_dir, StandbyReady.now(spec))
        standby.enter(StandbyPhase.READY)
        if not _promotion_appeared(spec.promote_path, stop):
            return OK_EXIT  # stopped: the stop's own callback is leaving already
        warming.stop(wait=False)  # the pipeline's turn: its batch in flight ends meanwhile
        try:
            promoted = read_promotion(spec)
        except PromotionError as exc:
            log.error("event=promotion_refused error=%s", exc)
            return USAGE_EXIT
        standby.enter(StandbyPhase.PROMOTED)
        if lease is not None:
            lease.stop()  # the promoted worker watches its spec's lease
        clear_standby_ready(spec.work_dir)
        configure_worker_logging(promoted)
        log.info(
            "event=standby_worker_promoted token=%s generation=%d",
            promoted.token,
            promoted.generation,
        )
        return run_worker(
            promoted,
            stdin_fd=None,  # its stop watches stdin already
            stop=stop,
            session=spark,
            prepared=PreparedApp(function),
        )
    finally:
        stop_session(spark)  # nothing left to stop if the pipeline's run stopped it


def _origin_refused(spec: WorkerSpec) -> str | None:
    """Why the checkpoint location is another pipeline's or cluster's, read early (None: it
    is not, or no cluster to check); an origin this worker's user may not read yet is
    unknown, checked again at the promotion."""
    if spec.cluster is None:
        return None
    return check_origin(
        spec.checkpoint_location,
        spec.cluster,
        spec.pipeline,
        spec.token.era,
        denied_is_unknown=True,
    )


def _promotion_appeared(path: Path, stop: StopRequest) -> bool:
    """Wait until ``path`` exists (True) or a stop is requested (False)."""
    while not path.exists():
        if stop.wait(PROMOTE_POLL_SECS):
            return False
    return True


if __name__ == "__main__":
    sys.exit(main())
