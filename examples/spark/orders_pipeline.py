"""keyqueue in a Spark pipeline: enqueue a DataFrame, consume the queue as a stream, analyse
its dead letters. Runs as it is: `python examples/spark/orders_pipeline.py`, with
KEYQUEUE_URL naming the Redis server and LAKE the folder for the stream's output."""

import os

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from keyqueue.spark import register

URL = os.environ.get("KEYQUEUE_URL", "redis://localhost:6379/0")
LAKE = os.path.abspath(os.environ.get("LAKE", "lake"))

spark = SparkSession.builder.getOrCreate()
register(spark)  # the format "keyqueue"; a local session's Python workers run this Python

# 1. Batch enqueue: one message per row. Body column "value" (binary or string; option
#    bodyColumn names another), optional "delay" (seconds) and "dedupKey" columns.
orders = spark.range(1, 1001).select(F.col("id").alias("order_id"), (F.col("id") % 5 + 1).alias("items"))
(orders.select(F.to_json(F.struct("*")).alias("value"), F.col("order_id").cast("string").alias("dedupKey"))
       .write.format("keyqueue").option("url", URL).option("queue", "orders")
       .mode("append").save())

# 2. Consume the queue as a stream into a sink, at-least-once.
stream = (spark.readStream.format("keyqueue").option("url", URL).option("queue", "orders")
          .option("maxRowsPerTrigger", 50_000).load())        # id, body, receives, enqueued_at
(stream.select("id", F.col("body").cast("string").alias("json"))
       .writeStream.format("parquet").option("path", f"{LAKE}/processed/")
       .option("checkpointLocation", f"{LAKE}/checkpoints/orders/")
       .trigger(availableNow=True)                             # or processingTime="10 seconds"
       .start().awaitTermination())
print("processed:", spark.read.parquet(f"{LAKE}/processed/").count())

# 3. Analyse dead letters (a snapshot: nothing is claimed or changed).
dead = (spark.read.format("keyqueue").option("url", URL).option("queue", "orders")
        .option("source", "dead").load())     # id, body, receives, enqueued_at, deadline, last_error
dead.groupBy("last_error").agg(F.count("*").alias("n"), F.max("receives")).show(truncate=False)
