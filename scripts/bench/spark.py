"""Spark throughput: the "keyqueue" sink beside bare foreachPartition RPUSH writers, and the
streaming read with acknowledgement, in one run on a local[2] session and a private redis-server.

Each writer's figure is the best of interleaved rounds (``--rounds``, default 2: noise hits
them alike). ``--quick`` writes and reads a few thousand rows: Spark's own start-up (a JVM,
its Python workers) is most of its time.

    .venv/bin/python scripts/bench/spark.py [--quick] [--rows 1000000] [--rounds 2] [--stream-rows 200000]
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any, Callable, Iterable

import redis
from harness import Options, flushed_rate, interleaved, markdown_table, throwaway_redis, timed

from keyqueue import Queue


def session() -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from keyqueue.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def bare_writer(url: str, values_per_rpush: int) -> Callable[[Iterable[Any]], None]:
    """What a team writes by hand: RPUSH the rows to a list, pipelined 1,000 rows per round trip."""

    def write(rows: Iterable[Any]) -> None:
        client = redis.Redis.from_url(url)
        pipe = client.pipeline(transaction=False)
        chunk: list[str] = []
        for row in rows:
            chunk.append(row.value)
            if len(chunk) == values_per_rpush:
                pipe.rpush("bare", *chunk)
                chunk = []
            if len(pipe) * values_per_rpush >= 1000:
                pipe.execute()
        if chunk:
            pipe.rpush("bare", *chunk)
        pipe.execute()
        client.close()

    return write


def main(argv: list[str] | None = None) -> int:
    ap = Options(__doc__, rounds=2, min_rounds=1, json=False)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--stream-rows", type=int, default=200_000)
    args = ap.parse(argv)
    if args.quick:
        args.rows, args.stream_rows = 2_000, 1_000
    spark = session()
    with throwaway_redis() as (server, r):
        url = server.url
        df = spark.range(0, args.rows, numPartitions=2).selectExpr("cast(id as string) as value").cache()
        df.count()
        writers: dict[str, Callable[[], None]] = {
            "bare foreachPartition, one pipelined RPUSH per row": lambda: df.foreachPartition(bare_writer(url, 1)),
            "bare foreachPartition, 1,000 values per RPUSH": lambda: df.foreachPartition(bare_writer(url, 1000)),
            'df.write.format("keyqueue") (real enqueues)': lambda: (
                df.write.format("keyqueue").option("url", url).option("queue", "sink").mode("append").save()
            ),
        }
        runs = interleaved(
            {name: (lambda w=write: flushed_rate(r, lambda: w, args.rows)) for name, write in writers.items()},
            args.rounds,
        )
        best = {name: max(rates) for name, rates in runs.items()}
        base = best["bare foreachPartition, one pipelined RPUSH per row"]
        print(f"write {args.rows:,} small rows, 2 partitions, best of {args.rounds}:\n")
        print(
            "\n".join(
                markdown_table(
                    ["writer", "rows/s", "vs one pipelined RPUSH per row"],
                    "lrr",
                    ([name, f"{rate:,.0f}", f"{rate / base:.2f}x"] for name, rate in best.items()),
                )
            )
        )

        r.flushall()
        q = Queue("stream", client=r, visibility_timeout=300)
        for i in range(0, args.stream_rows, 10_000):
            q.enqueue_many([b"x" * 16] * min(10_000, args.stream_rows - i))
        with tempfile.TemporaryDirectory() as ck:
            stream = (
                spark.readStream.format("keyqueue")
                .option("url", url)
                .option("queue", "stream")
                .option("maxRowsPerTrigger", 50_000)
                .load()
            )
            query = stream.writeStream.format("noop").option("checkpointLocation", ck).trigger(availableNow=True)
            took = timed(lambda: query.start().awaitTermination())
        left = q.stats()
        assert left.waiting == left.processing == 0, left
        print(
            f"\nstream read with ack: {args.stream_rows:,} messages in {took:.1f} s = "
            f"{args.stream_rows / took:,.0f} rows/s (maxRowsPerTrigger 50,000, AvailableNow, "
            f"noop sink; every message claimed, read and acknowledged)"
        )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
