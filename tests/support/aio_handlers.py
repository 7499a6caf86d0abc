"""Async handlers for worker processes started by the tests (``keyqueue worker
tests.support.aio_handlers:...``): the CLI runs them with keyqueue.aio.Worker. Each records what it
did in Redis (the keys of ``tests.support.handlers``), so the test can see it from outside."""

from __future__ import annotations

import asyncio
import os
import threading

from keyqueue.aio import Message, Queue

from .handlers import DONE, STARTED

#: hash id -> "<thread name> <whether a loop ran the handler>", written by ``where``
WHERE = "test:where"


def _client(m: Message):  # type: ignore[no-untyped-def]
    assert m.queue is not None
    return m.queue.client


async def slow(m: Message) -> None:
    """Sleeps (without blocking the loop) for the number of seconds in the body."""
    await _client(m).rpush(STARTED, m.id)
    await asyncio.sleep(float(m.text))
    await _client(m).hincrby(DONE, m.id, 1)


async def where(m: Message) -> None:
    """Records that it ran on an event loop, and in which thread."""
    loop = asyncio.get_running_loop()
    await _client(m).hset(WHERE, m.id, f"{threading.current_thread().name} {loop.is_running()}")
    await _client(m).hincrby(DONE, m.id, 1)


#: A Worker made with the decorator of an asyncio queue; it connects to KQ_TEST_URL (no
#: I/O at import).
jobs = Queue("adecorated", url=os.environ.get("KQ_TEST_URL"), max_receives=2)


@jobs.worker(concurrency=4, retry_backoff=40.0)
async def decorated(m: Message) -> None:
    if m.text == "fail":
        raise RuntimeError("failing as asked")
    await where(m)
