"""The counters hash: exact totals kept by the operations themselves, in the same
script or MULTI as the change they count, in both modes and both faces."""

from __future__ import annotations

from typing import Callable

import redis

from keyqueue import Queue

from ..support.helpers import FakeClock, wait_until

ZERO = {"enqueued": 0, "acked": 0, "redelivered": 0, "dead_lettered": 0, "expired": 0, "scheduled": 0, "throttled": 0}


def counts(q: Queue, **changed: int) -> dict[str, int]:
    return {**ZERO, **changed}


def test_enqueued_counts_new_messages_only(make_queue: Callable[..., Queue]) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, bucket_seconds=1)
    assert q.counters() == ZERO  # a queue never counted reads as zeros
    q.enqueue("a")
    q.enqueue("b", dedup_key="k")
    q.enqueue("b again", dedup_key="k")  # a dedup hit is no new message
    q.enqueue_many(["c", "d", "e"])
    q.enqueue_many(["f", "g"], delays=[0, 0], dedup_keys=["k", "other"])  # one hit, one new
    q.enqueue("later", delay=2)
    assert q.counters() == counts(q, enqueued=7)
    clock.advance(3)
    assert q.reap().delayed_released == 1  # a delayed message becoming visible counts nothing
    assert q.counters() == counts(q, enqueued=7)


def test_acked_counts_current_deliveries_once(make_queue: Callable[..., Queue]) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, visibility_timeout=5, bucket_seconds=1)
    q.enqueue_many(["a", "b", "c", "d"])
    a, b, c, d = q.claim_many(4)
    assert q.ack(a) and q.ack_many([b, b, c]) == 2
    assert not q.ack(a)  # already acked
    clock.advance(6)
    assert q.reap().requeued == 1  # d's visibility timeout expired: redelivered
    assert not q.ack(d)  # a stale delivery's ack counts nothing
    assert q.counters() == counts(q, enqueued=4, acked=3, redelivered=1)


def test_redelivered_counts_at_the_next_claim_without_a_reaper(make_queue: Callable[..., Queue]) -> None:
    q = make_queue("q", visibility_timeout=0.2, bucket_seconds=0.1)
    q.enqueue("x")
    first = q.claim()
    assert first is not None
    again = wait_until(lambda: q.claim(), timeout=5)  # claim-time reaping brings it back
    assert again.id == first.id and again.receives == 2
    assert q.counters() == counts(q, enqueued=1, redelivered=1)
    assert q.ack(again)
    assert q.counters() == counts(q, enqueued=1, acked=1, redelivered=1)


def test_dead_lettered_counts_every_way_to_the_dead_letters(make_queue: Callable[..., Queue]) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, visibility_timeout=5, bucket_seconds=1, max_receives=1)
    q.enqueue_many(["by worker", "at claim", "by reaper"])
    m = q.claim()
    assert m is not None and q.dead_letter(m, "poison")  # by a worker
    m = q.claim()
    assert m is not None and q.release(m)  # back, but out of receives
    m = q.claim()  # released to the tail: "by reaper" is first
    assert m is not None and m.body == b"by reaper"
    clock.advance(6)
    assert q.reap().dead_lettered == 1  # expired on its last receive
    assert q.claim() is None  # "at claim" goes to the dead letters instead of out
    assert q.stats().dead == 3
    assert q.counters() == counts(q, enqueued=3, dead_lettered=3)
    assert q.requeue() == 3  # a requeue from the dead letters is no redelivery
    assert q.counters() == counts(q, enqueued=3, dead_lettered=3)


def test_counters_outlive_a_purge_and_go_with_the_queue(make_queue: Callable[..., Queue], r: redis.Redis) -> None:
    q = make_queue("q")
    q.enqueue_many(["a", "b"])
    q.purge(source="all")
    assert q.counters() == counts(q, enqueued=2)
    q.destroy()
    assert not r.exists("kq:{q}:counters")
