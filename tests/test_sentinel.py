"""Sentinel URLs (SPEC 9) on real servers: a primary, two replicas and three sentinels,
started here; the library, the asyncio API and the CLI follow the master, and a failover
under producers with min_replicas=1 and a worker loses nothing acknowledged."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from typing import Iterator

import pytest
import redis

from keyqueue import NotReplicated, Queue, Reaper, Worker, aio

from .conftest import wait_until
from .ha_servers import SentinelSet
from .test_worker import Running


@pytest.fixture(scope="module")
def ha() -> Iterator[SentinelSet]:
    s = SentinelSet(replicas=2)
    try:
        yield s
    finally:
        s.stop()


def test_a_queue_follows_the_sentinels_to_the_primary(ha: SentinelSet) -> None:
    q = Queue("s", url=ha.url, min_replicas=1)
    mid = q.enqueue("via sentinel")
    direct = redis.Redis(port=ha.primary.port)
    assert direct.hget(f"kq:{{s}}:item:{mid}", "b") == b"via sentinel"
    m = q.claim()
    assert m is not None and m.id == mid and q.ack(m)
    assert type(q.client.connection_pool).__name__ == "SentinelConnectionPool"

    async def main() -> str:
        async with aio.Queue("s", url=ha.url) as aq:
            got = await aq.enqueue("async")
            m = await aq.claim()
            assert m is not None and m.text == "async" and await m.ack()
            return got

    assert asyncio.run(main())
    direct.close()


def test_the_cli_takes_a_sentinel_url(ha: SentinelSet) -> None:
    run = [sys.executable, "-m", "keyqueue", "--url", ha.url]
    subprocess.run([*run, "enqueue", "cli", "hello"], check=True, capture_output=True, timeout=60)
    out = subprocess.run([*run, "stats", "cli", "--json"], check=True, capture_output=True, text=True, timeout=60)
    assert '"waiting": 1' in out.stdout


def test_a_failover_loses_nothing_acknowledged(ha: SentinelSet) -> None:
    """Producers with min_replicas=1 and a worker, both through the sentinel URL; the
    primary is SIGKILLed mid-run; every enqueue that returned an id is processed."""
    acked: list[str] = []
    handled: list[str] = []
    by_async: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        q = Queue("fo", url=ha.url, min_replicas=1, replica_timeout=0.5)
        i = 0
        while not stop.is_set():
            try:
                acked.append(q.enqueue(f"m{i}"))
                i += 1
            except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError, NotReplicated) as exc:
                failures.append(type(exc).__name__)  # not acknowledged: a user would retry
                time.sleep(0.05)

    worker_q = Queue("fo", url=ha.url, visibility_timeout=2)
    producer = threading.Thread(target=produce, daemon=True)
    # beside the sync worker: an asyncio worker and a reaper, all through the sentinel URL
    loop = asyncio.new_event_loop()
    aq = aio.Queue("fo", url=ha.url)

    async def on_message(m: aio.Message) -> None:
        handled.append(m.id)
        by_async.append(m.id)

    async_worker = aio.Worker(aq, on_message, concurrency=4)
    async_thread = threading.Thread(target=loop.run_until_complete, args=(async_worker.run(),), daemon=True)
    reaper = Reaper(["fo"], url=ha.url, interval=0.5)
    reaper.start()
    async_thread.start()
    with Running(Worker(worker_q, lambda m: handled.append(m.id))):
        producer.start()
        wait_until(lambda: len(handled) >= 200, timeout=30)
        old = ha.primary.port
        ha.primary.kill()  # SIGKILL: no goodbye to anyone
        new = ha.wait_for_failover(old)
        assert new != old
        count = len(acked)
        async_before = len(by_async)
        # producing again on the new primary, and the asyncio worker taking part again (after
        # its outage backoff)
        wait_until(lambda: len(acked) >= count + 200 and len(by_async) > async_before, timeout=60)
        stop.set()
        producer.join(30)
        wanted = set(acked)
        wait_until(lambda: wanted <= set(handled), timeout=60)
    loop.call_soon_threadsafe(async_worker.stop)
    async_thread.join(30)
    reaper.shutdown()
    assert not async_thread.is_alive() and reaper.passes > 0
    loop.run_until_complete(aq.aclose())
    loop.close()
    lost = wanted - set(handled)
    duplicates = len(handled) - len(set(handled))
    print(f"failover: {len(wanted)} acknowledged, {len(lost)} lost, {duplicates} duplicates, "
          f"{len(failures)} enqueues refused meanwhile ({sorted(set(failures))})")
    assert not lost
