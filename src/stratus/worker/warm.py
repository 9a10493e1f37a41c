"""``python -m stratus.worker.warm MASTER``: a worker that starts Spark before its pipeline.

A supervisor with ``supervisor.worker.warm`` keeps one of these per free slot, so that a
pipeline assigned to it skips the Spark start (most of a cold start). The warm worker:

1. starts a SparkSession with the cluster's default static conf (``warm_settings(MASTER)``
   of ``session_conf``: stratus's defaults, the app name ``stratus-warm``, the master), and
   warms it up with one small streaming query (``warm_up``, shared with the standby worker: a
   pipeline's first batch then finds Spark's code loaded and compiled);
2. creates ``ready-<pid>`` in its working directory, then waits for one line on stdin,
   the path of a ``WorkerSpec`` its supervisor wrote (the hand-over); stdin is a pipe that
   only its monitor holds (``stratus.supervisor.worker_monitor``), which passes on what its
   supervisor hands over, so nobody else can hand it a pipeline;
3. becomes that pipeline's worker: ``run_worker`` with the session already up, the same
   heartbeats, stop handling and exit codes as a cold worker (``stratus.worker.main``).

EOF on stdin before the hand-over (its monitor is gone) ends it at once with its Spark JVM
(and a monitor whose supervisor is gone before a hand-over kills it itself); after it, EOF
is a stop request as for any worker. A Spark that does not start exits 1, and the
supervisor starts another after a back-off::

    spark = start_warm_session("local[*]")
    spec_path = handover.wait()          # the line its supervisor wrote
    run_worker(WorkerSpec.read(spec_path), stdin_fd=None, stop=stop, session=spark)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import traceback
from pathlib import Path

from pyspark.sql import SparkSession

from stratus.logs import configure_daemon_logging
from stratus.worker.errors import SparkStartError
from stratus.worker.main import (
    configure_worker_logging,
    exit_with_group,
    read_worker_spec,
    run_worker,
)
from stratus.worker.outcome import FAILED_EXIT, OK_EXIT, USAGE_EXIT
from stratus.worker.session_conf import warm_settings
from stratus.worker.spec import warm_ready_file
from stratus.worker.stop_request import STDIN_CLOSED, StopRequest
from stratus.worker.warm_up import warm_up

log = logging.getLogger(__name__)

READ_BYTES = 4096


def start_warm_session(master: str) -> SparkSession:
    """The warm worker's session; ``SparkStartError`` if Spark does not start."""
    builder = SparkSession.builder
    for key, value in warm_settings(master).items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as exc:
        raise SparkStartError(
            f"the warm worker's Spark did not start with master {master!r}: "
            f"{type(exc).__name__}: {exc}; check pipeline.spark.master"
        ) from exc


class Handover:
    """The warm worker's stdin: the spec path its supervisor writes, then EOF.

    One daemon thread reads it. EOF before a whole line ends the process at once (with its
    JVM); EOF after it is a stop request of the pipeline's worker."""

    def __init__(self, fd: int, stop: StopRequest) -> None:
        self._fd = fd
        self._stop = stop
        self._line = b""
        self._ready = threading.Event()
        threading.Thread(target=self._read, name="warm-handover", daemon=True).start()

    def wait(self) -> Path:
        """Block until the supervisor hands a pipeline over; its spec's path."""
        self._ready.wait()
        return Path(self._line.decode())

    def _read(self) -> None:
        buffer = b""
        try:
            while not self._ready.is_set():
                data = os.read(self._fd, READ_BYTES)
                if not data:
                    _gone_before_handover()
                buffer += data
                if b"\n" in buffer:
                    self._line = buffer.split(b"\n", 1)[0]
                    self._ready.set()
            while os.read(self._fd, READ_BYTES):
                pass
        except OSError:
            if not self._ready.is_set():
                _gone_before_handover()
        self._stop.request(STDIN_CLOSED)


def _gone_before_handover() -> None:
    """No pipeline was handed over and none can be: take the JVM down and leave now."""
    exit_with_group(OK_EXIT)


def main(argv: list[str] | None = None) -> int:
    """Start Spark, wait for a pipeline, run it; the exit code of its worker."""
    args = _parser().parse_args(argv)
    configure_daemon_logging(context={"pipeline": "-"})  # as the pipeline's, once handed one
    stop = StopRequest()
    handover = Handover(sys.stdin.fileno(), stop)
    log.info("event=warm_worker_starting master=%s pid=%d", args.master, os.getpid())
    try:
        spark = start_warm_session(args.master)
    except SparkStartError:
        traceback.print_exc()
        return FAILED_EXIT
    warm_up(spark)
    Path(warm_ready_file(os.getpid())).touch()  # in its working directory, the pool's
    log.info("event=warm_worker_ready master=%s pid=%d", args.master, os.getpid())
    spec_path = handover.wait()
    spec = read_worker_spec(spec_path)
    if spec is None:
        return USAGE_EXIT
    configure_worker_logging(spec)
    log.info("event=warm_worker_handed_over pid=%d", os.getpid())
    return run_worker(spec, stdin_fd=None, stop=stop, session=spark)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m stratus.worker.warm",
        description="Start Spark, then run the pipeline whose spec path arrives on stdin.",
    )
    parser.add_argument("master", help="spark.master of the session (pipeline.spark.master)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
