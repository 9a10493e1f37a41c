"""The ``orders`` materialized view: 1000 generated orders of 7 customers."""

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

ORDERS = 1000
CUSTOMERS = 7


@dp.materialized_view
def orders() -> DataFrame:
    spark = SparkSession.active()
    return spark.range(ORDERS).select(
        sf.col("id").alias("order_id"),
        (sf.col("id") % CUSTOMERS).alias("customer"),
        ((sf.col("id") * 37) % 1000 / 10).alias("amount"),
    )
