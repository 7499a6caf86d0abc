"""Spark executors as workers: a burst Worker per Spark task, so a queue drains on a cluster.

A task that dies leaves its messages in flight; they come back after their visibility
timeout, and the next round of tasks (or Spark's own retry of the task) takes them."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable
from urllib.parse import quote

from pyspark.sql import SparkSession

from ..message import Message
from ..queue import Queue
from ..worker import Worker

log = logging.getLogger("keyqueue.spark")


def run_workers(spark: SparkSession, queue: Queue, handler: Callable[[Message], Any],
                num_workers: int, *, url: str | None = None, max_rounds: int = 10,
                **worker_options: Any) -> dict[str, int]:
    """Drain ``queue`` with ``num_workers`` Spark tasks, each a burst Worker (its options in
    ``worker_options``). Rounds repeat while messages are left in flight by failed tasks,
    waiting for them to come back. ``url`` is how tasks connect (default: the queue's own
    client's host, port, db and credentials). Messages a failing handler released for a
    later retry (its backoff) are left for a later run. Returns processed and failed
    handler calls, rounds run and failed Spark jobs."""
    target = url or _url_of(queue)
    name, prefix, scripting = queue.name, queue.prefix, queue.scripting
    replicas, replica_timeout = queue.min_replicas, queue.replica_timeout

    def task(index: int, _: Iterable[int]) -> Iterable[tuple[int, int]]:
        q = Queue(name, url=target, prefix=prefix, scripting=scripting, min_replicas=replicas,
                  replica_timeout=replica_timeout)
        w = Worker(q, handler, **worker_options)
        t = threading.Thread(target=w.run, kwargs={"burst": True})  # not the main thread: no signal handlers
        t.start()
        t.join()
        q.client.close()
        yield w.processed, w.failed

    totals = {"processed": 0, "failed": 0, "rounds": 0, "failed_jobs": 0}
    for _ in range(max_rounds):
        totals["rounds"] += 1
        try:
            for processed, failed in spark.sparkContext.parallelize(
                    range(num_workers), num_workers).mapPartitionsWithIndex(task).collect():
                totals["processed"] += processed
                totals["failed"] += failed
        except Exception as exc:  # noqa: BLE001  a failed job: its messages come back by deadline
            totals["failed_jobs"] += 1
            log.warning("a worker job failed (its messages come back after their visibility "
                        "timeout): %s", str(exc).splitlines()[0][:300])
        if not _wait_for_leftovers(queue):
            return totals
    return totals


def _wait_for_leftovers(q: Queue) -> bool:
    """Whether messages are left to process: waits (reaping) for those still in flight to
    come back, at most one visibility timeout and a little."""
    deadline = time.monotonic() + q.settings.visibility_timeout + 5
    while True:
        q.reap()
        s = q.stats()
        if s.waiting:
            return True
        if not s.processing or time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _url_of(q: Queue) -> str:
    pool = q.client.connection_pool
    kw = pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}?db={kw.get('db', 0)}"
    auth = ""
    if kw.get("password"):
        auth = f"{quote(kw.get('username') or '', safe='')}:{quote(kw['password'], safe='')}@"
    scheme = "rediss" if pool.connection_class.__name__ == "SSLConnection" else "redis"
    return f"{scheme}://{auth}{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"
