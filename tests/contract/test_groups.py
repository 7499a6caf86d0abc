"""Message groups: a group's messages delivered in enqueue order, at most group_concurrency of
them released (waiting or in flight) at once; groups interleave; every end of a message (ack,
dead letter, expiry, purge) releases the group's next. Both faces; the script-free mode
refuses ``group=`` with one ConfigurationError and writes nothing, which every test here then
checks in place of the rest."""

from __future__ import annotations

import math
import threading
from typing import Any, Callable

import pytest
import redis

from keyqueue import ConfigurationError, CorruptQueue, Message, Queue

from ..support.helpers import FakeClock, snapshot


def grouped(make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool, **kw: Any) -> Queue | None:
    """Queue "q" with ``kw``; in the script-free mode, the refusal of ``group=`` checked
    (nothing written) and None."""
    q = make_queue("q", **kw)
    if scripting:
        return q
    before = snapshot(r)
    with pytest.raises(ConfigurationError, match="scripted mode"):
        q.enqueue("x", group="g")
    with pytest.raises(ConfigurationError, match="scripted mode"):
        q.enqueue_many(["x", "y"], group="g", delay=1)
    assert snapshot(r) == before
    return None


def drain(q: Queue, count: int = 10, limit: int = 10_000) -> list[list[Message]]:
    """Claim batches of ``count``, acking each batch, until a claim finds nothing."""
    batches = []
    for _ in range(limit):
        got = q.claim_many(count)
        if not got:
            return batches
        batches.append(got)
        assert q.ack_many(got) == len(got)
    raise AssertionError("the queue did not drain")


def test_each_group_in_order_one_at_a_time_under_claim_many(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    sent: dict[str | None, list[str]] = {}
    for i in range(6):  # enqueued interleaved, singly and in batches
        for g in ("a", "b", "c"):
            sent.setdefault(g, []).append(q.enqueue(f"{g}{i}", group=g))
        sent.setdefault(None, []).append(q.enqueue(f"plain{i}"))
    sent["d"] = q.enqueue_many([f"d{i}" for i in range(6)], group="d")
    got: dict[str | None, list[str]] = {}
    batches = drain(q)
    for batch in batches:
        groups = [m.group for m in batch if m.group is not None]
        assert len(groups) == len(set(groups))  # one of a group per claim: none in flight together
        for m in batch:
            got.setdefault(m.group, []).append(m.id)
    assert got == sent
    assert len(batches[0]) == 10  # the ungrouped ones are never held back by a group
    assert q.groups() == [] and q.stats().held == 0 and len(q) == 0
    assert r.keys("kq:{q}:group*") == [] and not r.exists("kq:{q}:held")


def test_the_next_is_not_visible_before_the_current_is_acked(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    ids = q.enqueue_many(["1", "2", "3"], group="g")
    first = q.claim_many(10)
    assert [m.id for m in first] == [ids[0]] and first[0].group == "g"
    assert q.claim_many(10) == []
    assert len(q) == 2 and q.stats().held == 2 and q.stats().waiting == 2
    assert [m.id for m in q.peek(10, source="held")] == ids[1:]
    assert all(m.group == "g" for m in q.peek(10, source="held"))
    assert [(g.id, g.held, g.active) for g in q.groups()] == [("g", 2, 1)]
    assert first[0].ack()
    assert [m.id for m in q.claim_many(10)] == [ids[1]]


def test_an_ack_releases_the_next_though_the_group_counts_were_lost(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """A grouped message's receipt ends in g, first delivery or not, and only such a
    receipt has the ack read the message's group: an ack frees the group's next even with
    the group counts lost, and an ungrouped receipt has no g."""
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    ids = q.enqueue_many(["1", "2"], group="g")
    plain = q.enqueue("p")
    (first,) = q.claim_many(1)
    assert first.receipt is not None and first.receipt.startswith("1-") and first.receipt.endswith("g")
    assert first.release()
    (p, first) = q.claim_many(10)  # (the released one went back to the tail)
    assert (first.id, p.id) == (ids[0], plain)
    assert first.receipt is not None and first.receipt.startswith("2-") and first.receipt.endswith("g")
    assert p.receipt is not None and not p.receipt.endswith("g")
    r.delete("kq:{q}:groups")
    assert q.ack_many([first, p]) == 2
    assert [m.id for m in q.claim_many(10)] == [ids[1]]


def test_a_released_or_timed_out_delivery_comes_back_before_the_next(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock, bucket_seconds=1, visibility_timeout=5)
    if q is None:
        return
    ids = q.enqueue_many(["1", "2"], group="g")
    m = q.claim()
    assert m is not None and m.release()
    again = q.claim()
    assert again is not None and again.id == ids[0] and again.receives == 2
    clock.advance(5.001)
    q.reap()
    back = q.claim_many(10)
    assert [x.id for x in back] == [ids[0]] and back[0].receives == 3
    assert not again.ack()  # stale: the group stays with the current delivery
    assert q.claim_many(10) == []
    assert back[0].ack()
    assert [x.id for x in q.claim_many(10)] == [ids[1]]


def test_a_release_with_a_delay_keeps_the_group_waiting_for_it(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock, bucket_seconds=1)
    if q is None:
        return
    ids = q.enqueue_many(["1", "2"], group="g")
    m = q.claim()
    assert m is not None and m.release(delay=10)
    assert q.claim_many(10) == []
    clock.advance(10)
    q.reap()
    assert [x.id for x in q.claim_many(10)] == [ids[0]]


def test_group_concurrency_caps_the_released_messages_of_a_group(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    q = grouped(make_queue, r, scripting, group_concurrency=3)
    if q is None:
        return
    assert r.hget("kq:{q}:config", "group_concurrency") == b"3"
    ids = q.enqueue_many([str(i) for i in range(10)], group="g")
    other = q.enqueue("o", group="h")
    got = q.claim_many(10)
    assert sorted(m.id for m in got if m.group == "g") == ids[:3] and [m.id for m in got if m.group == "h"] == [other]
    assert q.claim_many(10) == []
    assert q.groups() == [("g", 7, 3), ("h", 0, 1)]
    got[0].dead_letter("no")
    assert [m.id for m in q.claim_many(10)] == [ids[3]]
    assert make_queue("q").settings.group_concurrency == 3  # read by every process


def test_a_grouped_delivery_acked_twice_at_once_frees_one_place(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """A delivery listed twice in one ack_many ends once: with two places a group, the ack
    of one of them releases one held message, not two."""
    q = grouped(make_queue, r, scripting, group_concurrency=2)
    if q is None:
        return
    ids = q.enqueue_many([str(i) for i in range(5)], group="g")
    first, second = q.claim_many(10)
    assert q.ack_many([first, first]) == 1
    assert [m.id for m in q.claim_many(10)] == [ids[2]]
    assert q.groups() == [("g", 2, 2)] and second.id == ids[1]


def test_a_held_message_whose_item_is_gone_is_skipped(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """A held id without its message (only a damaged queue has one) is dropped when its turn
    comes: the group's next one with a message is released in its place, in the same ack,
    and the counts stay right."""
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    a = q.enqueue_many(["a0", "a1", "a2", "a3"], group="a")
    b = q.enqueue_many(["b0", "b1"], group="b")
    r.delete(f"kq:{{q}}:item:{a[1]}", f"kq:{{q}}:item:{a[2]}", f"kq:{{q}}:item:{b[1]}")
    got = q.claim_many(10)
    assert sorted(m.id for m in got) == [a[0], b[0]]
    assert q.ack_many(got) == 2
    assert [m.id for m in q.claim_many(10)] == [a[3]]
    assert q.groups() == [("a", 0, 1)] and q.stats().held == 0
    assert r.lrange("kq:{q}:group:a", 0, -1) == [] and not r.exists("kq:{q}:group:b")


def test_raising_group_concurrency_releases_held_messages_at_once(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    g = q.enqueue_many([f"g{i}" for i in range(6)], group="g")
    h = q.enqueue_many([f"h{i}" for i in range(2)], group="h")
    first = q.claim_many(10)
    assert [m.id for m in first] == [g[0], h[0]] and q.stats().held == 6
    raised = make_queue("q", group_concurrency=3)  # another process raises it (or config --set)
    assert q.stats().held == 3
    more = raised.claim_many(10)
    assert [m.id for m in more] == [g[1], g[2], h[1]]
    assert q.groups() == [("g", 3, 3), ("h", 0, 2)]
    make_queue("q", group_concurrency=2)  # a lowering releases nothing: the groups drain to it
    assert q.stats().held == 3 and q.claim_many(10) == []
    assert q.ack_many(first + more) == 5
    assert [m.id for m in q.claim_many(10)] == [g[3], g[4]]


def test_a_long_group_does_not_starve_a_later_one(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    q.enqueue_many([f"long{i}" for i in range(10_000)], group="long")
    late = q.enqueue_many([f"late{i}" for i in range(10)], group="late")
    delivered = []
    for _ in range(30):
        m = q.claim()
        assert m is not None
        delivered.append(m.id)
        m.ack()
    assert set(late) <= set(delivered)
    assert [i for i in delivered if i in late] == late


def test_groups_by_id_or_busiest_first(make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool) -> None:
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    for g, n in (("a", 2), ("b", 5), ("c", 1), ("d", 5)):
        q.enqueue_many([f"{g}{i}" for i in range(n)], group=g)
    assert q.groups() == [("a", 1, 1), ("b", 4, 1), ("c", 0, 1), ("d", 4, 1)]
    assert q.groups(2) == [("a", 1, 1), ("b", 4, 1)]
    assert q.groups(3, busiest=True) == [("b", 4, 1), ("d", 4, 1), ("a", 1, 1)]  # ties by id
    assert q.groups(0, busiest=True) == []


def test_a_delayed_grouped_message_joins_its_group_when_due(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock, bucket_seconds=1)
    if q is None:
        return
    later = q.enqueue("later", group="g", delay=10)
    now = q.enqueue("now", group="g")
    m = q.claim()
    assert m is not None and m.id == now  # the delayed one does not block its group
    assert q.groups() == [("g", 0, 1)]
    clock.advance(10)
    q.reap()
    assert q.claim_many(10) == []  # due: it joined behind the one in flight
    assert [x.id for x in q.peek(source="held")] == [later]
    assert m.ack()
    got = q.claim_many(10)
    assert [x.id for x in got] == [later] and got[0].group == "g"


def test_delayed_messages_of_a_group_due_in_one_reap_join_it_in_the_order_they_fell_due(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """Found due together (one timer bucket, one reap), they join their group by due time,
    and those due at once by id (enqueue order), not in the timer set's order."""
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock)
    if q is None:
        return
    second = q.enqueue("due second", group="g", delay=20)
    first = q.enqueue("due first", group="g", delay=10)
    batch = q.enqueue_many([f"b{i}" for i in range(5)], group="g", delay=25)
    clock.advance(30)
    assert q.reap().delayed_released == 7
    order = [m.id for m in q.peek(source="waiting")] + [m.id for m in q.peek(10, source="held")]
    assert order == [first, second, *batch]
    assert [m.id for batch_ in drain(q) for m in batch_] == order


def test_delayed_messages_of_a_group_join_in_due_order_from_a_bucket_reaped_in_parts(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """A timer bucket of more than 500 timers is reaped in parts (SSCAN); the due delayed
    messages of groups wait for the end of the pass over it and join in due order. A reaping
    client that stops mid-pass loses nothing: the next pass finds them in their timer set."""
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock)
    if q is None:
        return
    q.enqueue_many([f"u{i}" for i in range(600)], delay=5)  # other timers in the same bucket
    ids = [q.enqueue(f"g{i}", group="g", delay=40 - i / 2) for i in range(60)]  # each due before the one before
    clock.advance(45)
    first = make_queue("q", clock=clock)
    assert first.claim() is not None  # its claim reaps one part (500 timers), then stops for good
    # (the group's messages that part found wait for the end of a pass: none joined yet)
    assert q.stats().held == 0 and not any(m.group for m in q.peek(1000, source="waiting"))
    assert q.reap().delayed_released >= 60
    order = [m.id for m in q.peek(1000, source="waiting") if m.group] + [m.id for m in q.peek(100, source="held")]
    assert order == ids[::-1]


def test_dead_letter_frees_the_group_and_requeue_puts_it_at_the_end(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    ids = q.enqueue_many(["1", "2", "3"], group="g")
    m = q.claim()
    assert m is not None and m.dead_letter("bad")
    assert q.peek(source="dead")[0].group == "g"
    second = q.claim()
    assert second is not None and second.id == ids[1]
    assert q.requeue([ids[0]]) == 1
    assert [x.id for x in q.peek(source="held")] == [ids[2], ids[0]]
    assert second.ack()
    order = [b[0].id for b in drain(q, 1)]
    assert order == [ids[2], ids[0]]


def test_out_of_receives_frees_the_group(make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool) -> None:
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock, bucket_seconds=1, visibility_timeout=5, max_receives=1)
    if q is None:
        return
    ids = q.enqueue_many(["1", "2"], group="g")
    assert q.claim() is not None
    clock.advance(5.001)
    q.reap()  # out of receives: dead-lettered by the reaper
    assert [m.id for m in q.peek(source="dead")] == [ids[0]]
    assert [m.id for m in q.claim_many(10)] == [ids[1]]


def test_retention_expiry_frees_the_group(make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool) -> None:
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock, bucket_seconds=1, visibility_timeout=5, retention=10)
    if q is None:
        return
    old = q.enqueue("old", group="g")
    clock.advance(6)
    young = q.enqueue("young", group="g")
    clock.advance(4)  # old reached the retention while waiting: a claim deletes it and goes on
    got = q.claim_many(10)
    assert [m.id for m in got] == [young]
    assert not r.exists(f"kq:{{q}}:item:{old}") and q.counters()["expired"] == 1
    # in flight past its retention: deleted at its deadline, and the next released
    nxt = q.enqueue("next", group="g")
    clock.advance(6)
    q.reap()
    assert q.counters()["expired"] == 2
    assert [m.id for m in q.claim_many(10)] == [nxt]


def test_the_expiry_sweep_frees_the_group(make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool) -> None:
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock, bucket_seconds=1, retention=10)
    if q is None:
        return
    old = q.enqueue("old", group="g")
    clock.advance(9)
    young = q.enqueue("young", group="g")
    clock.advance(1)
    q.reap()  # the sweep deletes the old one and releases the young one
    assert not r.exists(f"kq:{{q}}:item:{old}")
    assert q.groups() == [("g", 0, 1)] and q.stats().held == 0
    assert [m.id for m in q.peek(source="waiting")] == [young]


@pytest.mark.parametrize("by", ["sweep", "claim", "deadline"])
def test_a_group_that_expired_while_held_goes_at_once(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool, by: str
) -> None:
    """Held messages expire when released: one past its retention is deleted at its release
    instead, so a group of 300 that expired while held goes in one reap or claim (not one a
    pass), counted, and the young message behind them is the one released."""
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock, bucket_seconds=1, visibility_timeout=20, retention=10)
    if q is None:
        return
    ids = q.enqueue_many([str(i) for i in range(300)], group="g")
    if by == "deadline":  # the first in flight until its deadline, at 20 s
        m = q.claim()
        assert m is not None and m.id == ids[0]
    clock.advance(15 if by == "deadline" else 9)
    young = q.enqueue("young", group="g")
    clock.advance(5 if by == "deadline" else 1)  # every one of ids reached the retention, young did not
    assert q.stats().held == 300
    if by == "claim":
        got = q.claim_many(10)
        assert [m.id for m in got] == [young]
    else:
        q.reap()
        assert [m.id for m in q.peek(source="waiting")] == [young]
    assert q.counters()["expired"] == 300
    assert q.stats().held == 0 and len(q) == (1 if by != "claim" else 0)
    assert not any(r.exists(f"kq:{{q}}:item:{i}") for i in ids)


def test_dedup_key_is_per_queue_not_per_group(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    first = q.enqueue("a", group="g", dedup_key="k")
    assert q.enqueue("b", group="h", dedup_key="k") == first
    assert q.enqueue("c", dedup_key="k") == first
    assert len(q) == 1 and q.groups() == [("g", 0, 1)]


def test_grouped_messages_keep_their_attributes(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock, bucket_seconds=1)
    if q is None:
        return
    q.enqueue("a", group="g", attributes=b"\x00one")
    q.enqueue_many(["b", "c"], group="g", attributes=[b"two", None])
    q.enqueue("d", group="g", attributes=b"four", delay=5)
    clock.advance(5)
    q.reap()
    got = []
    for _ in range(4):
        (m,) = q.claim_many(10)
        got.append((m.body, m.attributes, m.group))
        assert m.ack()
    assert got == [(b"a", b"\x00one", "g"), (b"b", b"two", "g"), (b"c", None, "g"), (b"d", b"four", "g")]


@pytest.mark.parametrize("source", ["waiting", "all"])
def test_purge_and_destroy_leave_no_group_key(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool, source: str
) -> None:
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock, bucket_seconds=1)
    if q is None:
        return
    for g in ("a", "b", "c"):
        q.enqueue_many([f"{g}{i}" for i in range(5)], group=g)
    q.enqueue_many(["d0", "d1"], group="d", delay=30)
    q.enqueue("plain")
    claimed = q.claim_many(2)
    assert len(claimed) == 2
    assert len(q) == 14 and q.stats().held == 12  # a, b, c: 4 held each behind the one released
    n = q.purge(source=source)  # type: ignore[arg-type]
    if source == "waiting":
        assert n == 14  # the held ones, c0 and plain
        assert len(q) == 0
        for m in claimed:
            assert m.ack()  # their groups have nothing left to release
        assert q.groups() == []
        assert r.keys("kq:{q}:group:*") == [] and not r.exists("kq:{q}:held")
        assert q.stats().delayed == 2
    else:
        assert n == 14 + 2 + 2  # and the two in flight, the two delayed
        assert r.keys("kq:{q}:group*") == [] and not r.exists("kq:{q}:held")
        assert q.stats() == type(q.stats())(0, 0, 0, 0, None, 0)
    q.enqueue_many(["x", "y"], group="a")
    q.destroy()
    assert r.keys("kq:{q}:*") == []


@pytest.mark.parametrize("bad", [5, b"g", "", "x" * 129, "a b", "caf\u00e9", "tab\t", "\x7f"])
def test_a_bad_group_raises_and_writes_nothing(make_queue: Callable[..., Queue], r: redis.Redis, bad: object) -> None:
    q = make_queue("q")
    q.enqueue("before")
    before = snapshot(r)
    with pytest.raises(ValueError, match="group"):
        q.enqueue("x", group=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group"):
        q.enqueue_many(["x"], group=bad)  # type: ignore[arg-type]
    assert snapshot(r) == before


def test_the_longest_group_and_every_printable_character_are_taken(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    every = "".join(chr(c) for c in range(0x21, 0x7F))
    q.enqueue("a", group="x" * 128)
    q.enqueue("b", group=every)
    assert sorted(g.id for g in q.groups()) == sorted(["x" * 128, every])
    assert {m.group for m in q.claim_many(5)} == {"x" * 128, every}


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2", math.nan, None])
def test_a_bad_group_concurrency_raises_and_writes_nothing(
    make_queue: Callable[..., Queue], r: redis.Redis, bad: object
) -> None:
    with pytest.raises(ValueError, match="group_concurrency"):
        make_queue("fresh", visibility_timeout=5, group_concurrency=bad)
    assert r.keys("*") == []


@pytest.mark.parametrize("key", ["kq:{q}:group:g", "kq:{q}:groups", "kq:{q}:held"])
def test_a_group_key_of_the_wrong_type_fails_the_operation_writing_nothing(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool, key: str
) -> None:
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    q.enqueue_many(["1", "2"], group="g")
    m = q.claim()
    assert m is not None
    saved = r.dump(key)
    r.delete(key)
    r.sadd(key, "x")
    before = snapshot(r)
    with pytest.raises(CorruptQueue, match=key):  # (a group with room reads the counts, one held the list)
        q.enqueue("3", group="free" if key.endswith(":groups") else "g")
    with pytest.raises(CorruptQueue, match=key):
        q.ack(m)
    assert snapshot(r) == before
    r.delete(key)
    if saved is not None:
        r.restore(key, 0, saved)
    assert q.ack(m)


def test_an_ack_of_many_groups_undoes_its_pops_when_a_later_group_is_corrupt(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """The next messages of the first groups are taken before a later group's list turns
    out to be of the wrong type: they go back where they were, and nothing has changed."""
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    for g in ("g1", "g2", "g3"):
        q.enqueue_many([f"{g}-1", f"{g}-2", f"{g}-3"], group=g)
    got = q.claim_many(3)
    assert sorted(m.text for m in got) == ["g1-1", "g2-1", "g3-1"]
    got.sort(key=lambda m: m.text)
    r.delete("kq:{q}:group:g3")
    r.set("kq:{q}:group:g3", "x")
    before = snapshot(r)
    with pytest.raises(CorruptQueue, match="group:g3"):
        q.ack_many(got)
    assert snapshot(r) == before
    r.delete("kq:{q}:group:g3")
    assert q.ack_many(got) == 3
    assert sorted(m.text for m in q.claim_many(3)) == ["g1-2", "g2-2"]  # (g3's held ones are gone)


@pytest.mark.parametrize(
    ("key", "released"),
    [(k, True) for k in ("seq", "queue", "items", "counters", "signal")]
    + [(k, False) for k in ("seq", "counters")],  # (a held one touches neither the FIFO nor the signal)
)
def test_a_queue_key_of_the_wrong_type_fails_a_grouped_enqueue_writing_nothing(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool, key: str, released: bool
) -> None:
    """One grouped message, released or held: a corrupt key found by a write half-way is
    undone with every write before it."""
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    q.enqueue_many(["1", "2"], group="busy")  # (one released, one held)
    full = f"kq:{{q}}:{key}"
    r.delete(full)
    r.sadd(full, "x") if key != "items" else r.set(full, "x")
    before = snapshot(r)
    with pytest.raises(CorruptQueue, match=full.replace("{", "\\{")):
        q.enqueue("3", group="free" if released else "busy")
    assert snapshot(r) == before


def test_a_worker_retries_a_failed_message_before_the_next_of_its_group(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool, workers: Any
) -> None:
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    ids = q.enqueue_many(["1", "2", "3"], group="g")
    others = q.enqueue_many(["x", "y"], group="h")
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def handler(m: Message) -> None:
        with lock:
            seen.append((m.id, m.receives))
        if m.id == ids[0] and m.receives == 1:
            raise RuntimeError("first try fails")

    workers.run(workers.make(q, handler, concurrency=4, retry_backoff=0))
    mine = [x for x in seen if x[0] in ids]
    assert mine == [(ids[0], 1), (ids[0], 2), (ids[1], 1), (ids[2], 1)]
    assert [i for i, _ in seen if i in others] == others
    assert len(q) == 0 and q.groups() == []


def test_a_poison_message_holds_its_group_until_dead_lettered_while_others_flow(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool, workers: Any
) -> None:
    q = grouped(make_queue, r, scripting, max_receives=3)
    if q is None:
        return
    poison, after = q.enqueue_many(["poison", "after"], group="p")
    others = q.enqueue_many([f"a{i}" for i in range(20)], group="a")
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def handler(m: Message) -> None:
        with lock:
            seen.append((m.id, m.receives))
        if m.id == poison:
            raise RuntimeError("cannot be processed")

    # One at a time (two threads could spend the poison's three tries while the other
    # handles one message): each retry goes behind what waits, so the other group flows.
    workers.run(workers.make(q, handler, concurrency=1, retry_backoff=0))
    tries = [i for i, (mid, _) in enumerate(seen) if mid == poison]
    assert [seen[i][1] for i in tries] == [1, 2, 3]
    assert [(m.id, m.group) for m in q.peek(source="dead")] == [(poison, "p")]
    assert [mid for mid, _ in seen].index(after) > tries[-1]  # its group waited for the dead letter
    assert any(mid in others for mid, _ in seen[tries[0] : tries[-1]])  # the other group flowed meanwhile
    assert [mid for mid, _ in seen if mid in others] == others
    assert len(q) == 0 and q.groups() == []


def test_the_script_free_mode_does_not_serve_a_grouped_queue(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    q = make_queue("q")
    producer = Queue("q", client=r)  # a scripted client's groups
    producer.enqueue_many(["1", "2", "3"], group="g")
    first = producer.claim()
    assert first is not None and first.dead_letter("bad")
    if scripting:
        assert [m.text for m in q.claim_many(5)] == ["2"]
        return
    before = snapshot(r)
    with pytest.raises(ConfigurationError, match="holds message groups"):
        q.claim_many(5)
    with pytest.raises(ConfigurationError, match="holds message groups"):
        q.reap()
    with pytest.raises(ConfigurationError, match="holds message groups"):
        q.requeue()
    for source in ("waiting", "delayed", "all"):  # (a group's current message can be delayed)
        with pytest.raises(ConfigurationError, match="holds message groups"):
            q.purge(source=source)  # type: ignore[arg-type]
    assert snapshot(r) == before
    assert len(q) == 2 and q.stats().held == 1 and q.groups() == [("g", 1, 1)]  # reading is fine
    assert q.requeue([]) == 0  # (nothing asked for: nothing refused)


@pytest.mark.parametrize(("key", "field"), [("counters", "acked"), ("held", None)])
def test_a_counter_that_is_no_integer_fails_grouped_writes_changing_nothing(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool, key: str, field: str | None
) -> None:
    """A count Lua would read as a number but Redis' INCRBY refuses ("1.5"): the ack that
    would release the group's next, and a grouped enqueue that would hold its message,
    fail before any write."""
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    q.enqueue_many(["1", "2"], group="g")
    m = q.claim()
    assert m is not None
    full = f"kq:{{q}}:{key}"
    if field is None:
        r.set(full, "1.5")
    else:
        r.hset(full, field, "1.5")
    before = snapshot(r)
    with pytest.raises(CorruptQueue, match=full.replace("{", "\\{")):
        q.ack(m) if key == "counters" else q.enqueue("3", group="g")
    assert snapshot(r) == before


def test_the_script_free_mode_does_not_serve_a_queue_whose_grouped_messages_are_all_delayed(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """No group has released a message yet (no groups hash): the mark a grouped enqueue
    leaves in the counters hash still tells the script-free reaper and claim to stay out,
    rather than release the message into the FIFO without its group."""
    clock = FakeClock()
    q = make_queue("q", clock=clock, bucket_seconds=1)
    producer = Queue("q", client=r, clock=clock, bucket_seconds=1)
    (mid,) = producer.enqueue_many(["1"], group="g", delay=2)
    assert not r.exists("kq:{q}:groups") and r.hget("kq:{q}:counters", "grouped") == b"1"
    assert "grouped" not in q.counters()
    clock.advance(3)
    if scripting:
        assert q.reap().delayed_released == 1
        m = q.claim()
        assert m is not None and (m.id, m.group) == (mid, "g") and m.receipt.endswith("g")
        return
    before = snapshot(r)
    with pytest.raises(ConfigurationError, match="holds message groups"):
        q.reap()
    with pytest.raises(ConfigurationError, match="holds message groups"):
        q.claim_many(5)
    assert snapshot(r) == before


def test_a_claim_reads_the_group_with_the_group_counts_lost_and_on_an_old_queue(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """A grouped message is written without n; a claim on a queue marked as having groups
    reads g in its first read whatever became of the group counts, on a queue of this
    version and on one an older version made (no item_format mark: a six-field read)."""
    q = grouped(make_queue, r, scripting)
    if q is None:
        return
    ids = q.enqueue_many(["1", "2"], group="g")
    attributed = q.enqueue("a", group="h", attributes=b"A")
    assert r.hget(f"kq:{{q}}:item:{ids[0]}", "n") is None and r.hget(f"kq:{{q}}:item:{attributed}", "n") == b"0"
    r.delete("kq:{q}:groups")
    r.hdel("kq:{q}:counters", "item_format")
    got = {m.id: m for m in q.claim_many(10)}
    assert {i: (m.group, m.attributes, m.receipt.endswith("g")) for i, m in got.items()} == {
        ids[0]: ("g", None, True),
        attributed: ("h", b"A", True),
    }
    assert q.ack_many(list(got.values())) == 2
    (nxt,) = q.claim_many(10)
    assert (nxt.id, nxt.group) == (ids[1], "g")


def test_the_script_free_mode_does_not_end_a_grouped_delivery(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """A delivery a scripted claim made of a grouped message (its receipt ends in g): an ack
    or a dead letter must free the group's next in the same step, which the script-free
    mode does not do, so it refuses them and writes nothing; a release keeps the message's
    place in its group and works in both modes."""
    producer = Queue("q", client=r)
    ids = producer.enqueue_many(["1", "2"], group="g")
    m = producer.claim()
    assert m is not None and m.receipt.endswith("g")
    q = make_queue("q")
    if scripting:
        assert q.ack_many([m]) == 1
        (nxt,) = q.claim_many(5)
        assert (nxt.id, nxt.group) == (ids[1], "g")
        return
    before = snapshot(r)
    with pytest.raises(ConfigurationError, match="holds message groups"):
        q.ack_many([m])
    with pytest.raises(ConfigurationError, match="holds message groups"):
        q.dead_letter(m, "bad")
    assert snapshot(r) == before
    assert q.release(m)
    again = producer.claim()
    assert again is not None and (again.id, again.group, again.receives) == (ids[0], "g", 2)


def test_a_grouped_delivery_released_with_a_delay_keeps_its_place_in_both_modes(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """A grouped message in flight counts among its group's released messages by being in
    processing; released with a delay (in either mode) it is marked j, so that while it is
    delayed the group still waits for it, the fsck counts it, and when due it comes back
    first rather than joining the end of its group."""
    clock = FakeClock()
    producer = Queue("q", client=r, clock=clock, bucket_seconds=1)
    ids = producer.enqueue_many(["1", "2"], group="g")
    m = producer.claim()
    assert m is not None and m.id == ids[0] and b"j" not in r.hgetall(f"kq:{{q}}:item:{ids[0]}")
    assert producer.check(settle=0).consistent
    q = make_queue("q", clock=clock)
    assert q.release(m, delay=10)
    assert r.hget(f"kq:{{q}}:item:{ids[0]}", "j") == b"1"
    assert producer.claim_many(10) == []
    assert q.check(settle=0).consistent and producer.check(settle=0).consistent
    clock.advance(11)
    producer.reap()
    assert [x.id for x in producer.claim_many(10)] == [ids[0]]


def _lost_receipt(r: redis.Redis, q: Queue, clock: FakeClock, *fields: str) -> list[str]:
    """Two messages of group g, the first in flight with ``fields`` of its item deleted (a
    state no operation leaves) and listed in a timer bucket already due, where a reap meets it."""
    ids = q.enqueue_many(["1", "2"], group="g")
    assert q.claim() is not None
    r.hdel(f"kq:{{q}}:item:{ids[0]}", *fields)
    past = int(clock.now) - 5
    r.sadd(f"kq:{{q}}:timer:{past}", ids[0])
    r.zadd("kq:{q}:timers", {str(past): past * 1000})
    return ids


def test_a_reap_keeps_a_grouped_delivery_without_receipt_in_its_group(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """A grouped message owned without a receipt, before its deadline, leaves processing as
    a delayed one that still counts in its group (j): the group waits for it, and when due
    it comes back before the group's next."""
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock, bucket_seconds=1, visibility_timeout=30)
    if q is None:
        return
    ids = _lost_receipt(r, q, clock, "c")
    q.reap()
    assert r.hget(f"kq:{{q}}:item:{ids[0]}", "j") == b"1" and not r.sismember("kq:{q}:processing", ids[0])
    assert q.claim_many(10) == [] and q.groups() == [("g", 1, 1)]
    clock.advance(31)
    q.reap()
    assert [x.id for x in q.claim_many(10)] == [ids[0]]
    assert q.groups() == [("g", 1, 1)]


def test_a_reap_ends_a_grouped_delivery_without_receipt_found_dead(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """A grouped message owned without a receipt or deadline that is also in the dead
    letters leaves processing as a dead letter: it no longer counts in its group, whose next
    is released."""
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock, bucket_seconds=1, visibility_timeout=30)
    if q is None:
        return
    ids = _lost_receipt(r, q, clock, "c", "d")
    r.rpush("kq:{q}:dead", ids[0])
    q.reap()
    assert not r.sismember("kq:{q}:processing", ids[0]) and r.lrange("kq:{q}:dead", 0, -1) == [ids[0].encode()]
    assert [x.id for x in q.claim_many(10)] == [ids[1]]
    assert q.groups() == [("g", 0, 1)]


def test_a_lean_grouped_delivery_a_reap_dead_letters_frees_its_group_and_keeps_its_counts(
    make_queue: Callable[..., Queue], r: redis.Redis, scripting: bool
) -> None:
    """A grouped first delivery is stored lean (receipt ending in g, and the deadline); a
    reap that finds it out of receives writes out its receives, deliveries and first
    delivery time, dead-letters it and releases its group's next."""
    clock = FakeClock()
    q = grouped(make_queue, r, scripting, clock=clock, bucket_seconds=1, visibility_timeout=5, max_receives=1)
    if q is None:
        return
    ids = q.enqueue_many(["1", "2"], group="g")
    item = f"kq:{{q}}:item:{ids[0]}"
    m = q.claim()
    assert m is not None and m.id == ids[0] and m.receipt.endswith("g") and m.first_claimed_at is not None
    assert set(r.hkeys(item)) == {
        b"b",
        b"t",
        b"g",
        b"c",
        b"d",
    }  # lean: no r, n, f (or j: in flight, it counts in its group)
    assert q.claim_many(10) == []  # (the group waits for it)
    clock.advance(6)
    assert q.reap().dead_lettered == 1
    stored = r.hgetall(item)
    assert (stored[b"r"], stored[b"n"], stored[b"f"]) == (b"1", b"1", str(round(m.first_claimed_at * 1000)).encode())
    assert b"c" not in stored and b"j" not in stored
    assert [x.id for x in q.claim_many(10)] == [ids[1]]
    assert q.check(settle=0).consistent
