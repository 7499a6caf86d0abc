"""Past the pools' limits: what keyqueue builds from a URL waits for a free connection
instead of failing with "Too many connections", and says which setting to raise when the
wait runs out."""

from __future__ import annotations

import asyncio
import collections
import functools
import threading
from typing import Any

import pytest
import redis
import redis.asyncio

import keyqueue.aio
from keyqueue import PoolExhausted, Queue
from keyqueue.connection import from_url
from keyqueue.pools import AsyncBlockingSentinelPool, BlockingSentinelPool
from keyqueue.server import RedisServer

from ..support.helpers import run_threads, wait_until


def test_five_hundred_tasks_share_one_async_queue(redis_server: RedisServer, r: redis.Redis) -> None:
    """250 long-polling consumers and 250 producers on one aio.Queue built from a URL (a pool
    of 100): none fails, every message is claimed exactly once."""
    got: collections.Counter[bytes] = collections.Counter()

    async def main() -> None:
        q = keyqueue.aio.Queue("pool500", url=redis_server.url)

        async def consume() -> None:
            while True:
                msg = await q.claim(wait=1)
                if msg is None:
                    if sum(got.values()) >= 250:
                        return
                    continue
                got[msg.body] += 1
                assert await q.ack(msg)

        async def produce(i: int) -> None:
            await q.enqueue(f"m{i}")

        try:
            await asyncio.wait_for(
                asyncio.gather(*[consume() for _ in range(250)], *[produce(i) for i in range(250)]), 60
            )
            assert q.client.connection_pool.max_connections == 100
        finally:
            await q.client.aclose()

    asyncio.run(main())
    assert got == collections.Counter(f"m{i}".encode() for i in range(250))


def test_two_hundred_threads_share_one_queue(redis_server: RedisServer, r: redis.Redis) -> None:
    """The sync face the same way: 200 threads long-polling beside 100 producing, on a pool
    of 20 connections."""
    q = Queue("pool200", url=redis_server.url + "?max_connections=20")
    got: collections.Counter[bytes] = collections.Counter()
    lock = threading.Lock()

    def consume() -> None:
        while True:
            msg = q.claim(wait=1)
            if msg is None:
                with lock:
                    if sum(got.values()) >= 100:
                        return
                continue
            with lock:
                got[msg.body] += 1
            msg.ack()

    calls = [consume] * 200 + [functools.partial(q.enqueue, f"m{i}") for i in range(100)]
    assert run_threads(calls, 60) == []
    assert got == collections.Counter(f"m{i}".encode() for i in range(100))
    q.client.close()


def test_async_worker_with_concurrency_300(redis_server: RedisServer, r: redis.Redis) -> None:
    """300 handlers at once, each making calls of its own on the queue's pool: every message
    handled once, nothing dead-lettered or retried."""
    seen: collections.Counter[bytes] = collections.Counter()

    async def main() -> None:
        q = keyqueue.aio.Queue("pool-worker", url=redis_server.url, max_receives=1)
        side = keyqueue.aio.Queue("pool-side", client=q.client)
        await q.enqueue_many([f"m{i}".encode() for i in range(900)])

        async def handler(msg: keyqueue.aio.Message) -> None:
            seen[msg.body] += 1
            await side.enqueue(msg.body)
            await asyncio.sleep(0.05)  # 300 handlers hold their messages at once

        worker = keyqueue.aio.Worker(q, handler, concurrency=300)
        try:
            await asyncio.wait_for(worker.run(burst=True), 120)
            stats = await q.stats()
            assert (stats.waiting, stats.processing, stats.delayed, stats.dead) == (0, 0, 0, 0)
            assert (await side.stats()).waiting == 900
        finally:
            await q.client.aclose()

    asyncio.run(main())
    assert seen == collections.Counter(f"m{i}".encode() for i in range(900))


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_pool_busy_past_pool_timeout_names_the_settings(redis_server: RedisServer, r: redis.Redis, face: str) -> None:
    """One connection, held by a long-poll slice longer than pool_timeout: the next operation
    fails with PoolExhausted (a redis ConnectionError, so workers back off), naming both
    settings; nothing is lost."""
    url = redis_server.url + "?max_connections=1&pool_timeout=0.2"
    if face == "sync":
        q: Any = Queue("exhausted", url=url)
        poll = threading.Thread(target=q.claim, kwargs={"wait": 1.5})
        poll.start()
        try:
            wait_until(lambda: not q.client.connection_pool.has_idle())  # the long-poll holds it
            with pytest.raises(PoolExhausted) as info:
                q.enqueue("x")
        finally:
            poll.join()
        q.client.close()
    else:

        async def main() -> Any:
            aq = keyqueue.aio.Queue("exhausted", url=url)
            await aq.stats()  # settings loaded: the long-poll's first step holds the connection
            poll = asyncio.ensure_future(aq.claim(wait=1.5))
            await asyncio.sleep(0)
            while not aq.client.connection_pool._in_use_connections:
                await asyncio.sleep(0.01)
            try:
                with pytest.raises(PoolExhausted) as caught:
                    await aq.enqueue("x")
            finally:
                await poll
                await aq.client.aclose()
            return caught

        info = asyncio.run(main())
    text = str(info.value)
    assert "max_connections" in text and "pool_timeout" in text and "all 1 in use" in text
    assert isinstance(info.value, redis.ConnectionError)
    assert Queue("exhausted", client=r).stats().waiting == 0


def test_url_sizes_and_times_the_pool() -> None:
    for cls in (redis.Redis, redis.asyncio.Redis):
        pool = from_url(
            "redis://127.0.0.1:1/0?max_connections=7&pool_timeout=2.5&socket_timeout=3", cls
        ).connection_pool
        assert (pool.max_connections, pool.timeout, pool.connection_kwargs["socket_timeout"]) == (7, 2.5, 3.0)
        pool = from_url("redis://127.0.0.1:1/0", cls).connection_pool
        assert (pool.max_connections, pool.timeout) == (100, 20.0)
    sentinel = "redis+sentinel://127.0.0.1:1/svc?max_connections=5&pool_timeout=1"
    pool = from_url(sentinel).connection_pool
    assert isinstance(pool, BlockingSentinelPool) and (pool.max_connections, pool.timeout) == (5, 1.0)
    pool = from_url(sentinel, redis.asyncio.Redis).connection_pool
    assert isinstance(pool, AsyncBlockingSentinelPool) and (pool.max_connections, pool.timeout) == (5, 1.0)


@pytest.mark.parametrize(
    "query, why",
    [
        ("max_connections=0", "max_connections must be a positive whole number"),
        ("max_connections=many", "invalid value for 'max_connections'"),
        ("pool_timeout=0", "pool_timeout must be a positive number of seconds"),
        ("pool_timeout=soon", "invalid value for 'pool_timeout'"),
        ("timeout=3", "unknown query parameter 'timeout'"),
    ],
)
def test_bad_pool_settings_are_a_bad_url(query: str, why: str) -> None:
    from keyqueue import ConfigurationError

    with pytest.raises(ConfigurationError, match=why):
        from_url(f"redis://127.0.0.1:1/0?{query}")


def test_the_dashboard_and_metrics_under_200_requests_at_once(redis_server: RedisServer, r: redis.Redis) -> None:
    """keyqueue serve's pages, API and /metrics share one pool (100 connections): 200
    requests at once over 5 queues, every one answered 200 with the right numbers."""
    import httpx

    from keyqueue.web import create_app

    from ..support.web_support import Served

    for i in range(5):
        Queue(f"dash{i}", client=r).enqueue_many([b"x"] * (i + 1))
    served = Served(create_app(url=redis_server.url))

    async def main() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=300)
        async with httpx.AsyncClient(base_url=served.url, limits=limits, timeout=60) as client:
            paths = ["/api/queues", "/metrics", "/api/queues/dash3", "/"] * 50
            return await asyncio.gather(*[client.get(p) for p in paths])

    try:
        replies = asyncio.run(main())
    finally:
        served.stop()
    assert [x.status_code for x in replies] == [200] * 200
    waiting = {q["name"]: q["waiting"] for q in replies[0].json() if q["name"].startswith("dash")}
    assert waiting == {f"dash{i}": i + 1 for i in range(5)}
