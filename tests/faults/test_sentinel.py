"""Sentinel URLs on real servers: a primary, two replicas and three sentinels,
started here; the library, the asyncio API and the CLI follow the master, and a failover
under producers with min_replicas=1 and a worker loses nothing acknowledged."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Iterator

import pytest
import redis

from keyqueue import NotReplicated, Queue, Reaper, Worker, aio
from keyqueue.server import free_port

from ..support.ha_servers import SentinelSet
from ..support.helpers import wait_until
from ..support.processes import in_process
from ..support.workers import Running


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
    assert type(q.client.connection_pool).__name__ == "BlockingSentinelPool"  # waits its turn when all are busy

    async def main() -> str:
        async with aio.Queue("s", url=ha.url) as aq:
            got = await aq.enqueue("async")
            m = await aq.claim()
            assert m is not None and m.text == "async" and await m.ack()
            return got

    assert asyncio.run(main())
    direct.close()


def test_many_connections_discovering_the_master_at_once_keep_every_sentinel(ha: SentinelSet) -> None:
    """As after a failover: many new connections ask the sentinels at once, the first one
    listed not answering. Every sentinel stays listed once (none dropped with its
    connections left open), on both faces."""
    url = ha.url.replace("redis+sentinel://", f"redis+sentinel://127.0.0.1:{free_port()},")

    def kept(q: Queue | aio.Queue) -> list[int]:
        manager = q.client.connection_pool.sentinel_manager
        return sorted(id(s) for s in manager.sentinels)

    q = Queue("discover", url=url)
    before = kept(q)
    barrier = threading.Barrier(40)

    def one() -> None:
        barrier.wait(30)
        assert q.length() == 0

    threads = [threading.Thread(target=one) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert kept(q) == before and len(set(before)) == 4
    q.client.close()

    async def main() -> None:
        async with aio.Queue("discover", url=url) as aq:
            before = kept(aq)
            lengths = await asyncio.gather(*(aq.length() for _ in range(40)))
            assert lengths == [0] * 40
            assert kept(aq) == before and len(set(before)) == 4

    asyncio.run(main())


def test_the_cli_takes_a_sentinel_url(ha: SentinelSet) -> None:
    sent = in_process(["--url", ha.url, "enqueue", "cli", "hello"])
    assert sent.returncode == 0, sent.stderr
    out = in_process(["--url", ha.url, "stats", "cli", "--json"])
    assert out.returncode == 0 and '"waiting": 1' in out.stdout, out.stderr


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
    # and `keyqueue serve` on the same sentinel URL: it must follow the new primary too
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "keyqueue", "--url", ha.url, "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:  # serve is stopped whatever fails
        wait_until(lambda: _get(base + "/healthz")[0] == 200, timeout=30)
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
        # serve, never restarted, answers from the new primary: a queue made after the failover
        Queue("after-failover", url=ha.url).enqueue("x")
        wait_until(
            lambda: _get(base + "/api/queues/after-failover") == (200, {"name": "after-failover", "waiting": 1}),
            timeout=30,
        )
        assert _get(base + "/healthz")[0] == 200
    finally:
        server.terminate()
        server.wait(30)
    loop.call_soon_threadsafe(async_worker.stop)
    async_thread.join(30)
    reaper.shutdown()
    assert not async_thread.is_alive() and reaper.passes > 0
    loop.run_until_complete(aq.aclose())
    loop.close()
    lost = wanted - set(handled)
    duplicates = len(handled) - len(set(handled))
    print(
        f"failover: {len(wanted)} acknowledged, {len(lost)} lost, {duplicates} duplicates, "
        f"{len(failures)} enqueues refused meanwhile ({sorted(set(failures))})"
    )
    assert not lost


def test_min_replicas_is_what_keeps_acknowledged_writes_through_a_failover() -> None:
    """Why min_replicas exists: the replication link is cut while two producers go
    on writing, one with min_replicas=0, one with 1; then the primary dies and a replica is
    promoted. The first lost what it was told was enqueued; the second was told nothing
    it did not keep (its enqueues raised NotReplicated)."""
    ha = SentinelSet(replicas=2)
    made: list[Queue] = []
    try:
        q0 = Queue("r0", url=ha.url)
        q1 = Queue("r1", url=ha.url, min_replicas=1, replica_timeout=0.2)
        made += [q0, q1]
        before = [q0.enqueue("before"), q1.enqueue("before")]  # replicated: survive
        ha.cut_replication()
        acked0 = [q0.enqueue(f"m{i}") for i in range(50)]
        acked1: list[str] = []
        refused1 = 0
        for i in range(5):
            try:
                acked1.append(q1.enqueue(f"m{i}"))
            except NotReplicated as exc:
                assert exc.acknowledged == 0 and exc.wanted == 1
                refused1 += 1
        old = ha.primary.port
        ha.primary.kill()
        ha.wait_for_failover(old)

        def survivors(q: Queue, ids: list[str]) -> set[str]:
            return {m.id for m in q.get(ids)}

        wait_until(lambda: _answers(q0), timeout=30)
        assert survivors(q0, before[:1]) == {before[0]} and survivors(q1, before[1:]) == {before[1]}
        lost0 = set(acked0) - survivors(q0, acked0)
        assert lost0 == set(acked0)  # every write made during the partition was acknowledged, then lost
        assert refused1 == 5 and not acked1  # with min_replicas=1 none was acknowledged
        print(
            f"min_replicas=0: {len(lost0)} of {len(acked0)} acknowledged enqueues lost in the failover; "
            f"min_replicas=1: {refused1} refused with NotReplicated, 0 acknowledged, 0 lost"
        )
    finally:
        for q in made:
            q.client.close()
        ha.stop()


def _answers(q: Queue) -> bool:
    try:
        q.length()
        return True
    except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
        return False


def _get(url: str) -> tuple[int, dict[str, object] | None]:
    """Status and the fields of a JSON answer that these tests look at (0: no answer)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            body = json.loads(resp.read())
            return resp.status, {k: body[k] for k in ("name", "waiting") if k in body} or None
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError:
        return 0, None
