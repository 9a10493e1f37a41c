"""Totals generated orders by customer and writes them as parquet, replacing the last run's.

``spark.stratus.example.orders`` orders (default 10000) are generated: order ``i`` belongs to
customer ``i % 7`` and is worth ``(i * 37) % 1000 / 10``. The totals, one row per customer
``(customer, orders, amount)``, go to ``spark.stratus.example.output``. The function
returns when they are written; with no streaming query left, the pipeline is FINISHED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

if TYPE_CHECKING:  # the worker's context; a pipeline needs no stratus to run
    from stratus.worker.pipeline_context import PipelineContext

ORDERS_KEY = "spark.stratus.example.orders"
OUTPUT_KEY = "spark.stratus.example.output"
DEFAULT_ORDERS = 10_000
CUSTOMERS = 7


def run(spark: SparkSession, context: PipelineContext) -> None:
    output = context.conf.get(OUTPUT_KEY)
    if not output:
        raise ValueError(f"set {OUTPUT_KEY} in the pipeline's conf (stratus.yaml or --conf)")
    orders = int(context.conf.get(ORDERS_KEY, DEFAULT_ORDERS))
    generated = spark.range(orders).select(
        (sf.col("id") % CUSTOMERS).alias("customer"),
        ((sf.col("id") * 37) % 1000 / 10).alias("amount"),
    )
    if context.should_stop():  # a long job checks between its steps; this one is short
        return
    totals = generated.groupBy("customer").agg(
        sf.count("*").alias("orders"), sf.round(sf.sum("amount"), 2).alias("amount")
    )
    totals.coalesce(1).write.mode("overwrite").parquet(str(output))
