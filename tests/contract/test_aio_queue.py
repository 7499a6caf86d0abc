"""What only the asyncio Queue can get wrong: blocking the loop, cancellation, many tasks on
one loop racing a sync client, construction without a loop, closing what it opened. (The
whole queue contract also runs on keyqueue.aio.Queue: see contract/conftest.py.)"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest
import redis
import redis.asyncio

from keyqueue import InvalidQueueName, Queue, aio

from ..support.helpers import wait_until

#: Constructing at import time, where no event loop runs (as a web app's module would).
MODULE_LEVEL = aio.Queue("module-level", url="redis://127.0.0.1:1/0")


def test_a_long_poll_never_blocks_the_loop(redis_server, r: redis.Redis, scripting: bool) -> None:
    """Another task runs while the claim waits in Redis: it sees this claim's connection
    blocked (by its client name: the server is shared) and sends the message the claim then
    takes. A blocked loop never runs it: the claim ends empty after its wait."""
    sync = Queue("q", client=r, scripting=scripting)
    name = f"long-poll-{time.monotonic_ns()}"
    ran: list[str] = []

    def blocked() -> bool:
        return any(c["name"] == name and "b" in c["flags"] for c in r.client_list())

    async def main() -> object:
        url = f"{redis_server.url}?client_name={name}"
        async with aio.Queue("q", url=url, scripting=scripting) as q:

            async def feeder() -> None:
                end = time.monotonic() + 30
                while not await asyncio.to_thread(blocked):
                    if time.monotonic() > end:
                        return
                    await asyncio.sleep(0.01)
                ran.append("while it waited")
                await asyncio.to_thread(sync.enqueue, "sent meanwhile")

            t = asyncio.create_task(feeder())
            got = await q.claim(wait=30)  # nothing to claim yet: it waits in Redis
            if got is None:
                t.cancel()
            await asyncio.gather(t, return_exceptions=True)
            return got

    got = asyncio.run(main())
    assert ran == ["while it waited"]
    assert got is not None and got.text == "sent meanwhile"  # type: ignore[attr-defined]


def test_a_cancelled_long_poll_takes_nothing(redis_server, r: redis.Redis, scripting: bool) -> None:
    sync = Queue("q", client=r, scripting=scripting)

    async def main() -> None:
        async with aio.Queue("q", url=redis_server.url, scripting=scripting) as q:
            waiter = asyncio.create_task(q.claim(wait=30))
            while r.info("clients")["blocked_clients"] < 1:  # it is waiting in BLPOP
                await asyncio.sleep(0.01)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        # The waiting connection is gone (with the claim it had queued behind its BLPOP);
        # the server notices the closed socket a moment later.
        wait_until(lambda: r.info("clients")["blocked_clients"] == 0, timeout=5)
        sync.enqueue("after the cancellation")
        s = sync.stats()
        assert (s.waiting, s.processing) == (1, 0)

    asyncio.run(main())
    m = sync.claim()
    assert m is not None and m.text == "after the cancellation" and m.receives == 1


def test_a_task_that_caught_its_cancellation_goes_on_using_the_queue(
    redis_server, r: redis.Redis, scripting: bool
) -> None:
    """Cleanup code that catches CancelledError and goes on (without uncancel) gets its
    operations' results: a cancel is raised only by the operation it was asked during, not
    by every one after it (which would have written, then raised: a retry would duplicate)."""
    got: list[object] = []

    async def main() -> None:
        async with aio.Queue("q", url=redis_server.url, scripting=scripting) as q:

            async def job() -> None:
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    pass
                got.append(await q.enqueue("follow-up"))
                got.append(await q.length())

            t = asyncio.create_task(job())
            await asyncio.sleep(0.05)
            t.cancel()
            await t

    asyncio.run(main())
    assert got == [got[0], 1] and [m.text for m in Queue("q", client=r, scripting=scripting).peek()] == ["follow-up"]


def test_many_tasks_and_a_sync_thread_own_each_message_once(redis_server, r: redis.Redis, scripting: bool) -> None:
    n = 600
    sync = Queue("q", client=r, scripting=scripting, visibility_timeout=60)
    sync.enqueue_many([str(i) for i in range(n)])
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def thread_consumer() -> None:
        q = Queue("q", url=redis_server.url, scripting=scripting)
        while msgs := q.claim_many(3):
            with lock:
                seen.update(m.id for m in msgs)
            assert q.ack_many(msgs) == len(msgs)

    async def main() -> None:
        async with aio.Queue("q", url=redis_server.url, scripting=scripting) as q:

            async def consumer() -> None:
                while msgs := await q.claim_many(3):
                    with lock:
                        seen.update(m.id for m in msgs)
                    assert await q.ack_many(msgs) == len(msgs)

            await asyncio.gather(*(consumer() for _ in range(20)))

    t = threading.Thread(target=thread_consumer)
    t.start()
    asyncio.run(main())
    t.join(60)
    assert len(seen) == n and max(seen.values()) == 1
    assert sync.stats().processing == 0


def test_constructing_needs_no_loop_and_no_redis() -> None:
    assert MODULE_LEVEL.name == "module-level"  # made at import time, Redis unreachable
    with pytest.raises(InvalidQueueName):
        aio.Queue("bad name")

    async def first_use() -> None:
        with pytest.raises(redis.ConnectionError):
            await MODULE_LEVEL.enqueue("x")  # the first operation is where it fails

    asyncio.run(first_use())


def test_async_with_closes_what_it_opened(redis_server, r: redis.Redis) -> None:
    url = redis_server.url + "?client_name=kq-aio-test"

    def named() -> int:
        return sum(1 for c in r.client_list() if c.get("name") == "kq-aio-test")

    async def main() -> None:
        async with aio.Queue("q", url=url) as q:
            await q.enqueue("x")
            assert named() >= 1
        # a client given by the caller stays open
        client = redis.asyncio.Redis(port=redis_server.port)
        async with aio.Queue("q", client=client) as q2:
            assert await q2.length() == 1
        assert await client.ping()
        await client.aclose()

    asyncio.run(main())
    wait_until(lambda: named() == 0, timeout=5)


def test_settings_load_on_first_use_and_are_written(redis_server, r: redis.Redis) -> None:
    q = aio.Queue("q", url=redis_server.url, visibility_timeout=9)
    assert r.exists("kq:{q}:config") == 0  # constructing did no I/O

    async def main() -> float:
        async with q:
            await q.enqueue("x")
            return q.settings.visibility_timeout

    assert asyncio.run(main()) == 9
    assert r.hget("kq:{q}:config", "visibility_timeout") == b"9"


def test_sync_and_async_messages_settle_each_other(redis_server, r: redis.Redis, scripting: bool) -> None:
    sync = Queue("q", client=r, scripting=scripting)

    async def main() -> None:
        async with aio.Queue("q", url=redis_server.url, scripting=scripting) as q:
            await q.enqueue("from async")
            m = sync.claim()
            assert m is not None and m.text == "from async"
            assert sync.release(m, delay=0, error="ValueError: later")
            again = await q.claim()
            assert again is not None and again.id == m.id and again.receives == 2
            assert again.last_error == "ValueError: later"
            before = time.time()
            assert await again.extend(60) and again.deadline is not None
            assert before + 60 - 0.01 <= again.deadline <= time.time() + 60
            assert await again.ack() and not sync.ack(m)

    asyncio.run(main())
