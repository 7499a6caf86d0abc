"""Async handlers for worker processes started by the tests (``keyqueue worker
tests.support.aio_handlers:...``): the CLI runs them with keyqueue.aio.Worker. Each records what it
did in Redis (the keys of ``tests.support.handlers``), so the test can see it from outside."""

from __future__ import annotations

import asyncio
import os
import threading

from keyqueue.aio import Message, Queue

from .handlers import CLAIMS, DONE, PEAK, RUNNING, STARTED

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


async def deaf(m: Message) -> None:
    """Runs for the number of seconds in the body, catching every cancellation on the way."""
    await _client(m).rpush(STARTED, m.id)
    end = asyncio.get_running_loop().time() + float(m.text)
    while asyncio.get_running_loop().time() < end:
        try:
            await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            pass
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


async def stamp(m: Message) -> None:
    """As handlers.stamp, on the event loop."""
    await _client(m).rpush(CLAIMS, f"{m.id} {m.deadline!r}")
    await _client(m).hincrby(DONE, m.id, 1)


async def busy(m: Message) -> None:
    """As handlers.busy, on the event loop."""
    client = _client(m)
    await client.rpush(PEAK, await client.incr(RUNNING))
    await asyncio.sleep(0.1)
    await client.decr(RUNNING)
    await client.hincrby(DONE, m.id, 1)
