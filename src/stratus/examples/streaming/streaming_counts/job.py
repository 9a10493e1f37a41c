"""Counts events by key in 10-second event-time windows, exactly once into parquet.

Input: JSON-lines files in the directory ``spark.stratus.example.input``, one event a line,
``{"id": 7, "key": "beta", "ts": "2024-01-01T00:00:07+00:00"}``. Output: parquet rows
``(window, key, count)`` in ``spark.stratus.example.output``, appended once the watermark
(latest event time minus 10 s) has passed a window's end. The query's checkpoint is
``context.checkpoint("window-counts")``: a restarted or moved worker resumes from it, and
the file sink's commit log makes every window appear exactly once in the output.

The function starts the query and returns; the worker keeps it running until it is stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

if TYPE_CHECKING:  # the worker's context; a pipeline needs no stratus to run
    from stratus.worker.pipeline_context import PipelineContext

INPUT_KEY = "spark.stratus.example.input"
OUTPUT_KEY = "spark.stratus.example.output"
WINDOW = "10 seconds"
WATERMARK_DELAY = "10 seconds"
DEFAULT_TRIGGER_SECS = 2.0
SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("key", StringType()),
        StructField("ts", TimestampType()),
    ]
)


def run(spark: SparkSession, context: PipelineContext) -> None:
    source, sink = required(context, INPUT_KEY), required(context, OUTPUT_KEY)
    events = spark.readStream.schema(SCHEMA).json(source)
    counts = (
        events.withWatermark("ts", WATERMARK_DELAY).groupBy(sf.window("ts", WINDOW), "key").count()
    )
    interval = context.trigger_interval_secs or DEFAULT_TRIGGER_SECS
    (
        counts.writeStream.format("parquet")
        .outputMode("append")
        .option("checkpointLocation", context.checkpoint("window-counts"))
        .queryName("window_counts")
        .trigger(processingTime=f"{interval} seconds")
        .start(sink)
    )


def required(context: PipelineContext, key: str) -> str:
    """The conf value ``key``, or an error that says how to set it."""
    value = context.conf.get(key)
    if not value:
        raise ValueError(f"set {key} in the pipeline's conf (stratus.yaml or --conf)")
    return str(value)
