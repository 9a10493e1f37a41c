"""A session's warm-up: one small stateful streaming query, run before any pipeline's.

A warm worker (``stratus.worker.warm``) and a standby worker (``stratus.worker.standby``)
start their SparkSession before their pipeline runs in it; each then warms it up, so that
the JVM has loaded Spark's streaming, state store, shuffle and parquet code, and compiled
its hot methods, by the time the pipeline's first batch needs it::

    spark = start_session(spec)
    warm_up(spark)                          # one micro-batch: the classes loaded
    warming = WarmUp.begin(spark, batches=40)  # the first now, the others in a thread
    ...                                     # READY meanwhile
    warming.stop(wait=False)                # promoted: the pipeline's turn

One batch loads the classes; the JIT compiles a method only once it has run many times, and
until then the pipeline's first batches run it interpreted and pay for its compiles. More
batches move those compiles before the promotion: a promoted standby worker's first batch
took about two thirds as long after 40 as after one (docs/benchmarks.md). Past the first,
they run in the background, so that a standby worker is READY as early as with one; once
they are done, the query stops, its files go, and a full collection gives back the heap
they grew.

The query runs in a session of its own (``SparkSession.newSession``: the same JVM, its own
SQL conf and query listeners), in a scratch directory of the working directory, removed once
it has stopped (a process killed before leaves it behind: a few kilobytes). A failure
costs only the warm-up: it is logged, and the caller goes on.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from datetime import datetime, timedelta
from pathlib import Path

from pyspark.sql import SparkSession, functions
from pyspark.sql.streaming.query import StreamingQuery

from stratus.files import write_atomically

log = logging.getLogger(__name__)

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
EPOCH = datetime(2020, 1, 1)
EVENT_STEP_SECS = 7  # event time gained per batch: windows close, and rows reach the sink
STOP_WAIT_SECS = 15.0  # a stopped query's processAllAvailable returns within 10 s (Spark's wait)


class WarmUp:
    """A warm-up under way: ``begin`` it; ``stop`` it early (a promotion) or let it end.

    ``batches_done`` counts the micro-batches run so far; ``finished`` is set once the warm-up
    is over: all its batches run (its query then stopped, its scratch directory removed and
    the heap collected, on its own), stopped early, or failed."""

    def __init__(
        self, spark: SparkSession, query: StreamingQuery | None, scratch: Path, batches: int
    ) -> None:
        self._spark = spark
        self._query = query
        self._scratch = scratch
        self._batches = batches
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._batches_over = threading.Event()  # no batch runs or will run
        self.batches_done = 0
        self.finished = threading.Event()

    @classmethod
    def begin(cls, spark: SparkSession, *, batches: int = 1) -> WarmUp:
        """Start the warm-up query and run its first micro-batch; the others (up to
        ``batches`` in all) run on a daemon thread after the return."""
        scratch = Path(tempfile.mkdtemp(prefix="warm-up-", dir=os.getcwd()))
        warming = cls(spark, _start_query(spark, scratch), scratch, max(batches, 1))
        if warming._query is None or not warming._run_batches(1):
            warming._batches_over.set()
            warming.finished.set()  # failed: ``stop`` removes the scratch directory
        elif warming._batches == 1:
            warming._run_the_rest()  # nothing left to run: ends it here
        else:
            threading.Thread(target=warming._run_the_rest, name="warm-up", daemon=True).start()
        return warming

    def stop(self, *, wait: bool = True) -> None:
        """End the warm-up: no batch after the one running, its query stopped and its scratch
        directory removed; with ``wait`` False on a daemon thread, so that the caller (a
        promotion) goes on at once. Idempotent."""
        with self._lock:
            if self._stopping.is_set():
                return
            self._stopping.set()
        if wait:
            self._end()
        else:
            threading.Thread(target=self._end, name="warm-up-stop", daemon=True).start()

    def _run_the_rest(self) -> None:
        done = self._run_batches(self._batches) and not self._stopping.is_set()
        self._batches_over.set()
        if done:
            self.stop()  # on this thread: the query and its files are of no more use
            if self._batches > 1:
                _collect_garbage(self._spark)
            log.info("event=warm_up_done batches=%d", self.batches_done)
        self.finished.set()

    def _run_batches(self, upto: int) -> bool:
        """Run batches until ``upto`` are done or a stop; False if one failed (logged)."""
        assert self._query is not None
        try:
            while self.batches_done < upto and not self._stopping.is_set():
                _write_batch(self._scratch / "in", self.batches_done)
                self._query.processAllAvailable()  # returns early once the query is stopped
                self.batches_done += 1
        except Exception as exc:
            if not self._stopping.is_set():
                log.warning("event=warm_up_failed batches=%d error=%r", self.batches_done, exc)
            return False
        return True

    def _end(self) -> None:
        try:
            if self._query is not None:
                self._query.stop()
        except Exception as exc:
            log.warning("event=warm_up_stop_failed error=%r", exc)
        finally:
            self._batches_over.wait(timeout=STOP_WAIT_SECS)  # its last batch has returned
            shutil.rmtree(self._scratch, ignore_errors=True)
        if self.batches_done < self._batches:
            log.info("event=warm_up_stopped batches=%d", self.batches_done)


def warm_up(spark: SparkSession, *, batches: int = 1) -> None:
    """Warm ``spark`` up with ``batches`` micro-batches, all of them before the return."""
    warming = WarmUp.begin(spark, batches=batches)
    warming.finished.wait()
    warming.stop()


def _collect_garbage(spark: SparkSession) -> None:
    """A full collection in the session's JVM: the heap its warm-up batches grew (about 250
    MiB after 40) is given back to the machine, which a standby worker holds for hours."""
    jvm = spark.sparkContext._jvm  # py4j's view of the driver's JVM: no public equivalent
    try:
        if jvm is not None:
            jvm.System.gc()
    except Exception as exc:
        log.warning("event=warm_up_collect_failed error=%r", exc)


def _start_query(spark: SparkSession, scratch: Path) -> StreamingQuery | None:
    """The warm-up's query (a windowed count with a watermark, from JSON files into parquet)
    in a session of its own; None if it could not start (logged)."""
    try:
        session = spark.newSession()
        session.conf.set(SHUFFLE_PARTITIONS, "2")
        source = scratch / "in"
        source.mkdir()
        rows = session.readStream.schema("id LONG, time TIMESTAMP").json(str(source))
        counts = (
            rows.withWatermark("time", "1 second")
            .groupBy(functions.window("time", "5 seconds"))
            .count()
        )
        return (
            counts.writeStream.format("parquet")
            .outputMode("append")
            .option("checkpointLocation", str(scratch / "checkpoint"))
            .start(str(scratch / "out"))
        )
    except Exception as exc:
        log.warning("event=warm_up_failed batches=0 error=%r", exc)
        return None


def _write_batch(source: Path, number: int) -> None:
    """Batch ``number``'s input file, whole at once (its temporary name is a dot file, which
    the file source skips)."""
    start = EPOCH + timedelta(seconds=number * EVENT_STEP_SECS)
    lines = (
        json.dumps(
            {"id": number * 2 + offset, "time": (start + timedelta(seconds=offset)).isoformat()}
        )
        for offset in (0, 1)
    )
    write_atomically(source / f"{number}.json", ("\n".join(lines) + "\n").encode())
