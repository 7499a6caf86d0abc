"""Single ownership under concurrency: threads and processes racing for thousands of messages."""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections import Counter

import redis

from keyqueue import Queue


def drain(url: str, batch: int, out: list[str] | None = None, scripting: bool = True) -> list[str]:
    """Claim and ack until the queue is empty; returns every id this consumer was given."""
    q = Queue("race", url=url, scripting=scripting)
    got = out if out is not None else []
    while True:
        msgs = q.claim_many(batch) if batch > 1 else [m for m in [q.claim()] if m]
        if not msgs:
            return got
        got.extend(m.id for m in msgs)
        assert q.ack_many(msgs) == len(msgs)


def _drain_into(url: str, batch: int, results: mp.Queue, scripting: bool) -> None:
    results.put(drain(url, batch, scripting=scripting))


def test_threads_never_share_a_message(redis_server, r: redis.Redis, scripting: bool) -> None:
    q = Queue("race", client=r, scripting=scripting)
    ids = q.enqueue_many([b"x"] * 6000)
    outs: list[list[str]] = [[] for _ in range(8)]
    threads = [
        threading.Thread(target=drain, args=(redis_server.url, 1 + 9 * (i % 2), outs[i], scripting)) for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    seen = Counter(i for out in outs for i in out)
    assert sorted(seen, key=int) == ids
    assert max(seen.values()) == 1
    assert sum(1 for out in outs if out) >= 4  # they really raced
    assert q.stats().processing == 0 and not r.keys("kq:{race}:item:*")


def test_processes_never_share_a_message(redis_server, r: redis.Redis, scripting: bool) -> None:
    q = Queue("race", client=r, scripting=scripting)
    ids = q.enqueue_many([b"y"] * 8000)
    ctx = mp.get_context("spawn")
    results: mp.Queue = ctx.Queue()
    procs = [
        ctx.Process(target=_drain_into, args=(redis_server.url, (1, 25, 100, 7)[i], results, scripting))
        for i in range(4)
    ]
    for p in procs:
        p.start()
    outs = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    seen = Counter(i for out in outs for i in out)
    assert sorted(seen, key=int) == ids and max(seen.values()) == 1


def test_ownership_holds_while_messages_expire(redis_server, r: redis.Redis, scripting: bool) -> None:
    """Short timeouts, a reaper racing the claimers: deliveries of one id never overlap."""
    vis = 0.05
    q = Queue("race", client=r, visibility_timeout=vis, bucket_seconds=1, scripting=scripting)
    q.enqueue_many([str(i) for i in range(300)])
    stop = threading.Event()
    spans: list[tuple[str, float, str]] = []
    lock = threading.Lock()

    def reaper() -> None:
        while not stop.is_set():
            q.reap()

    def claimer(ack_mod: int) -> None:
        mine = Queue("race", url=redis_server.url, scripting=scripting)
        while not stop.is_set():
            for m in mine.claim_many(5):
                with lock:
                    spans.append((m.id, m.deadline, m.receipt))  # type: ignore[arg-type]
                if int(m.id) % ack_mod == 0:  # a few are acked; the rest keep expiring
                    m.ack()

    workers = [threading.Thread(target=reaper)] + [threading.Thread(target=claimer, args=(k,)) for k in (11, 13, 17)]
    for t in workers:
        t.start()
    try:
        from ..support.helpers import wait_until

        wait_until(lambda: len(spans) > 1500, timeout=60)
    finally:
        stop.set()
        for t in workers:
            t.join(30)
    by_id: dict[str, list[tuple[float, str]]] = {}
    for mid, deadline, receipt in spans:
        by_id.setdefault(mid, []).append((deadline, receipt))
    redelivered = 0
    for mid, deliveries in by_id.items():
        deliveries.sort()
        receipts = [rc for _, rc in deliveries]
        assert len(set(receipts)) == len(receipts), f"{mid}: a receipt was handed out twice"
        for (prev_deadline, _), (deadline, _) in zip(deliveries, deliveries[1:]):
            assert deadline - vis >= prev_deadline - 0.001, f"{mid} claimed while still owned"
            redelivered += 1
    assert redelivered > 100


def test_a_script_free_claim_that_a_reap_overtakes_starts_after_the_last_delivery(redis_server, r: redis.Redis) -> None:
    """A script-free claim reads the list head (a stale entry of a message still owned), then
    a reaper puts that message back before the claim takes it: the new delivery is timed
    from when the claim took it, so it starts after the one it replaces ended."""
    from keyqueue.core.roundtrip import Stepper
    from keyqueue.transport.sync import Pinned

    from ..support.helpers import wait_until

    q = Queue("race", client=r, visibility_timeout=0.2, bucket_seconds=1, scripting=False)
    q.enqueue("x")
    first = q.claim()
    assert first is not None
    k = q._core.keys
    item = k.item(first.id)
    ended = int(r.hget(item, "d"))
    r.lpush(k.queue, first.id)  # a stale entry, as a claimer that died before its commit leaves

    step = Stepper(q._core.claim_now(1, 200))
    pinned = Pinned(r)
    try:
        while not any(c[0] == "LINDEX" for c in step.next):  # type: ignore[union-attr]
            step.send(pinned.round_trip(step.next))  # type: ignore[arg-type]
        step.send(pinned.round_trip(step.next))  # type: ignore[arg-type]  # the head, and the time
        wait_until(lambda: q.reap() is not None and r.sismember(k.items, first.id), timeout=30)
        while not step.done:
            step.send(pinned.round_trip(step.next))  # type: ignore[arg-type]
    finally:
        pinned.release(step.clean)
    assert [f.id for f in step.result] == [first.id]
    started = int(r.hget(item, "d")) - 200
    assert started >= ended, f"delivered at {started}, while the last delivery ran until {ended}"
    assert r.sismember(k.processing, first.id)


def test_releases_racing_claims_leave_every_message_visible(redis_server, r: redis.Redis, scripting: bool) -> None:
    """Consumers release some messages while others claim: a claimer that finds a list entry
    stale must never drop the fresh entry a release just added (it would leave the message
    waiting but invisible to every claim)."""
    q = Queue("race", client=r, scripting=scripting)
    total = 2000
    seen: list[str] = []
    stop = threading.Event()

    def produce() -> None:
        for _ in range(0, total, 20):
            q.enqueue_many([b"x"] * 20)

    def consume() -> None:
        mine = Queue("race", url=redis_server.url, scripting=scripting)
        while not stop.is_set():
            for m in mine.claim_many(5, wait=0.05):
                if int(m.id) % 7 == 0 and m.receives == 1:
                    m.release()
                    continue
                seen.append(m.id)
                assert m.ack()

    threads = [threading.Thread(target=produce)] + [threading.Thread(target=consume) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        from ..support.helpers import wait_until

        wait_until(lambda: len(seen) >= total, timeout=60)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert len(seen) == len(set(seen)) == total
    s = q.stats()
    assert (s.waiting, s.processing, s.delayed) == (0, 0, 0)
