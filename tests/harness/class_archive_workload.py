"""What the test run's class archive is made from (``class_archive.py`` runs this file): a
driver that loads the classes the tests' pipelines use, a batch query and a stateful
streaming query from JSON files to parquet, then prints its JVM's pid (``PID_LINE``) and stops.

    python -m tests.harness.class_archive_workload WORK_DIR     # from the repository's root
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 pyspark's own convention

from tests.harness.class_archive import PID_LINE


def run(work: Path) -> int:
    """Run the workload in ``work``; the driver JVM's pid."""
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("stratus-tests-class-archive")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]
    events = work / "in"
    events.mkdir()
    for part in range(2):
        lines = (
            json.dumps({"key": f"k{n % 3}", "ts": f"2026-01-01T00:00:{n:02d}"}) for n in range(30)
        )
        (events / f"{part}.json").write_text("\n".join(lines) + "\n")
    spark.range(100).groupBy((F.col("id") % 3).alias("key")).count().write.parquet(
        str(work / "batch")
    )
    spark.read.parquet(str(work / "batch")).collect()
    counts = (
        spark.readStream.schema("key string, ts timestamp")
        .json(str(events))
        .withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "10 seconds"), "key")
        .count()
    )
    query = (
        counts.writeStream.outputMode("append")
        .format("parquet")
        .option("path", str(work / "stream"))
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    return pid


if __name__ == "__main__":
    print(f"{PID_LINE}{run(Path(sys.argv[1]))}", flush=True)
