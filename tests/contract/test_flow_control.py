"""Rate limits, in-flight caps and throttles, on both faces and in both modes: what a claim
takes under them, what ``rate_state`` says, and bad values refused with nothing written.
Windows are the server clock's, so most tests here run on a FakeClock (it replaces TIME)."""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable

import pytest
import redis

import keyqueue
from keyqueue import Queue, RateState

from ..support.helpers import FakeClock, run_threads, snapshot, wait_until
from ..support.workers import Workers

MakeQueue = Callable[..., Queue]


def flow_keys(r: redis.Redis, name: str = "q") -> list[bytes]:
    return sorted(k for k in r.keys(f"kq:{{{name}}}:*") if b":rate:" in k or k.endswith(b":throttle"))


def test_rate_limit_caps_each_window_of_the_server_clock(make_queue: MakeQueue, clock: FakeClock) -> None:
    clock.now = 1_700_000_000.0  # a window boundary for a 10 s window
    q = make_queue(rate_limit="3/10", clock=clock)
    q.enqueue_many([f"m{i}" for i in range(10)])
    got = q.claim_many(10)
    assert [m.text for m in got] == ["m0", "m1", "m2"]
    assert q.claim() is None and q.claim_many(5) == []
    clock.advance(9.999)
    assert q.claim() is None
    assert len(q) == 7  # a refused claim takes nothing
    clock.advance(0.001)  # the next window
    assert [m.text for m in q.claim_many(10)] == ["m3", "m4", "m5"]


def test_a_window_that_ends_between_the_script_free_claims_round_trips_counts_no_more(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script-free claim reads the time, then reserves its place in that time's window a
    round trip later. Should the window end and its counter expire in between (a stalled
    client, a starved host), the reservation would count from zero again: a second full
    share in one window. Such a claim takes nothing; the next claim counts in the next window."""
    from keyqueue.backends.commands import flow

    clock = FakeClock(1_700_000_000.990)  # 10 ms before the end of a 1 s window
    q = Queue("late", client=r, scripting=False, clock=clock, rate_limit="10/1", visibility_timeout=60)
    q.enqueue_many([f"m{i}" for i in range(30)])
    first = q.claim_many(10)
    assert len(first) == 10  # the window's share; its counter expires with the window (10 ms)
    made = flow.Flow.__init__

    def then_stall(self: Any, *args: Any, **kw: Any) -> None:
        made(self, *args, **kw)
        clock.advance(0.02)  # the window ends before the reservation ...
        time.sleep(0.05)  # ... and its counter expires (its PTTL was 10 ms)

    monkeypatch.setattr(flow.Flow, "__init__", then_stall)
    late = q.claim_many(10)
    monkeypatch.undo()
    in_window = [m for m in first + late if m.deadline is not None and m.deadline - 60 < 1_700_000_001]
    assert len(in_window) == 10 and late == []
    assert [m.text for m in q.claim_many(10)] == [f"m{i}" for i in range(10, 20)]  # the next window's


def test_claim_many_gets_what_is_left_of_the_window(make_queue: MakeQueue, clock: FakeClock) -> None:
    clock.now = 1_700_000_000.0
    q = make_queue(rate_limit=(5, 10), clock=clock)
    q.enqueue_many([f"m{i}" for i in range(10)])
    assert q.claim() is not None and q.claim() is not None
    assert len(q.claim_many(10)) == 3
    state = q.rate_state()
    assert (state.limit, state.interval, state.used) == (5, 10.0, 5)
    assert state.resets_in == pytest.approx(10.0)


def test_redeliveries_count_and_refused_claims_keep_receives(make_queue: MakeQueue, clock: FakeClock) -> None:
    clock.now = 1_700_000_000.0
    q = make_queue(rate_limit="1/10", clock=clock)
    q.enqueue("a")
    m = q.claim()
    assert m is not None and q.release(m)
    assert q.claim() is None  # the redelivery would be a second claim in the window
    assert q.peek(1)[0].receives == 1
    clock.advance(10)
    again = q.claim()
    assert again is not None and again.receives == 2


def test_max_in_flight_caps_owned_deliveries(make_queue: MakeQueue, clock: FakeClock) -> None:
    q = make_queue(max_in_flight=2, clock=clock, visibility_timeout=30)
    q.enqueue_many(["a", "b", "c", "d"])
    first = q.claim_many(3)
    assert [m.text for m in first] == ["a", "b"]
    assert q.claim() is None
    assert q.rate_state().in_flight == 2
    assert first[0].ack()
    assert [m.text for m in q.claim_many(5)] == ["c"]
    # An expired delivery counts until it is reaped.
    clock.advance(31)
    assert q.claim() is None or q.rate_state().in_flight <= 2


def test_both_limits_apply_together(make_queue: MakeQueue, clock: FakeClock) -> None:
    clock.now = 1_700_000_000.0
    q = make_queue(rate_limit="3/10", max_in_flight=2, clock=clock)
    q.enqueue_many(["a", "b", "c", "d"])
    got = q.claim_many(4)
    assert len(got) == 2
    q.ack_many(got)
    assert len(q.claim_many(4)) == 1  # the window had one left
    assert q.claim() is None


def test_throttle_holds_every_claim_back(make_queue: MakeQueue, clock: FakeClock) -> None:
    q = make_queue(clock=clock)
    q.enqueue("a")
    assert q.throttle(5) == pytest.approx(5.0)
    assert q.claim() is None
    assert q.rate_state().throttled_for == pytest.approx(5.0)
    q.throttle(1)  # a shorter throttle does not cut a longer one short
    clock.advance(4.9)
    assert q.claim() is None
    clock.advance(0.1)
    assert q.claim() is not None
    assert q.rate_state().throttled_for == 0


def test_throttled_release_keeps_receives(make_queue: MakeQueue, clock: FakeClock) -> None:
    q = make_queue(clock=clock, max_receives=1)
    q.enqueue("a")
    for _ in range(5):
        m = q.claim()
        assert m is not None and m.receives == 1
        assert q.release_throttled(m, 2)
        assert q.claim() is None  # none starts in the throttle's seconds
        assert q.peek(1)[0].receives == 0
        clock.advance(2)
    assert q.stats().dead == 0


def test_refused_claims_are_counted_once_each(make_queue: MakeQueue, clock: FakeClock) -> None:
    clock.now = 1_700_000_000.0
    q = make_queue(rate_limit="1/10", clock=clock)
    assert q.claim() is None  # nothing waits: nothing was refused
    q.enqueue_many(["a", "b"])
    assert q.claim() is not None
    assert q.claim() is None and q.claim() is None
    q.throttle(1)
    assert q.claim() is None
    assert q.counters()["throttled"] == 3


def test_a_held_back_long_poll_is_counted_once(make_queue: MakeQueue) -> None:
    """A claim(wait=...) its limits hold back tries again about once a second (a limit lifted
    elsewhere applies); it is still one refused claim. So is a claim of several queues."""
    q = make_queue()
    q.enqueue("a")
    q.throttle(60)
    t0 = time.monotonic()
    assert q.claim(wait=1.6) is None
    assert time.monotonic() - t0 >= 1.5  # (it tried again at least once)
    assert q.counters()["throttled"] == 1
    assert q.claim_many(5, wait=1.2) == [] and q.counters()["throttled"] == 2


def test_a_long_poll_held_back_by_a_full_window_only_reads(r: redis.Redis, scripting: bool) -> None:
    """Its look each second, once the window is known full, writes nothing: no reservation
    made and given back (the script-free mode reads the window's count in its first round
    trip), and the refusal is counted once."""
    q = Queue("full", client=r, scripting=scripting, rate_limit="1/3600")
    q.enqueue_many(["a", "b"])
    assert q.claim() is not None
    r.config_resetstat()
    t0 = time.monotonic()
    assert q.claim(wait=3.2) is None
    elapsed = time.monotonic() - t0
    sent = {k[len("cmdstat_") :]: v["calls"] for k, v in r.info("commandstats").items()}
    writes = {c: n for c, n in sent.items() if c in ("incrby", "decrby", "pexpire", "hincrby", "watch", "multi")}
    assert writes == {"hincrby": 1}, sent  # (the one count of the refusal)
    assert sum(sent.values()) <= 16 * (elapsed + 1), sent  # a few reads a look, a look a second


def test_a_held_back_claim_of_several_queues_is_counted_once(r: redis.Redis, scripting: bool) -> None:
    from keyqueue.queue import claim_any

    limited = Queue("limited", client=r, scripting=scripting, rate_limit="1/3600")
    other = Queue("other", client=r, scripting=scripting)
    limited.enqueue_many(["l1", "l2"])
    assert claim_any([limited, other], 5)[0] is limited  # (cut by the limit: counted)
    assert limited.counters()["throttled"] == 1
    assert claim_any([limited, other], 5, wait=2.2) == (None, [])  # (tried again a second on)
    assert limited.counters()["throttled"] == 2


def test_rate_state_without_limits(make_queue: MakeQueue, r: redis.Redis) -> None:
    q = make_queue()
    q.enqueue("a")
    assert q.claim() is not None
    assert q.rate_state() == RateState(None, None, 0, None, 1, 0.0, None)


def test_unset_limits_touch_no_key(make_queue: MakeQueue, r: redis.Redis) -> None:
    q = make_queue()
    q.enqueue_many(["a", "b"])
    m = q.claim()
    assert m is not None and q.claim_many(5)
    assert flow_keys(r) == []
    assert r.hget("kq:{q}:counters", "throttled") is None


def test_limits_set_elsewhere_apply_at_the_next_claim(make_queue: MakeQueue, clock: FakeClock) -> None:
    clock.now = 1_700_000_000.0
    q = make_queue(clock=clock)
    q.enqueue_many(["a", "b", "c"])
    assert q.claim() is not None
    make_queue(rate_limit="1/10", clock=clock)  # another process (or keyqueue config) sets it
    assert q.claim() is not None  # the window's first claim
    assert q.claim() is None
    make_queue(rate_limit=None, clock=clock)
    assert q.claim() is not None


def test_limits_are_settings(make_queue: MakeQueue, r: redis.Redis) -> None:
    q = make_queue(rate_limit=(20, 1), max_in_flight=3)
    assert r.hmget("kq:{q}:config", "rate_limit", "max_in_flight") == [b"20/1", b"3"]
    assert (q.settings.rate_limit, q.settings.max_in_flight) == ("20/1", 3)
    assert make_queue().settings.rate_limit == "20/1"
    make_queue(rate_limit="5/0.5")
    assert r.hget("kq:{q}:config", "rate_limit") == b"5/0.5"


BAD_RATES: list[Any] = ["0/1", "5/0", "x", "5", "5/", "/1", "-1/1", "1/-1", "1/nan", "1/inf", "1/0.0001", "", -1, 5]
BAD_RATES += [True, (0, 1), (1, 0), (True, 1), (1, True), (1.5, 1), (1, 2, 3), [1], None.__class__]


@pytest.mark.parametrize("value", BAD_RATES, ids=repr)
def test_bad_rate_limits_are_refused_with_nothing_written(make_queue: MakeQueue, r: redis.Redis, value: Any) -> None:
    before = snapshot(r)
    with pytest.raises(ValueError, match="rate_limit"):
        make_queue(rate_limit=value)
    assert snapshot(r) == before


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "3", math.nan])
def test_bad_max_in_flight_is_refused_with_nothing_written(make_queue: MakeQueue, r: redis.Redis, value: Any) -> None:
    before = snapshot(r)
    with pytest.raises(ValueError, match="max_in_flight"):
        make_queue(max_in_flight=value)
    assert snapshot(r) == before


@pytest.mark.parametrize("seconds", [0, -1, 0.0, True, math.nan, math.inf, "5"])
def test_bad_throttles_are_refused(make_queue: MakeQueue, r: redis.Redis, seconds: Any) -> None:
    q = make_queue()
    before = snapshot(r)
    with pytest.raises(ValueError):
        q.throttle(seconds)
    with pytest.raises(ValueError):
        keyqueue.Throttle(seconds)
    assert snapshot(r) == before


def test_a_limited_long_poll_sleeps_until_the_window_opens(make_queue: MakeQueue, r: redis.Redis) -> None:
    """Real clock: the wait returns within the next window, at a few commands a second."""
    q = make_queue(rate_limit="2/1", visibility_timeout=30)
    q.enqueue_many(["a", "b", "c"])
    while True:  # two claims in one window (a boundary between them: again)
        got = q.claim_many(2)
        if q.claim() is None and len(got) == 2:
            break
        q.ack_many(got)
        q.enqueue_many(["a", "b"])
    r.config_resetstat()
    m = q.claim(wait=5)
    assert m is not None
    claimed_at = m.deadline - 30
    first_at = got[0].deadline - 30
    assert math.floor(claimed_at) == math.floor(first_at) + 1  # the next window, not later
    stats = r.info("commandstats")
    # Claims (a script call, or the server time a script-free claim starts with) and waits:
    # a few, not a poll loop (the commands a claim makes inside its script count apart).
    calls = {k: stats.get(f"cmdstat_{k}", {}).get("calls", 0) for k in ("evalsha", "time", "blpop")}
    assert sum(calls.values()) <= 6, calls


def test_a_long_poll_held_back_by_max_in_flight_takes_a_freed_slot(make_queue: MakeQueue) -> None:
    q = make_queue(max_in_flight=1, visibility_timeout=30)
    q.enqueue_many(["a", "b"])
    held = q.claim()
    assert held is not None
    started = time.monotonic()
    freed_at: list[float] = []

    def free() -> None:
        time.sleep(0.5)
        freed_at.append(time.monotonic())
        assert held.ack()

    got: list[Any] = []
    errors = run_threads([free, lambda: got.append(q.claim(wait=10))])
    assert errors == []
    assert got[0] is not None and got[0].text == "b"
    assert time.monotonic() - freed_at[0] < 5  # (about 1 s; generous for a busy machine)
    assert time.monotonic() - started < 10


def test_a_handler_raising_throttle_gives_its_message_back_unspent(
    make_queue: MakeQueue, workers: Workers, caplog: pytest.LogCaptureFixture
) -> None:
    """Five throttles with max_receives=1 do not dead-letter the message; no delivery starts
    within a throttle; nothing above DEBUG is logged for it."""
    q = make_queue(max_receives=1)
    q.enqueue("x")
    seen: list[tuple[float, int]] = []

    def handler(m: Any) -> None:
        seen.append((time.monotonic(), m.receives))
        if len(seen) <= 5:
            raise keyqueue.Throttle(0.3)

    w = workers.make(q, handler)
    with caplog.at_level(logging.DEBUG, logger="keyqueue"):
        workers.run(w)  # a burst run waits out the throttles: the queue is not empty
    assert [r for _, r in seen] == [1] * 6
    assert all(b - a >= 0.25 for (a, _), (b, _) in zip(seen, seen[1:]))  # (server and local clocks)
    s = q.stats()
    assert (s.waiting, s.processing, s.delayed, s.dead) == (0, 0, 0, 0)
    assert q.counters()["acked"] == 1
    assert [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG and "throttl" in r.getMessage()] == []
    assert any("throttled queue=q" in r.getMessage() for r in caplog.records)


def test_a_limited_claim_makes_no_more_round_trips(
    r: redis.Redis, scripting: bool, round_trips: list[int], clock: FakeClock
) -> None:
    """On a clock of the test's own: a claim spends one more round trip when a timer
    bucket's boundary passes between its two reads of the time, whatever its limits."""
    sent = round_trips

    def trips(q: Queue, claims: int = 3) -> int:
        q.enqueue_many(["warm-up", "a", "b", "c"])
        assert q.claim() is not None  # scripts loaded, the first claim-time reap made
        q._core.claim_reaping = False  # (a reap or a look at schedules is the same either way)
        before = len(sent)
        for _ in range(claims):
            q.claim()
        return len(sent) - before

    plain = trips(Queue("plain", client=r, scripting=scripting, clock=clock))
    assert (
        trips(Queue("roomy", client=r, scripting=scripting, clock=clock, rate_limit="1000/1", max_in_flight=100))
        == plain
    )
    assert trips(Queue("refusing", client=r, scripting=scripting, clock=clock, rate_limit="1/3600")) <= plain
    assert trips(Queue("capped", client=r, scripting=scripting, clock=clock, max_in_flight=1)) <= plain
    if scripting:
        assert plain == 3  # one round trip a claim


def test_a_held_back_queue_leaves_the_others_served(r: redis.Redis, scripting: bool) -> None:
    from keyqueue.queue import claim_any

    limited = Queue("limited", client=r, scripting=scripting, rate_limit="1/3600")
    other = Queue("other", client=r, scripting=scripting)
    limited.enqueue_many(["l1", "l2"])
    src, got = claim_any([limited, other], 5, wait=1)
    assert src is limited and [m.text for m in got] == ["l1"]
    assert claim_any([limited, other], 5, wait=1) == (None, [])  # held back, nothing elsewhere
    other.enqueue("o1")
    src, got = claim_any([limited, other], 5, wait=5)
    assert src is other and [m.text for m in got] == ["o1"]
    started = time.monotonic()
    waiter: list[Any] = []

    def enqueue_later() -> None:
        time.sleep(0.3)
        other.enqueue("o2")

    assert run_threads([enqueue_later, lambda: waiter.append(claim_any([limited, other], 5, wait=10))]) == []
    assert waiter[0][0] is other and time.monotonic() - started < 8


@pytest.mark.parametrize("field,value", [("rate_limit", "lots"), ("rate_limit", "5/x"), ("max_in_flight", "many")])
def test_a_limit_overwritten_with_garbage_fails_claims_and_changes_nothing(
    make_queue: MakeQueue, r: redis.Redis, field: str, value: str
) -> None:
    q = make_queue()
    q.enqueue("a")
    r.hset("kq:{q}:config", field, value)
    before = snapshot(r)
    with pytest.raises(keyqueue.CorruptQueue, match="config"):
        q.claim()
    assert snapshot(r) == before


def test_a_worker_sleeps_through_a_throttle(make_queue: MakeQueue, workers: Workers, r: redis.Redis) -> None:
    q = make_queue()
    q.enqueue("x")
    q.throttle(2.5)
    r.config_resetstat()
    handled: list[float] = []
    started = time.monotonic()
    with workers.running(workers.make(q, lambda m: handled.append(time.monotonic()), concurrency=2)):
        wait_until(lambda: handled, timeout=30)
    assert handled[0] - started >= 2.0  # (the throttle's 2.5 s, less the set-up)
    stats = r.info("commandstats")
    claims = sum(stats.get(f"cmdstat_{k}", {}).get("calls", 0) for k in ("evalsha", "time"))
    assert claims <= 40, claims  # about one a second a lane and a reap a second, not a poll loop
