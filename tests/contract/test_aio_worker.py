"""What only keyqueue.aio.Worker does: handlers as tasks on one loop (the test's thread), a
CancelledError of the handler's own, the handlers' tasks cancelled at the end of the grace
period, stop(now=True), stop() from another thread, a Redis outage waited out on the loop,
and what it refuses. Each test runs its own loop with asyncio.run. The worker contract runs
on both faces (test_worker.py, test_worker_outcomes.py); as `keyqueue worker` processes:
faults/test_processes.py."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import pytest
import redis
import redis.asyncio

from keyqueue import InvalidArgument, Queue
from keyqueue.aio import Message, Worker
from keyqueue.aio import Queue as AsyncQueue
from keyqueue.server import RedisServer


@pytest.fixture
def url(redis_server: RedisServer, r: redis.Redis) -> str:
    return redis_server.url  # (r: flushed for this test)


@asynccontextmanager
async def queues(url: str, scripting: bool, *names: str, **settings: Any) -> AsyncIterator[list[AsyncQueue]]:
    """Async queues on one client, closed at the end (on the loop that used it)."""
    client = redis.asyncio.Redis.from_url(url)
    try:
        yield [AsyncQueue(name, client=client, scripting=scripting, **settings) for name in names]
    finally:
        await client.aclose()


async def until(predicate: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll (awaiting an async predicate) until it is truthy; fail at the deadline (as
    wait_until's: it only catches what never happens; a starved host takes its time)."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.01)


@asynccontextmanager
async def running(worker: Worker, **run_kw: Any) -> AsyncIterator[asyncio.Task[None]]:
    """worker.run() as a task; stopped, and awaited, at the end."""
    task = asyncio.ensure_future(worker.run(**run_kw))
    try:
        yield task
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


def test_handlers_run_concurrently_on_one_loop(url: str, scripting: bool) -> None:
    waiting: list[str] = []
    threads: set[int] = set()

    async def main() -> None:
        everyone = asyncio.Event()

        async def handler(m: Message) -> None:
            threads.add(threading.get_ident())
            waiting.append(m.id)
            if len(waiting) == 10:  # the tenth finds nine others waiting with it
                everyone.set()
            await asyncio.wait_for(everyone.wait(), 10)

        async with queues(url, scripting, "q") as (q,):
            await q.enqueue_many(["x"] * 10)
            w = Worker(q, handler, concurrency=10)
            await w.run(burst=True)
            assert w.processed == 10 and w.failed == 0 and (await q.stats()).processing == 0

    asyncio.run(main())
    assert threads == {threading.get_ident()}  # the test's own thread: its loop ran them all


def test_a_cancelled_error_the_handler_raises_fails_the_delivery(url: str, scripting: bool) -> None:
    """A CancelledError the handler raises itself is its failure, not a shutdown. (Any other
    BaseException, SystemExit too: test_worker_outcomes.py, on both faces.)"""

    async def handler(m: Message) -> None:
        raise asyncio.CancelledError(3)

    async def main() -> None:
        async with queues(url, scripting, "q") as (q,):
            await q.enqueue("x")
            w = Worker(q, handler, retry_backoff=30)
            await w.run(burst=True)
            (m,) = await q.peek(source="delayed")
            assert m.last_error == "CancelledError: 3" and w.failed == 1

    asyncio.run(main())


def test_the_end_of_the_grace_period_cancels_the_handlers(url: str, scripting: bool) -> None:
    """The handlers' tasks are cancelled (what is held released: test_worker.py, both faces)."""
    started: list[str] = []
    cancelled: list[str] = []

    async def stuck(m: Message) -> None:
        started.append(m.id)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(m.id)
            raise

    async def main() -> None:
        async with queues(url, scripting, "q") as (q,):
            await q.enqueue_many(["a", "b"])
            w = Worker(q, stuck, concurrency=2, grace_period=0.3)
            async with running(w):
                await until(lambda: len(started) == 2)  # (held but not started: given back at once)
            s = await q.stats()
            assert (s.waiting, s.processing, s.delayed) == (2, 0, 0)

    asyncio.run(main())
    assert sorted(cancelled) == ["1", "2"]


def test_a_handler_past_its_timeout_has_its_task_cancelled_and_the_lane_goes_on(url: str, scripting: bool) -> None:
    """One lane (concurrency 1): the stuck handler's task is cancelled, its delivery failed,
    and the lane handles the next message."""
    cancelled: list[float] = []
    handled: list[str] = []

    async def handler(m: Message) -> None:
        if m.text == "stuck":
            started = time.monotonic()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(time.monotonic() - started)
                raise
        handled.append(m.text)

    async def main() -> None:
        async with queues(url, scripting, "q", max_receives=5) as (q,):
            await q.enqueue_many(["stuck", "next"])
            w = Worker(q, handler, concurrency=1, timeout=1, retry_backoff=60)
            async with running(w):
                await until(lambda: handled == ["next"])
            (m,) = await q.peek(source="delayed")
            assert m.text == "stuck" and (m.last_error or "").startswith("HandlerTimeout")
            assert w.failed == 1 and w.processed == 1

    asyncio.run(main())
    assert len(cancelled) == 1 and 1 <= cancelled[0] < 7


def test_stop_now_releases_what_is_held_at_once(url: str, scripting: bool) -> None:
    async def stuck(m: Message) -> None:
        await asyncio.sleep(60)

    async def main() -> None:
        async with queues(url, scripting, "q", visibility_timeout=60) as (q,):
            await q.enqueue_many(["a", "b", "c"])
            w = Worker(q, stuck, concurrency=2, grace_period=60)
            task = asyncio.ensure_future(w.run())
            await until(lambda: len(w._held) == 2)
            w.stop()
            w.stop(now=True)  # as a second SIGINT
            await asyncio.wait_for(task, 5)
            s = await q.stats()
            assert (s.waiting, s.processing, s.delayed) == (3, 0, 0)

    asyncio.run(main())


def test_stop_from_another_thread(url: str, scripting: bool) -> None:
    async def handler(m: Message) -> None:
        pass

    async def main() -> None:
        async with queues(url, scripting, "q") as (q,):
            w = Worker(q, handler)
            task = asyncio.ensure_future(w.run())
            await until(lambda: w._loop is not None and w._claims)  # long-polling
            await asyncio.get_running_loop().run_in_executor(None, w.stop)
            await asyncio.wait_for(task, 1)  # the long-poll (2 s) was cancelled, not waited out

    asyncio.run(main())


def test_a_redis_outage_is_logged_and_waited_out(scripting: bool, caplog: pytest.LogCaptureFixture) -> None:
    done: list[str] = []

    async def handler(m: Message) -> None:
        done.append(m.text)

    async def enqueue(q: AsyncQueue, body: str) -> bool:
        try:
            return bool(await q.enqueue(body))
        except redis.ConnectionError:  # (a pooled connection from before the restart)
            return False

    async def settled(q: AsyncQueue) -> bool:
        s = await q.stats()
        return (s.waiting, s.processing, s.delayed, s.dead) == (0, 0, 0, 0)

    async def main(server: RedisServer) -> None:
        loop = asyncio.get_running_loop()
        async with queues(server.url, scripting, "q") as (q,):
            await q.enqueue("before")
            # A claim or ack the outage cut off leaves its message to return at its
            # deadline (2 s here): the worker then delivers it again.
            async with running(Worker(q, handler, concurrency=2, visibility_timeout=2)):
                await until(lambda: done == ["before"])
                await loop.run_in_executor(None, server.stop)
                await until(lambda: "claim failed" in caplog.text and "retrying in" in caplog.text)
                await loop.run_in_executor(None, server.start)
                await until(lambda: enqueue(q, "after"))
                await until(lambda: "after" in done)
                await until(lambda: settled(q))
            assert set(done) == {"before", "after"}

    with (
        RedisServer(["--appendonly", "yes", "--appendfsync", "always"]) as server,
        caplog.at_level(logging.WARNING, logger="keyqueue.worker"),
    ):
        asyncio.run(main(server))


def test_a_blocking_queue_is_refused_both_ways(r: redis.Redis) -> None:
    """(Bad options, and the decorator's options: test_worker.py, on both faces.)"""

    async def handler(m: Message) -> None:
        pass

    with pytest.raises(InvalidArgument, match="keyqueue.aio.Queue"):
        Worker(Queue("q", client=r), handler)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="keyqueue.aio.Worker"):  # the sync one points here
        Queue("q", client=r).worker()(handler)
