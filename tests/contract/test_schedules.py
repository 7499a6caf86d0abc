"""Schedules on both faces and in both modes: upsert, pause, resume, fire now, and firing by
reaps and claims, one message per fire time."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any, Callable

import pytest
import redis

from keyqueue import InvalidSchedule, KeyQueueError, Queue
from keyqueue.core import queue_core
from keyqueue.core.schedules import jitter_ms

from ..support.helpers import FakeClock, run_threads, stored_schedule, wait_until, write_schedule

MakeQueue = Callable[..., Queue]


def snapshot(r: redis.Redis) -> dict[bytes, Any]:
    return {k: r.dump(k) for k in sorted(r.keys("*"))}


def test_upsert_lists_and_reads_back(q: Queue) -> None:
    made = q.schedule("nightly", cron="0 3 * * *", tz="Europe/Berlin", body="report")
    assert made.id == "nightly" and made.cron == "0 3 * * *" and made.every is None
    assert made.tz == "Europe/Berlin" and made.body == b"report" and not made.paused
    assert made.fired == 0 and made.missed == 0 and made.last_fire is None
    assert made.next_fire is not None and made.next_fire > time.time()
    assert [s.id for s in q.schedules()] == ["nightly"]
    assert q.schedules()[0] == made


def test_identical_upsert_changes_no_key(q: Queue, r: redis.Redis) -> None:
    q.schedule("s", every=60, body=b"x", jitter=2)
    before = snapshot(r)
    again = q.schedule("s", every=60, body=b"x", jitter=2)
    assert snapshot(r) == before
    assert again.every == 60


def test_changed_upsert_takes_effect_at_once(q: Queue) -> None:
    q.schedule("s", every=3600)
    changed = q.schedule("s", every=1, body="now")
    assert changed.next_fire is not None and changed.next_fire <= time.time() + 1.5
    msg = wait_until(lambda: q.claim(wait=0.5), timeout=20)
    assert msg.body == b"now" and msg.scheduled_for is not None


def test_a_consumer_alone_fires_on_time(q: Queue) -> None:
    made = q.schedule("tick", every=1, body="tick")
    assert made.next_fire is not None
    msg = wait_until(lambda: q.claim(wait=0.5), timeout=20)
    assert msg.body == b"tick"
    assert msg.scheduled_for is not None and msg.scheduled_for >= made.next_fire
    assert (msg.scheduled_for - made.next_fire) % 1 == pytest.approx(0, abs=1e-6)  # anchored
    assert msg.enqueued_at >= msg.scheduled_for - 0.001  # never before its fire time
    assert q.schedules()[0].fired >= 1


def test_scheduled_for_on_peeked_messages(q: Queue) -> None:
    q.schedule("s", every=1)
    wait_until(lambda: q.reap() is not None and len(q) > 0, timeout=20)
    (peeked,) = q.peek(1)
    assert peeked.scheduled_for is not None
    assert q.peek(1)[0].scheduled_for == peeked.scheduled_for
    q.enqueue("plain")
    assert [m.scheduled_for for m in q.peek(10)][-1] is None


def test_fire_schedule_leaves_the_schedule_as_it_was(q: Queue) -> None:
    made = q.schedule("s", every=3600, body="manual")
    mid = q.fire_schedule("s")
    (msg,) = q.peek(1)
    assert msg.id == mid and msg.body == b"manual" and msg.scheduled_for is not None
    after = q.schedules()[0]
    assert after.next_fire == made.next_fire and after.every == 3600 and not after.paused
    assert after.fired == 1 and after.last_fire == msg.scheduled_for
    assert q.pause_schedule("s")
    q.fire_schedule("s")
    assert q.schedules()[0].paused and q.schedules()[0].next_fire == made.next_fire


def test_unknown_ids(q: Queue) -> None:
    with pytest.raises(KeyQueueError):
        q.fire_schedule("nope")
    assert q.unschedule("nope") is False
    assert q.pause_schedule("nope") is False
    assert q.resume_schedule("nope") is False


def test_unschedule(q: Queue, r: redis.Redis) -> None:
    q.schedule("s", every=60)
    assert q.unschedule("s") is True
    assert q.schedules() == []
    assert not r.exists("kq:{q}:schedule_state", "kq:{q}:schedule_defs", "kq:{q}:schedule_bodies", "kq:{q}:schedules")


def test_nothing_fires_while_paused(q: Queue) -> None:
    q.schedule("s", every=1)
    assert q.pause_schedule("s") is True
    assert q.pause_schedule("s") is True
    assert q.schedules()[0].paused
    end = time.monotonic() + 2.5
    while time.monotonic() < end:
        q.reap()
        assert q.claim(wait=0.2) is None
    assert q.resume_schedule("s") is True
    assert not q.schedules()[0].paused
    assert wait_until(lambda: q.claim(wait=0.5), timeout=20).scheduled_for is not None


def set_behind(r: redis.Redis, sid: str, every_ms: int, late_ms: int, behind: int) -> int:
    """Make the schedule look as if nothing ran for ``behind`` fire times, the latest of them
    ``late_ms`` old; its fire times' anchor moved to match. The latest fire time (ms)."""
    t = r.time()
    now = t[0] * 1000 + t[1] // 1000
    latest = now - late_ms
    first = latest - (behind - 1) * every_ms
    write_schedule(r, sid, {**stored_schedule(r, sid), b"a": b"%d" % first, b"n": b"%d" % first})
    return latest


@pytest.mark.parametrize(("catch_up", "messages", "missed"), [("all", 5, 0), ("one", 1, 4), ("none", 0, 5)])
def test_catch_up_after_five_missed_intervals(
    q: Queue, r: redis.Redis, catch_up: str, messages: int, missed: int
) -> None:
    q.schedule("s", every=20, catch_up=catch_up)
    latest = set_behind(r, "s", 20_000, 8_000, 5)
    q.reap()
    got = sorted(m.scheduled_for for m in q.peek(100) if m.scheduled_for is not None)
    if catch_up == "all":
        assert got == [(latest - k * 20_000) / 1000 for k in range(4, -1, -1)]
    elif catch_up == "one":
        assert got == [latest / 1000]
    else:
        assert got == []
    s = q.schedules()[0]
    assert (len(got), s.missed, s.fired) == (messages, missed, messages)
    assert s.next_fire == (latest + 20_000) / 1000
    q.reap()
    assert len(q.peek(100)) == messages  # nothing fires twice


def test_misfire_grace_skips_old_fire_times(q: Queue, r: redis.Redis) -> None:
    q.schedule("s", every=20, catch_up="all", misfire_grace=50)
    latest = set_behind(r, "s", 20_000, 8_000, 5)
    q.reap()
    got = sorted(m.scheduled_for for m in q.peek(100) if m.scheduled_for is not None)
    assert got == [(latest - k * 20_000) / 1000 for k in (2, 1, 0)]
    assert q.schedules()[0].missed == 2


def test_jitter_delays_each_message_by_its_own_offset(q: Queue, r: redis.Redis) -> None:
    q.schedule("s", every=20, catch_up="all", jitter=600)
    set_behind(r, "s", 20_000, 8_000, 5)
    q.reap()
    delayed = q.peek(100, source="delayed")
    assert delayed
    for m in delayed:
        assert m.scheduled_for is not None and m.deadline is not None
        fire = round(m.scheduled_for * 1000)
        assert round(m.deadline * 1000) == fire + jitter_ms("s", fire, 600_000)


def test_end_stops_firing(q: Queue) -> None:
    end = time.time() + 2.5
    q.schedule("s", every=1, catch_up="all", end=end)
    wait_until(lambda: q.reap() is not None and q.schedules()[0].next_fire is None, timeout=30)
    s = q.schedules()[0]
    times = sorted(m.scheduled_for for m in q.peek(100) if m.scheduled_for is not None)
    assert times and times[-1] <= end and s.fired == len(times)


def test_start_in_the_future(q: Queue) -> None:
    start = int(time.time()) + 3600
    s = q.schedule("s", every=60, start=start)
    assert s.next_fire == start and s.start == start


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"cron": "* * * * *", "every": 5},
        {"cron": "not cron"},
        {"cron": "* * * * *", "tz": "Nowhere/Land"},
        {"every": 0},
        {"every": 5, "start": 100, "end": 50},
        {"every": 5, "catch_up": "most"},
        {"every": 5, "id": "bad id!"},
        {"every": 5, "jitter": -1},
        {"every": 5, "misfire_grace": 0},  # (every fire is a little late: none would fire)
        {"every": 5, "misfire_grace": -1},
    ],
)
def test_bad_input_writes_nothing(q: Queue, r: redis.Redis, kw: dict[str, Any]) -> None:
    before = snapshot(r)
    kw = dict(kw)
    sid = kw.pop("id", "s")
    with pytest.raises(InvalidSchedule) as info:
        q.schedule(sid, **kw)
    assert isinstance(info.value, ValueError)
    assert snapshot(r) == before


def test_a_body_over_the_limit_is_refused(make_queue: MakeQueue, r: redis.Redis) -> None:
    q = make_queue("q", max_body_bytes=10)
    before = snapshot(r)
    with pytest.raises(ValueError):
        q.schedule("s", every=5, body=b"x" * 11)
    assert snapshot(r) == before


def test_a_queue_writes_its_schedule_again_after_redis_lost_it(q: Queue, r: redis.Redis) -> None:
    q.schedule("s", every=3600, body="kept")
    r.flushall()
    q.enqueue("after the loss")  # the write that finds the queue gone restores it

    def back() -> bool:
        q.reap()
        return [s.body for s in q.schedules()] == [b"kept"]

    wait_until(back, timeout=10, interval=0.3)


def test_many_queues_upserting_and_firing_give_one_message_per_fire_time(make_queue: MakeQueue) -> None:
    """Several Queue objects upsert the same schedule at once and reap in threads."""
    queues = [make_queue("q") for _ in range(4)]
    barrier = threading.Barrier(len(queues))
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(q: Queue) -> None:
        try:
            barrier.wait()
            q.schedule("s", every=1, catch_up="all", body="tick")
            while not stop.is_set():
                q.reap()
                time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    wait_until(lambda: queues[0].schedules() and queues[0].schedules()[0].fired >= 5, timeout=60, interval=0.2)
    stop.set()
    for t in threads:
        t.join(30)
    assert not errors
    s = queues[0].schedules()[0]
    times = [m.scheduled_for for m in queues[0].peek(1000)]
    assert len(times) == len(set(times)) == s.fired
    assert all(t is not None for t in times)
    steps = {round(b - a, 3) for a, b in zip(sorted(times), sorted(times)[1:])}  # type: ignore[operator]
    assert steps == {1.0}  # every fire time once, none skipped


def test_check_finds_and_repairs_the_schedule_index(q: Queue, r: redis.Redis) -> None:
    made = q.schedule("a", every=60)
    q.schedule("b", every=60)
    q.schedule("c", every=60)
    assert q.pause_schedule("b")
    sound = q.check(settle=0)
    assert sound.consistent and sound.problems == []
    r.zadd("kq:{q}:schedules", {"a": 5, "b": 7, "gone": 9})
    r.zrem("kq:{q}:schedules", "c")
    found = q.check(settle=0)
    assert [(p.kind, p.ids) for p in found.problems] == [("schedule-index", ["a", "b", "c", "gone"])]
    assert q.check(repair=True, settle=0).consistent
    assert q.check(settle=0).problems == []
    assert r.zscore("kq:{q}:schedules", "b") == float("inf") and r.zscore("kq:{q}:schedules", "gone") is None
    assert made.next_fire is not None and r.zscore("kq:{q}:schedules", "a") == made.next_fire * 1000
    assert r.zscore("kq:{q}:schedules", "c") == int(stored_schedule(r, "c")[b"n"])


def test_check_finds_and_repairs_schedule_parts_without_a_schedule(q: Queue, r: redis.Redis) -> None:
    """A definition or body whose schedule (its state) is gone is deleted; a state whose
    definition is gone cannot be read: reported, left for an upsert."""
    q.schedule("a", every=60)
    q.schedule("b", every=60)
    r.hset("kq:{q}:schedule_defs", "gone", '[null,60000,"UTC",null,null,0,"one",null]')
    r.hset("kq:{q}:schedule_bodies", "gone2", "x")
    r.hdel("kq:{q}:schedule_defs", "b")
    found = q.check(settle=0)
    assert [(p.kind, p.ids) for p in found.problems] == [("bad-schedule", ["b"]), ("schedule-stray", ["gone", "gone2"])]
    q.check(repair=True, settle=0)
    assert [(p.kind, p.ids) for p in q.check(settle=0).problems] == [("bad-schedule", ["b"])]
    assert r.hkeys("kq:{q}:schedule_defs") == [b"a"] and sorted(r.hkeys("kq:{q}:schedule_bodies")) == [b"a", b"b"]
    q.schedule("b", every=60)  # written whole again
    assert q.check(settle=0).problems == []


def test_check_reports_an_unreadable_schedule(q: Queue, r: redis.Redis) -> None:
    q.schedule("a", every=60)
    r.hset("kq:{q}:schedule_defs", "a", "not json")
    found = q.check(settle=0)
    assert [(p.kind, p.ids) for p in found.problems] == [("bad-schedule", ["a"])]
    with pytest.raises(KeyQueueError):
        q.schedules()
    q.reap()  # firing skips it, reaping goes on


def test_a_worker_fires_and_handles_and_a_flushall_does_not_stop_it(q: Queue, r: redis.Redis, workers: Any) -> None:
    """The Worker's Queue upserted the schedule; Redis loses everything under it."""
    seen: list[float] = []
    lock = threading.Lock()

    def handler(m: Any) -> None:
        with lock:
            seen.append(m.scheduled_for)

    q.schedule("tick", every=1, body="tick")
    with workers.running(workers.make(q, handler)):
        wait_until(lambda: len(seen) >= 2, timeout=30, interval=0.1)
        r.flushall()
        after = len(seen)
        wait_until(lambda: len(seen) >= after + 2, timeout=30, interval=0.1)
    assert len(seen) == len(set(seen)) and all(t is not None for t in seen)
    assert [s.id for s in q.schedules()] == ["tick"]


def test_counters_count_scheduled_messages(q: Queue) -> None:
    q.schedule("s", every=3600)
    q.fire_schedule("s")
    q.fire_schedule("s")
    q.enqueue("plain")
    c = q.counters()
    assert (c["scheduled"], c["enqueued"]) == (2, 3)


def test_a_six_field_cron_fires_on_its_seconds(q: Queue) -> None:
    q.schedule("s", cron="* * * * * *", tz="Asia/Kolkata", body="second")
    msg = wait_until(lambda: q.claim(wait=0.5), timeout=20)
    assert msg.body == b"second" and msg.scheduled_for is not None
    assert msg.scheduled_for == int(msg.scheduled_for)  # a whole second
    assert msg.enqueued_at >= msg.scheduled_for - 0.001


# -- many due at once ---------------------------------------------------------------------

#: More due schedules than one reap used to fire (20 looks of 100).
MANY = 2_500


def many_due(q: Queue, r: redis.Redis, n: int, name: str = "q", now: float | None = None) -> list[str]:
    """``n`` schedules (every hour, each with its id as body), all due a second before ``now``
    (default: the server's time): one made by ``q``, the others written as copies of it."""
    q.schedule("s0", every=3600, body="s0")
    made = stored_schedule(r, "s0", name)
    sids = [f"s{i}" for i in range(n)]
    t = r.time()
    due = round((t[0] + t[1] / 1e6 if now is None else now) * 1000) - 1000
    p = r.pipeline(transaction=False)
    for sid in sids:
        write_schedule(p, sid, {**made, b"b": sid.encode(), b"a": b"%d" % due, b"n": b"%d" % due}, name)
    p.execute()
    return sids


def drained_bodies(q: Queue) -> Counter[bytes]:
    """Every message's body, each claimed and acked once."""
    got: Counter[bytes] = Counter()
    while msgs := q.claim_many(100):
        got.update(m.body for m in msgs)
        assert q.ack_many(msgs) == len(msgs)
    return got


@pytest.fixture
def unhurried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reap's time for firing made long enough for any machine: what is tested is that one
    reap fires every due schedule, not how fast."""
    monkeypatch.setattr(queue_core, "FIRE_SECONDS", 600.0)


def test_one_reap_fires_thousands_of_due_schedules_once_each(q: Queue, r: redis.Redis, unhurried: None) -> None:
    sids = many_due(q, r, MANY)
    q.reap()
    assert len(q) == MANY
    q.reap()  # nothing fires twice
    assert drained_bodies(q) == Counter(sid.encode() for sid in sids)
    stored = q.schedules()
    assert len(stored) == MANY and {s.fired for s in stored} == {1}
    assert all(s.next_fire is not None and s.next_fire > time.time() + 3000 for s in stored)


def test_two_firers_of_thousands_of_due_schedules_fire_each_once(
    make_queue: MakeQueue, r: redis.Redis, unhurried: None
) -> None:
    q, other = make_queue("q"), make_queue("q")
    sids = many_due(q, r, MANY)
    barrier = threading.Barrier(2)

    def reap(firer: Queue) -> None:
        barrier.wait()
        firer.reap()

    assert not run_threads([lambda: reap(q), lambda: reap(other)])
    assert drained_bodies(q) == Counter(sid.encode() for sid in sids)
    assert {s.fired for s in q.schedules()} == {1}


def test_a_firer_whose_last_fire_is_out_of_date_reads_again(make_queue: MakeQueue, r: redis.Redis) -> None:
    """A Queue fires schedules it fired before after another changed them: with a new body
    and due again (its record of their next fire is out of date), then paused and resumed
    (their version moved on, their next fire not: the fire's compare-and-set finds it)."""
    clock = FakeClock(time.time())
    q, other = make_queue("q", clock=clock), make_queue("q", clock=clock)
    sids = many_due(q, r, 300, now=clock())
    q.reap()
    assert drained_bodies(q) == Counter(sid.encode() for sid in sids)
    for sid in sids:
        other.schedule(sid, every=3600, body="new")
    clock.advance(3600)
    q.reap()
    assert drained_bodies(q) == Counter({b"new": 300})
    for sid in sids:
        assert other.pause_schedule(sid) and other.resume_schedule(sid)
    clock.advance(3600)
    q.reap()
    assert drained_bodies(q) == Counter({b"new": 300})
    assert {s.fired for s in q.schedules()} == {3}


def test_a_schedule_made_again_is_fired_by_its_new_definition(make_queue: MakeQueue) -> None:
    """Made again by another Queue, a schedule can reach the version and next fire a firer
    recorded of the one before: the fire compares its definition too."""
    clock = FakeClock(float(int(time.time())))
    q, other = make_queue("q", clock=clock), make_queue("q", clock=clock)
    start = clock() - 1800
    q.schedule("s", every=3600, start=start, body="old")
    clock.advance(1800)
    q.reap()
    (before,) = q.schedules()
    assert before.fired == 1 and before.next_fire == start + 7200
    assert other.unschedule("s")
    other.schedule("s", every=3600, start=start, end=start + 7200.5, body="new?")
    again = other.schedule("s", every=3600, start=start, end=start + 7200.5, body="new")  # the version as before
    assert again.next_fire == before.next_fire
    clock.advance(3600)
    q.reap()
    (after,) = q.schedules()
    assert (after.fired, after.next_fire) == (1, None)  # the new one's end: no fire after this one
    assert [m.body for m in q.peek(5)] == [b"old", b"new"]


def test_a_stale_firer_reads_a_schedule_made_again_with_the_same_definition(r: redis.Redis, scripting: bool) -> None:
    """Made again with the same definition (its state is new: a new anchor), a schedule can
    reach the version and next fire a firer recorded of the one before: the fire compares the
    anchor too, so the firer reads the new schedule, and the fire time gives one message."""
    clock = FakeClock(float(int(time.time())))
    q, other = (Queue("q", client=r, scripting=scripting, clock=clock) for _ in range(2))
    start = clock() - 1800
    q.schedule("s", every=3600, start=start, jitter=1, body="old")  # (jitter: the planned path)
    clock.advance(1801)
    q.reap()
    assert drained_bodies(q) == Counter({b"old": 1})
    stale = q._core.known["s"]
    assert other.unschedule("s")
    clock.advance(5)
    other.schedule("s", every=3600, start=start, jitter=1, body="new?")
    other.schedule("s", every=3600, start=start, jitter=1, body="new")
    again = stored_schedule(r, "s")
    assert (again[b"v"], int(again[b"n"])) == (stale.version.encode(), stale.next_ms)
    assert int(again[b"a"]) != stale.anchor_ms
    clock.advance(3600)
    q.reap()
    assert drained_bodies(q) == Counter({b"new": 1})
    assert q._core.known["s"].anchor_ms == int(again[b"a"])  # read again, not fired as recorded
    assert (q.schedules()[0].fired, q.schedules()[0].last_fire) == (1, start + 7200)


def test_a_fire_of_the_look_moves_only_the_index_and_reads_as_a_fire(r: redis.Redis) -> None:
    """The scripted look fires an ``every`` schedule without writing its state: the index
    moves on by the interval, and every reader (schedules(), the fsck, a later planned fire,
    a pause) counts those fires in."""
    clock = FakeClock(1_800_000_000.0)
    q = Queue("q", client=r, clock=clock)
    start = clock() + 1
    q.schedule("s", every=10, start=start)
    written = stored_schedule(r, "s")
    for k in range(3):
        clock.advance(10 if k else 2)
        assert q._run(lambda: q._core.fire_due(0.0)) == 1
    assert stored_schedule(r, "s") == written  # (no state written by the look's fires)
    s = q.schedules()[0]
    assert (s.fired, s.last_fire, s.next_fire) == (3, start + 20, start + 30)
    assert q.check(settle=0).problems == []
    q.fire_schedule("s")  # a planned fire computes its state from the counted-in one
    assert (q.schedules()[0].fired, q.schedules()[0].next_fire) == (4, start + 30)
    assert q.pause_schedule("s") and q.resume_schedule("s")
    s = q.schedules()[0]
    assert (s.fired, s.paused) == (4, False) and len(q.peek(100)) == 4
    r.zadd("kq:{q}:schedules", {"s": (s.next_fire or 0) * 1000 + 5000})  # off the grid: reported
    assert [(p.kind, p.ids) for p in q.check(settle=0).problems] == [("schedule-index", ["s"])]


def test_an_index_entry_left_without_its_schedule_does_not_fire(r: redis.Redis, scripting: bool) -> None:
    """A schedule whose state alone is lost (its definition, body and index entry left) is
    gone: nothing fires it (a Queue other than the one that upserted it, which would write
    it back), and an upsert of the id makes it whole again."""
    clock = FakeClock(1_800_000_000.0)
    q, other = (Queue("q", client=r, scripting=scripting, clock=clock) for _ in range(2))
    start = clock() + 1
    q.schedule("s", every=10, start=start)
    r.hdel("kq:{q}:schedule_state", "s")
    clock.advance(2)
    other.reap()
    assert other.peek(10) == [] and other.schedules() == []
    made = other.schedule("s", every=10, start=start)
    assert made.next_fire is not None and made.next_fire > clock()
    assert q.check(settle=0).problems == []


def test_fire_now_puts_back_a_lost_index_entry(r: redis.Redis, scripting: bool) -> None:
    clock = FakeClock(1_800_000_000.0)
    q = Queue("q", client=r, scripting=scripting, clock=clock)
    made = q.schedule("s", every=10, start=clock() + 1)
    r.zrem("kq:{q}:schedules", "s")
    assert q.fire_schedule("s")
    assert r.zscore("kq:{q}:schedules", "s") == (made.next_fire or 0) * 1000
    assert q.schedules()[0].fired == 1 and len(q.peek(10)) == 1


def test_check_scores_an_index_off_the_grid_at_its_next_grid_fire(r: redis.Redis) -> None:
    """An index score past the state's next fire but off the grid (only a write from
    elsewhere makes one) is repaired to the grid's next fire time from there, not back to the
    state's: nothing it fired fires again."""
    clock = FakeClock(1_800_000_000.0)
    q = Queue("q", client=r, clock=clock)
    start = clock() + 1
    q.schedule("s", every=10, start=start)
    r.zadd("kq:{q}:schedules", {"s": (start + 25) * 1000})
    assert [(p.kind, p.ids) for p in q.check(settle=0).problems] == [("schedule-index", ["s"])]
    assert q.check(repair=True, settle=0).consistent
    assert r.zscore("kq:{q}:schedules", "s") == (start + 30) * 1000
    s = q.schedules()[0]
    assert (s.fired, s.last_fire, s.next_fire) == (3, start + 20, start + 30)


def test_a_write_read_before_a_fire_is_done_again(
    r: redis.Redis, scripting: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pause computed from a read of the schedule, with a fire by another process between
    the read and the write (the look's fire moves only the index), is computed again: the
    fire is kept in the schedule's count."""
    clock = FakeClock(1_800_000_000.0)
    q, other = (Queue("q", client=r, scripting=scripting, clock=clock) for _ in range(2))
    start = clock() + 1
    q.schedule("s", every=10, start=start)
    clock.advance(2)
    read = q._core.ops.schedule_get
    raced: list[int] = []

    def racing(sid: str) -> Any:
        got = yield from read(sid)
        if not raced:
            raced.append(other.reap() is not None)
        return got

    monkeypatch.setattr(q._core.ops, "schedule_get", racing)
    assert q.pause_schedule("s")
    s = q.schedules()[0]
    assert raced and (s.fired, s.last_fire, s.paused) == (1, start, True)
    assert [m.scheduled_for for m in q.peek(10)] == [start]


def test_the_scripted_fire_without_planning_agrees_with_the_planner(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scripted mode fires one due fire time of an ``every`` schedule in the call that
    reads it, without the client's planner; the script-free mode always plans. The same
    schedules, fired by both at the same (fake) times, in steps that land on the edges of
    the fast case (an interval, a grace, the late limit, the end, before the start), end in
    the same state, fire time by fire time."""
    import random

    rnd = random.Random(7)
    clock = FakeClock(1_800_000_000.0)
    queues = [Queue(f"fast{m}", client=r, scripting=m == "scripted", clock=clock) for m in ("scripted", "commands")]
    t0 = clock()
    definitions: dict[str, dict[str, Any]] = {
        "plain": {"every": 10},
        "later": {"every": 10, "start": t0 + 25},
        "started": {"every": 3, "start": t0 - 100},
        "ending": {"every": 7, "end": t0 + 60},
        "graced": {"every": 5, "misfire_grace": 2},
        "none": {"every": 10, "catch_up": "none"},
        "all": {"every": 4, "catch_up": "all"},
        "jittered": {"every": 10, "jitter": 2},
        "cron": {"cron": "* * * * *"},
    }
    for q in queues:
        for sid, kw in definitions.items():
            q.schedule(sid, body=sid, **kw)

    def state(q: Queue) -> tuple[Any, ...]:
        schedules = sorted((s.id, s.next_fire, s.last_fire, s.fired, s.missed) for s in q.schedules())
        fired = sorted((m.text, m.scheduled_for) for m in q.peek(10_000) + q.peek(10_000, source="delayed"))
        return schedules, fired

    planned = Counter[str]()
    plan = queue_core.plan_fire
    firer = [""]

    def counted(*args: Any) -> Any:
        planned[firer[0]] += 1
        planned[firer[0] + ":" + args[0]] += 1
        return plan(*args)

    monkeypatch.setattr(queue_core, "plan_fire", counted)
    for _ in range(60):
        clock.advance(rnd.choice([0.5, 1, 2, 3, 4, 5, 5.001, 7, 10, 12, 20]))
        for q in queues:
            firer[0] = q.name
            q.reap()
        assert state(queues[0]) == state(queues[1])
    for sid in definitions:  # the fast case fired each kind that has one, and no other
        fast, planner = planned[f"fastscripted:{sid}"], planned[f"fastcommands:{sid}"]
        assert fast == planner if sid in ("jittered", "cron") else fast < planner, (sid, fast, planner)
    schedules, fired = state(queues[0])
    assert {text for text, _ in fired} == set(definitions)  # every one fired
    assert len(fired) == len(set(fired)) > 60  # no fire time twice


def test_a_fired_message_stores_its_body_as_an_enqueued_one_does(r: redis.Redis) -> None:
    """Bodies at the edges of the item's field size (the server's hash-max-listpack-value):
    one field, two, many, and one field again past a hundred. A fire by the scripted look
    (which writes the item itself), and by the script-free mode, store the same item hash,
    the body in the fields an enqueue uses, and deliver the body whole."""
    chunk = int(r.config_get("hash-max-listpack-value")["hash-max-listpack-value"])
    sizes = [0, 1, chunk, chunk + 1, 2 * chunk, 2 * chunk + 1, 100 * chunk, 100 * chunk + 1]
    bodies = {f"s{n}": bytes(range(256)) * (n // 256) + b"x" * (n % 256) for n in sizes}
    clock = FakeClock(1_800_000_000.0)
    modes = {m: Queue(f"sized{m}", client=r, scripting=m == "scripted", clock=clock) for m in ("scripted", "commands")}
    for q in modes.values():
        for sid, body in bodies.items():
            q.schedule(sid, every=10, body=body, start=clock() + 5)
    clock.advance(5.5)
    items: dict[str, dict[str, dict[bytes, bytes]]] = {}
    for mode, q in modes.items():
        q.reap()
        fired = q.peek(100)
        assert len(fired) == len(bodies)
        items[mode] = {}
        for m in fired:
            fields = r.hgetall(f"kq:{{{q.name}}}:item:{m.id}")
            sid = next(sid for sid, body in bodies.items() if m.body == body)
            items[mode][sid] = fields
    assert items["scripted"] == items["commands"]  # (one fake time: the same t and s)
    plain = Queue("sizedplain", client=r)
    for sid, body in bodies.items():
        fields = items["scripted"][sid]
        enqueued = r.hgetall(f"kq:{{sizedplain}}:item:{plain.enqueue(body)}")
        assert {k: v for k, v in fields.items() if k.startswith(b"b")} == {
            k: v for k, v in enqueued.items() if k.startswith(b"b")
        }, sid
    for q in modes.values():
        got = sorted(m.body for m in q.claim_many(100))
        assert got == sorted(bodies.values())


def test_an_upsert_writes_an_unreadable_state_whole_again(make_queue: MakeQueue, r: redis.Redis) -> None:
    """A state the fsck reports as bad (not the packed fields) is no identical schedule: the
    same upsert writes it whole again, instead of failing on what it cannot read."""
    q = make_queue("q")
    q.schedule("s", every=60, body="x")
    r.hset("kq:{q}:schedule_state", "s", "garbage")
    again = q.schedule("s", every=60, body="x")
    assert again.every == 60 and again.next_fire is not None
    assert [s.id for s in make_queue("q").schedules()] == ["s"]
