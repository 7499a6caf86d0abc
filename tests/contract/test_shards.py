"""Sharded queues, on both faces and both modes: one logical queue stored as N queues whose
keys carry ``{NAME#i}``; producers spread over them, claims serve every shard, ids name their
shard, and the reading and maintenance operations show the logical queue."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any, Callable

import pytest
import redis

from keyqueue import Queue
from keyqueue.errors import ConfigurationError, InvalidArgument
from keyqueue.server import RedisServer

from ..support.helpers import FakeClock
from ..support.workers import Workers

MakeQueue = Callable[..., Queue]


def shard_of(msg_id: str) -> int:
    shard, sep, _ = msg_id.partition("#")
    assert sep and shard.isdigit(), msg_id
    return int(shard)


def test_round_robin_spreads_single_enqueues_evenly(make_queue: MakeQueue, r: redis.Redis) -> None:
    q = make_queue("rr", shards=6)
    ids = [q.enqueue(f"m{i}") for i in range(600)]
    spread = Counter(shard_of(i) for i in ids)
    assert sorted(spread) == list(range(6))
    assert all(95 <= n <= 105 for n in spread.values()), spread
    # each shard holds what its ids say, in its own keys
    for shard, n in spread.items():
        assert r.scard(f"kq:{{rr#{shard}}}:items") == n
    assert len(q) == 600


def test_a_batch_goes_over_every_shard(make_queue: MakeQueue) -> None:
    q = make_queue("batch", shards=6)
    ids = q.enqueue_many([f"m{i}" for i in range(60)], delays=[0.0] * 60)
    assert len(ids) == len(set(ids)) == 60
    assert Counter(shard_of(i) for i in ids) == {s: 10 for s in range(6)}
    # ids come back in the bodies' order
    assert [m.text for m in q.get(ids)] == [f"m{i}" for i in range(60)]


def test_a_shard_key_keeps_its_messages_on_one_shard_in_every_process(make_queue: MakeQueue) -> None:
    q = make_queue("keyed", shards=6)
    ids = [q.enqueue(f"m{i}", shard_key="customer-42") for i in range(12)]
    ids += q.enqueue_many(["x", "y"], shard_keys=["customer-42", "customer-42"])
    shards = {shard_of(i) for i in ids}
    assert len(shards) == 1
    # another process (another hash seed) routes the key to the same shard
    code = "from keyqueue.core.shards import shard_for; print(shard_for('customer-42', 6))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "7"}
    )
    assert int(out.stdout) == shards.pop()
    # messages of one key keep their order on their shard
    got = [m.text for m in q.claim_many(14)]
    assert got == [f"m{i}" for i in range(12)] + ["x", "y"]


def test_claims_serve_every_shard_starting_from_a_rotating_one(make_queue: MakeQueue) -> None:
    q = make_queue("rot", shards=4)
    for shard in range(4):
        for i in range(3):
            q.enqueue(f"{shard}-{i}", shard_key=next(k for k in map(str, range(100)) if _shard(k, 4) == shard))
    firsts = [shard_of(m.id) for m in (q.claim() for _ in range(4)) if m is not None]
    assert sorted(firsts) == [0, 1, 2, 3]  # four claims in a row: four different shards first
    rest = q.claim_many(100)
    assert len(rest) + 4 == 12
    assert {shard_of(m.id) for m in rest} == {0, 1, 2, 3}


def _shard(key: str, count: int) -> int:
    from keyqueue.core.shards import shard_for

    return shard_for(key, count)


def test_a_long_poll_wakes_for_any_shard(make_queue: MakeQueue, redis_server: RedisServer) -> None:
    q = make_queue("poll", shards=3)
    producer = make_queue("poll", url=f"redis://127.0.0.1:{redis_server.port}/0")
    assert producer.shards == 3
    late = threading.Timer(0.3, lambda: producer.enqueue("late"))
    late.start()
    got = q.claim(wait=5)
    late.join()
    assert got is not None and got.text == "late"


def test_settling_by_sharded_id(make_queue: MakeQueue) -> None:
    q = make_queue("settle", shards=3, max_receives=5)
    q.enqueue_many([f"m{i}" for i in range(6)])
    msgs = q.claim_many(6)
    assert len(msgs) == 6 and {shard_of(m.id) for m in msgs} == {0, 1, 2}
    a, b, c, d, e, f = msgs
    assert q.ack(a) and not q.ack(a)
    assert q.ack_many([b, c]) == 2
    assert q.extend(d, 100)
    assert q.release(e, error="boom")
    assert q.dead_letter(f, "bad")
    st = q.stats()
    assert (st.waiting, st.processing, st.dead) == (1, 1, 1)
    assert [m.id for m in q.peek(source="dead")] == [f.id]
    assert q.peek(source="dead")[0].last_error == "bad"
    assert q.requeue([f.id]) == 1
    assert q.stats().dead == 0 and len(q) == 2
    again = q.get([e.id, f.id, "9#1", "nonsense"])
    assert [m.id for m in again] == [e.id, f.id]
    assert again[0].last_error == "boom"
    assert q.purge(ids=["0#999", "x"], source="dead") == 0
    with pytest.raises(InvalidArgument):
        q.purge(ids=[f.id], source="waiting")


def test_aggregate_stats_are_the_sums_of_the_shards(make_queue: MakeQueue) -> None:
    q = make_queue("sums", shards=4)
    q.enqueue_many([f"m{i}" for i in range(20)])
    q.enqueue_many(["later"] * 4, delay=60)
    got = q.claim_many(5)
    q.dead_letter(got[0], "x")
    per = q.shard_stats()
    assert len(per) == 4
    total = q.stats()
    for name in ("waiting", "processing", "delayed", "dead"):
        assert getattr(total, name) == sum(getattr(s, name) for s in per)
    assert (total.waiting, total.processing, total.delayed, total.dead) == (15, 4, 4, 1)
    counters = q.counters()
    assert counters["enqueued"] == 24 and counters["dead_lettered"] == 1


def test_peek_is_merged_and_bounded(make_queue: MakeQueue) -> None:
    q = make_queue("peek", shards=3)
    ids = [q.enqueue(f"m{i}") for i in range(9)]
    peeked = q.peek(5)
    assert len(peeked) == 5
    assert {m.id for m in peeked} <= set(ids)
    assert sorted(q.ids()) == sorted(ids)


def test_purge_requeue_and_destroy_cover_every_shard(make_queue: MakeQueue, r: redis.Redis) -> None:
    q = make_queue("gone", shards=3)
    q.enqueue_many([f"m{i}" for i in range(9)])
    for m in q.claim_many(3):
        q.dead_letter(m)
    assert q.requeue() == 3
    assert len(q) == 9
    assert q.purge() == 9
    assert len(q) == 0
    q.enqueue_many(["a", "b", "c"])
    q.destroy()
    assert r.keys("kq:{gone*") == []
    assert b"gone" not in r.smembers("kq:queues")


def test_a_different_count_is_refused_with_nothing_written(make_queue: MakeQueue, r: redis.Redis) -> None:
    make_queue("fixed", shards=4).enqueue("x")
    before = {k: r.dump(k) for k in r.keys("*")}
    for wrong in (1, 3, 8):
        with pytest.raises(ConfigurationError):
            make_queue("fixed", shards=wrong, visibility_timeout=7)
    # an existing unsharded queue takes no count either
    make_queue("plain").enqueue("y")
    before = {k: r.dump(k) for k in r.keys("*")}
    with pytest.raises(ConfigurationError):
        make_queue("plain", shards=2, visibility_timeout=7)
    assert {k: r.dump(k) for k in r.keys("*")} == before


def test_a_queue_made_without_a_count_adopts_the_stored_one(make_queue: MakeQueue) -> None:
    first = make_queue("adopt", shards=5, visibility_timeout=9)
    ids = first.enqueue_many([f"m{i}" for i in range(10)])
    second = make_queue("adopt")
    assert second.shards == 5
    assert second.settings.visibility_timeout == 9
    got = second.claim_many(10)
    assert sorted(m.id for m in got) == sorted(ids)
    assert second.ack_many(got) == 10


def test_settings_reach_every_shard(make_queue: MakeQueue, r: redis.Redis) -> None:
    make_queue("cfg", shards=3)
    make_queue("cfg", visibility_timeout=12)
    for shard in range(3):
        assert r.hget(f"kq:{{cfg#{shard}}}:config", "visibility_timeout") == b"12"


def test_one_shard_is_the_unsharded_layout(make_queue: MakeQueue, r: redis.Redis) -> None:
    q = make_queue("one", shards=1)
    msg_id = q.enqueue("x")
    assert "#" not in msg_id
    assert q.shards == 1
    assert all(k.startswith(b"kq:{one}:") or k == b"kq:queues" for k in r.keys("*"))
    assert not r.exists("kq:{one}:shards")


def test_check_reports_a_problem_in_any_shard(make_queue: MakeQueue, r: redis.Redis) -> None:
    q = make_queue("fsck", shards=3)
    q.enqueue_many([f"m{i}" for i in range(6)])
    assert q.check(settle=0).consistent
    r.srem("kq:{fsck#2}:items", *r.smembers("kq:{fsck#2}:items"))  # shard 2's ids lose their state
    report = q.check(settle=0)
    assert not report.consistent
    assert all(i.startswith("2#") for p in report.problems for i in p.ids if "#" in i)
    assert q.check(settle=0, repair=True).problems
    assert q.check(settle=0).consistent


def test_reap_reaps_every_shard(make_queue: MakeQueue) -> None:
    q = make_queue("reap", shards=3, visibility_timeout=0.2)
    q.enqueue_many([f"m{i}" for i in range(6)])
    assert len(q.claim_many(6)) == 6
    deadline = time.monotonic() + 10
    requeued = 0
    while requeued < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
        requeued += q.reap().requeued
    assert requeued == 6
    assert len(q) == 6


def test_a_worker_drains_a_sharded_queue_once_each(make_queue: MakeQueue, workers: Workers) -> None:
    q = make_queue("work", shards=6)
    ids = q.enqueue_many([f"m{i}" for i in range(120)])
    seen: list[str] = []
    workers.run(workers.make(q, lambda m: seen.append(m.id), concurrency=4))
    assert sorted(seen) == sorted(ids)
    assert q.stats().processing == 0 and len(q) == 0


def test_the_registry_and_an_all_queues_reaper_see_the_logical_queue_once(
    make_queue: MakeQueue, r: redis.Redis, scripting: bool
) -> None:
    from keyqueue import Reaper
    from keyqueue.queue import list_queues

    q = make_queue("listed", shards=4, visibility_timeout=0.2)
    make_queue("plain").enqueue("x")
    q.enqueue_many([f"m{i}" for i in range(8)])
    assert list_queues(r) == ["listed", "plain"]
    assert len(q.claim_many(8)) == 8
    reaper = Reaper(client=r, scripting=scripting)
    deadline = time.monotonic() + 10
    requeued = 0
    while requeued < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
        requeued += reaper.reap_once()["listed"].requeued
    assert requeued == 8 and len(q) == 8


def test_a_dedup_key_meets_its_repeat_on_one_shard(make_queue: MakeQueue) -> None:
    q = make_queue("dedup", shards=6, dedup_window=60)
    first = [q.enqueue(f"m{i}", dedup_key=f"k{i}") for i in range(12)]
    again = [q.enqueue("repeat", dedup_key=f"k{i}") for i in range(12)]
    assert again == first
    assert q.enqueue_many(["a", "b"], dedup_keys=["k0", "k1"]) == first[:2]
    assert len(q) == 12


def test_an_id_of_no_shard_is_refused_by_settling(make_queue: MakeQueue) -> None:
    q = make_queue("foreign", shards=2)
    q.enqueue("x")
    m = q.claim()
    assert m is not None
    inner = m._m if hasattr(m, "_m") else m  # (the async face's message behind the test's proxy)
    for wrong in ("7", "5#1", "x#1"):
        object.__setattr__(inner, "id", wrong)
        with pytest.raises(InvalidArgument, match="not an id of sharded queue"):
            q.extend(m, 10)


def test_max_in_flight_holds_for_the_whole_sharded_queue(make_queue: MakeQueue) -> None:
    q = make_queue("limited", shards=4, max_in_flight=3)
    other = make_queue("limited")  # another consumer of the same queue (adopts the count)
    q.enqueue_many([f"m{i}" for i in range(12)])
    got = q.claim_many(2)
    got += other.claim_many(12)
    # 3 in flight in all, not 3 on each of the 4 shards
    assert len(got) == 3 and q.rate_state().in_flight == 3
    assert q.claim() is None and other.claim_many(5) == []
    q.ack(got.pop(0))
    # the slot one ack frees serves one claim, from whichever shard it starts
    more = [m for m in (other.claim() for _ in range(4)) if m is not None]
    assert len(more) == 1 and q.rate_state().in_flight == 3
    got += more
    q.throttle(30)
    for m in got:
        q.ack(m)
    assert q.claim() is None  # a throttle holds back every shard
    assert q.stats().waiting == 8


def test_a_bad_batch_writes_to_no_shard(make_queue: MakeQueue) -> None:
    q = make_queue("badbatch", shards=3, max_body_bytes=10)
    for bad in (
        dict(bodies=["a", "b", "c", "d", 5]),
        dict(bodies=["a", "b", "c", "d", "x" * 11]),
        dict(bodies=["a", "b", "c", "d"], shard_keys=["k", "k", "k", 7]),
        dict(bodies=["a", "b", "c", "d"], delays=[0, 0, 0, -1]),
    ):
        with pytest.raises((TypeError, ValueError)):
            q.enqueue_many(**bad)  # type: ignore[arg-type]
    assert q.counters()["enqueued"] == 0 and len(q) == 0


def test_the_reads_of_every_shard_go_in_one_round_trip(r: redis.Redis, scripting: bool, round_trips: list[int]) -> None:
    q = Queue("reads", client=r, scripting=scripting, shards=6)
    q.enqueue_many([f"m{i}" for i in range(12)])
    q.enqueue("later", delay=60)
    for read, want in ((len, 12), (lambda q: q.counters()["enqueued"], 13), (lambda q: q.stats().delayed, 1)):
        round_trips.clear()
        assert read(q) == want
        assert len(round_trips) <= 4  # one per step of one shard's read (script-free stats: 4), not per shard
    round_trips.clear()
    assert len(q.peek(4)) == 4 and len(round_trips) <= 3


def test_an_asyncio_queue_adopts_the_count_at_its_first_operation(r: redis.Redis, redis_server: RedisServer) -> None:
    import asyncio

    import redis.asyncio

    from keyqueue import aio

    Queue("lazy", client=r, shards=4).enqueue_many([f"m{i}" for i in range(8)])

    async def main() -> None:
        client = redis.asyncio.Redis(port=redis_server.port)
        try:
            first_len = aio.Queue("lazy", client=client)  # no I/O yet
            assert first_len.shards == 1  # (not known before its first operation)
            assert await first_len.length() == 8 and first_len.shards == 4
            first_claim = aio.Queue("lazy", client=client)
            got = await first_claim.claim_many(3)
            assert len(got) == 3 and all("#" in m.id for m in got)
            assert await first_claim.ack_many(got) == 3
            seen: list[str] = []

            async def handle(m: Any) -> None:
                seen.append(m.id)

            await aio.Worker(aio.Queue("lazy", client=client), handle).run(burst=True)  # first use: the worker's claim
            assert len(seen) == 5 and len(set(seen)) == 5
            with pytest.raises(ConfigurationError):
                await aio.Queue("lazy", client=client, shards=1).length()
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_group_stays_on_one_shard_in_order(make_queue: MakeQueue, r: redis.Redis, scripting: bool) -> None:
    q = make_queue("grouped", shards=4)
    if not scripting:  # (groups need the scripted mode: refused before any shard is written)
        with pytest.raises(ConfigurationError):
            q.enqueue_many(["x", "y"], group="g")
        assert q.counters()["enqueued"] == 0
        return
    sent: dict[str, list[str]] = {}
    for i in range(5):
        for g in ("a", "b", "c", "d", "e"):
            sent.setdefault(g, []).append(q.enqueue(f"{g}{i}", group=g))
    sent["f"] = q.enqueue_many([f"f{i}" for i in range(5)], group="f")
    for g, ids in sent.items():
        assert len({shard_of(i) for i in ids}) == 1, g  # one shard a group
    infos = q.groups()
    assert [i.id for i in infos] == sorted(sent)
    assert q.stats().held == sum(s.held for s in q.shard_stats()) == sum(i.held for i in infos) > 0
    held = [(m.group, m.id) for m in q.peek(100, source="held")]  # group by group, as one queue gives them
    assert held == [(g, i) for g in sorted(sent) for i in sent[g][1:]]
    assert [m.id for m in q.peek(7, source="held")] == [i for g in sorted(sent) for i in sent[g][1:]][:7]
    got: dict[str, list[str]] = {}
    while batch := q.claim_many(10):
        groups = [m.group for m in batch]
        assert len(groups) == len(set(groups))  # one of a group in flight at a time
        for m in batch:
            got.setdefault(m.group, []).append(m.id)
        assert q.ack_many(batch) == len(batch)
    assert got == sent
    assert q.groups() == [] and q.stats().held == 0


@pytest.mark.parametrize("shards", [1, 3])
def test_reads_after_destroy_leave_the_queue_destroyed(make_queue: MakeQueue, r: redis.Redis, shards: int) -> None:
    """As an unsharded queue: reading a destroyed queue makes nothing; the next write makes
    it again, with its shard count, so another Queue of the name finds the message."""
    q = make_queue("undone", shards=shards, visibility_timeout=9)
    q.enqueue_many(["a", "b", "c"])
    q.destroy()
    assert len(q) == 0 and q.stats().waiting == 0 and q.peek() == [] and q.counters()["enqueued"] == 0
    assert q.claim() is None and q.rate_state().in_flight == 0 and not q.exists()
    q.reap()
    assert r.keys("kq:{undone*") == [] and r.smembers("kq:queues") == set()
    msg_id = q.enqueue("again")
    assert q.exists() and r.smembers("kq:queues") == {b"undone"}
    other = make_queue("undone")
    assert other.shards == shards
    got = other.claim()
    assert got is not None and got.id == msg_id and got.text == "again"


@pytest.mark.parametrize("how", ["destroyed by another process", "lost with the data"])
@pytest.mark.parametrize("batch", [False, True])
def test_a_producer_stores_the_count_again_when_the_queue_is_gone(
    make_queue: MakeQueue, r: redis.Redis, how: str, batch: bool
) -> None:
    """A running producer of a sharded queue whose keys went away under it (another process
    destroyed the queue, or Redis lost its data) stores the count and the name again with
    its next write, so every other Queue of the name finds the queue sharded and the
    message on its shard, as an unsharded queue's next write makes it again."""
    producer = make_queue("gone", shards=3, visibility_timeout=9)
    producer.enqueue_many(["a", "b", "c"])
    if how == "lost with the data":
        r.flushall()
    else:
        make_queue("gone").destroy()
    assert r.get("kq:{gone}:shards") is None
    sent = producer.enqueue_many(["again", "more"]) if batch else [producer.enqueue("again")]
    assert r.get("kq:{gone}:shards") == b"3" and r.smembers("kq:queues") == {b"gone"}
    other = make_queue("gone")
    assert other.shards == 3 and len(other) == len(sent)
    assert sorted(m.id for m in other.claim_many(10)) == sorted(sent)


def test_a_worker_that_finds_the_data_lost_stores_the_count_first(make_queue: MakeQueue, r: redis.Redis) -> None:
    """After Redis lost its data a running worker's claim finds it before any producer: its
    shards' settings come back, and the count and the name with them, so the producer's
    next messages are found by every Queue of the name."""
    producer = make_queue("healed", shards=2, visibility_timeout=30)
    worker = make_queue("healed", shards=2, visibility_timeout=30)
    producer.enqueue_many(["a", "b"])
    assert len(worker.claim_many(10)) == 2
    r.flushall()
    assert worker.claim_many(10) == []  # (it finds the configs gone, and restores)
    assert r.get("kq:{healed}:shards") == b"2" and r.smembers("kq:queues") == {b"healed"}
    sent = [producer.enqueue(f"m{i}") for i in range(4)]
    other = make_queue("healed")
    assert other.shards == 2 and sorted(m.id for m in other.claim_many(10)) == sorted(sent)


def test_a_queue_made_before_the_queue_was_sharded_adopts_the_count(make_queue: MakeQueue, r: redis.Redis) -> None:
    """A Queue given no count that loaded before the queue was made sharded turns sharded:
    at its first write (before writing), at a claim or reap, and when its settings are
    re-read; one given shards=1 gets a ConfigurationError there instead."""
    consumer, producer, refresher = make_queue("late"), make_queue("late"), make_queue("late")
    one = make_queue("late", shards=1)
    assert consumer.claim() is None  # it has claimed (and looked) before the queue is sharded
    sent = make_queue("late", shards=3).enqueue_many([f"m{i}" for i in range(6)])
    assert producer.shards == 1
    late_id = producer.enqueue("late")
    assert producer.shards == 3 and shard_of(late_id) in range(3)
    assert set(r.keys("kq:{late}:*")) == {b"kq:{late}:shards"}  # nothing went to the unsharded keys
    got: list[str] = []
    deadline = time.monotonic() + 60
    while len(got) < 7 and time.monotonic() < deadline:
        got += [m.id for m in consumer.claim_many(10, wait=1)]
    assert sorted(got) == sorted([*sent, late_id]) and consumer.shards == 3
    refresher.refresh_settings()
    assert refresher.shards == 3
    before = {k: r.dump(k) for k in r.keys("*")}
    with pytest.raises(ConfigurationError, match="3 shards"):
        one.enqueue("x")
    assert {k: r.dump(k) for k in r.keys("*")} == before


def test_a_worker_made_before_the_queue_was_sharded_drains_its_shards(make_queue: MakeQueue, workers: Workers) -> None:
    q = make_queue("late-work")
    assert q.claim() is None
    ids = make_queue("late-work", shards=4).enqueue_many([f"m{i}" for i in range(40)])
    seen: list[str] = []
    workers.run(workers.make(q, lambda m: seen.append(m.id), concurrency=2))
    assert sorted(seen) == sorted(ids) and q.shards == 4


def test_a_dedup_key_holds_for_the_whole_queue_whatever_routes_the_message(
    make_queue: MakeQueue, scripting: bool
) -> None:
    q = make_queue("dedup-all", shards=6, dedup_window=60)
    far = next(k for k in map(str, range(100)) if _shard(k, 6) != _shard("d", 6))  # routes elsewhere
    first = q.enqueue("first", dedup_key="d", shard_key=far)
    assert shard_of(first) == _shard(far, 6)
    assert q.enqueue("again", dedup_key="d") == first  # routed by its dedup key alone
    assert q.enqueue("again", dedup_key="d", shard_key="other") == first
    if scripting:
        assert q.enqueue("again", dedup_key="d", group="g") == first
    # a batch: a repeat of an earlier key, and one key twice with two shard keys
    x, y, z = q.enqueue_many(["x", "y", "z"], dedup_keys=["d", "e", "e"], shard_keys=["a", "b", far])
    assert x == first and y == z != first
    # another Queue (another process) routes a repeat the same way
    assert make_queue("dedup-all").enqueue("again", dedup_key="e", shard_key="zzz") == y
    assert sorted(m.text for m in q.peek(100)) == ["first", "y"]
    assert q.counters()["enqueued"] == 2
    # forgotten (each shard's records and routes): the keys enqueue anew, wherever they route
    assert q.forget_dedup_keys() >= 2
    assert q.enqueue("anew", dedup_key="d", shard_key="other") not in (first, y)
    assert q.enqueue("anew", dedup_key="e") not in (first, y)
    assert q.counters()["enqueued"] == 4


def test_producers_racing_with_one_dedup_key_and_other_routes_enqueue_it_once(make_queue: MakeQueue) -> None:
    queues = [make_queue("dedup-race", shards=4, dedup_window=60) for _ in range(6)]
    for round_ in range(5):
        ids: list[str] = []
        start = threading.Barrier(len(queues))

        def send(i: int, q: Queue) -> None:
            start.wait()
            ids.append(q.enqueue(f"m{i}", dedup_key=f"k{round_}", shard_key=f"route-{i}"))

        threads = [threading.Thread(target=send, args=(i, q)) for i, q in enumerate(queues)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(ids) == len(queues) and len(set(ids)) == 1, ids
    assert len(queues[0]) == 5


def claimed_over(q: Queue, seconds: float) -> tuple[int, float]:
    """Messages claimed by claiming as fast as the limit lets for about ``seconds``, and the
    seconds that took."""
    got = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        got += len(q.claim_many(100, wait=0.1))
    return got, time.monotonic() - start


def test_a_rate_limit_holds_for_the_whole_sharded_queue(make_queue: MakeQueue) -> None:
    q = make_queue("rated", shards=4, rate_limit="10/1")
    q.enqueue_many([f"m{i}" for i in range(400)])
    got, spent = claimed_over(q, 2.5)
    # at most 10 a window, in every window the claims touched (not 10 on each of 4 shards)
    assert 10 <= got <= 10 * (int(spent) + 2), (got, spent)
    assert q.rate_state().used <= 10


@pytest.mark.parametrize("limit, count", [(12, 6), (10, 4), (3, 6), (1, 5), (7, 7)])
def test_the_shares_of_a_window_sum_to_the_limit_and_reach_every_shard(limit: int, count: int) -> None:
    from keyqueue.core.backend import FlowScope
    from keyqueue.keys import QueueKeys

    keys = QueueKeys("kq", "x")
    scopes = [FlowScope(keys, (i, count)) for i in range(count)]
    served = [0] * count
    for w in range(1_700_000_000, 1_700_000_000 + count):
        parts = [s.limit(limit, w) for s in scopes]
        assert sum(parts) == limit and max(parts) - min(parts) <= 1, parts
        served = [a + b for a, b in zip(served, parts)]
    assert served == [limit] * count  # over `count` windows, every shard its even part
    assert FlowScope(keys).limit(limit, 5) == limit


def race(*makers: Callable[[], Any]) -> list[Any]:
    """Run ``makers`` at once (threads from one barrier): what each returned or raised."""
    out: list[Any] = [None] * len(makers)
    start = threading.Barrier(len(makers))

    def go(i: int) -> None:
        start.wait()
        try:
            out[i] = makers[i]()
        except Exception as exc:  # (what it raised is its outcome)
            out[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(makers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_queues_made_at_once_with_different_counts_agree_on_one(make_queue: MakeQueue, r: redis.Redis) -> None:
    make_queue("warm")  # (the fixtures the async face needs, set up before threads ask for them)
    for round_ in range(10):
        name = f"race{round_}"
        counts = [None, 1, 2, 3, 4, None]  # (None: no count given, settings given)

        def make(count: int | None) -> Callable[[], Any]:
            def run() -> Any:
                if count is None:
                    q = make_queue(name, visibility_timeout=9)
                else:
                    q = make_queue(name, shards=count, visibility_timeout=9)
                return q, q.enqueue(f"from {count}")

            return run

        outcomes = race(*(make(c) for c in counts))
        made = [o for o in outcomes if not isinstance(o, Exception)]
        failed = [o for o in outcomes if isinstance(o, Exception)]
        assert all(isinstance(e, ConfigurationError) and "\n" not in str(e) for e in failed), failed
        stored = r.get(f"kq:{{{name}}}:shards")
        winner = 1 if stored is None else int(stored)
        assert {q.shards for q, _ in made} == {winner}  # every Queue made runs on the stored count
        # every message a made Queue enqueued is where a new Queue of the name claims it
        reader = make_queue(name)
        got = [m.id for m in reader.claim_many(100)]
        assert sorted(got) == sorted(i for _, i in made), (winner, outcomes)


def test_an_unsharded_first_enqueue_and_a_sharded_one_at_once_agree(make_queue: MakeQueue) -> None:
    for round_ in range(10):
        name = f"first{round_}"
        plain, sharded = make_queue(name), make_queue(name, shards=3)  # (neither has written yet)
        outcomes = race(lambda: plain.enqueue("plain"), lambda: sharded.enqueue("sharded"))
        sent = [i for i in outcomes if isinstance(i, str)]
        assert all(isinstance(o, (str, ConfigurationError)) for o in outcomes), outcomes
        assert len(sent) >= 1 and plain.shards == make_queue(name).shards
        got = [m.id for m in make_queue(name).claim_many(10)]
        assert sorted(got) == sorted(sent), outcomes


def test_a_batch_goes_to_every_shard_in_one_round_trip(r: redis.Redis, scripting: bool, round_trips: list[int]) -> None:
    q = Queue("one-trip", client=r, scripting=scripting, shards=6)
    q.enqueue_many(["warm"] * 6)  # (scripts loaded, the queue registered)
    round_trips.clear()
    ids = q.enqueue_many([f"m{i}" for i in range(60)], shard_keys=[f"k{i % 12}" for i in range(60)])
    assert len({shard_of(i) for i in ids}) > 1
    if scripting:
        assert len(round_trips) == 1
    else:  # (each shard's enqueue WATCHes: one shard after another)
        assert len(round_trips) >= len({shard_of(i) for i in ids})
    # each key's messages in their order on their shard
    got = [m for m in q.claim_many(100) if m.text != "warm"]
    for k in range(12):
        assert [m.text for m in got if m.id in ids[k::12]] == [f"m{i}" for i in range(k, 60, 12)]


def test_retention_holds_on_every_shard(make_queue: MakeQueue) -> None:
    """A retention keeps its meaning on a sharded queue: messages past it are deleted on
    whichever shard they wait, counted once in the logical queue's counters."""
    clock = FakeClock()
    q = make_queue("kept", shards=3, retention=60, clock=clock)
    old = q.enqueue_many([f"old{i}" for i in range(6)])
    assert {shard_of(i) for i in old} == {0, 1, 2}
    clock.advance(61)
    young = q.enqueue("young")
    got = q.claim_many(10)
    assert [m.id for m in got] == [young]
    assert q.counters()["expired"] == 6 and len(q) == 0


def test_a_schedule_on_a_sharded_queue_fires_once_per_fire_time(make_queue: MakeQueue) -> None:
    """Schedules keep their meaning on a sharded queue: kept on shard 0, fired once per
    fire time by any Queue of the name (here two), listed by the logical queue."""
    clock = FakeClock()
    q = make_queue("ticks", shards=3, clock=clock)
    other = make_queue("ticks", clock=clock)
    q.schedule("s", every=10, body="tick")
    for _ in range(3):
        clock.advance(10)
        other.reap()
        q.reap()
    got = q.claim_many(10)
    assert [m.text for m in got] == ["tick"] * 3 and {shard_of(m.id) for m in got} == {0}
    assert len({m.scheduled_for for m in got}) == 3
    (s,) = other.schedules()
    assert (s.id, s.fired) == ("s", 3)


def test_a_sharded_long_poll_wakes_when_a_delayed_message_falls_due(
    r: redis.Redis, scripting: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Due delayed messages signal nobody: a claim that long-polls the shards (as a
    worker's over its queues) waits no longer than the earliest timer it knows of (a claim's
    reaping runs at most once a second), as a single queue's claim does, not a slice; and
    the shard its wait claims is reaped too when its timer is due."""
    from keyqueue.core.queue_core import REAP_INTERVAL, WAIT_SLICE
    from keyqueue.core.shards import ShardedCore, shard_for
    from keyqueue.transport import sync

    q = Queue("later", client=r, scripting=scripting, shards=3)
    key = next(f"k{i}" for i in range(100) if shard_for(f"k{i}", 3) == 0)
    q.enqueue("soon", delay=0.3, shard_key=key)
    assert isinstance(q._core, ShardedCore)
    q._core.turn = 0  # the claim's rotation starts at the message's shard, the one its wait claims
    waits: list[float] = []
    pack = sync.pack

    def record(conn: Any, cmds: Any) -> Any:
        waits.extend(float(c[-1]) for c in cmds if str(c[0]).upper() == "BLPOP")
        return pack(conn, cmds)

    monkeypatch.setattr(sync, "pack", record)
    got = q.claim(wait=10)
    assert got is not None and got.text == "soon"
    # the timer's (no sooner than a reap a second may run, as a single queue's), not a slice
    assert waits and waits[0] <= REAP_INTERVAL < WAIT_SLICE, waits
