"""Drain a queue with Spark executors as workers: a burst keyqueue Worker in every task.
Runs as it is: `python examples/spark/drain_with_workers.py`, with KEYQUEUE_URL naming
the Redis server."""

import os

from pyspark.sql import SparkSession

from keyqueue import Message, Queue
from keyqueue.spark import run_workers

URL = os.environ.get("KEYQUEUE_URL", "redis://localhost:6379/0")

spark = SparkSession.builder.getOrCreate()


def handle(message: Message) -> None:
    """handler(message), as for `keyqueue worker`. Defined in the script, it travels to the
    executors with the job; one from your own package must be installed there, or shipped
    with spark.sparkContext.addPyFile."""
    order = message.json()
    if order["items"] < 1:
        raise ValueError("an order without items")  # retried after a backoff, or dead-lettered


print(run_workers(spark, Queue("orders", url=URL), handle, num_workers=2,  # tasks at once
                  concurrency=4))                                       # handler threads per task
