"""The fsck of message groups, on both faces and modes (the check uses plain commands, so the
script-free mode checks a grouped queue a scripted producer filled): a consistent grouped queue
is left alone; a wrong count, a stuck group, a wrong held counter, a lost group mark, a
stray group list entry and a grouped message in no state are found and repaired, and every message is then
delivered once, in its group's order."""

from __future__ import annotations

from typing import Callable

import pytest
import redis

from keyqueue import Queue
from keyqueue.fsck import GROUP_COUNT, GROUP_ENTRY, GROUP_MARK, HELD_COUNT, ORPHAN

from ..support.check_support import ITEMS, QUEUE, claim_and_ack_all, item, problems
from ..support.helpers import FakeClock, snapshot

GROUPS, HELD = "kq:{q}:groups", "kq:{q}:held"


def group_list(g: str) -> str:
    return f"kq:{{q}}:group:{g}"


@pytest.fixture
def cq(make_queue: Callable[..., Queue], clock: FakeClock) -> Queue:
    """Queue "q" on the face and mode under test, on a clock the test moves."""
    return make_queue("q", clock=clock, visibility_timeout=30, bucket_seconds=1)


@pytest.fixture
def producer(cq: Queue, r: redis.Redis, clock: FakeClock) -> Queue:
    """The same queue, scripted (groups need it), for setting the scene."""
    return Queue("q", client=r, clock=clock)


def repairs(q: Queue, want: dict[str, list[str]]) -> None:
    """The check finds exactly ``want``, the repair fixes it, a second check finds nothing."""
    before = q.check(settle=0)
    assert problems(before) == want and not before.consistent, str(before)
    fixed = q.check(repair=True, settle=0)
    assert problems(fixed) == want and all(p.repaired for p in fixed.problems), str(fixed)
    after = q.check(settle=0)
    assert after.consistent and after.problems == [], str(after)


def in_group_order(q: Queue, clock: FakeClock, sent: dict[str, list[str]]) -> None:
    """Everything delivered once by ``q`` (scripted: only that mode serves groups), each group
    in the order it was sent."""
    clock.advance(3600)
    q.reap()
    q.requeue()
    got = claim_and_ack_all(q)
    assert sorted(got, key=int) == sorted((i for ids in sent.values() for i in ids), key=int)
    for ids in sent.values():
        assert [i for i in got if i in ids] == ids
    assert q.groups() == [] and len(q) == 0


def test_a_consistent_grouped_queue_is_left_alone(cq: Queue, producer: Queue, clock: FakeClock, r: redis.Redis) -> None:
    a = producer.enqueue_many(["a0", "a1", "a2"], group="a")
    b = producer.enqueue_many(["b0", "b1"], group="b")
    c = [producer.enqueue("c0", group="c", delay=30)]
    first = producer.claim_many(10)
    assert {m.id for m in first} == {a[0], b[0]}
    assert [m for m in first if m.id == b[0]][0].dead_letter("bad")  # b1 released
    before = snapshot(r)
    report = cq.check(settle=0)
    assert report.consistent and report.problems == [] and report.notes == [], str(report)
    assert (report.waiting, report.held, report.processing, report.delayed, report.dead) == (3, 2, 1, 1, 1)
    assert report.waiting == len(cq)  # (held ones counted in both)
    assert " 3 waiting (2 held), 1 processing, 1 delayed, 1 dead; " in str(report)
    assert cq.check(repair=True, settle=0).consistent
    assert snapshot(r) == before
    [m.ack() for m in first if m.id == a[0]]
    in_group_order(producer, clock, {"a": a[1:], "b": [b[1], b[0]], "c": c})


def test_a_wrong_group_count_is_set_right(cq: Queue, producer: Queue, clock: FakeClock, r: redis.Redis) -> None:
    a = producer.enqueue_many(["a0", "a1", "a2"], group="a")
    r.hset(GROUPS, "a", 5)
    repairs(cq, {GROUP_COUNT: ["a"]})
    assert r.hget(GROUPS, "a") == b"1"
    in_group_order(producer, clock, {"a": a})


def test_a_stuck_group_releases_its_next(cq: Queue, producer: Queue, clock: FakeClock, r: redis.Redis) -> None:
    a = producer.enqueue_many(["a0", "a1", "a2"], group="a")
    r.delete(item(a[0]))  # its released message lost: the group would wait for ever
    r.lrem(QUEUE, 0, a[0])
    r.srem(ITEMS, a[0])
    repairs(cq, {GROUP_COUNT: ["a"]})
    assert [m.id for m in cq.peek(source="waiting")] == [a[1]]
    in_group_order(producer, clock, {"a": a[1:]})


def test_a_wrong_held_counter_is_set_right(cq: Queue, producer: Queue, clock: FakeClock, r: redis.Redis) -> None:
    a = producer.enqueue_many(["a0", "a1", "a2"], group="a")
    r.set(HELD, 7)
    repairs(cq, {HELD_COUNT: ["held"]})
    assert r.get(HELD) == b"2" and len(cq) == 3
    in_group_order(producer, clock, {"a": a})


def test_a_lost_group_mark_is_written_again(cq: Queue, producer: Queue, clock: FakeClock, r: redis.Redis) -> None:
    """Without the counters hash's mark a claim would not read a grouped message's group (it
    is written without n): the ack would not free the group's next."""
    a = producer.enqueue_many(["a0", "a1"], group="a")
    r.hdel("kq:{q}:counters", "grouped")
    repairs(cq, {GROUP_MARK: ["counters"]})
    (m,) = producer.claim_many(10)
    assert (m.id, m.group) == (a[0], "a") and m.ack()
    in_group_order(producer, clock, {"a": a[1:]})


def test_a_stray_group_entry_is_dropped(cq: Queue, producer: Queue, clock: FakeClock, r: redis.Redis) -> None:
    a = producer.enqueue_many(["a0", "a1"], group="a")
    b = producer.enqueue_many(["b0"], group="b")
    r.rpush(group_list("a"), "999", b[0])  # no message; a message of another group, released
    r.incrby(HELD, 2)
    repairs(cq, {GROUP_ENTRY: ["999", b[0]]})
    assert r.lrange(group_list("a"), 0, -1) == [a[1].encode()] and r.get(HELD) == b"1"
    in_group_order(producer, clock, {"a": a, "b": b})


def test_a_grouped_message_in_no_state_goes_back_to_the_end_of_its_group(
    cq: Queue, producer: Queue, clock: FakeClock, r: redis.Redis
) -> None:
    a = producer.enqueue_many(["a0", "a1", "a2"], group="a")
    r.lrem(group_list("a"), 0, a[1])
    r.decr(HELD)
    repairs(cq, {ORPHAN: [a[1]]})
    in_group_order(producer, clock, {"a": [a[0], a[2], a[1]]})
