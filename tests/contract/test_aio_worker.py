"""keyqueue.aio.Worker: async handlers, concurrency tasks on one loop; in-process (each test
runs its own loop with asyncio.run), and as `keyqueue worker` processes."""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import threading
import time
from collections import Counter
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import pytest
import redis
import redis.asyncio

from keyqueue import InvalidArgument, Queue
from keyqueue.aio import Message
from keyqueue.aio import Queue as AsyncQueue
from keyqueue.aio import Worker
from keyqueue.server import RedisServer

from ..support.aio_handlers import WHERE
from ..support.helpers import wait_until
from ..support.handlers import DONE, STARTED
from ..support.processes import Procs


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


async def until(predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll (awaiting an async predicate) until it is truthy; fail at the deadline."""
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


def test_burst_drains_every_message_once(url: str, scripting: bool) -> None:
    seen: Counter[str] = Counter()

    async def handler(m: Message) -> None:
        seen[m.id] += 1
        await asyncio.sleep(0)

    async def main() -> None:
        async with queues(url, scripting, "q") as (q,):
            ids = await q.enqueue_many([str(i) for i in range(2000)])
            w = Worker(q, handler)
            await w.run(burst=True)
            assert sorted(seen, key=int) == ids and set(seen.values()) == {1}
            s = await q.stats()
            assert (s.waiting, s.processing, s.delayed, s.dead) == (0, 0, 0, 0) and w.processed == 2000

    asyncio.run(main())


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


def test_a_failure_is_retried_with_backoff_and_its_error(url: str, scripting: bool) -> None:
    async def handler(m: Message) -> None:
        raise RuntimeError("boom")

    async def main() -> None:
        async with queues(url, scripting, "q") as (q,):
            await q.enqueue("x")
            w = Worker(q, handler, retry_backoff=30)
            async with running(w):
                await until(lambda: w.failed == 1)
            (m,) = await q.peek(source="delayed")
            assert m.last_error == "RuntimeError: boom" and m.receives == 1
            assert m.deadline is not None and 25 < m.deadline - time.time() <= 30

    asyncio.run(main())


def test_failures_end_in_dead_letters(url: str, scripting: bool) -> None:
    calls: list[int] = []

    async def handler(m: Message) -> None:
        calls.append(m.receives)
        raise ValueError("bad payload")

    async def main() -> None:
        async with queues(url, scripting, "q", max_receives=3) as (q,):
            await q.enqueue("poison")
            async with running(Worker(q, handler, retry_backoff=0.05)):
                await until(lambda: _dead(q))
            (dead,) = await q.peek(source="dead")
            assert dead.last_error == "ValueError: bad payload" and dead.receives == 3

    asyncio.run(main())
    assert calls == [1, 2, 3]


async def _dead(q: AsyncQueue) -> bool:
    return (await q.stats()).dead == 1


@pytest.mark.parametrize("error", [asyncio.CancelledError, SystemExit], ids=["CancelledError", "SystemExit"])
def test_any_base_exception_fails_the_delivery(url: str, scripting: bool, error: type) -> None:
    """A CancelledError the handler raises itself is its failure (not a shutdown); a
    SystemExit also stops the worker, and run() re-raises it."""
    async def handler(m: Message) -> None:
        raise error(3)

    async def main() -> None:
        async with queues(url, scripting, "q") as (q,):
            await q.enqueue("x")
            w = Worker(q, handler, retry_backoff=30)
            if error is SystemExit:
                with pytest.raises(SystemExit):  # (awaited as is: a task would hand it to the loop)
                    await w.run()
            else:
                await w.run(burst=True)
            (m,) = await q.peek(source="delayed")
            assert m.last_error == f"{error.__name__}: 3" and w.failed == 1

    asyncio.run(main())


@pytest.mark.parametrize("action", ["ack", "release"])
def test_a_handler_that_settles_its_message_is_taken_at_its_word(
        url: str, scripting: bool, caplog: pytest.LogCaptureFixture, action: str) -> None:
    async def handler(m: Message) -> None:
        assert await (m.ack() if action == "ack" else m.release(delay=60, error="later"))

    async def main() -> None:
        async with queues(url, scripting, "q") as (q,):
            await q.enqueue("x")
            w = Worker(q, handler)
            with caplog.at_level(logging.DEBUG, logger="keyqueue.worker"):
                await w.run(burst=True)
            s = await q.stats()
            assert (s.waiting, s.processing, s.delayed) == (0, 0, 1 if action == "release" else 0)
            assert w.processed == 1

    asyncio.run(main())
    past = {"ack": "acked", "release": "released"}[action]
    assert f"handler {past} queue=q id=1 receives=1 itself" in caplog.messages
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not any(line.startswith("acked ") for line in caplog.messages)


def test_the_heartbeat_keeps_a_long_handler_s_message(url: str, scripting: bool) -> None:
    calls: list[str] = []
    other: list[str] = []

    async def slow(m: Message) -> None:
        calls.append(m.id)
        await asyncio.sleep(1.5)  # 5x the visibility timeout

    async def thief(m: Message) -> None:
        other.append(m.id)

    async def main() -> None:
        async with queues(url, scripting, "q", visibility_timeout=0.3, bucket_seconds=1) as (q,):
            await q.enqueue("x")
            async with running(Worker(q, slow)), running(Worker(q, thief)):  # the thief reaps too
                await until(lambda: calls)
                await until(lambda: _settled(q), timeout=15)
            assert (await q.stats()).waiting == 0

    asyncio.run(main())
    assert calls == ["1"] and other == []


async def _settled(q: AsyncQueue) -> bool:
    s = await q.stats()
    return s.processing == 0 and s.waiting == 0


def test_queues_are_served_in_priority_order(url: str, scripting: bool) -> None:
    order: list[str] = []

    async def handler(m: Message) -> None:
        order.append(m.text)

    async def main() -> None:
        async with queues(url, scripting, "high", "low") as (high, low):
            await low.enqueue_many([f"low{i}" for i in range(30)])
            await high.enqueue_many([f"high{i}" for i in range(30)])
            await Worker([high, low], handler, concurrency=1).run(burst=True)

    asyncio.run(main())
    assert order == [f"high{i}" for i in range(30)] + [f"low{i}" for i in range(30)]


def test_stop_lets_in_flight_work_finish(url: str, scripting: bool) -> None:
    done: list[str] = []

    async def main() -> None:
        started, proceed = asyncio.Event(), asyncio.Event()

        async def handler(m: Message) -> None:
            started.set()
            await proceed.wait()
            done.append(m.text)

        async with queues(url, scripting, "q") as (q,):
            await q.enqueue_many(["a", "b", "c"])
            w = Worker(q, handler, concurrency=1, grace_period=10)
            task = asyncio.ensure_future(w.run())
            await asyncio.wait_for(started.wait(), 10)
            w.stop()  # a plain call
            await asyncio.sleep(0.05)
            assert not task.done()  # waiting for the handler
            proceed.set()
            await asyncio.wait_for(task, 10)
            assert (await q.stats()).processing == 0
            assert sorted(m.text for m in await q.peek()) == ["b", "c"]  # never started: given back

    asyncio.run(main())
    assert done == ["a"]


def test_the_end_of_the_grace_period_cancels_and_releases(url: str, scripting: bool,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    cancelled: list[str] = []

    async def stuck(m: Message) -> None:
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
                await until(lambda: len(w._held) == 2)
                t0 = time.monotonic()
            assert time.monotonic() - t0 < 3
            (s, msgs) = (await q.stats(), await q.peek())
            assert (s.waiting, s.processing, s.delayed) == (2, 0, 0)
            assert [m.last_error for m in msgs] == [None, None] and w.failed == 0  # not failures

    with caplog.at_level(logging.WARNING, logger="keyqueue.worker"):
        asyncio.run(main())
    assert sorted(cancelled) == ["1", "2"]
    assert sum("grace period over: releasing queue=q" in line for line in caplog.messages) == 2


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

    async def main(server: RedisServer) -> None:
        loop = asyncio.get_running_loop()
        async with queues(server.url, scripting, "q") as (q,):
            await q.enqueue("before")
            async with running(Worker(q, handler, concurrency=2)):
                await until(lambda: done == ["before"])
                await loop.run_in_executor(None, server.stop)
                await until(lambda: "claim failed" in caplog.text and "retrying in" in caplog.text)
                await loop.run_in_executor(None, server.start)
                await until(lambda: enqueue(q, "after"))
                await until(lambda: done == ["before", "after"], timeout=15)
            assert (await q.stats()).processing == 0

    with RedisServer(["--appendonly", "yes", "--appendfsync", "always"]) as server, \
            caplog.at_level(logging.WARNING, logger="keyqueue.worker"):
        asyncio.run(main(server))


def test_bad_options_and_handlers(r: redis.Redis) -> None:
    q = AsyncQueue("q", client=redis.asyncio.Redis())  # no I/O

    async def handler(m: Message) -> None:
        pass

    with pytest.raises(InvalidArgument, match="keyqueue.aio.Queue"):
        Worker(Queue("q", client=r), handler)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        Worker(q, handler, concurrency=0)
    assert q.worker(concurrency=3)(handler).concurrency == 3
    with pytest.raises(InvalidArgument, match="keyqueue.aio.Worker"):  # the sync one points here
        Queue("q", client=r).worker()(handler)


# -- as processes: `keyqueue worker` with an async handler --------------------------------


@pytest.fixture
def procs(tmp_path: Path, scripting: bool, request: pytest.FixtureRequest) -> Procs:
    """`keyqueue` processes (stderr to a log each), every one killed at the end."""
    ps = Procs(tmp_path, scripting)
    request.addfinalizer(lambda: [(p.kill(), p.wait()) for p in ps.started])
    return ps


def test_the_cli_runs_an_async_handler_with_the_async_worker(redis_server: RedisServer, r: redis.Redis,
                                                             procs: Procs, scripting: bool) -> None:
    Queue("q", client=r).enqueue_many(["a", "b", "c"])
    p = procs.spawn(redis_server.url, "worker", "tests.support.aio_handlers:where", "-q", "q", "--burst")
    assert p.wait(20) == 0, procs.log(p)
    assert r.hlen(DONE) == 3 and Queue("q", client=r).stats().processing == 0
    assert set(r.hvals(WHERE)) == {b"MainThread True"}  # awaited on the main thread's loop
    assert "worker options: concurrency=10 " in procs.log(p)  # aio.Worker's default


def test_the_cli_runs_a_decorated_async_worker_with_its_options(redis_server: RedisServer, r: redis.Redis,
                                                                procs: Procs, scripting: bool) -> None:
    q = Queue("adecorated", client=r)
    q.enqueue_many(["ok", "fail"])
    p = procs.spawn(redis_server.url, "worker", "tests.support.aio_handlers:decorated", "--burst")
    p.wait(20)
    log = procs.log(p)
    assert p.returncode == 0, log
    assert "worker tests.support.aio_handlers:decorated on adecorated at" in log and "concurrency 4" in log
    (failed,) = q.peek(source="delayed")
    assert failed.deadline is not None and 35 < failed.deadline - time.time() <= 40  # retry_backoff=40
    assert r.hlen(DONE) == 1


def test_sigterm_lets_the_async_handler_finish_and_exits_0(redis_server: RedisServer, r: redis.Redis,
                                                           procs: Procs, scripting: bool) -> None:
    q = Queue("q", client=r)
    q.enqueue_many(["1.0", "0", "0"])
    p = procs.spawn(redis_server.url, "worker", "tests.support.aio_handlers:slow", "-q", "q", "-c", "1", "--grace", "10")
    wait_until(lambda: r.llen(STARTED) >= 1)
    p.send_signal(signal.SIGTERM)
    assert p.wait(15) == 0, procs.log(p)
    assert r.hget(DONE, "1") == b"1"  # the in-flight handler finished and was acked
    s = q.stats()
    assert s.processing == 0 and s.waiting + r.hlen(DONE) == 3
    assert "SIGTERM: stopping" in procs.log(p)


def test_a_second_sigint_releases_at_once_and_exits_130(redis_server: RedisServer, r: redis.Redis,
                                                        procs: Procs, scripting: bool) -> None:
    q = Queue("q", client=r, visibility_timeout=60)
    q.enqueue_many(["30", "30"])
    p = procs.spawn(redis_server.url, "worker", "tests.support.aio_handlers:slow", "-q", "q", "--grace", "60")
    wait_until(lambda: r.llen(STARTED) == 2)
    p.send_signal(signal.SIGINT)
    wait_until(lambda: "SIGINT: stopping" in procs.log(p))
    p.send_signal(signal.SIGINT)
    assert p.wait(10) == 130
    s = q.stats()  # back in waiting at once, not after their 60 s deadline
    assert (s.waiting, s.processing) == (2, 0) and r.hlen(DONE) == 0
    assert "second SIGINT: releasing every held message now" in procs.log(p)


def test_a_sigkilled_async_worker_loses_nothing(redis_server: RedisServer, r: redis.Redis,
                                                procs: Procs, scripting: bool) -> None:
    q = Queue("q", client=r, visibility_timeout=1, bucket_seconds=1)
    q.enqueue_many(["0.05"] * 40)
    victim = procs.spawn(redis_server.url, "worker", "tests.support.aio_handlers:slow", "-q", "q", "-c", "4")
    wait_until(lambda: r.llen(STARTED) >= 6)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert q.stats().processing > 0  # it died holding messages
    rescuer = procs.spawn(redis_server.url, "worker", "tests.support.aio_handlers:slow", "-q", "q", "-c", "4")
    wait_until(lambda: r.hlen(DONE) == 40 and q.stats().processing == 0, timeout=30)
    rescuer.send_signal(signal.SIGTERM)
    assert rescuer.wait(15) == 0
    assert q.stats().waiting == 0
