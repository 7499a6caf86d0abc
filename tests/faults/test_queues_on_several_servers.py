"""Queues on several servers (or cluster nodes) served together: one out of reach holds
back only itself."""

from __future__ import annotations

import asyncio

import pytest
import redis

from keyqueue import Queue, aio
from keyqueue.queue import claim_any
from keyqueue.server import RedisServer


def test_a_server_out_of_reach_holds_back_only_its_own_queue(caplog: pytest.LogCaptureFixture) -> None:
    """claim_any over queues on two servers (both faces): with one server stopped, the other
    queue's messages are still claimed (and a WARNING says so once); with both stopped, the
    outage is the caller's."""
    down, up = RedisServer(["--appendonly", "no"]).start(), RedisServer(["--appendonly", "no"]).start()
    try:
        lost = Queue("first", url=down.url, visibility_timeout=30)
        kept = Queue("second", url=up.url, visibility_timeout=30)
        lost.enqueue("a")
        ids = kept.enqueue_many(["b", "c", "d"])
        down.stop()
        with caplog.at_level("WARNING", logger="keyqueue.queue"):
            for i in range(2):  # (each call tries the lost one first)
                q, got = claim_any([lost, kept], count=1)
                assert q is kept and [m.id for m in got] == [ids[i]]
        warned = [r.getMessage() for r in caplog.records]
        assert len(warned) == 1 and warned[0].startswith("queue first out of reach"), warned

        async def aio_claim() -> list[str]:
            queues = [aio.Queue("first", url=down.url), aio.Queue("second", url=up.url)]
            try:
                q, got = await aio.claim_any(queues, count=5)
                assert q is queues[1]
                return [m.id for m in got]
            finally:
                for each in queues:
                    await each.client.aclose()

        assert asyncio.run(aio_claim()) == ids[2:]
        up.stop()
        with pytest.raises(redis.ConnectionError):
            claim_any([lost, kept], count=1)
        lost.client.close()
        kept.client.close()
    finally:
        down.cleanup()
        up.cleanup()
