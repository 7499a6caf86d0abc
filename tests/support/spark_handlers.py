"""Handlers for keyqueue.spark.run_workers tests (importable by Spark's Python workers)."""

from __future__ import annotations

import os

import redis

from keyqueue import Message


def record_to(url: str):  # type: ignore[no-untyped-def]
    """A handler that records each body in the Redis set ``done``; a body "die" kills its
    Spark task's Python worker on the first delivery."""

    def handle(m: Message) -> None:
        if m.text == "die" and m.receives == 1:
            os._exit(1)
        record(url, m)

    return handle


def fail_once_to(url: str, every: int):  # type: ignore[no-untyped-def]
    """A handler that records each body (``n<i>``) in the Redis set ``done``; the first
    delivery of every ``every``-th message raises, so the worker retries it after its backoff."""

    def handle(m: Message) -> None:
        if int(m.text[1:]) % every == 0 and m.receives == 1:
            raise RuntimeError("the first delivery fails")
        record(url, m)

    return handle


def record(url: str, m: Message) -> None:
    client = redis.Redis.from_url(url)
    client.sadd("done", m.body)
    client.close()


def always_fail(m: Message) -> None:
    """A handler whose every delivery fails: its messages never leave the queue."""
    raise RuntimeError("this handler always fails")
