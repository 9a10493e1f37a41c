"""A session's warm-up: one small stateful streaming query, run before any pipeline's.

A warm worker (``stratus.worker.warm``) and a standby worker (``stratus.worker.standby``)
start their SparkSession before their pipeline runs in it; each then runs ``warm_up``, so
that the JVM has loaded and compiled Spark's streaming, state store, shuffle and parquet code
by the time the pipeline's first batch needs it::

    spark = start_session(spec)
    warm_up(spark)      # in the working directory: a scratch directory, removed after
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from pyspark.sql import SparkSession, functions

log = logging.getLogger(__name__)

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def warm_up(spark: SparkSession) -> None:
    """Run one small stateful streaming query to its end (a windowed count with a watermark,
    from JSON files into parquet, ``availableNow``) in a scratch directory of the working
    directory. The session's own ``spark.sql.shuffle.partitions`` (a pipeline's, for a
    standby worker) is back in place afterwards. A failure costs only the warm-up: it is
    logged, and the caller goes on all the same."""
    with tempfile.TemporaryDirectory(prefix="warm-up-", dir=os.getcwd()) as scratch:
        source = Path(scratch, "in")
        source.mkdir()
        (source / "rows.json").write_text(
            '{"id": 1, "time": "2020-01-01T00:00:00"}\n{"id": 2, "time": "2020-01-01T00:00:07"}\n'
        )
        own_partitions = spark.conf.get(SHUFFLE_PARTITIONS, None)
        try:
            spark.conf.set(SHUFFLE_PARTITIONS, "2")
            rows = spark.readStream.schema("id LONG, time TIMESTAMP").json(str(source))
            counts = (
                rows.withWatermark("time", "1 second")
                .groupBy(functions.window("time", "5 seconds"))
                .count()
            )
            query = (
                counts.writeStream.format("parquet")
                .outputMode("append")
                .option("checkpointLocation", str(Path(scratch, "checkpoint")))
                .trigger(availableNow=True)
                .start(str(Path(scratch, "out")))
            )
            query.awaitTermination()
        except Exception as exc:
            log.warning("event=warm_up_failed error=%r", exc)
        finally:
            if own_partitions is None:
                spark.conf.unset(SHUFFLE_PARTITIONS)
            else:
                spark.conf.set(SHUFFLE_PARTITIONS, own_partitions)
