"""What only ``keyqueue.aio.Queue.check`` does: the fsck is one core operation, so the async
queue runs the same check as the sync one, and must find what the sync check finds (over
RESP2 too) and wait out its second look without blocking the loop. Each test runs its
coroutine with ``asyncio.run``. Every other fsck test runs on both faces: test_check.py."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, TypeVar

import pytest
import redis
import redis.asyncio

from keyqueue import Queue
from keyqueue.aio import Queue as AioQueue
from keyqueue.fsck import (
    DEAD_DUPLICATE,
    EMPTY_INDEX,
    MISSING_HASH,
    ORPHAN,
    OWNED_AND_WAITING,
    STALE_LIST,
    STALE_TIMER,
    STRAY_FIELDS,
    TIMER_INDEX,
    UNLISTED,
    WRONG_TYPE,
    CheckReport,
    check_queue,
)
from keyqueue.server import RedisServer

from ..support.check_support import (
    BASE,
    DEAD,
    ITEMS,
    PROCESSING,
    QUEUE,
    TIMERS,
    claim_and_ack_all,
    item,
    notes,
    problems,
)
from ..support.helpers import FakeClock, snapshot

T = TypeVar("T")


def on_loop(
    port: int, scripting: bool, body: Callable[[AioQueue], Awaitable[T]], *, protocol: int | None = None, **kw: Any
) -> T:
    """Run ``body(queue)`` on a fresh loop with an async queue "q" on its own client."""

    async def main() -> T:
        options: dict[str, Any] = {} if protocol is None else {"protocol": protocol}
        client = redis.asyncio.Redis(port=port, **options)
        try:
            return await body(AioQueue("q", client=client, scripting=scripting, **kw))
        finally:
            await client.aclose()

    return asyncio.run(main())


@pytest.fixture
def sq(r: redis.Redis, scripting: bool, clock: FakeClock) -> Queue:
    """The sync queue "q" (same clock): it makes the healthy states and drains the queue."""
    return Queue("q", client=r, scripting=scripting, clock=clock, visibility_timeout=30)


@pytest.mark.parametrize("protocol", [None, 2], ids=["default-protocol", "resp2"])
def test_async_check_finds_and_repairs_what_the_sync_check_does(
    redis_server: RedisServer, r: redis.Redis, scripting: bool, clock: FakeClock, sq: Queue, protocol: int | None
) -> None:
    sq.enqueue_many(["a", "b", "c", "d", "e", "f"])  # 1..6
    assert sq.claim() is not None  # 1 in flight
    sq.enqueue("later", delay=60)  # 7 delayed
    bucket = str(int(r.hget(item("7"), "d")) // 60_000)
    r.rpush(QUEUE, "1")  # a list entry of an id in flight
    r.sadd(PROCESSING, "2")  # a claim that died between its steps
    r.lrem(QUEUE, 0, "3")  # waiting, but invisible to claims
    r.sadd(BASE + "timer:5", "3")  # a timer entry of a waiting id
    r.srem(ITEMS, "4")
    r.lrem(QUEUE, 0, "4")  # an item hash nothing refers to
    r.hset(item("5"), mapping={"c": "9-9", "d": "123"})  # stray receipt and timer
    r.rpush(DEAD, "6")  # dead and waiting
    r.zrem(TIMERS, bucket)  # a bucket the reaper cannot see
    r.sadd(ITEMS, "99")  # an id without an item hash
    r.zadd(TIMERS, {"999": 1})  # an index entry of no timer set
    want = {
        MISSING_HASH: ["99"],
        ORPHAN: ["4"],
        OWNED_AND_WAITING: ["2"],
        UNLISTED: ["3"],
        DEAD_DUPLICATE: ["6"],
        STRAY_FIELDS: ["5"],
        TIMER_INDEX: [bucket],
    }
    want_notes = {STALE_LIST: ["1"], STALE_TIMER: ["3"], EMPTY_INDEX: ["999"]}
    before = snapshot(r)
    sync = check_queue(sq, settle=0)

    async def body(q: AioQueue) -> tuple[CheckReport, CheckReport, CheckReport]:
        found = await q.check(settle=0)
        assert snapshot(r) == before  # a check without repair writes nothing
        return found, await q.check(repair=True, settle=0), await q.check(settle=0)

    found, fixed, after = on_loop(redis_server.port, scripting, body, protocol=protocol, clock=clock)
    assert problems(found) == want and notes(found) == want_notes and not found.consistent
    assert found.to_dict() == sync.to_dict()  # the sync check of the same damage agrees
    assert problems(fixed) == want and notes(fixed) == want_notes and fixed.consistent
    assert all(p.repaired for p in fixed.problems + fixed.notes), str(fixed)
    assert after.consistent and after.problems == [] and after.notes == [], str(after)
    assert check_queue(sq, settle=0).to_dict() == after.to_dict()
    assert (after.waiting, after.processing, after.delayed, after.dead) == (5, 1, 1, 0)

    clock.advance(3600)  # every message delivered exactly once: nothing lost or doubled
    sq.reap()
    got = claim_and_ack_all(sq)
    assert sorted(got, key=int) == ["1", "2", "3", "4", "5", "6", "7"]
    assert r.keys(BASE + "item:*") == [] and r.zcard(TIMERS) == 0 and r.llen(DEAD) == 0


def test_async_and_sync_reports_agree(redis_server: RedisServer, r: redis.Redis, scripting: bool, sq: Queue) -> None:
    sq.enqueue_many(["a", "b", "c"])
    held, dead = sq.claim(), sq.claim()
    assert held and dead and dead.dead_letter("broken")
    sq.enqueue("later", delay=60)
    r.sadd(PROCESSING, "3")
    r.rpush(DEAD, "2")
    r.set(item("77"), "not a hash")
    sync = check_queue(sq, settle=0)
    async_ = on_loop(redis_server.port, scripting, lambda q: q.check(settle=0))
    assert async_.to_dict() == sync.to_dict() and str(async_) == str(sync)
    assert problems(async_) == {WRONG_TYPE: [item("77")], OWNED_AND_WAITING: ["3"], DEAD_DUPLICATE: ["2"]}


def test_async_second_look_waits_without_blocking_the_loop(
    redis_server: RedisServer, r: redis.Redis, scripting: bool, sq: Queue
) -> None:
    """A claim caught between its steps finishes while the check waits: another task on the
    loop runs during the settle, and the check then finds nothing (and repairs nothing)."""
    sq.enqueue("a")
    r.sadd(PROCESSING, "1")

    async def body(q: AioQueue) -> CheckReport:
        async def claim_finishes() -> None:
            await asyncio.sleep(0.1)
            await q.client.srem(PROCESSING, "1")

        report, _ = await asyncio.gather(q.check(repair=True, settle=0.5), claim_finishes())
        return report

    report = on_loop(redis_server.port, scripting, body)
    assert report.consistent and report.problems == [] and report.notes == []
    assert sq.length() == 1 and r.scard(PROCESSING) == 0
