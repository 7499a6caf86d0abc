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

from ..core.results import QueueStats
from ..errors import InvalidArgument, MissingDependency
from ..message import Message
from ..queue import Queue
from ..worker.threads import Worker
from .interpreter import NO_MODULE, cannot_import, keyqueue_python

log = logging.getLogger("keyqueue.spark")

#: Longest wait between rounds for a message to come back: the worker's longest retry backoff.
MAX_WAIT = 300.0
#: Seconds between polls, and beyond a message's due time before giving up on it (the
#: reaper's precision, and clock skew between this host and Redis).
POLL, SLACK = 0.2, 3.0


def run_workers(
    spark: SparkSession,
    queue: Queue,
    handler: Callable[[Message], Any],
    num_workers: int,
    *,
    url: str | None = None,
    max_rounds: int = 10,
    max_wait: float = MAX_WAIT,
    **worker_options: Any,
) -> dict[str, int]:
    """Drain ``queue`` with ``num_workers`` Spark tasks, each a burst Worker (its options in
    ``worker_options``). A burst ends when nothing is waiting, so rounds go on, at most
    ``max_rounds``, while messages are left in flight (a failed task's) or delayed (a
    handler's retry backoff): between rounds it waits for the first of them to come back,
    unless that is more than ``max_wait`` seconds away. ``url`` is how tasks connect
    (default: the queue's own client's host, port, db and credentials). Returns processed
    and failed handler calls, rounds run, failed Spark jobs, and what is left: waiting,
    processing and delayed."""
    if max_rounds < 1:
        raise InvalidArgument(f"max_rounds must be at least 1, not {max_rounds!r}")
    exe = keyqueue_python(spark, executors_only=True)
    target = url or _url_of(queue)
    name, prefix, scripting = queue.name, queue.prefix, queue.scripting
    replicas, replica_timeout = queue.min_replicas, queue.replica_timeout

    def task(index: int, _: Iterable[int]) -> Iterable[tuple[int, int]]:
        q = Queue(
            name, url=target, prefix=prefix, scripting=scripting, min_replicas=replicas, replica_timeout=replica_timeout
        )
        w = Worker(q, handler, **worker_options)
        t = threading.Thread(target=w.run, kwargs={"burst": True})  # not the main thread: no signal handlers
        t.start()
        t.join()
        q.client.close()
        yield w.processed, w.failed

    totals = {"processed": 0, "failed": 0, "rounds": 0, "failed_jobs": 0}
    for n in range(1, max_rounds + 1):
        totals["rounds"] = n
        try:
            for processed, failed in (
                spark.sparkContext.parallelize(range(num_workers), num_workers).mapPartitionsWithIndex(task).collect()
            ):
                totals["processed"] += processed
                totals["failed"] += failed
        except Exception as exc:  # noqa: BLE001  a failed job: its messages come back by deadline
            missing = NO_MODULE.search(str(exc))
            if missing:  # the executors' Python: no round would do better
                raise MissingDependency(cannot_import(exe, missing.group(1))) from None
            totals["failed_jobs"] += 1
            log.warning(
                "a worker job failed (its messages come back after their visibility timeout): %s",
                str(exc).splitlines()[0][:300],
            )
        left = _wait_for_work(queue, max_wait if n < max_rounds else 0.0, worker_options.get("visibility_timeout"))
        if not left.waiting:
            break
    return totals | {"waiting": left.waiting, "processing": left.processing, "delayed": left.delayed}


def _wait_for_work(q: Queue, max_wait: float, visibility: float | None) -> QueueStats:
    """The queue's counts once a message is waiting, nothing is left, or what is left does
    not come back in time. Reaps while it polls: nothing else may be serving the queue.
    ``visibility``: the workers' own visibility timeout, if they were given one."""
    until: float | None = None
    while True:
        q.reap()
        s = q.stats()
        if s.waiting or not (s.processing or s.delayed):
            return s
        if until is None:
            back = _comes_back_in(q, s, visibility or q.settings.visibility_timeout)
            if back > max_wait:
                return s
            until = time.monotonic() + back + SLACK
        if time.monotonic() > until:
            return s
        time.sleep(POLL)


def _comes_back_in(q: Queue, s: QueueStats, visibility: float) -> float:
    """Seconds until the first in-flight or delayed message is due back (an in-flight one
    within ``visibility``, the timeout its worker claimed it with)."""
    due = [visibility] if s.processing else []
    if s.delayed:
        first = q.peek(1, source="delayed")
        due += [(m.deadline or 0.0) - time.time() for m in first]
    return max(0.0, min(due, default=0.0))


def _url_of(q: Queue) -> str:
    manager = getattr(q.client, "nodes_manager", None)
    if manager is not None:  # a cluster: every node it knows is a seed
        kw = manager.connection_kwargs
        seeds = ",".join(n.name for n in manager.nodes_cache.values()) or ",".join(manager.startup_nodes)
        scheme = (
            "rediss+cluster"
            if kw.get("ssl") or kw.get("connection_class", object).__name__ == "SSLConnection"
            else "redis+cluster"
        )
        return f"{scheme}://{_auth(kw)}{seeds}"
    pool = q.client.connection_pool
    kw = pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}?db={kw.get('db', 0)}"
    scheme = "rediss" if pool.connection_class.__name__ == "SSLConnection" else "redis"
    return f"{scheme}://{_auth(kw)}{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


def _auth(kw: dict[str, Any]) -> str:
    if not kw.get("password"):
        return ""
    return f"{quote(kw.get('username') or '', safe='')}:{quote(kw['password'], safe='')}@"
