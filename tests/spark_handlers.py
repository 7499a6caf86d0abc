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
        client = redis.Redis.from_url(url)
        client.sadd("done", m.body)
        client.close()

    return handle
