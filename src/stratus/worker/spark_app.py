"""Runs an app pipeline: a Spark session, the package's function, then its streaming queries.

The function is loaded before Spark starts, so a bad entrypoint fails in a second, without a
JVM. The session gets the pipeline's ``spark.*`` conf over stratus's defaults
(``SPARK_DEFAULTS``: no UI, no console progress bars, WARN logs), the app name
``stratus-<pipeline>`` unless the conf sets ``spark.app.name``, and the master the supervisor
resolved. After ``function(spark, context)`` returns:

- no streaming query active: a batch, FINISHED;
- queries active: they run until a stop request (STOPPED) or until one fails (FAILED, with
  the query's error) or all end by themselves (FINISHED).

A stop request stops the active queries (their checkpoints stay), cancels running jobs (so a
batch function blocked in an action returns), and lets the function return; the run is then
STOPPED whatever the function raised. A newer worker's claim on the checkpoint location,
found after a committed micro-batch (``checkpoint_owner``), stops the run the same way,
FENCED. The Spark JVM is gone when ``run_app`` returns: the session is stopped and the JVM,
which pyspark started with a pipe on its stdin, sees EOF and exits (it also does when this
process dies, even by SIGKILL)::

    outcome = run_app(spec, stop, reporter)
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from stratus.api.records import QueryProgress
from stratus.worker.checkpoint_owner import OwnerFence
from stratus.worker.entrypoint import load_entrypoint
from stratus.worker.errors import EntrypointError, SparkStartError
from stratus.worker.heartbeat_file import HeartbeatReporter
from stratus.worker.outcome import Outcome, without_stack
from stratus.worker.pipeline_context import PipelineContext
from stratus.worker.query_progress import QueryTracker, tracker_listener
from stratus.worker.run_trail import WorkerTrail
from stratus.worker.session_conf import DEPS_DIR, SPARK_DEFAULTS, spark_conf, with_deps_first
from stratus.worker.spec import WorkerSpec
from stratus.worker.stop_request import StopRequest

log = logging.getLogger(__name__)

QUERY_POLL_SECS = 0.5  # how often the main thread looks at the queries after the function
JVM_EXIT_SECS = 10.0  # after closing the JVM's stdin, how long before it is killed
CODE_ARCHIVE = "pipeline-code"  # <work_dir>/pipeline-code.zip, shipped to remote executors


@dataclass(frozen=True)
class PreparedApp:
    """What a standby worker did before its promotion, which ``run_app`` does not do again:
    its entry point imported (``function``), and the session it passes along started for this
    pipeline (``start_session``: its code and requirements already reach the executors)."""

    function: Callable[..., Any]


def run_app(
    spec: WorkerSpec,
    stop: StopRequest,
    reporter: HeartbeatReporter,
    *,
    session: SparkSession | None = None,
    prepared: PreparedApp | None = None,
    history: WorkerTrail | None = None,
    fence: OwnerFence | None = None,
) -> Outcome:
    """Run the app of ``spec`` to its outcome; the final heartbeat is written before the
    Spark session is torn down, so a supervisor's SIGKILL during the teardown loses nothing.

    ``session``: a warm worker's, already started; the pipeline's runtime conf is set on it
    and its code shipped to it (``adopt_session``) instead of starting one. With
    ``prepared`` (a promoted standby worker), its function is not imported again and its
    session, started for this pipeline, gets only the runtime conf. ``history``
    records every micro-batch the queries commit; ``fence`` checks the checkpoint's claims
    after each, and stops the run (FENCED) once a newer worker claimed it."""
    assert spec.entrypoint is not None  # the manifest requires it for kind app
    context = PipelineContext.from_spec(spec, stop.event)
    try:
        function = (
            prepared.function
            if prepared is not None
            else load_entrypoint(spec.entrypoint, spec.code_dir)
        )
    except EntrypointError as exc:
        traceback.print_exc()
        return Outcome.failed(str(exc))
    if stop.requested():
        return stop.outcome()
    try:
        spark = (
            start_session(spec)
            if session is None
            else adopt_session(session, spec, ship_code=prepared is None)
        )
    except SparkStartError as exc:
        traceback.print_exc()
        return Outcome.failed(str(exc))
    stop.install_signal_handlers()  # pyspark replaced SIGINT's handler with its own
    try:
        if stop.requested():  # it came while Spark started
            return stop.outcome()
        outcome = _run_in_session(
            spark,
            function,
            context,
            spec=spec,
            stop=stop,
            reporter=reporter,
            on_batch=_batch_hooks(history, fence),
        )
        _stop_queries(spark)
        reporter.finish(outcome)
        return outcome
    finally:
        stop_session(spark)


def spark_settings(spec: WorkerSpec) -> dict[str, str]:
    """Every setting of the worker's session: defaults, the conf's spark.* keys, the master;
    with an archive of requirements, its directory first on the executors' PYTHONPATH (a
    relative path: Python workers start in the executor's working directory, where Spark
    unpacks archives)."""
    settings = {
        **SPARK_DEFAULTS,
        "spark.app.name": f"stratus-{spec.pipeline}",
        **spark_conf(spec.conf),
        "spark.master": spec.spark_master,
    }
    return settings if spec.deps_archive is None else with_deps_first(settings)


def start_session(spec: WorkerSpec) -> SparkSession:
    """A session with ``spark_settings(spec)``; the package's modules reach the executors."""
    # Python workers of local executors inherit the JVM's environment, hence this path.
    paths = [str(spec.code_dir), *filter(None, [os.environ.get("PYTHONPATH")])]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    builder = SparkSession.builder
    for key, value in spark_settings(spec).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        raise SparkStartError(
            f"Spark did not start with master {spec.spark_master!r}: {type(exc).__name__}: "
            f"{exc}; check spark.master and the pipeline's spark.* conf"
        ) from exc
    if not spec.spark_master.startswith("local"):
        _ship_deps(spark, spec)
        _ship_code(spark, spec)
    return spark


def adopt_session(spark: SparkSession, spec: WorkerSpec, *, ship_code: bool = True) -> SparkSession:
    """A session started before ``spec`` was known made ``spec``'s: each ``spark.*`` key of
    the pipeline's conf that differs from the session's is set, which only runtime keys allow
    (the supervisor hands a warm worker only pipelines whose static keys match; a standby
    worker refuses a promotion whose static keys differ from those it started with), and,
    with ``ship_code`` (a warm worker's session), the package is shipped as a zip, since the
    JVM's Python workers started before the package was known. A standby worker's session,
    started for its pipeline, has the package already."""
    for key, value in spark_conf(spec.conf).items():
        if key == "spark.master" or spark.conf.get(key, None) == value:
            continue
        try:
            spark.conf.set(key, value)
        except Exception as exc:
            raise SparkStartError(
                f"the warm worker's session cannot take {key}={value!r}: "
                f"{type(exc).__name__}: {without_stack(str(exc))}; a static Spark conf key "
                "needs a cold start: set supervisor.worker.warm=false or report the key"
            ) from exc
    if ship_code:
        _ship_code(spark, spec)
    return spark


def stop_session(spark: SparkSession) -> None:
    """Stop the session and wait for pyspark's JVM to exit (kill it past JVM_EXIT_SECS)."""
    with contextlib.suppress(Exception):
        spark.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    process: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):
        gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    if process is None:
        return
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()  # the JVM exits at EOF on its stdin
    try:
        process.wait(timeout=JVM_EXIT_SECS)
    except subprocess.TimeoutExpired:
        log.warning("event=jvm_killed pid=%d after_secs=%g", process.pid, JVM_EXIT_SECS)
        process.kill()
        process.wait()


def _run_in_session(
    spark: SparkSession,
    function: Callable[..., Any],
    context: PipelineContext,
    *,
    spec: WorkerSpec,
    stop: StopRequest,
    reporter: HeartbeatReporter,
    on_batch: Callable[[QueryProgress], None],
) -> Outcome:
    tracker = QueryTracker(on_batch=on_batch, trigger_interval_secs=spec.trigger_interval_secs)
    spark.streams.addListener(tracker_listener(tracker))
    reporter.report_queries(tracker.snapshot)
    stop.on_request(lambda: _interrupt(spark))
    spark_context = spark.sparkContext
    reporter.running(app_id=spark_context.applicationId, spark_ui=spark_context.uiWebUrl)
    log.info("event=function_called entrypoint=%s", spec.entrypoint)
    outcome = _call(function, spark, context, str(spec.entrypoint), stop)
    return outcome or _watch_queries(spark, tracker, stop)


def _batch_hooks(
    history: WorkerTrail | None, fence: OwnerFence | None
) -> Callable[[QueryProgress], None]:
    """What a committed micro-batch triggers: its history line, then the owners' check."""

    def committed(progress: QueryProgress) -> None:
        if history is not None:
            history.batch_committed(progress)
        if fence is not None:
            fence.batch_committed(progress)

    return committed


def _call(
    function: Callable[..., Any],
    spark: SparkSession,
    context: PipelineContext,
    entrypoint: str,
    stop: StopRequest,
) -> Outcome | None:
    """Call the function; an outcome if the run ends with it, None if queries may go on."""
    try:
        function(spark, context)
    except (Exception, KeyboardInterrupt) as exc:
        if stop.requested():  # the stop interrupted it: stopped queries and cancelled jobs raise
            return stop.outcome()
        traceback.print_exc()
        message = without_stack(str(exc))
        return Outcome.failed(f"entrypoint {entrypoint!r} raised {type(exc).__name__}: {message}")
    except SystemExit as exc:
        if exc.code not in (0, None):
            return Outcome.failed(f"entrypoint {entrypoint!r} called sys.exit({exc.code!r})")
    return stop.outcome() if stop.requested() else None


def _watch_queries(spark: SparkSession, tracker: QueryTracker, stop: StopRequest) -> Outcome:
    """Wait while queries are active: until a stop, a query's failure, or none is left."""
    known: dict[str, StreamingQuery] = {}
    while True:
        active = {str(query.id): query for query in spark.streams.active}
        known.update(active)
        failure = tracker.failure() or _failure_of_ended(known, active)
        if failure:
            return Outcome.failed(failure)
        if not active:  # ended by themselves, or by a stop under way
            return stop.outcome() if stop.requested() else Outcome.finished()
        if stop.wait(QUERY_POLL_SECS):
            return stop.outcome()


def _failure_of_ended(
    known: dict[str, StreamingQuery], active: dict[str, StreamingQuery]
) -> str | None:
    """The error of a query that ended with one; asked of the query itself, since the
    listener may not have heard of its end yet."""
    for query_id, query in known.items():
        if query_id in active:
            continue
        error = query.exception()
        if error is not None:
            label = f"{query.name!r} ({query_id})" if query.name else query_id
            return f"streaming query {label} failed: {without_stack(str(error))}"
    return None


def _interrupt(spark: SparkSession) -> None:
    """On a stop request (a thread of StopRequest): stop queries, cancel running jobs."""
    _stop_queries(spark)
    with contextlib.suppress(Exception):
        spark.sparkContext.cancelAllJobs()


def _stop_queries(spark: SparkSession) -> None:
    try:
        queries = spark.streams.active
    except Exception:
        return  # the session is gone, and its queries with it
    for query in queries:
        try:
            if query.isActive:  # another thread may have stopped it since
                query.stop()
                log.info("event=query_stopped name=%s id=%s", query.name, query.id)
        except Exception as exc:
            log.warning("event=query_stop_failed name=%s id=%s error=%r", query.name, query.id, exc)


def _ship_deps(spark: SparkSession, spec: WorkerSpec) -> None:
    """Executors unpack the archive of the pipeline's requirements (its supervisor built it
    once per environment) into ``DEPS_DIR``, before any task of the pipeline runs. Added at
    run time, so the operator's ``spark.archives`` (spark-defaults.conf) stay as they are."""
    if spec.deps_archive is not None:
        spark.sparkContext.addArchive(f"{spec.deps_archive}#{DEPS_DIR}")


def _ship_code(spark: SparkSession, spec: WorkerSpec) -> None:
    """Executors on other machines import the package's modules from a zip of it."""
    archive = shutil.make_archive(str(spec.work_dir / CODE_ARCHIVE), "zip", spec.code_dir)
    spark.sparkContext.addPyFile(archive)
