"""``Queue.check`` (check_queue), the fsck of one queue, on both faces. Each broken state is
made with raw commands on a healthy queue; the check must name it, the repair must fix it,
and every message must then be delivered exactly once (nothing lost, nothing doubled).
What only the asyncio face's check does: test_check_async.py; ``keyqueue check``:
surfaces/test_cli.py."""

from __future__ import annotations

import json
import threading
from typing import Callable

import pytest
import redis

from keyqueue import Queue
from keyqueue.errors import CorruptQueue, InvalidArgument
from keyqueue.fsck import (
    BAD_FLOW,
    CLAIMING,
    DEAD_DUPLICATE,
    EMPTY_INDEX,
    MISSING_HASH,
    ORPHAN,
    OWNED_AND_WAITING,
    STALE_LIST,
    STALE_TIMER,
    STRAY_FIELDS,
    TIMER_INDEX,
    UNLISTED,
    UNTIMED,
    WRONG_TYPE,
    CheckReport,
    check_queue,
)

from ..support.check_support import (
    BASE,
    DEAD,
    ITEMS,
    PROCESSING,
    QUEUE,
    TIMERS,
    acked_before_the_repair_looks,
    claim_and_ack_all,
    item,
    notes,
    problems,
)
from ..support.helpers import FakeClock, snapshot


@pytest.fixture
def cq(make_queue: Callable[..., Queue], clock: FakeClock) -> Queue:
    """Queue "q" on a clock the test moves: deadlines and delays pass when it says so."""
    return make_queue("q", clock=clock, visibility_timeout=30)


def timer_keys(r: redis.Redis) -> list[str]:
    return sorted(k.decode() for k in r.keys(BASE + "timer:*"))


def bucket_of(r: redis.Redis, msg_id: str) -> str:
    return str(int(r.hget(item(msg_id), "d")) // 60_000)  # default bucket_seconds = 60


def repairs(q: Queue, want: dict[str, list[str]]) -> None:
    """The check finds exactly ``want``, the repair fixes it, a second check finds nothing."""
    before = q.check(settle=0)
    assert problems(before) == want and not before.consistent
    assert all(not p.repaired for p in before.problems)
    fixed = q.check(repair=True, settle=0)
    assert problems(fixed) == want and fixed.consistent
    assert all(p.repaired for p in fixed.problems + fixed.notes), str(fixed)
    after = q.check(settle=0)
    assert after.consistent and after.problems == [] and after.notes == [], str(after)


def drain(q: Queue, clock: FakeClock, r: redis.Redis) -> list[str]:
    """Deliver everything the queue holds (due timers, dead letters requeued), acking each
    delivery; afterwards the queue must be empty. Returns the ids delivered, in order."""
    clock.advance(3600)
    q.reap()
    q.requeue()
    got = claim_and_ack_all(q)
    s = q.stats()
    assert (s.waiting, s.processing, s.delayed, s.dead) == (0, 0, 0, 0)
    assert r.keys(BASE + "item:*") == [] and timer_keys(r) == [] and r.zcard(TIMERS) == 0
    assert r.llen(QUEUE) == 0 and r.llen(DEAD) == 0
    return got


def every_state(q: Queue) -> None:
    """Messages in every state: 4, 5 waiting (5 in chunks), 1 in flight, 2 and 6 delayed, 3 dead."""
    q.enqueue_many(["a", "b", "c", "d", "x" * 500])
    held, released, dead = q.claim(), q.claim(), q.claim()
    assert held and released and dead
    assert released.release(delay=10) and dead.dead_letter("broken")
    q.enqueue("later", delay=60)


# -- a healthy queue --------------------------------------------------------------------------


def test_a_healthy_queue_in_every_state_is_consistent_and_left_alone(
    cq: Queue, clock: FakeClock, r: redis.Redis
) -> None:
    every_state(cq)
    before = snapshot(r)
    report = cq.check(settle=0)
    assert report.consistent and report.complete
    assert report.problems == [] and report.notes == []
    assert (report.waiting, report.processing, report.delayed, report.dead) == (2, 1, 2, 1)
    assert str(report).endswith("2 waiting, 1 processing, 2 delayed, 1 dead; 0 problems, 0 notes: consistent")
    assert json.loads(json.dumps(report.to_dict()))["counts"] == {
        "waiting": 2,
        "held": 0,
        "processing": 1,
        "delayed": 2,
        "dead": 1,
    }
    assert cq.check(repair=True, settle=0).consistent
    assert snapshot(r) == before  # neither the check nor a repair of nothing wrote anything
    assert sorted(drain(cq, clock, r)) == ["1", "2", "3", "4", "5", "6"]


def test_a_queue_that_does_not_exist_is_consistent(make_queue: Callable[..., Queue], r: redis.Redis) -> None:
    report = make_queue("nothing").check(repair=True)
    assert report.consistent and report.keys == 0 and "does not exist" in str(report)
    assert r.keys("*") == []


# -- each problem: found, repaired, then every message delivered once ------------------------


def test_owned_and_waiting(cq: Queue, clock: FakeClock, r: redis.Redis) -> None:
    cq.enqueue_many(["a", "b"])
    r.sadd(PROCESSING, "1")  # a claim that died between its two steps
    repairs(cq, {OWNED_AND_WAITING: ["1"]})
    assert drain(cq, clock, r) == ["1", "2"]


def test_in_flight_without_its_timer_entry(cq: Queue, clock: FakeClock, r: redis.Redis) -> None:
    cq.enqueue("a")
    held = cq.claim()
    assert held
    tk = BASE + "timer:" + bucket_of(r, "1")
    r.srem(tk, "1")  # the reaper would never redeliver it
    repairs(cq, {UNTIMED: ["1"]})
    assert r.sismember(tk, "1") and r.zscore(TIMERS, tk.rsplit(":", 1)[1]) is not None
    assert cq.stats().processing == 1  # still owned: the holder's receipt stays valid
    assert cq.extend(held, 30)
    assert drain(cq, clock, r) == ["1"]  # the reaper finds it after its deadline


@pytest.mark.parametrize("origin", ["waiting", "delayed", "dead", "receipt-without-deadline"])
def test_an_abandoned_claim_goes_back_where_it_came_from(
    cq: Queue, clock: FakeClock, r: redis.Redis, origin: str
) -> None:
    if origin == "waiting":  # taken out of items and the list, never given a receipt
        cq.enqueue("a")
        r.srem(ITEMS, "1")
        r.lrem(QUEUE, 0, "1")
        r.sadd(PROCESSING, "1")
        want = (1, 0, 0, 0)
    elif origin == "delayed":
        cq.enqueue("a", delay=60)
        r.sadd(PROCESSING, "1")
        want = (0, 0, 1, 0)
    elif origin == "dead":
        cq.enqueue("a")
        msg = cq.claim()
        assert msg and msg.dead_letter()
        r.sadd(PROCESSING, "1")
        want = (0, 0, 0, 1)
    else:
        cq.enqueue("a")
        assert cq.claim()
        r.hdel(item("1"), "d")
        want = (1, 0, 0, 0)
    repairs(cq, {UNTIMED: ["1"]})
    s = cq.stats()
    assert (s.waiting, s.processing, s.delayed, s.dead) == want
    assert r.lrange(DEAD, 0, -1) == ([b"1"] if origin == "dead" else [])
    assert drain(cq, clock, r) == ["1"]


def test_orphaned_item_hash_is_adopted(cq: Queue, clock: FakeClock, r: redis.Redis) -> None:
    cq.enqueue_many(["a", "b"])
    r.srem(ITEMS, "1")
    r.lrem(QUEUE, 0, "1")
    repairs(cq, {ORPHAN: ["1"]})
    assert drain(cq, clock, r) == ["2", "1"]  # adopted at the tail


def test_orphaned_delayed_message_gets_its_timer_back(cq: Queue, clock: FakeClock, r: redis.Redis) -> None:
    cq.enqueue("later", delay=60)
    r.delete(BASE + "timer:" + bucket_of(r, "1"))
    r.delete(TIMERS)
    repairs(cq, {ORPHAN: ["1"]})
    assert cq.stats().delayed == 1 and cq.claim() is None  # still delayed, not made visible early
    assert drain(cq, clock, r) == ["1"]


@pytest.mark.parametrize("where", ["waiting", "processing", "dead"])
def test_entries_without_an_item_hash_are_removed(cq: Queue, clock: FakeClock, r: redis.Redis, where: str) -> None:
    cq.enqueue_many(["a", "b"])
    if where != "waiting":
        msg = cq.claim()
        assert msg and (where == "processing" or msg.dead_letter())
    r.delete(item("1"))
    before = cq.check(settle=0)
    assert problems(before) == {MISSING_HASH: ["1"]}
    if where == "processing":  # its timer entry is a leftover the reaper would drop anyway
        assert notes(before) == {STALE_TIMER: ["1"]}
    repairs(cq, {MISSING_HASH: ["1"]})
    assert r.scard(ITEMS) == 1 and r.scard(PROCESSING) == 0 and r.llen(DEAD) == 0
    assert drain(cq, clock, r) == ["2"]


def test_waiting_id_missing_from_the_list_is_listed_again(cq: Queue, clock: FakeClock, r: redis.Redis) -> None:
    cq.enqueue_many(["a", "b", "c"])
    r.lrem(QUEUE, 0, "2")  # in items but invisible to claims
    repairs(cq, {UNLISTED: ["2"]})
    assert drain(cq, clock, r) == ["1", "3", "2"]


@pytest.mark.parametrize("how", ["unindexed", "indexed-too-late"])
def test_timer_bucket_the_reaper_cannot_see(cq: Queue, clock: FakeClock, r: redis.Redis, how: str) -> None:
    cq.enqueue("later", delay=60)
    bucket = bucket_of(r, "1")
    if how == "unindexed":
        r.zrem(TIMERS, bucket)
    else:
        r.zadd(TIMERS, {bucket: 10**15}, xx=True)
    clock.advance(120)
    assert cq.reap().delayed_released == 0  # due, but the reaper does not look there
    repairs(cq, {TIMER_INDEX: [bucket]})
    assert cq.reap().delayed_released == 1
    assert drain(cq, clock, r) == ["1"]


def test_dead_twice_keeps_one_entry(cq: Queue, clock: FakeClock, r: redis.Redis) -> None:
    cq.enqueue_many(["a", "b"])
    for _ in range(2):
        msg = cq.claim()
        assert msg and msg.dead_letter()
    r.rpush(DEAD, "1")
    repairs(cq, {DEAD_DUPLICATE: ["1"]})
    assert r.lrange(DEAD, 0, -1) == [b"1", b"2"]  # the first entry kept: order unchanged
    assert cq.requeue() == 2
    assert drain(cq, clock, r) == ["1", "2"]


def test_dead_and_waiting_stays_waiting(cq: Queue, clock: FakeClock, r: redis.Redis) -> None:
    cq.enqueue("a")
    r.rpush(DEAD, "1")
    repairs(cq, {DEAD_DUPLICATE: ["1"]})
    assert r.llen(DEAD) == 0
    assert drain(cq, clock, r) == ["1"]


@pytest.mark.parametrize("state", ["waiting", "dead"])
def test_stray_receipt_and_timer_fields_are_removed(cq: Queue, clock: FakeClock, r: redis.Redis, state: str) -> None:
    cq.enqueue("a")
    if state == "dead":
        msg = cq.claim()
        assert msg and msg.dead_letter()
    r.hset(item("1"), mapping={"c": "9-9", "d": "123"})
    repairs(cq, {STRAY_FIELDS: ["1"]})
    assert r.hmget(item("1"), "c", "d") == [None, None]
    assert drain(cq, clock, r) == ["1"]


@pytest.mark.parametrize("state", ["waiting", "delayed"])
def test_a_dead_lettering_time_on_a_live_message_is_removed(
    cq: Queue, clock: FakeClock, r: redis.Redis, state: str
) -> None:
    """x (when it was dead-lettered) belongs to dead letters: dead_retention counts from it."""
    cq.enqueue("a", delay=5 if state == "delayed" else 0)
    r.hset(item("1"), "x", "123")
    repairs(cq, {STRAY_FIELDS: ["1"]})
    assert r.hget(item("1"), "x") is None
    assert drain(cq, clock, r) == ["1"]


def test_keys_of_the_wrong_type_are_reported_never_deleted(cq: Queue, clock: FakeClock, r: redis.Redis) -> None:
    cq.enqueue_many(["a", "b"])
    r.set(item("77"), "not a hash")
    report = cq.check(repair=True, settle=0)
    assert problems(report) == {WRONG_TYPE: [item("77")]} and not report.consistent
    assert report.complete and report.waiting == 2
    assert r.get(item("77")) == b"not a hash"
    r.delete(item("77"))
    assert drain(cq, clock, r) == ["1", "2"]


def test_flow_keys_of_the_wrong_type_are_reported_and_stop_claims(cq: Queue, r: redis.Redis) -> None:
    cq.enqueue("a")
    r.hset(BASE + "throttle", "x", "1")
    report = cq.check(repair=True, settle=0)
    assert problems(report) == {WRONG_TYPE: [BASE + "throttle"]}
    with pytest.raises(CorruptQueue, match="throttle"):
        cq.claim()
    r.delete(BASE + "throttle")
    Queue("q", client=r, rate_limit="5/60", clock=cq._ops.clock)
    window = int(cq._ops.clock() * 1000) // 60_000
    r.lpush(BASE + f"rate:{window}", "x")
    before = snapshot(r)
    with pytest.raises(CorruptQueue, match="rate:"):
        cq.claim()
    assert snapshot(r) == before


def test_flow_keys_without_a_number_or_an_expiry_are_repaired(cq: Queue, clock: FakeClock, r: redis.Redis) -> None:
    cq.enqueue("a")
    r.set(BASE + "throttle", "soon")
    r.set(BASE + "rate:17", 3)  # an old window's counter, left without its expiry
    r.set(BASE + "rate:18", 2, px=60_000)  # as a claim leaves it: fine
    repairs(cq, {BAD_FLOW: [BASE + "rate:17", BASE + "throttle"]})
    assert not r.exists(BASE + "throttle") and not r.exists(BASE + "rate:17") and r.exists(BASE + "rate:18")
    Queue("q", client=r, rate_limit="5/60", clock=clock)
    window = int(clock() * 1000) // 60_000
    r.set(BASE + f"rate:{window}", 4)  # the current window's, without its expiry: it gets it
    r.set(BASE + "throttle", int(clock() * 1000) + 5000)
    repairs(cq, {BAD_FLOW: [BASE + f"rate:{window}", BASE + "throttle"]})
    assert r.get(BASE + f"rate:{window}") == b"4" or not r.exists(BASE + f"rate:{window}")  # (a past time: gone)
    assert r.pttl(BASE + "throttle") != -1


def test_a_core_key_of_the_wrong_type_stops_the_id_checks(cq: Queue, r: redis.Redis) -> None:
    cq.enqueue_many(["a", "b"])
    r.delete(ITEMS)
    r.set(ITEMS, "x")
    before = snapshot(r)
    report = cq.check(repair=True, settle=0)
    assert problems(report) == {WRONG_TYPE: [ITEMS]} and not report.consistent
    assert not report.complete and "ids not checked" in str(report)
    assert snapshot(r) == before
    with pytest.raises(InvalidArgument):
        cq.check(settle=-1)


# -- leftovers: reported as notes, consistent, cleaned by --repair -------------------------


def test_leftovers_are_notes_and_are_cleaned(cq: Queue, clock: FakeClock, r: redis.Redis) -> None:
    cq.enqueue_many(["a", "b"])
    assert cq.claim()
    r.rpush(QUEUE, "1")  # a list entry of an id that is in flight
    r.sadd(BASE + "timer:5", "2")  # a timer entry of a waiting id
    r.zadd(TIMERS, {"999": 1})  # an index entry of a bucket with no set
    report = cq.check(settle=0)
    assert report.consistent and report.problems == []
    assert notes(report) == {STALE_LIST: ["1"], STALE_TIMER: ["2"], EMPTY_INDEX: ["999"]}
    assert str(report).splitlines()[0].startswith("note stale-list-entry: 1 -- ")
    fixed = cq.check(repair=True, settle=0)
    assert all(p.repaired for p in fixed.notes)
    again = cq.check(settle=0)
    assert again.notes == [] and r.lrange(QUEUE, 0, -1) == [b"2"]
    assert sorted(drain(cq, clock, r)) == ["1", "2"]


# -- settle: a live operation's passing state is not a problem ---------------------------------


def test_a_state_gone_on_the_second_look_is_not_reported(
    r: redis.Redis, scripting: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """keyqueue.Queue's second look waits in time.sleep: the claim finishes meanwhile. (The
    asyncio face's waits without blocking the loop: test_check_async.py.)"""
    sq = Queue("q", client=r, scripting=scripting, visibility_timeout=30)
    sq.enqueue("a")
    r.sadd(PROCESSING, "1")
    slept: list[float] = []

    def claim_finishes(seconds: float) -> None:
        slept.append(seconds)
        r.srem(PROCESSING, "1")

    monkeypatch.setattr("keyqueue.transport.sync.time.sleep", claim_finishes)
    report = check_queue(sq, repair=True, settle=0.5)
    assert slept == [0.5] and report.consistent and report.problems == []
    assert sq.length() == 1


def test_a_state_still_there_on_the_second_look_is_reported(cq: Queue, r: redis.Redis) -> None:
    cq.enqueue("a")
    r.sadd(PROCESSING, "1")
    assert problems(cq.check(settle=0.05)) == {OWNED_AND_WAITING: ["1"]}


def test_repair_leaves_an_id_alone_when_its_state_changed_since(
    cq: Queue, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repair re-reads each id: a change since the check found it is not overwritten."""
    cq.enqueue_many(["a", "b"])
    r.sadd(PROCESSING, "1")
    acked_before_the_repair_looks(monkeypatch, r, "1")
    report = cq.check(repair=True, settle=0)
    assert problems(report) == {OWNED_AND_WAITING: ["1"]} and not report.consistent
    assert r.sismember(PROCESSING, "1") and r.sismember(ITEMS, "1")  # untouched


def test_a_claim_within_its_intent_bucket_is_left_to_the_claimer(cq: Queue, r: redis.Redis) -> None:
    """The script-free claim: intent in a timer set, SADD processing, SREM items, then the
    receipt. Between those steps the id is owned without a receipt; while the intent's bucket
    has not passed that is a live claim, not a problem, and no repair touches it."""
    cq.enqueue("a")
    sec, _ = r.time()
    intent = BASE + f"timer:{(sec + 30) // 60}"
    r.sadd(intent, "1")
    r.sadd(PROCESSING, "1")
    r.srem(ITEMS, "1")
    before = snapshot(r)
    report = cq.check(repair=True, settle=0)
    assert report.consistent and report.problems == [] and notes(report) == {CLAIMING: ["1"]}
    assert report.processing == 1 and snapshot(r) == before
    r.delete(intent)  # the bucket has passed (the reaper dropped the intent): the claimer is gone
    repairs(cq, {UNTIMED: ["1"]})
    assert cq.length() == 1


# -- a live queue: checks and repairs while workers run lose and double nothing -------------


def test_check_and_repair_on_a_live_queue(make_queue: Callable[..., Queue]) -> None:
    q = make_queue("live", visibility_timeout=30)
    total = 400
    seen: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    reports: list[CheckReport] = []

    def produce() -> None:
        for i in range(0, total, 20):
            q.enqueue_many([f"m{j}" for j in range(i, i + 20)])

    def consume() -> None:
        while not stop.is_set():
            batch = q.claim_many(5, wait=0.05)
            for m in batch:
                if int(m.id) % 7 == 0 and m.receives == 1:
                    assert m.release()  # some go round again
                    continue
                with lock:
                    seen.append(m.id)
                assert m.ack()

    def check() -> None:
        while not stop.is_set():
            reports.append(q.check(repair=True, settle=0))

    threads = [threading.Thread(target=f) for f in [produce, check] + [consume] * 4]
    for t in threads:
        t.start()
    try:
        deadline = 60
        while len(seen) < total and deadline > 0:
            stop.wait(0.05)
            deadline -= 0.05
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert sorted(seen, key=int) == [str(i) for i in range(1, total + 1)]  # each exactly once
    assert reports  # with settle=0 it saw passing states; its re-reads left them alone
    final = q.check(settle=0)  # leftovers of the script-free mode are notes only
    assert final.consistent and final.problems == [], str(final)
    assert q.check(repair=True, settle=0).consistent
    assert q.check(settle=0).notes == []


# -- without Lua ------------------------------------------------------------------------------


def test_check_and_repair_work_without_scripting(
    make_queue: Callable[..., Queue], cq: Queue, clock: FakeClock, r: redis.Redis, no_scripting_url: str
) -> None:
    cq.enqueue_many(["a", "b"])
    r.sadd(PROCESSING, "1")
    r.lrem(QUEUE, 0, "2")
    client = redis.Redis.from_url(no_scripting_url)
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.eval("return 1", 0)
    finally:
        client.close()
    plain = make_queue("q", url=no_scripting_url, scripting=False)
    report = plain.check(repair=True, settle=0)
    assert problems(report) == {OWNED_AND_WAITING: ["1"], UNLISTED: ["2"]} and report.consistent
    assert plain.check(settle=0).problems == []
    assert drain(cq, clock, r) == ["1", "2"]


def test_long_id_lists_are_cut_short(cq: Queue, r: redis.Redis) -> None:
    cq.enqueue_many([str(i) for i in range(25)])
    r.delete(ITEMS, QUEUE)
    report = cq.check(settle=0)
    line = str(report).splitlines()[0]
    assert line.startswith("orphan-item: " + " ".join(str(i) for i in range(1, 21)) + " ... (25 in all) -- ")
    assert len(report.to_dict()["problems"][0]["ids"]) == 25


def test_queue_check_is_the_fsck(q, r) -> None:
    q.enqueue_many(["a", "b"])
    r.srem("kq:{q}:items", "1")  # waiting in the list, but no longer in items: an orphan
    report = q.check(settle=0)
    assert not report.consistent and any("1" in p.ids for p in report.problems)
    assert q.check(repair=True, settle=0).consistent and q.check(settle=0).consistent
    assert sorted(m.text for m in q.claim_many(5)) == ["a", "b"]
