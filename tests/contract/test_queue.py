"""The Queue contract against a real redis-server: the data model and its semantics."""

from __future__ import annotations

import json

import pytest
import redis

from keyqueue import InvalidArgument, Message, Queue, QueueStats
from keyqueue.backends.commands import WATCH_CHUNK
from keyqueue.server import RedisServer

from ..support.helpers import FakeClock, watches


def test_enqueue_writes_the_spec_layout(q: Queue, r: redis.Redis) -> None:
    ids = q.enqueue_many([b"a", "b"])
    assert ids == ["1", "2"]
    assert r.get("kq:{q}:seq") == b"2"
    assert r.lrange("kq:{q}:queue", 0, -1) == [b"1", b"2"]
    assert r.smembers("kq:{q}:items") == {b"1", b"2"}
    item = r.hgetall("kq:{q}:item:2")
    assert item[b"b"] == b"b" and int(item[b"t"]) > 1_600_000_000_000
    assert r.sismember("kq:queues", "q")


def test_fifo_order_and_message_fields(q: Queue) -> None:
    q.enqueue_many([f"m{i}" for i in range(5)])
    got = [q.claim() for _ in range(5)]
    assert [m.text for m in got if m] == [f"m{i}" for i in range(5)]
    m = got[0]
    assert m is not None and m.receives == 1 and m.receipt and m.deadline is not None
    assert m.deadline - m.enqueued_at == pytest.approx(30.0, abs=1.0)
    assert q.claim() is None


def test_bodies_are_bytes_and_json_helpers(q: Queue) -> None:
    q.enqueue(json.dumps({"x": [1, 2]}))
    q.enqueue(bytes(range(256)))
    q.enqueue(bytearray(b"ba"))
    a, b, c = q.claim_many(3)
    assert a.json() == {"x": [1, 2]} and b.body == bytes(range(256)) and c.body == b"ba"
    q.enqueue("héllo")
    assert q.claim().text == "héllo"  # type: ignore[union-attr]


def test_ack_deletes_and_claim_moves_ownership(q: Queue, r: redis.Redis) -> None:
    q.enqueue("x")
    m = q.claim()
    assert m is not None
    assert r.smembers("kq:{q}:processing") == {b"1"} and not r.smembers("kq:{q}:items")
    assert r.llen("kq:{q}:queue") == 0
    bucket = int(m.deadline * 1000) // 60000  # type: ignore[operator]
    assert r.smembers(f"kq:{{q}}:timer:{bucket}") == {b"1"}
    assert m.ack() is True
    assert m.ack() is False
    assert not r.exists("kq:{q}:item:1", "kq:{q}:processing", f"kq:{{q}}:timer:{bucket}", "kq:{q}:timers")


def test_stale_receipts_change_nothing(make_queue, r: redis.Redis) -> None:
    clock = FakeClock()
    q = make_queue(visibility_timeout=5, clock=clock)
    q.enqueue("x")
    first = q.claim()
    clock.advance(5)
    assert q.reap().requeued == 1
    second = q.claim()
    assert first is not None and second is not None and first.receipt != second.receipt
    assert second.receives == 2
    before = r.hgetall("kq:{q}:item:1")
    assert first.ack() is False
    assert first.extend(100) is False
    assert first.release() is False
    assert first.dead_letter("x") is False
    assert r.hgetall("kq:{q}:item:1") == before and r.smembers("kq:{q}:processing") == {b"1"}
    assert second.ack() is True


def test_peeked_messages_have_no_receipt(q: Queue) -> None:
    q.enqueue("x")
    (p,) = q.peek()
    assert p.receipt is None and p.text == "x"
    assert not (q.ack(p) or q.extend(p, 1) or q.release(p) or q.dead_letter(p))
    assert q.length() == 1


def test_extend_moves_the_deadline_and_its_bucket(make_queue, r: redis.Redis) -> None:
    clock = FakeClock()
    q = make_queue(visibility_timeout=5, bucket_seconds=1, clock=clock)
    q.enqueue("x")
    m = q.claim()
    assert m is not None and q.extend(m, 100) is True
    assert m.deadline == pytest.approx(clock.now + 100)
    assert r.smembers(f"kq:{{q}}:timer:{int(clock.now + 100)}") == {b"1"}
    assert not r.exists(f"kq:{{q}}:timer:{int(clock.now + 5)}")
    clock.advance(50)
    assert q.reap().requeued == 0 and q.stats().processing == 1
    clock.advance(50)
    assert q.reap().requeued == 1 and q.length() == 1


def test_release_goes_to_the_tail_with_optional_delay(make_queue) -> None:
    clock = FakeClock()
    q = make_queue(clock=clock)
    q.enqueue_many(["a", "b", "c"])
    a = q.claim()
    assert a is not None and q.release(a, error="boom") is True
    assert [m.text for m in q.peek()] == ["b", "c", "a"]
    assert q.peek()[2].last_error == "boom"
    b = q.claim()
    assert b is not None and q.release(b, delay=10) is True
    assert q.stats() == QueueStats(waiting=2, processing=0, delayed=1, dead=0, oldest_age=0.0)
    clock.advance(9.999)
    assert q.reap().delayed_released == 0
    clock.advance(0.001)
    assert q.reap().delayed_released == 1
    assert [m.text for m in q.peek()] == ["c", "a", "b"]


def test_delayed_messages_are_invisible_until_due(make_queue) -> None:
    clock = FakeClock()
    q = make_queue(clock=clock, bucket_seconds=60)
    mid = q.enqueue("later", delay=90)
    q.enqueue("now")
    now = q.claim()
    assert now is not None and now.text == "now" and now.ack()
    assert q.claim() is None and q.length() == 0
    (d,) = q.peek(source="delayed")
    assert d.id == mid and d.deadline == pytest.approx(clock.now + 90)
    clock.advance(89.9)
    q.reap()
    assert q.claim() is None
    clock.advance(0.1)
    assert q.reap().delayed_released == 1
    assert q.claim().id == mid  # type: ignore[union-attr]


def test_max_receives_sends_to_dead_letters(make_queue, r: redis.Redis) -> None:
    clock = FakeClock()
    q = make_queue(visibility_timeout=1, max_receives=2, clock=clock)
    q.enqueue("poison")
    for expected in (1, 2):
        m = q.claim()
        assert m is not None and m.receives == expected
        q.release(m, error=f"fail {expected}")
    assert q.claim() is None  # the third delivery would exceed max_receives
    (dead,) = q.peek(source="dead")
    assert dead.receives == 2 and dead.last_error == "fail 2"
    assert r.lrange("kq:{q}:dead", 0, -1) == [b"1"] and r.exists("kq:{q}:item:1")


def test_reap_dead_letters_an_expired_last_delivery(make_queue) -> None:
    clock = FakeClock()
    q = make_queue(visibility_timeout=1, max_receives=1, clock=clock)
    q.enqueue("x")
    assert q.claim() is not None
    clock.advance(1)
    res = q.reap()
    assert (res.requeued, res.dead_lettered) == (0, 1)
    (dead,) = q.peek(source="dead")
    assert "visibility timeout expired" in (dead.last_error or "")


def test_dead_letter_and_requeue_reset_receives(q: Queue) -> None:
    q.enqueue_many(["a", "b", "c"])
    for m in q.claim_many(3):
        assert q.dead_letter(m, reason=f"bad {m.text}")
    assert [m.text for m in q.peek(source="dead")] == ["a", "b", "c"]
    assert q.requeue(["2"]) == 1
    assert q.requeue(["2", "999"]) == 0
    assert [m.id for m in q.peek(source="dead")] == ["1", "3"]
    assert q.requeue() == 2
    waiting = q.peek()
    assert [m.text for m in waiting] == ["b", "a", "c"]
    assert all(m.receives == 0 for m in waiting) and waiting[0].last_error == "bad b"


def test_requeue_from_processing_fences_the_old_holder(q: Queue) -> None:
    q.enqueue_many(["a", "b"])
    a, b = q.claim_many(2)
    assert q.requeue(source="processing") == 2
    assert a.ack() is False and b.extend(5) is False
    assert q.stats().processing == 0 and q.length() == 2
    assert q.stats().delayed == 0


def test_dedup_key_within_the_window(make_queue, r: redis.Redis) -> None:
    q = make_queue(dedup_window=60)
    first = q.enqueue("a", dedup_key="order-1")
    assert q.enqueue("b", dedup_key="order-1") == first
    assert q.enqueue("c", dedup_key="order-2") != first
    assert q.length() == 2
    assert 0 < r.pttl("kq:{q}:dedup:order-1") <= 60_000
    r.delete("kq:{q}:dedup:order-1")  # as when the window ends
    assert q.enqueue("d", dedup_key="order-1") != first


def test_forget_dedup_keys_lets_a_key_enqueue_anew_and_keeps_the_messages(make_queue, r: redis.Redis) -> None:
    q = make_queue(dedup_window=60)
    first = q.enqueue("a", dedup_key="order-1")
    q.enqueue_many(["b", "c"], dedup_keys=["order-2", None])
    other = make_queue("other", dedup_window=60)
    kept = other.enqueue("x", dedup_key="order-1")  # another queue's record stays
    assert q.forget_dedup_keys() == 2
    assert not r.exists("kq:{q}:dedup:order-1", "kq:{q}:dedup:order-2") and r.exists("kq:{other}:dedup:order-1")
    again = q.enqueue("a again", dedup_key="order-1")
    assert again != first and q.length() == 4
    assert other.enqueue("x", dedup_key="order-1") == kept
    assert q.forget_dedup_keys() == 1 and q.forget_dedup_keys() == 0


def test_dedup_window_expires(make_queue, r: redis.Redis) -> None:
    from ..support.helpers import wait_until

    q = make_queue(dedup_window=0.2)
    first = q.enqueue("a", dedup_key="k")
    wait_until(lambda: not r.exists("kq:{q}:dedup:k"), timeout=5)
    assert q.enqueue("a", dedup_key="k") != first


def test_stats_and_oldest_age(make_queue) -> None:
    clock = FakeClock()
    q = make_queue(clock=clock)
    assert q.stats() == QueueStats(0, 0, 0, 0, None)
    q.enqueue_many(["a", "b", "c"])
    q.enqueue("d", delay=5)
    clock.advance(2.5)
    q.dead_letter(q.claim())  # type: ignore[arg-type]
    q.claim()
    assert q.stats() == QueueStats(waiting=1, processing=1, delayed=1, dead=1, oldest_age=2.5)
    assert len(q) == 1


@pytest.mark.parametrize("source", ["waiting", "delayed", "dead", "all"])
def test_purge_empties_its_source_only(make_queue, r: redis.Redis, source: str) -> None:
    q = make_queue()
    q.enqueue_many(["w1", "w2"])
    q.enqueue("d1", delay=100)
    q.enqueue_many(["x", "p"])
    q.claim_many(2)  # w1, w2 in flight ... re-enqueue waiting ones
    dead = q.claim_many(2)
    q.dead_letter(dead[0])
    q.enqueue_many(["w3", "w4"])
    before = q.stats()
    assert before == QueueStats(2, 3, 1, 1, before.oldest_age)
    counts = {"waiting": 2, "delayed": 1, "dead": 1, "all": 7}
    assert q.purge(source=source) == counts[source]
    after = q.stats()
    expect = {
        "waiting": QueueStats(0, 3, 1, 1, None),
        "delayed": QueueStats(2, 3, 0, 1, after.oldest_age),
        "dead": QueueStats(2, 3, 1, 0, after.oldest_age),
        "all": QueueStats(0, 0, 0, 0, None),
    }[source]
    assert after == expect
    items = [k for k in r.keys("kq:{q}:item:*")]
    assert len(items) == 7 - counts[source]
    if source == "all":
        # only the id counter, the totals (and a spare wake-up token) survive: no message,
        # timer or set
        assert set(r.keys("kq:{q}:*")) - {b"kq:{q}:signal"} == {b"kq:{q}:seq", b"kq:{q}:counters"}


def test_purge_in_batches(make_queue, r: redis.Redis) -> None:
    q = make_queue()
    q.enqueue_many([b"x"] * 2500)
    seen: list[int] = []
    assert q.purge(progress=seen.append) == 2500
    assert seen == [500] * 5 and q.length() == 0 and not r.keys("kq:{q}:item:*")


def test_destroy_leaves_no_key_behind(make_queue, r: redis.Redis) -> None:
    q = make_queue(max_receives=3, dedup_window=100)
    other = make_queue("other")
    other.enqueue("keep")
    q.enqueue_many(["a", "b", "c"])
    q.enqueue("d", delay=30, dedup_key="k")
    q.dead_letter(q.claim())  # type: ignore[arg-type]
    q.claim()
    q.destroy()
    assert r.keys("kq:{q}:*") == []
    assert r.smembers("kq:queues") == {b"other"}
    assert other.length() == 1


def test_settings_are_shared_through_the_config_hash(make_queue, r: redis.Redis) -> None:
    a = make_queue(visibility_timeout=7, max_receives=3)
    assert r.hgetall("kq:{q}:config") == {b"visibility_timeout": b"7", b"max_receives": b"3"}
    b = make_queue()
    assert (b.settings.visibility_timeout, b.settings.max_receives) == (7, 3)
    make_queue(max_receives=None, bucket_seconds=5)
    assert r.hget("kq:{q}:config", "max_receives") == b""
    assert a.refresh_settings().max_receives is None and a.settings.bucket_seconds == 5
    assert make_queue().settings.visibility_timeout == 7


def test_per_claim_visibility_timeout(make_queue) -> None:
    clock = FakeClock()
    q = make_queue(clock=clock)
    q.enqueue("x")
    m = q.claim(visibility_timeout=2)
    assert m is not None and m.deadline == pytest.approx(clock.now + 2)


def test_claim_many_respects_count_and_order(q: Queue) -> None:
    q.enqueue_many([str(i) for i in range(10)])
    assert [m.text for m in q.claim_many(4)] == ["0", "1", "2", "3"]
    assert [m.text for m in q.claim_many(100)] == [str(i) for i in range(4, 10)]
    assert q.claim_many(5) == []


def test_enqueue_many_large_batch_is_chunked(q: Queue, r: redis.Redis) -> None:
    ids = q.enqueue_many([b"%d" % i for i in range(2500)])
    assert ids == [str(i) for i in range(1, 2501)]
    assert r.lrange("kq:{q}:queue", 0, -1) == [i.encode() for i in ids]
    assert q.ack_many(q.claim_many(2500)) == 2500
    assert r.keys("kq:{q}:item:*") == []


def test_ack_many_counts_only_current(q: Queue) -> None:
    q.enqueue_many(["a", "b", "c"])
    ms = q.claim_many(3)
    assert q.ack(ms[1])
    assert q.ack_many(ms + q.peek()) == 2


def test_messages_of_another_queue_are_refused(make_queue) -> None:
    a, b = make_queue("a"), make_queue("b")
    a.enqueue("x")
    m = a.claim()
    with pytest.raises(InvalidArgument, match="belongs to queue 'a'"):
        b.ack(m)  # type: ignore[arg-type]
    assert isinstance(m, Message) and m.ack()


def test_queues_under_different_prefixes_are_separate(make_queue, r: redis.Redis) -> None:
    a, b = make_queue("jobs"), make_queue("jobs", prefix="other")
    a.enqueue("x")
    assert b.length() == 0 and r.exists("other:{jobs}:config") == 0
    assert r.smembers("kq:queues") == {b"jobs"} and not r.exists("other:queues")
    b.enqueue("y")
    assert r.smembers("other:queues") == {b"jobs"}


def test_reading_a_queue_does_not_register_it(make_queue, r: redis.Redis) -> None:
    from keyqueue.queue import list_queues

    q = make_queue("typo")
    assert q.length() == 0 and q.stats().waiting == 0 and q.peek() == []
    assert list_queues(r) == [] and r.keys("*") == []
    make_queue("configured", visibility_timeout=5)
    make_queue("used").enqueue("x")
    assert list_queues(r) == ["configured", "used"]


SIZES = [0, 1, 63, 64, 65, 127, 128, 129, 1000, 6399, 6400, 6401, 256 * 1024]


def test_bodies_of_every_size_round_trip_on_every_path(make_queue, r: redis.Redis) -> None:
    clock = FakeClock()
    q = make_queue(clock=clock)
    bodies = [bytes((i * 7 + n) % 256 for i in range(n)) for n in SIZES]
    single = [q.enqueue(b) for b in bodies]
    many = q.enqueue_many(bodies)
    delayed = q.enqueue_many(bodies, delay=1)
    assert [m.body for m in q.peek(len(SIZES), source="waiting")] == bodies
    assert [m.body for m in q.peek(len(SIZES), source="delayed")] == bodies
    claimed = q.claim_many(2 * len(SIZES))
    assert [m.body for m in claimed] == bodies + bodies
    assert [m.id for m in claimed] == single + many
    assert q.ack_many(claimed) == len(claimed)
    clock.advance(1)
    q.reap()
    assert [m.body for m in q.claim_many(len(SIZES))] == bodies
    assert [m.id for m in q.peek(len(delayed), source="processing")] == sorted(delayed, key=int)


def test_small_bodies_keep_the_compact_hash_encoding(q: Queue, r: redis.Redis) -> None:
    q.enqueue(b"x" * 100)
    assert r.object("encoding", "kq:{q}:item:1") == b"listpack"
    assert r.hgetall("kq:{q}:item:1").keys() == {b"t", b"b", b"b1"}


def test_large_batches_stay_under_lua_limits(make_queue, r: redis.Redis) -> None:
    """Lua's unpack() takes about 8,000 values: big calls must be chunked inside (10,000 ids
    are past it)."""
    clock = FakeClock()
    # (a client that waits 60 s for a reply: what is tested is the chunking, not speed; a
    # starved machine took more than redis-py's default 5 s for one call of 10,000)
    q = make_queue(clock=clock, bucket_seconds=3600, reply_timeout=60)
    q.enqueue_many([b"x"] * 10_000)
    q.enqueue_many([b"d"] * 9_000, delay=60)  # one timer bucket of 9,000 ids
    got = q.claim_many(10_000)
    assert len(got) == 10_000 and len({m.id for m in got}) == 10_000
    assert q.requeue(source="processing") == 10_000
    assert q.purge(source="delayed") == 9_000
    assert q.stats().delayed == 0 and q.length() == 10_000
    assert q.ack_many(q.claim_many(10_000)) == 10_000
    assert r.keys("kq:{q}:item:*") == []


def test_operations_on_many_ids_watch_them_in_chunks(
    make_queue, scripting: bool, redis_server: RedisServer, r: redis.Redis
) -> None:
    """Redis checks each key a WATCH adds against those the client already watches, so one
    WATCH of n keys costs O(n^2) (10,000 ids took seconds): every script-free operation on
    more ids than WATCH_CHUNK works in chunks of at most that many, and its result is that
    of the whole batch. 400 ids fit in one call of every core batch (and a set of 400 ids is
    returned whole by SSCAN), so each step below would WATCH them at once without chunks."""
    clock = FakeClock()
    held = 400
    n = held + WATCH_CHUNK + 1  # (so that more than WATCH_CHUNK are acked)
    q = make_queue("wq", clock=clock, bucket_seconds=3600, max_receives=1)
    with watches(redis_server.port, "kq:{wq}:") as seen:
        q.enqueue_many([b"x"] * n)
        got = q.claim_many(n)  # claim
        assert len({m.id for m in got}) == n
        assert q.ack_many(got[:-held] + got[:1]) == n - held  # ack, a stale copy counted once
        assert q.requeue(source="processing") == held  # requeue of a whole (small) set
        again = q.claim_many(n)
        assert len(again) == held and all(m.receives == 1 for m in again)
        clock.advance(31)
        assert q.reap().dead_lettered == held  # reap of one bucket, examined whole
        assert q.purge(ids=[m.id for m in again], source="dead") == held  # dead-letter deletion
        q.enqueue_many([b"d"] * held, delay=60)
        assert q.purge(source="delayed") == held
        q.enqueue_many([b"p"] * held)
        assert len(q.claim_many(held)) == held
        assert q.purge(source="all") == held  # the held ones: purge of processing
    assert r.keys("kq:{wq}:item:*") == []
    sizes = [len(keys) for keys in seen]
    assert max(sizes, default=0) <= WATCH_CHUNK, sizes
    assert bool(seen) != scripting  # (the scripted mode WATCHes nothing)


def test_enqueue_many_with_a_delay_and_a_dedup_key_each(q: Queue) -> None:
    ids = q.enqueue_many(["a", "b", "c"], delays=[0, 30, 0], dedup_keys=["ka", None, "kc"])
    assert len(set(ids)) == 3
    again = q.enqueue_many(["a2", "c2", "d"], dedup_keys=["ka", "kc", None])
    assert again[:2] == [ids[0], ids[2]] and again[2] not in ids  # repeats return the first ids
    s = q.stats()
    assert (s.waiting, s.delayed) == (3, 1)
    assert [m.text for m in q.claim_many(5)] == ["a", "c", "d"]
    with pytest.raises(InvalidArgument, match="delays has 1 entries for 2 bodies"):
        q.enqueue_many(["x", "y"], delays=[1])
    with pytest.raises(InvalidArgument, match="dedup key"):
        q.enqueue_many(["x"], dedup_keys=[""])


def test_get_reads_messages_by_id_without_claiming(q: Queue) -> None:
    ids = q.enqueue_many(["a", "b"])
    got = q.get([ids[1], "999", ids[0]])
    assert [(m.id, m.text, m.receipt) for m in got] == [(ids[1], "b", None), (ids[0], "a", None)]
    assert q.stats().waiting == 2 and q.get([]) == []


def test_body_fields_follow_the_servers_listpack_limit(make_queue, r: redis.Redis) -> None:
    """With hash-max-listpack-value 128, a 100-byte body is one field (32 bytes less per
    message: the hash fits jemalloc's 128-byte class); longer ones are split at 128."""
    r.config_set("hash-max-listpack-value", 128)
    try:
        q = make_queue("q")  # reads the limit when it loads
        bodies = [b"a" * 100, bytes(range(256)) + b"z" * 44, b"b" * 128, b"c" * 256]
        ids = [q.enqueue(b) for b in bodies] + q.enqueue_many(bodies)
        assert sorted(r.hkeys(f"kq:{{q}}:item:{ids[0]}")) == [b"b", b"t"]
        assert r.object("encoding", f"kq:{{q}}:item:{ids[0]}") == b"listpack"
        assert sorted(r.hkeys(f"kq:{{q}}:item:{ids[1]}")) == [b"b", b"b1", b"b2", b"t"]
        assert [len(r.hget(f"kq:{{q}}:item:{ids[1]}", f)) for f in (b"b", b"b1", b"b2")] == [128, 128, 44]
        assert [m.body for m in q.peek(8)] == bodies * 2
        assert [m.body for m in q.claim_many(8)] == bodies * 2
    finally:
        r.config_set("hash-max-listpack-value", 64)


def test_attributes_are_kept_in_the_item_hash_and_returned(q: Queue, r: redis.Redis) -> None:
    """Opaque per-message attributes (field a) ride with the message through every path:
    single, batch (mixed with none), delayed, per-message delays; claim, peek and get."""
    big = b"\x00\xff" * 300  # binary, longer than a body field
    one = q.enqueue("x", attributes=b"A1")
    batch = q.enqueue_many(["y", "z" * 200, "w"], attributes=[big, None, b""])
    each = q.enqueue_many(["v"], delays=[0], dedup_keys=["k"], attributes=[b"A5"])
    late = q.enqueue("d", delay=30, attributes=b"A6")
    plain = q.enqueue("p")
    assert r.hget(f"kq:{{q}}:item:{one}", "a") == b"A1"
    assert r.hget(f"kq:{{q}}:item:{one}", "n") == b"0"  # (so a claim finds a where n shows)
    assert not r.hexists(f"kq:{{q}}:item:{batch[1]}", "a") and not r.hexists(f"kq:{{q}}:item:{batch[2]}", "a")
    peeked = {m.id: m.attributes for m in q.peek(10)}
    assert peeked == {one: b"A1", batch[0]: big, batch[1]: None, batch[2]: None, each[0]: b"A5", plain: None}
    assert [m.attributes for m in q.peek(1, source="delayed")] == [b"A6"]
    assert [m.attributes for m in q.get([late, one])] == [b"A6", b"A1"]
    got = {m.id: m.attributes for m in q.claim_many(10)}
    assert got == peeked
    with pytest.raises(TypeError, match="attributes must be bytes"):
        q.enqueue("x", attributes="text")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="attributes has 1 entries for 2 bodies"):
        q.enqueue_many(["x", "y"], attributes=[b"a"])


def test_attributes_written_without_n_are_delivered_on_a_queue_without_the_mark(q: Queue, r: redis.Redis) -> None:
    """The first message of a queue marks it (its counters hash: item_format); a claim on a
    marked queue reads a message's attributes only where n shows. A queue an older version
    may have written, with attributes and no n, has no mark, and its claims read them."""
    first = q.enqueue("x")
    assert r.hget("kq:{q}:counters", "item_format") == (b"2" if q.scripting else None)
    assert "item_format" not in q.counters()
    r.hdel("kq:{q}:counters", "item_format")  # a queue made by 0.1.0
    old = q.enqueue("y", attributes=b"A")
    r.hdel(f"kq:{{q}}:item:{old}", "n")  # as 0.1.0 wrote it
    assert {m.id: m.attributes for m in q.claim_many(10)} == {first: None, old: b"A"}


def test_the_first_delivery_time_is_recorded_once(q: Queue, r: redis.Redis) -> None:
    """Field f: the time of the first claim, kept through later deliveries (SQS's
    ApproximateFirstReceiveTimestamp)."""
    mid = q.enqueue("x")
    assert q.peek(1)[0].first_claimed_at is None
    m = q.claim(visibility_timeout=5)
    assert m is not None and m.first_claimed_at is not None
    first = m.first_claimed_at
    assert m.release()
    # stored by the release, if not by the claim (a first delivery stored lean implies it)
    assert r.hget(f"kq:{{q}}:item:{mid}", "f") == str(round(first * 1000)).encode()
    again = q.claim()
    assert again is not None and again.receives == 2 and again.first_claimed_at == first
    assert q.get([mid])[0].first_claimed_at == first


@pytest.mark.parametrize(
    ("scripted_end", "group"),
    [(True, None), (False, None), (True, "g")],  # (the script-free mode refuses a queue with groups)
    ids=["scripted", "script-free", "scripted-grouped"],
)
@pytest.mark.parametrize(
    "end", ["release", "release_delayed", "dead_letter", "reap", "reap_unlimited", "requeue", "repair"]
)
def test_a_lean_first_delivery_keeps_its_counts_however_it_ends(
    r: redis.Redis, end: str, scripted_end: bool, group: str | None
) -> None:
    """A scripted claim stores a first delivery lean (receipt and deadline only), a grouped
    message's too (its receipt ends in g); whatever then ends the delivery, in either mode,
    writes out its receives, deliveries and first delivery time before it deletes the
    receipt, so the next delivery counts on from them."""
    clock = FakeClock()
    limit = None if end == "reap_unlimited" else 5  # (a reap reads fewer fields without a limit)
    claimer = Queue("mix", client=r, clock=clock, max_receives=limit)
    other = Queue("mix", client=r, clock=clock, max_receives=limit, scripting=scripted_end)
    mid = claimer.enqueue("x", group=group)
    item = f"kq:{{mix}}:item:{mid}"
    m = claimer.claim(visibility_timeout=10)
    assert m is not None and m.receives == 1 and m.group == group
    assert m.receipt.endswith("g") == (group is not None)
    first = round(m.first_claimed_at * 1000) if m.first_claimed_at else None
    assert {b"c", b"d"} <= set(r.hkeys(item)) and not {b"r", b"n", b"f"} & set(r.hkeys(item))  # lean
    (seen,) = other.get([mid])  # a reader fills in what the lean form implies
    assert (seen.receives, seen.first_claimed_at) == (1, m.first_claimed_at)
    clock.advance(1)
    if end == "release":
        assert other.release(m)
    elif end == "release_delayed":
        assert other.release(m, delay=1)
        clock.advance(2)
        other.reap()
    elif end == "dead_letter":
        assert other.dead_letter(m, "no")
    elif end in ("reap", "reap_unlimited"):
        clock.advance(60)
        assert other.reap().requeued == 1
    elif end == "requeue":
        assert other.requeue(source="processing") == 1
    else:  # fsck: a stray receipt on a waiting message, deleted by the repair
        r.srem("kq:{mix}:processing", mid)
        r.srem(f"kq:{{mix}}:timer:{int(r.hget(item, 'd')) // 60_000}", mid)
        r.rpush("kq:{mix}:queue", mid)
        r.sadd("kq:{mix}:items", mid)
        r.hdel(item, "d")
        report = other.check(repair=True, settle=0)
        assert [p.kind for p in report.problems] == ["stray-fields"] and report.consistent, report
    stored = r.hgetall(item)
    assert b"c" not in stored
    assert stored[b"n"] == b"1" and stored[b"f"] == str(first).encode()
    assert stored.get(b"r") == (None if end == "requeue" else b"1")  # (requeue resets receives)
    if end == "dead_letter":
        assert other.requeue() == 1
    again = claimer.claim()
    assert again is not None and again.receipt.startswith("2-") and again.first_claimed_at == m.first_claimed_at
    assert again.receives == (1 if end in ("requeue", "dead_letter") else 2)
    assert again.group == group and again.receipt.endswith("g") == (group is not None)
    assert again.ack() and claimer.check(settle=0).consistent


def test_purge_by_id_deletes_only_those_dead_letters(q: Queue, r: redis.Redis) -> None:
    ids = q.enqueue_many(["a", "b", "c", "d"])
    for m in q.claim_many(3):
        assert m.dead_letter("no")
    assert q.purge(source="dead", ids=[ids[0], ids[2], ids[3], "999"]) == 2  # d waits, 999 is nothing
    assert [m.id for m in q.peek(10, source="dead")] == [ids[1]]
    assert not r.exists(f"kq:{{q}}:item:{ids[0]}") and r.exists(f"kq:{{q}}:item:{ids[3]}")
    assert q.stats().waiting == 1
    with pytest.raises(InvalidArgument, match="dead letters only"):
        q.purge(source="waiting", ids=[ids[3]])


def test_metadata_hash_and_existence(make_queue, r: redis.Redis) -> None:
    q = make_queue("meta-q")
    assert not q.exists() and q.metadata() == {}
    q.enqueue("x")
    assert q.exists()
    q.set_metadata({"a": "1", "b": "2"})
    q.set_metadata({"c": "3"}, remove=["a"])
    assert q.metadata() == {"b": "2", "c": "3"}
    assert r.hgetall("kq:{meta-q}:meta") == {b"b": b"2", b"c": b"3"}
    assert q.check(settle=0).consistent
    q.destroy()
    assert not q.exists() and not r.exists("kq:{meta-q}:meta")


#: Errors at the bound of last_error: (the error, what last_error keeps). 4,096 bytes are
#: kept whole; longer ones are cut on a character boundary to at most 4,096 bytes with the
#: "…" (3 bytes), so a character that straddles byte 4,093 goes whole.
LONG_ERRORS = [
    ("a" * 4096, "a" * 4096),
    ("é" * 2048, "é" * 2048),
    ("a" * 4097, "a" * 4093 + "…"),
    ("a" * 4092 + "😀b", "a" * 4092 + "…"),  # the emoji's 4 bytes straddle the cut
    ("€" * 2000, "€" * 1364 + "…"),  # 3-byte characters: 4,092 bytes kept
    ("ab" + "😀" * 5000, "ab" + "😀" * 1022 + "…"),
]


@pytest.mark.parametrize("error, kept", LONG_ERRORS, ids=["4096", "4096-2byte", "4097", "emoji", "euro", "emojis"])
@pytest.mark.parametrize("writer", ["release", "dead_letter"])
def test_last_error_keeps_at_most_4096_bytes(make_queue, writer: str, error: str, kept: str) -> None:
    q = make_queue()
    q.enqueue("x")
    m = q.claim()
    assert m is not None
    assert (q.release(m, error=error) if writer == "release" else q.dead_letter(m, error)) is True
    (stored,) = q.peek(source="waiting" if writer == "release" else "dead")
    assert stored.last_error == kept
    size = len(kept.encode())
    assert size <= 4096 and (kept == error or size >= 4088)
