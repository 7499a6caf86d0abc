"""Real clocks: redelivery timing against server time, and the long-poll claim."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from keyqueue import Queue

from ..support.helpers import wait_until


def server_now(r: redis.Redis) -> float:
    sec, usec = r.time()
    return sec + usec / 1e6


def blocked_clients(r: redis.Redis) -> int:
    return sum(1 for c in r.client_list(_type="normal") if c.get("cmd") == "blpop")


class ReapLoop:
    """Reaps a queue every `interval` seconds in a thread (the Reaper daemon's default is 1 s)."""

    def __init__(self, q: Queue, interval: float = 1.0) -> None:
        self.q, self.interval = q, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            self.q.reap()

    def __enter__(self) -> ReapLoop:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.mark.parametrize("bucket_seconds", [1, 60, 3600])
def test_redelivery_never_before_and_soon_after_the_deadline(make_queue, r: redis.Redis, bucket_seconds: int) -> None:
    q = make_queue(visibility_timeout=1.0, bucket_seconds=bucket_seconds)
    q.enqueue_many(["a", "b", "c"])
    first = {m.id: m for m in q.claim_many(3, visibility_timeout=1.0)}
    first["c"] = first.pop("3")
    q.extend(first["c"], 2.0)  # a later deadline, in the same or another bucket
    redelivered: dict[str, float] = {}
    with ReapLoop(q, 1.0):
        while len(redelivered) < 3:
            m = q.claim(wait=5)
            assert m is not None, "a message was not redelivered"
            redelivered[m.id] = server_now(r)
            m.ack()
    deadlines = {"1": first["1"].deadline, "2": first["2"].deadline, "3": first["c"].deadline}
    for mid, at in redelivered.items():
        assert at >= deadlines[mid], f"message {mid} redelivered before its deadline"
        assert at - deadlines[mid] <= 2.5, f"message {mid} came back {at - deadlines[mid]:.2f}s late"


def test_fast_reaping_never_redelivers_early(make_queue, r: redis.Redis) -> None:
    q = make_queue(visibility_timeout=0.3, bucket_seconds=1)
    q.enqueue_many([str(i) for i in range(50)])
    deliveries: dict[str, list[tuple[float, float]]] = {}
    end = time.monotonic() + 3
    with ReapLoop(q, 0.005):
        while time.monotonic() < end:
            for m in q.claim_many(10, wait=0.1):
                start = m.deadline - 0.3  # type: ignore[operator]
                deliveries.setdefault(m.id, []).append((start, m.deadline))  # type: ignore[arg-type]
    assert sum(len(v) for v in deliveries.values()) > 50  # messages did come back
    for mid, spans in deliveries.items():
        for (_, prev_deadline), (start, _) in zip(spans, spans[1:]):
            assert start >= prev_deadline - 0.001, f"{mid} redelivered while still owned"


def test_long_poll_wakes_on_enqueue(q: Queue, r: redis.Redis) -> None:
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(q.claim(wait=30)))
    t0 = time.monotonic()
    waiter.start()
    wait_until(lambda: blocked_clients(r) == 1)
    q.enqueue("hello")
    waiter.join(30)
    assert got and got[0] is not None and got[0].text == "hello"
    assert time.monotonic() - t0 < 15, "the waiter slept through the enqueue"


def test_long_poll_wakes_every_waiter_of_a_batch(q: Queue, r: redis.Redis) -> None:
    got: list = []
    lock = threading.Lock()

    def wait() -> None:
        m = q.claim(wait=30)
        with lock:
            got.append(m)

    waiters = [threading.Thread(target=wait) for _ in range(4)]
    t0 = time.monotonic()
    for w in waiters:
        w.start()
    wait_until(lambda: blocked_clients(r) == 4)
    q.enqueue_many(["a", "b", "c", "d"])
    for w in waiters:
        w.join(30)
    assert sorted(m.text for m in got if m) == ["a", "b", "c", "d"]
    assert time.monotonic() - t0 < 15


def test_long_poll_wakes_on_reaped_delay(make_queue) -> None:
    q = make_queue()
    q.enqueue("later", delay=0.5)
    t0 = time.monotonic()
    with ReapLoop(q, 0.05):
        m = q.claim(wait=20)
    assert m is not None and m.text == "later" and time.monotonic() - t0 < 10


def test_idle_long_poll_costs_only_a_few_commands(q: Queue, r: redis.Redis) -> None:
    q.claim()  # load the scripts first
    r.config_resetstat()
    t0 = time.monotonic()
    assert q.claim(wait=6.0) is None
    elapsed = time.monotonic() - t0
    stats = r.info("commandstats")
    assert elapsed >= 6.0
    sent = {k[len("cmdstat_") :]: v["calls"] for k, v in stats.items()}
    # one claim (a script call, or one round trip of the script-free mode) per BLPOP
    claims = sent.get("evalsha", 0) + sent.get("lindex", 0)
    client_sent = claims + sent.get("blpop", 0)
    assert client_sent <= elapsed + 3, f"{client_sent} round trips in {elapsed:.1f}s: {sent}"
    assert sent.get("blpop", 0) >= 2  # it blocked in Redis rather than polling
    if q.scripting:  # everything else was run by the claim script (TIME, LRANGE, the reads
        # that check types: LLEN of the signal list; EXISTS config and ZRANGE timers: the
        # script reports a lost config hash and the next timer, so the claim knows when to
        # reap without a round trip of its own; HMGET config and GET throttle: the limits)
        assert set(sent) <= {
            "evalsha",
            "blpop",
            "type",
            "time",
            "lrange",
            "exists",
            "zrange",
            "llen",
            "hmget",
            "get",
            "config|resetstat",
        }, sent
    else:  # an empty claim is TIME, LINDEX, LLEN, EXISTS config, ZRANGE timers, EXISTS groups
        # and HGET of the counters' groups mark (this mode serves no grouped queue), and the
        # limits' HMGET config, GET throttle, SCARD processing in one round trip
        assert set(sent) <= {
            "blpop",
            "time",
            "lindex",
            "llen",
            "exists",
            "zrange",
            "hmget",
            "hget",
            "get",
            "scard",
            "config|resetstat",
        }, sent
        assert sent["time"] == sent["lindex"] == sent["llen"] == sent["exists"] // 2 == sent["hmget"] == claims
        assert sent["hget"] == claims


def test_wait_zero_returns_at_once(q: Queue) -> None:
    t0 = time.monotonic()
    assert q.claim() is None and q.claim_many(5, wait=0) == []
    assert time.monotonic() - t0 < 1
