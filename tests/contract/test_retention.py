"""Retention: a message whose age (from its first enqueue, or its requeue) reached
``retention`` is deleted instead of delivered, a dead letter older than ``dead_retention``
too; counted in ``counters()["expired"]``. Both faces, both modes."""

from __future__ import annotations

import math
import threading
import time
from typing import Callable

import pytest
import redis

from keyqueue import Queue, Reaper

from ..support.helpers import FakeClock, run_threads, wait_until
from ..support.workers import Workers

TEN_YEARS = 10 * 365.25 * 86400


@pytest.mark.parametrize("setting", ["retention", "dead_retention"])
@pytest.mark.parametrize("bad", [0, -1, True, False, "10", math.nan, math.inf, -math.inf, TEN_YEARS + 1])
def test_a_bad_retention_raises_and_writes_nothing(
    make_queue: Callable[..., Queue], r: redis.Redis, setting: str, bad: object
) -> None:
    with pytest.raises(ValueError, match=setting):
        make_queue("fresh", visibility_timeout=5, **{setting: bad})
    assert r.keys("*") == []  # not the registration, not the other setting given with it


def test_retention_is_a_config_hash_field_read_by_every_process(
    make_queue: Callable[..., Queue], r: redis.Redis
) -> None:
    q = make_queue("q", retention=2.5, dead_retention=TEN_YEARS)
    assert r.hget("kq:{q}:config", "retention") == b"2.5"
    assert float(r.hget("kq:{q}:config", "dead_retention") or 0) == TEN_YEARS
    other = make_queue("q")  # given none: reads them
    assert other.settings.retention == 2.5 and other.settings.dead_retention == TEN_YEARS
    make_queue("q", retention=None)  # None is written as the empty field: kept for ever
    assert r.hget("kq:{q}:config", "retention") == b""
    assert make_queue("q").settings.retention is None
    assert make_queue("plain").settings.retention is None  # absent: None
    assert q.counters()["expired"] == 0  # 0 before anything expired


def test_a_claim_deletes_the_expired_messages_it_meets(make_queue: Callable[..., Queue], r: redis.Redis) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, retention=10, bucket_seconds=1)
    old = q.enqueue_many(["a", "b"])
    clock.advance(9.999)
    assert q.peek(5)  # not yet: expiry is never early
    clock.advance(0.001)  # age == retention: expired
    young = q.enqueue("c")
    got = q.claim_many(5)
    assert [m.id for m in got] == [young]
    assert q.counters()["expired"] == 2
    assert not any(r.exists(f"kq:{{q}}:item:{i}") for i in old)  # deleted as an ack deletes
    assert q.stats().waiting == 0 and r.llen("kq:{q}:queue") == 0
    assert q.claim() is None


def test_release_redelivery_and_extend_keep_the_age(make_queue: Callable[..., Queue]) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, retention=10, visibility_timeout=3, bucket_seconds=1)
    q.enqueue("x")
    clock.advance(2)
    m = q.claim()
    assert m is not None and m.extend(3) and m.release()
    clock.advance(2)
    m = q.claim()  # age 4
    assert m is not None
    clock.advance(4)  # visibility timeout passed at age 7: redelivered
    assert q.reap().requeued == 1
    clock.advance(3)  # age 10 while waiting
    assert q.claim() is None
    assert q.counters()["expired"] == 1 and q.counters()["redelivered"] == 1


def test_an_in_flight_message_keeps_its_delivery_until_its_deadline(make_queue: Callable[..., Queue]) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, retention=10, visibility_timeout=8, bucket_seconds=1)
    q.enqueue_many(["acked", "held"])
    clock.advance(5)
    acked, held = q.claim_many(2)  # deadline at age 13
    clock.advance(7)  # age 12: past retention, still in flight
    assert q.reap().expired == 0
    assert q.stats().processing == 2
    assert acked.ack()  # the delivery is still current
    clock.advance(1.5)  # the deadline passed: deleted instead of redelivered
    result = q.reap()
    assert (result.expired, result.requeued) == (1, 0)
    assert not held.ack() and q.peek(5, source="processing") == [] and q.peek(5) == []
    assert q.counters()["expired"] == 1 and q.counters()["redelivered"] == 0 and q.counters()["acked"] == 1


def test_requeue_restarts_the_age(make_queue: Callable[..., Queue]) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, retention=10, bucket_seconds=1)
    mid = q.enqueue("x")
    m = q.claim()
    assert m is not None and m.dead_letter("bad")
    clock.advance(20)  # a dead letter is not subject to retention (dead_retention is not set)
    assert q.reap().expired == 0
    assert q.requeue() == 1
    clock.advance(9)
    m = q.claim()
    assert m is not None and m.id == mid  # age 9 since the requeue
    assert m.enqueued_at == pytest.approx(clock.now - 9)
    assert m.release()
    clock.advance(1)
    assert q.claim() is None and q.counters()["expired"] == 1


def test_a_delayed_message_expires_before_its_delay_ends(make_queue: Callable[..., Queue]) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, retention=5, bucket_seconds=60)
    q.enqueue("later", delay=100)
    keep = q.enqueue("kept", delay=100)
    clock.advance(4)
    q.enqueue("young", delay=100)
    clock.advance(0.5)
    assert q.reap().expired == 0
    clock.advance(0.5)  # the first two reached 5 s
    assert q.reap().expired == 2
    assert [m.id for m in q.peek(5, source="delayed")] != [keep]
    assert q.stats().delayed == 1


def released_behind(make_queue: Callable[..., Queue], younger: int) -> tuple[Queue, str, list[str]]:
    """A queue with a 10 s retention whose first message, expired now, was released behind
    ``younger`` messages enqueued 2 s ago: the queue, its id, theirs."""
    clock = FakeClock()
    q = make_queue("q", clock=clock, retention=10, bucket_seconds=1)
    old = q.enqueue("old")
    m = q.claim()
    assert m is not None
    clock.advance(8)
    young: list[str] = []
    for start in range(0, younger, 5000):
        young += q.enqueue_many([f"y{i}" for i in range(start, min(younger, start + 5000))])
    assert m.release()  # behind the younger ones: only a scan or the claims find it
    clock.advance(2)
    return q, old, young


@pytest.mark.parametrize("finder", ["reap", "claims"])
def test_a_message_released_behind_100_younger_ones_is_never_delivered_once_expired(
    make_queue: Callable[..., Queue], finder: str
) -> None:
    q, old, young = released_behind(make_queue, 100)
    if finder == "reap":
        assert q.reap().expired == 1
        assert [m.id for m in q.peek(200)] == young
    else:
        claimed: list[str] = []
        while batch := q.claim_many(30):
            claimed += [m.id for m in batch]
        assert claimed == young and old not in claimed and q.stats().waiting == 0
    assert q.counters()["expired"] == 1


def test_dead_retention_counts_from_the_dead_lettering(make_queue: Callable[..., Queue], r: redis.Redis) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, dead_retention=5, max_receives=1, visibility_timeout=1, bucket_seconds=1)
    a, b, c = q.enqueue_many(["a", "b", "c"])
    clock.advance(100)  # old messages, but their dead_retention starts when they die
    ma = q.claim()
    assert ma is not None and ma.dead_letter("no")
    mb = q.claim()
    assert mb is not None
    clock.advance(1.5)
    assert q.reap().dead_lettered == 1  # b: out of receives at its deadline
    clock.advance(3.5)  # a dead for 5 s, b for 3.5 s
    assert q.reap().expired == 1
    assert [m.id for m in q.peek(5, source="dead")] == [b] and not r.exists(f"kq:{{q}}:item:{a}")
    clock.advance(2)
    assert q.reap().expired == 1 and q.stats().dead == 0
    assert q.counters()["expired"] == 2
    assert [m.id for m in q.peek(5)] == [c]  # waiting: dead_retention is not retention


def test_a_retention_set_later_applies_to_the_messages_held(make_queue: Callable[..., Queue]) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, bucket_seconds=1)
    q.enqueue("waiting")
    q.enqueue("delayed", delay=100)
    clock.advance(30)
    assert q.reap().expired == 0  # no retention: kept
    later = make_queue("q", clock=clock, retention=20)
    assert later.reap().expired == 2
    assert later.stats().waiting == later.stats().delayed == 0
    make_queue("q", clock=clock, retention=None)
    later = make_queue("q", clock=clock)
    later.enqueue("kept")
    clock.advance(100)
    assert later.reap().expired == 0 and len(later) == 1


def test_a_reaper_deletes_an_expiring_delayed_message_within_seconds(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    q = make_queue("q", retention=1)
    start = time.time()
    q.enqueue("later", delay=600)
    q.enqueue("waiting")
    reaper = Reaper(["q"], client=r, scripting=scripting)  # (at its default interval, 1 s)
    reaper.start()
    try:
        wait_until(lambda: q.stats().delayed == 0 and q.stats().waiting == 0, timeout=15)
    finally:
        reaper.shutdown()
    assert time.time() - start >= 1.0  # never early
    assert q.counters()["expired"] == 2


def test_a_message_moved_in_keeps_its_first_enqueue_time(make_queue: Callable[..., Queue]) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, retention=10, bucket_seconds=1)
    now = clock.now
    ids = q.enqueue_many(["old", "new", "future"], enqueued_at=[now - 8, None, now + 50])
    delayed = q.enqueue_many(["old delayed"], delays=[30], enqueued_at=[now - 8])
    assert {m.id: m.enqueued_at for m in q.peek(5)} == {ids[0]: now - 8, ids[1]: now, ids[2]: now}
    clock.advance(2)  # the moved ones reached 10 s
    assert q.reap().expired == 2 and q.peek(5, source="delayed") == []
    assert [m.text for m in q.claim_many(5)] == ["new", "future"]
    assert delayed and q.counters()["expired"] == 2
    for bad in (["yesterday"], [True], [-1.0]):
        with pytest.raises(ValueError, match="enqueued_at"):
            q.enqueue_many(["x"], enqueued_at=bad)
    with pytest.raises(ValueError, match="enqueued_at has 1 entries for 2 bodies"):
        q.enqueue_many(["x", "y"], enqueued_at=[None])


def test_enqueue_and_claim_send_no_more_round_trips_with_a_retention(
    r: redis.Redis, scripting: bool, round_trips: list[int]
) -> None:
    sent = round_trips

    def trips(q: Queue) -> int:
        q.enqueue("warm-up")
        assert q.claim() is not None  # scripts loaded, the first claim-time reap made
        before = len(sent)
        q.enqueue("a")
        q.enqueue_many(["b", "c"])
        q.enqueue_many(["d"], delays=[0], dedup_keys=["k"])
        assert len(q.claim_many(3)) == 3 and q.claim() is not None and q.claim() is None
        return len(sent) - before

    assert trips(Queue("kept", client=r, scripting=scripting, retention=3600)) == trips(
        Queue("plain", client=r, scripting=scripting)
    )


def test_a_worker_deletes_expiring_delayed_messages_and_dead_letters(
    make_queue: Callable[..., Queue], workers: Workers
) -> None:
    q = make_queue("q", retention=1, dead_retention=1)
    start = time.time()
    q.enqueue("later", delay=600)
    q.enqueue("doomed")
    m = q.claim()
    assert m is not None and m.dead_letter("bad")
    handled: list[object] = []
    with workers.running(workers.make(q, handled.append)):
        wait_until(lambda: q.stats().delayed == 0 and q.stats().dead == 0, timeout=15)
    assert time.time() - start >= 1.0  # never early
    assert handled == [] and q.counters()["expired"] == 2


def test_claims_go_on_through_a_backlog_that_expired_at_once(make_queue: Callable[..., Queue]) -> None:
    """A claim deletes a bounded number of expired messages (no long call): the next go on."""
    clock = FakeClock()
    q = make_queue("q", clock=clock, retention=10, bucket_seconds=1)
    q.enqueue_many(["old"] * 1100)
    clock.advance(10)
    young = q.enqueue("young")
    got = wait_until(lambda: q.claim(), timeout=60, interval=0)
    assert got.id == young and q.counters()["expired"] == 1100


def test_no_delivery_past_retention_under_concurrent_claims_and_sweeps(r: redis.Redis, scripting: bool) -> None:
    """Claimers (some leaving their deliveries to lapse) and reaps race over messages
    expiring as they go: no delivery is ever made at an age of retention or more, and every
    message ends acked or expired, once."""
    q = Queue("race", client=r, scripting=scripting, retention=0.3, visibility_timeout=0.1, bucket_seconds=1)
    ages: list[int] = []
    stop = threading.Event()
    enqueued = [0]

    def produce() -> None:
        # Batches while the consumers run, at least 400 messages and until 50 deliveries were
        # seen: on a busy host a whole backlog could expire before any claim.
        deadline = time.monotonic() + 60
        while (enqueued[0] < 400 or len(ages) < 50) and time.monotonic() < deadline:
            enqueued[0] += len(q.enqueue_many([str(enqueued[0] + i) for i in range(20)]))
            seen = len(ages)
            wait_until(lambda: len(ages) > seen or q.stats().waiting == 0, timeout=10)

    def consume() -> None:
        mine = Queue("race", client=r, scripting=scripting)
        while not stop.is_set():
            for m in mine.claim_many(5):
                claimed_ms = int(str(m.receipt).split("-")[1])
                ages.append(claimed_ms - round(m.enqueued_at * 1000))
                if int(m.text) % 2:  # the other half lapse: redelivered, or deleted at their deadline
                    m.ack()  # (False when this consumer was slower than the visibility timeout)

    def reap() -> None:
        mine = Queue("race", client=r, scripting=scripting)
        while not stop.is_set():
            mine.reap()

    def stopper() -> None:
        produce()
        wait_until(lambda: (s := q.stats()).waiting + s.processing + s.delayed == 0, timeout=60)
        stop.set()

    assert run_threads([consume, consume, consume, reap, stopper]) == []
    assert len(ages) >= 50 and max(ages) < 300
    c = q.counters()
    assert c["acked"] + c["expired"] == enqueued[0] >= 400 and c["expired"] > 0
    assert q.check(settle=0).consistent


def test_reaps_delete_a_large_expired_backlog_and_keep_the_order_of_the_rest(
    make_queue: Callable[..., Queue], r: redis.Redis
) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, retention=10, bucket_seconds=1)
    q.enqueue_many(["old"] * 1200)
    clock.advance(5)
    kept = q.enqueue_many([f"y{i}" for i in range(30)])
    m = q.claim()  # an old one released behind the young ones
    assert m is not None and m.release()
    clock.advance(5)
    expired = 0
    while expired < 1200:  # each reap sweeps a bounded part (one batch of 100 at least)
        step = q.reap().expired
        assert step >= 100 or expired + step == 1200, (expired, step)
        expired += step
    assert expired == 1200 and q.reap().expired == 0
    assert [m.id for m in q.peek(50)] == kept and r.llen("kq:{q}:queue") == 30
    assert q.stats().oldest_age == 5


def test_a_running_reaper_applies_a_retention_set_meanwhile(r: redis.Redis, scripting: bool) -> None:
    q = Queue("later", client=r, scripting=scripting)
    q.enqueue_many(["a", "b"])
    reaper = Reaper(["later"], client=r, scripting=scripting)
    reaper.start()
    try:
        wait_until(lambda: reaper.passes >= 2)
        assert len(q) == 2  # no retention: kept
        Queue("later", client=r, retention=0.2)  # as `keyqueue config later --set retention=0.2`
        wait_until(lambda: len(q) == 0, timeout=15)  # from the reaper's next passes
    finally:
        reaper.shutdown()
    assert q.counters()["expired"] == 2


def test_a_reap_scans_a_large_backlog_a_bounded_part_at_a_time(
    make_queue: Callable[..., Queue], r: redis.Redis
) -> None:
    """With a retention, a reap looks at every waiting message for those released behind
    younger ones, but a bounded part of a large backlog per reap (the next goes on from
    there): a Worker reaps between its heartbeats, so one reap must never take long."""
    from keyqueue.core.queue_core import EXPIRE_BATCH, EXPIRE_SCAN_STEPS

    per_reap = EXPIRE_SCAN_STEPS * EXPIRE_BATCH
    backlog = 10 * per_reap
    q, old, _ = released_behind(make_queue, backlog)

    def scans() -> int:  # (a script's own SSCANs count too)
        stats = r.info("commandstats")
        return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "sscan"))

    reaps = 0
    while r.exists(f"kq:{{q}}:item:{old}"):
        before = scans()
        q.reap()
        reaps += 1
        assert scans() - before <= 2 * (EXPIRE_SCAN_STEPS + 3)  # the scan's steps, the head, the reap
        assert reaps <= backlog // per_reap + 2, "the scan never reached the expired message"
    assert q.counters()["expired"] == 1 and q.stats().waiting == backlog
