"""keyqueue.spark in a real local[2] SparkSession against the test session's redis-server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from keyqueue import Queue
from keyqueue.core.shards import shard_for
from keyqueue.server import RedisServer

from ..support.helpers import ROOT, wait_until

#: One JVM at a time: every Spark test on one xdist worker (with --dist loadgroup).
pytestmark = [pytest.mark.timeout(300), pytest.mark.spark]

EXAMPLES = ROOT / "examples" / "spark"


def fmt(reader: Any, url: str, queue: str, **options: Any) -> Any:
    reader = reader.format("keyqueue").option("url", url).option("queue", queue)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader


def drain(q: Queue) -> list[bytes]:
    out = []
    while msgs := q.claim_many(100):
        out += [m.body for m in msgs]
        q.ack_many(msgs)
    return out


def test_import_keyqueue_never_imports_pyspark() -> None:
    code = "import sys, keyqueue, keyqueue.cli; assert 'pyspark' not in sys.modules and 'pyarrow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_batch_write_with_delay_and_dedup_keys_is_exactly_once(
    spark: Any, redis_server: RedisServer, r: redis.Redis
) -> None:
    rows = [(f"body-{i}", 600.0 if i % 10 == 0 else 0.0, f"key-{i}") for i in range(1000)]
    df = spark.createDataFrame(rows, "value string, delay double, dedupKey string").repartition(2)
    for _ in range(2):  # a retried job writes everything again: the dedup keys absorb it
        fmt(df.write, redis_server.url, "w").mode("append").save()
    q = Queue("w", client=r)
    s = q.stats()
    assert (s.waiting, s.delayed) == (900, 100)
    assert sorted(drain(q)) == sorted(f"body-{i}".encode() for i in range(1000) if i % 10)


def test_binary_bodies_from_a_named_column(spark: Any, redis_server: RedisServer, r: redis.Redis) -> None:
    payloads = [bytes([i % 256, 0, 255]) * (i % 7 + 1) for i in range(300)]
    df = spark.createDataFrame([(p, i) for i, p in enumerate(payloads)], "payload binary, n int")
    fmt(df.write, redis_server.url, "bin", bodyColumn="payload").mode("append").save()
    assert sorted(drain(Queue("bin", client=r))) == sorted(payloads)
    with pytest.raises(Exception, match="no body column 'value'"):
        fmt(df.write, redis_server.url, "bin").mode("append").save()
    assert Queue("bin", client=r).stats().waiting == 0


def test_null_bodies_are_refused_before_their_partition_writes_anything(
    spark: Any, redis_server: RedisServer, r: redis.Redis
) -> None:
    rows = [(f"b{i}", i) for i in range(999)] + [(None, 999)]
    df = spark.createDataFrame(rows, "payload string, n int").coalesce(1)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")  # the null in the 10th batch
    try:
        with pytest.raises(Exception, match="the body column 'payload' holds nulls"):
            fmt(df.write, redis_server.url, "nulls", bodyColumn="payload").mode("append").save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert Queue("nulls", client=r).stats().waiting == 0


def test_null_bodies_skipped_when_asked_and_counted(
    spark: Any, redis_server: RedisServer, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """With option("nullBodies", "skip") the other rows are written; each task counts what
    it left out and the commit on the driver logs the sum (called here in-process: Spark
    runs it in a Python process of its own)."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from keyqueue.spark.options import Options
    from keyqueue.spark.sink import QueueWriter

    rows = [(None if i % 10 == 0 else f"b{i}", i) for i in range(200)]
    df = spark.createDataFrame(rows, "payload string, n int").repartition(3)
    fmt(df.write, redis_server.url, "skipnulls", bodyColumn="payload", nullBodies="skip").mode("append").save()
    assert sorted(drain(Queue("skipnulls", client=r))) == sorted(f"b{i}".encode() for i in range(200) if i % 10)

    opts = Options.parse({"url": redis_server.url, "queue": "skipnulls", "nullBodies": "skip"})
    writer = QueueWriter(opts, StructType([StructField("value", StringType())]))
    batch = pa.RecordBatch.from_pydict({"value": ["a", None, "b", None, None]})
    written = [writer.write(iter([batch])), writer.write(iter([batch]))]
    assert [(w.rows, w.skipped) for w in written] == [(2, 3), (2, 3)]
    with caplog.at_level("WARNING", logger="keyqueue.spark"):
        writer.commit(written)
    assert "skipped 6 rows whose body column was null" in caplog.text
    assert sorted(drain(Queue("skipnulls", client=r))) == [b"a", b"a", b"b", b"b"]
    with pytest.raises(Exception, match="option nullBodies must be refuse or skip, not 'drop'"):
        fmt(df.write, redis_server.url, "skipnulls", nullBodies="drop").mode("append").save()


def test_streaming_write(spark: Any, redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> None:
    src = tmp_path / "in"
    spark.createDataFrame([(f"s{i}",) for i in range(400)], "value string").write.parquet(str(src))
    stream = spark.readStream.schema("value string").parquet(str(src))
    query = (
        fmt(stream.writeStream, redis_server.url, "sw")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert sorted(drain(Queue("sw", client=r))) == sorted(f"s{i}".encode() for i in range(400))


def test_overwrite_is_refused_and_writes_nothing(
    spark: Any, redis_server: RedisServer, r: redis.Redis, tmp_path: Path
) -> None:
    q = Queue("ow", client=r)
    q.enqueue_many(["a", "b", "c"])
    df = spark.createDataFrame([("x",), ("y",)], "value string")
    with pytest.raises(Exception, match="a queue can only be appended to"):
        fmt(df.write, redis_server.url, "ow").mode("overwrite").save()
    # Spark itself refuses the default mode (errorifexists) and "ignore" for this source
    # (its message suggests Append or Overwrite): no mode but append may write.
    for mode in ("errorifexists", "error", "ignore", None):
        writer = fmt(df.write, redis_server.url, "ow")
        with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE|a queue can only be appended to"):
            (writer if mode is None else writer.mode(mode)).save()
    df.write.parquet(str(tmp_path / "in"))
    counts = spark.readStream.schema("value string").parquet(str(tmp_path / "in")).groupBy("value").count()
    query = (
        fmt(counts.selectExpr("value").writeStream, redis_server.url, "ow")
        .outputMode("complete")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match="a queue can only be appended to"):
        query.awaitTermination(120)
    assert sorted(drain(q)) == [b"a", b"b", b"c"]


def _consume(
    spark: Any,
    url: str,
    queue: str,
    checkpoint: Path,
    seen: list[list[str]],
    fail_at: int | None = None,
    **options: Any,
) -> Any:
    """An AvailableNow query that records each micro-batch's ids (in ``seen``); batch
    ``fail_at`` records half of its rows, then raises (the query dies mid-batch)."""

    def each(df: Any, batch_id: int) -> None:
        ids = [row.id for row in df.collect()]
        if batch_id == fail_at:
            seen.append(ids[: len(ids) // 2])
            raise RuntimeError("the sink failed halfway through the batch")
        seen.append(ids)

    stream = fmt(spark.readStream, url, queue, **options).load()
    return (
        stream.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_streaming_read_honours_the_row_limit_and_acks_after_commit(
    spark: Any, redis_server: RedisServer, r: redis.Redis, tmp_path: Path
) -> None:
    q = Queue("sr", client=r)
    ids = q.enqueue_many([f"m{i}" for i in range(550)])
    seen: list[list[str]] = []
    _consume(spark, redis_server.url, "sr", tmp_path / "ck", seen, maxRowsPerTrigger=100).awaitTermination(120)
    assert [len(b) for b in seen] == [100, 100, 100, 100, 100, 50]
    assert sorted(i for b in seen for i in b) == sorted(ids)
    s = q.stats()
    assert (s.waiting, s.processing, s.delayed) == (0, 0, 0)  # every batch acknowledged
    assert not r.keys("kq:{sr}:stream:*")  # and its manifest entries dropped


def test_streaming_rows_carry_the_message(
    spark: Any, redis_server: RedisServer, r: redis.Redis, tmp_path: Path
) -> None:
    q = Queue("rows", client=r)
    q.enqueue(b"\x00\xffbin")
    first = q.claim()
    assert first is not None and first.release()  # a second delivery: receives becomes 2
    out = tmp_path / "out"
    stream = fmt(spark.readStream, redis_server.url, "rows").load()
    assert stream.columns == ["id", "body", "receives", "enqueued_at"]
    (
        stream.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
        .awaitTermination(120)
    )
    (row,) = spark.read.parquet(str(out)).collect()
    assert (row.id, bytes(row.body), row.receives) == ("1", b"\x00\xffbin", 2)
    assert abs(row.enqueued_at.timestamp() - time.time()) < 120


def test_a_sharded_queue_is_written_and_streamed_once_each_over_its_shards(
    spark: Any, redis_server: RedisServer, r: redis.Redis, tmp_path: Path
) -> None:
    q = Queue("spread", client=r, shards=4)
    # half keyed, half round robin (about 50 a shard, whichever task writes them)
    rows = [(f"m{i}", f"key-{i % 8}" if i % 2 else None) for i in range(400)]
    df = spark.createDataFrame(rows, "value string, shardKey string").repartition(2)
    fmt(df.write, redis_server.url, "spread").mode("append").save()
    each = q.shard_stats()
    assert sum(s.waiting for s in each) == len(q) == 400 and all(s.waiting >= 45 for s in each), each
    where = {m.text: int(m.id.split("#")[0]) for m in q.peek(400)}
    for i in range(1, 400, 2):  # a keyed row is on its key's shard
        assert where[f"m{i}"] == shard_for(f"key-{i % 8}", 4)
    seen: list[list[str]] = []
    _consume(spark, redis_server.url, "spread", tmp_path / "ck", seen, maxRowsPerTrigger=150).awaitTermination(120)
    got = [i for b in seen for i in b]
    assert len(got) == len(set(got)) == 400  # each once
    assert {int(i.split("#")[0]) for i in got} == {0, 1, 2, 3}
    assert all((s.waiting, s.processing, s.delayed) == (0, 0, 0) for s in q.shard_stats())  # every one acknowledged
    assert q.counters()["acked"] == 400 and not r.keys("kq:{spread*}:stream:*")


def test_a_query_that_dies_mid_batch_restarts_from_its_checkpoint_and_loses_nothing(
    spark: Any, redis_server: RedisServer, r: redis.Redis, tmp_path: Path
) -> None:
    q = Queue("crash", client=r)
    ids = q.enqueue_many([f"c{i}" for i in range(500)])
    seen: list[list[str]] = []
    first = _consume(spark, redis_server.url, "crash", tmp_path / "ck", seen, fail_at=2, maxRowsPerTrigger=100)
    with pytest.raises(Exception, match="failed halfway"):
        first.awaitTermination(120)
    assert q.stats().processing == 100  # batch 2: claimed, half written, not acknowledged
    again = _consume(spark, redis_server.url, "crash", tmp_path / "ck", seen, maxRowsPerTrigger=100)
    again.awaitTermination(120)
    got = [i for b in seen for i in b]
    assert set(got) == set(ids)  # nothing lost
    assert len(got) - len(set(got)) == 50  # the replayed half of batch 2: at-least-once
    s = q.stats()
    assert (s.waiting, s.processing) == (0, 0)


def test_a_dead_querys_messages_come_back_by_their_visibility_timeout(
    spark: Any, redis_server: RedisServer, r: redis.Redis, tmp_path: Path
) -> None:
    q = Queue("gone", client=r, visibility_timeout=2, bucket_seconds=1)
    q.enqueue_many([f"g{i}" for i in range(30)])
    seen: list[list[str]] = []
    query = _consume(spark, redis_server.url, "gone", tmp_path / "ck", seen, fail_at=0)
    with pytest.raises(Exception, match="failed halfway"):
        query.awaitTermination(120)
    assert q.stats().processing == 30
    # The source stops extending once Spark stops calling it; then the deadline passes.
    wait_until(lambda: q.reap() and False or q.stats().waiting == 30, timeout=20, interval=0.2)


def test_snapshot_reads_dead_letters_without_changing_anything(
    spark: Any, redis_server: RedisServer, r: redis.Redis
) -> None:
    from ..support.helpers import snapshot

    q = Queue("snap", client=r)
    q.enqueue_many(["a", "b", "c", "d", "e"])
    a, b, c = q.claim_many(3)
    q.dead_letter(a, "bad input")
    q.dead_letter(b, "timeout upstream")
    before = snapshot(r)
    dead = fmt(spark.read, redis_server.url, "snap", source="dead").load()
    rows = sorted(dead.collect(), key=lambda x: x.id)
    assert [(x.id, bytes(x.body), x.receives, x.last_error) for x in rows] == [
        ("1", b"a", 1, "bad input"),
        ("2", b"b", 1, "timeout upstream"),
    ]
    assert dead.groupBy("last_error").count().count() == 2
    (held,) = fmt(spark.read, redis_server.url, "snap", source="processing").load().collect()
    assert held.id == c.id and held.deadline is not None
    waiting = fmt(spark.read, redis_server.url, "snap", source="waiting").load()
    assert sorted(x.id for x in waiting.collect()) == ["4", "5"]
    assert snapshot(r) == before


def test_a_snapshot_of_an_empty_state_has_no_rows(spark: Any, redis_server: RedisServer, r: redis.Redis) -> None:
    q = Queue("quiet", client=r)
    q.enqueue("held")
    assert q.claim() is not None
    for source in ("waiting", "delayed", "dead"):
        assert fmt(spark.read, redis_server.url, "quiet", source=source).load().count() == 0, source
    assert fmt(spark.read, redis_server.url, "quiet", source="processing").load().count() == 1


def test_a_snapshot_of_an_unknown_queue_names_the_closest_ones(
    spark: Any, redis_server: RedisServer, r: redis.Redis
) -> None:
    Queue("orders", client=r).enqueue("x")
    with pytest.raises(Exception, match="no queue 'ordrs' under prefix 'kq' at redis://.*; did you mean 'orders'"):
        fmt(spark.read, redis_server.url, "ordrs", source="dead").load().count()


def test_run_workers_drains_a_queue_on_spark_tasks_even_when_one_dies(
    spark: Any, redis_server: RedisServer, r: redis.Redis
) -> None:
    from keyqueue.spark import run_workers

    from ..support.spark_handlers import record_to

    q = Queue("work", client=r, visibility_timeout=1, bucket_seconds=1)
    bodies = [f"w{i}" for i in range(300)] + ["die"]
    q.enqueue_many(bodies)
    # the workers' own visibility timeout, longer than the queue's: the wait for the dead
    # task's message to come back must go by it
    result = run_workers(spark, q, record_to(redis_server.url), 2, visibility_timeout=10)
    assert {x.decode() for x in r.smembers("done")} == set(bodies)
    assert result["failed_jobs"] >= 1 and result["rounds"] >= 2  # the dead task's messages came back
    s = q.stats()
    assert (s.waiting, s.processing, s.dead) == (0, 0, 0)


def test_run_workers_goes_on_until_retries_are_done_and_says_what_is_left(
    spark: Any, redis_server: RedisServer, r: redis.Redis
) -> None:
    from keyqueue.spark import run_workers

    from ..support.spark_handlers import fail_once_to

    q = Queue("retry", client=r, bucket_seconds=1)
    bodies = [f"n{i}" for i in range(300)]
    q.enqueue_many(bodies)
    result = run_workers(spark, q, fail_once_to(redis_server.url, 7), 2, retry_backoff=1.0)
    assert {x.decode() for x in r.smembers("done")} == set(bodies)  # the 43 retries too
    assert result["failed"] == 43 and result["processed"] == 300 and result["rounds"] >= 2
    assert (result["waiting"], result["processing"], result["delayed"]) == (0, 0, 0)
    q.enqueue("n1000", delay=600)  # due later than max_wait: left, and said so, at once
    started = time.monotonic()
    result = run_workers(spark, q, fail_once_to(redis_server.url, 7), 2, max_wait=60)
    assert time.monotonic() - started < 30
    assert (result["rounds"], result["processed"], result["delayed"]) == (1, 0, 1)


def test_run_workers_stops_at_max_rounds_and_says_what_is_left(
    spark: Any, redis_server: RedisServer, r: redis.Redis
) -> None:
    """Messages that never succeed: a second round takes their retries, then max_rounds
    ends the run with every one of them reported left (waiting or delayed), none in flight."""
    from keyqueue.spark import run_workers

    from ..support.spark_handlers import always_fail

    q = Queue("stuck", client=r, bucket_seconds=1, max_receives=1000)
    q.enqueue_many([f"s{i}" for i in range(20)])
    result = run_workers(spark, q, always_fail, 2, max_rounds=2, retry_backoff=0.5)
    assert (result["rounds"], result["processed"], result["failed_jobs"]) == (2, 0, 0)
    assert result["failed"] > 20  # round 2 failed some retries again
    assert result["processing"] == 0 and result["waiting"] + result["delayed"] == 20
    s = q.stats()
    assert (s.processing, s.dead, s.waiting + s.delayed) == (0, 0, 20)


def test_bad_options_are_clear(spark: Any, redis_server: RedisServer) -> None:
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match='needs option\\("queue", NAME\\)'):
        df.write.format("keyqueue").option("url", redis_server.url).mode("append").save()
    with pytest.raises(Exception, match="invalid queue name"):
        fmt(df.write, redis_server.url, "no spaces").mode("append").save()
    with pytest.raises(Exception, match="maxRowsPerTrigger must be a positive"):
        fmt(spark.readStream, redis_server.url, "q", maxRowsPerTrigger="0").load().writeStream.format(
            "console"
        ).start().awaitTermination(30)


def test_the_source_extends_what_it_holds_while_the_query_lives(
    spark: Any, redis_server: RedisServer, r: redis.Redis, tmp_path: Path
) -> None:
    """A batch that runs 1.5x the visibility timeout keeps its messages: the source extends
    their deadlines, so a reaper finds nothing expired and nothing is delivered twice."""
    q = Queue("held", client=r, visibility_timeout=2, bucket_seconds=1)
    ids = q.enqueue_many([f"h{i}" for i in range(20)])
    seen: list[str] = []
    reaped: list[int] = []

    def each(df: Any, batch_id: int) -> None:
        seen.extend(row.id for row in df.collect())
        time.sleep(3)
        reaped.append(q.reap().total)

    stream = fmt(spark.readStream, redis_server.url, "held").load()
    (
        stream.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
        .awaitTermination(120)
    )
    assert reaped == [0] and sorted(seen) == sorted(ids)
    s = q.stats()
    assert (s.waiting, s.processing) == (0, 0)


def run_example(name: str, url: str, cwd: Path) -> str:
    """An example as a user runs it: a process of its own, its own Spark session, and no
    PYSPARK_PYTHON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env |= {"KEYQUEUE_URL": url, "LAKE": str(cwd / "lake"), "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], env=env, cwd=cwd, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def test_the_documented_examples_run_as_written(redis_server: RedisServer, r: redis.Redis, tmp_path: Path) -> None:
    page = (EXAMPLES.parent.parent / "docs" / "spark.md").read_text()  # shows the files by snippet
    for example in sorted(EXAMPLES.glob("*.py")):
        assert f'--8<-- "examples/spark/{example.name}"' in page, f"docs/spark.md does not show {example}"
    q = Queue("orders", client=r, max_receives=1)
    q.enqueue_many(json.dumps({"order_id": -i, "items": i % 3}) for i in range(60))
    out = run_example("drain_with_workers.py", redis_server.url, tmp_path)
    assert "'processed': 40, 'failed': 20" in out
    s = q.stats()
    assert (s.waiting, s.processing, s.delayed, s.dead) == (0, 0, 0, 20)
    out = run_example("orders_pipeline.py", redis_server.url, tmp_path)
    assert "processed: 1000" in out
    assert re.search(r"\|ValueError: an order without items *\|20 *\|1 *\|", out), out
    s = q.stats()
    assert (s.waiting, s.processing, s.delayed, s.dead) == (0, 0, 0, 20)


#: A sitecustomize that hides keyqueue from the interpreter it starts in.
HIDE_KEYQUEUE = """import sys


class NoKeyqueue:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "keyqueue":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NoKeyqueue())
"""


def python_without_keyqueue(tmp_path: Path) -> str:
    """This interpreter, with PySpark and all, but keyqueue not installed."""
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(HIDE_KEYQUEUE)
    exe = tmp_path / "python-without-keyqueue"
    exe.write_text(
        f'#!/bin/sh\nPYTHONPATH={tmp_path / "hide"}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "$@"\n'
    )
    exe.chmod(0o755)
    return str(exe)


def test_workers_that_cannot_import_keyqueue_are_one_clear_line(
    spark: Any, r: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import keyqueue.spark.workers as spark_workers
    from keyqueue.errors import MissingDependency
    from keyqueue.spark import register, run_workers

    exe = python_without_keyqueue(tmp_path)
    sc = spark.sparkContext
    monkeypatch.setattr(sc, "pythonExec", sc.pythonExec)  # put back after the test
    monkeypatch.setenv("PYSPARK_PYTHON", exe)
    line = re.escape(f"Spark's Python workers run {exe} (PYSPARK_PYTHON is {exe}), which cannot import keyqueue: ")
    with pytest.raises(MissingDependency, match=line):
        register(spark)
    q = Queue("elsewhere", client=r)
    q.enqueue("x")
    with pytest.raises(MissingDependency, match=line):
        run_workers(spark, q, print, 1)
    # Executors whose Python is not the driver's: the job fails there, and says the same.
    monkeypatch.setattr(spark_workers, "keyqueue_python", lambda session, **_: exe)
    sc.pythonExec = exe
    with pytest.raises(MissingDependency, match=line) as failed:
        run_workers(spark, q, print, 1)
    assert "\n" not in str(failed.value) and failed.value.__cause__ is None
    assert q.stats().waiting == 1


def test_a_stream_batch_with_nothing_left_to_read_is_one_empty_partition(redis_server, r) -> None:
    """A batch replayed after a restart whose record has expired holds no ids: still one
    partition (given none, PySpark calls read(None)), and it reads as no rows."""
    from keyqueue.spark.options import Options
    from keyqueue.spark.stream import StreamSource

    Queue("replayed", client=r).enqueue("x")
    source = StreamSource(Options.parse({"url": redis_server.url, "queue": "replayed"}))
    start, end = source.initialOffset(), {"source": source.source, "batch": 1}
    parts = source.partitions(start, end)
    assert len(parts) == 1 and list(source.read(parts[0])) == []
