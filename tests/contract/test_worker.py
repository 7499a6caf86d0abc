"""The worker runtime, in-process, on both faces (keyqueue.Worker in threads,
keyqueue.aio.Worker on a loop; ``workers`` runs the face's): batches, failures, heartbeats,
priorities, shutdown. What only one face does is in test_worker_threads.py and
test_aio_worker.py."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from typing import Callable

import pytest
import redis

from keyqueue import InvalidArgument, Message, Queue
from keyqueue.connection import REFUSED, outage_delay
from keyqueue.core.queue_core import bounded_error
from keyqueue.server import RedisServer
from keyqueue.worker.rules import MAX_BACKOFF, backoff
from keyqueue.worker.steps import Pause, drive, retrying

from ..support.helpers import wait_until
from ..support.workers import Workers


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff(1.0, r) for r in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff(0.5, 1) == 0.5 and backoff(1.0, 30) == MAX_BACKOFF == 300


def test_outage_waits_double_from_a_tenth_of_a_second_to_5_s() -> None:
    assert [outage_delay(n) for n in range(1, 10)] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]


def test_a_worker_retries_at_start_with_the_outage_waits_but_not_a_refusal() -> None:
    """What a worker does at start while Redis is down (each wait one WARNING line), and
    when Redis answers but refuses the credentials: raised at once, never waited out."""
    calls, waits = [], []

    def down_six_times() -> str:
        calls.append(1)
        if len(calls) <= 6:
            raise redis.ConnectionError("Connection refused")
        return "up"

    steps = retrying(down_six_times, "check Redis", lambda: False, fatal=REFUSED)
    assert drive(steps, waits.append) == "up"
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2]
    for refusal in (redis.AuthenticationError("WRONGPASS"), redis.exceptions.NoPermissionError("NOPERM")):
        failing = retrying(lambda: (_ for _ in ()).throw(refusal), "check Redis", lambda: False, fatal=REFUSED)
        assert callable(next(failing))
        with pytest.raises(type(refusal)):
            failing.throw(refusal)
    plain = retrying(lambda: None, "ack", lambda: False)  # (elsewhere a lost password is an outage)
    next(plain)
    assert plain.throw(redis.AuthenticationError("WRONGPASS")) == Pause(0.1)


def test_burst_processes_every_message_once(q: Queue, workers: Workers) -> None:
    ids = q.enqueue_many([str(i) for i in range(2000)])
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def handler(m: Message) -> None:
        with lock:
            seen[m.id] += 1

    w = workers.run(workers.make(q, handler, concurrency=4))
    assert sorted(seen, key=int) == ids and set(seen.values()) == {1}
    s = q.stats()
    assert (s.waiting, s.processing, s.delayed, s.dead) == (0, 0, 0, 0)
    assert q.length() == 0 and w.processed == 2000


def test_handlers_run_concurrently(q: Queue, workers: Workers) -> None:
    q.enqueue_many(["x"] * 4)  # one each: nothing is known of the handlers before the first ends
    active, peak = [0], [0]
    lock = threading.Lock()
    gate = threading.Barrier(4, timeout=10)

    def handler(m: Message) -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        gate.wait()  # only passes when 4 handlers run at once
        with lock:
            active[0] -= 1

    # Not burst: in burst a thread whose claim comes back empty while it holds nothing ends
    # (a script-free claim can, racing the others), and the barrier would wait for it.
    with workers.running(workers.make(q, handler, concurrency=4)) as w:
        wait_until(lambda: w.processed + w.failed == 4)
    assert peak[0] == 4 and q.stats().processing == 0
    assert w.processed == 4 and w.failed == 0


def test_failures_retry_with_backoff_then_dead_letter(make_queue: Callable[..., Queue], workers: Workers) -> None:
    q = make_queue(max_receives=3)
    q.enqueue("poison")
    calls: list[int] = []

    def handler(m: Message) -> None:
        calls.append(m.receives)
        raise ValueError("bad payload")

    with workers.running(workers.make(q, handler, retry_backoff=0.05)):
        wait_until(lambda: q.stats().dead == 1)
    assert calls == [1, 2, 3]
    (dead,) = q.peek(source="dead")
    assert dead.last_error == "ValueError: bad payload" and dead.receives == 3


def test_a_failed_message_waits_out_its_backoff(make_queue: Callable[..., Queue], workers: Workers) -> None:
    q = make_queue()
    q.enqueue("flaky")
    failed = threading.Event()

    def handler(m: Message) -> None:
        failed.set()
        raise RuntimeError("try later")

    before = time.time()
    with workers.running(workers.make(q, handler, retry_backoff=30)) as w:
        assert failed.wait(60)
        wait_until(lambda: q.stats().delayed == 1 and w.failed == 1)
    (m,) = q.peek(source="delayed")
    assert m.deadline is not None and before + 30 - 0.01 <= m.deadline <= time.time() + 30
    assert m.last_error == "RuntimeError: try later" and m.receives == 1


def test_heartbeat_keeps_a_long_handler_s_message(make_queue: Callable[..., Queue], workers: Workers) -> None:
    # (a timeout of 1.5 s: heartbeats every 0.5 s, so a busy machine's stalls do not lose it)
    q = make_queue(visibility_timeout=1.5, bucket_seconds=1)
    q.enqueue("x")
    calls: list[str] = []
    other: list[str] = []

    def slow(m: Message) -> None:
        calls.append(m.id)
        time.sleep(6.0)  # 4x the visibility timeout

    thief = workers.make(q, lambda m: other.append(m.id))
    with workers.running(workers.make(q, slow)):
        wait_until(lambda: calls)  # the thief starts once the slow handler holds the message
        with workers.running(thief):  # and it reaps every second
            wait_until(lambda: q.stats().processing == 0, timeout=15)
    assert calls == ["1"] and other == []
    assert q.stats().waiting == 0 and q.peek(source="dead") == []


def test_without_heartbeat_the_message_is_redelivered(make_queue: Callable[..., Queue], workers: Workers) -> None:
    q = make_queue(visibility_timeout=0.3, bucket_seconds=1)
    q.enqueue("x")
    started = threading.Event()
    other: list[int] = []

    def slow(m: Message) -> None:
        started.set()
        time.sleep(2.5)

    with workers.running(workers.make(q, slow, concurrency=1, heartbeat=False)):
        assert started.wait(10)
        with workers.running(workers.make(q, lambda m: other.append(m.receives))):
            wait_until(lambda: other)
    assert other == [2]


def test_queues_are_served_in_priority_order(make_queue: Callable[..., Queue], workers: Workers) -> None:
    high, low = make_queue("high"), make_queue("low")
    low.enqueue_many([f"low{i}" for i in range(50)])
    high.enqueue_many([f"high{i}" for i in range(50)])
    order: list[str] = []
    workers.run(workers.make([high, low], lambda m: order.append(m.text), concurrency=1))
    assert order == [f"high{i}" for i in range(50)] + [f"low{i}" for i in range(50)]


def test_reap_on_start_recovers_expired_but_never_live_work(make_queue: Callable[..., Queue], workers: Workers) -> None:
    q = make_queue(bucket_seconds=1)
    q.enqueue_many(["expired", "live"])
    expired = q.claim(visibility_timeout=0.05)
    live = q.claim(visibility_timeout=60)
    assert expired and live
    time.sleep(0.1)  # let the first deadline pass (nothing else polls)
    seen: list[str] = []
    workers.run(workers.make(q, lambda m: seen.append(m.text)))
    assert seen == ["expired"]
    assert live.ack() is True  # still owned by its original holder


def test_stop_lets_in_flight_work_finish(q: Queue, workers: Workers) -> None:
    q.enqueue_many(["a", "b", "c"])
    started, proceed = threading.Event(), threading.Event()
    done: list[str] = []

    def handler(m: Message) -> None:
        started.set()
        proceed.wait(10)
        done.append(m.text)

    run = workers.start(workers.make(q, handler, concurrency=1, grace_period=10))
    assert started.wait(10)
    run.worker.stop()  # a plain call
    assert not run.join(0.05)  # waiting for the handler
    proceed.set()
    run.result(15)
    assert done == ["a"]
    assert q.stats().processing == 0
    assert sorted(m.text for m in q.peek()) == ["b", "c"]  # never started: given back at once


def test_heartbeats_go_on_through_the_grace_period(q: Queue, workers: Workers) -> None:
    """A handler finishing in the grace period, long after the visibility timeout, still
    holds its message: it is acked once, never redelivered meanwhile."""
    q.enqueue("a")
    started, proceed = threading.Event(), threading.Event()

    def handler(m: Message) -> None:
        started.set()
        proceed.wait(30)

    run = workers.start(workers.make(q, handler, visibility_timeout=1, grace_period=30))
    assert started.wait(10)
    run.worker.stop()
    deadline = time.monotonic() + 4  # four visibility timeouts into the grace period
    while time.monotonic() < deadline:
        q.reap()
        assert q.claim() is None  # still held by the stopping worker
        time.sleep(0.2)
    proceed.set()
    run.result(15)
    assert q.counters()["acked"] == 1 and q.counters()["redelivered"] == 0
    assert (q.stats().waiting, q.stats().processing) == (0, 0)


def test_grace_period_over_releases_what_is_left(q: Queue, workers: Workers, caplog: pytest.LogCaptureFixture) -> None:
    q.enqueue_many(["a", "b"])
    stuck = threading.Event()
    started: list[str] = []

    def handler(m: Message) -> None:
        started.append(m.id)
        stuck.wait(60)

    run = workers.start(workers.make(q, handler, concurrency=2, grace_period=0.3))
    w = run.worker
    try:
        with caplog.at_level(logging.WARNING, logger="keyqueue.worker"):
            wait_until(lambda: len(started) == 2)  # (held but not started: given back at once)
            t0 = time.monotonic()
            w.stop()
            run.result(4)  # "run() did not return after the grace period"
            assert time.monotonic() - t0 < 3
    finally:
        stuck.set()
    s, msgs = q.stats(), q.peek()
    assert (s.waiting, s.processing, s.delayed) == (2, 0, 0)
    assert sorted(m.text for m in msgs) == ["a", "b"]
    assert [m.last_error for m in msgs] == [None, None] and w.failed == 0  # not failures
    assert sum("grace period over: releasing queue=q" in line for line in caplog.messages) == 2


def test_the_decorator_builds_a_worker(q: Queue, workers: Workers) -> None:
    @q.worker(concurrency=2, timeout=5)
    @workers.handler
    def handle(m: Message) -> None:
        pass

    assert isinstance(handle, workers.kind) and handle.concurrency == 2 and handle.queues == [workers.queue(q)]
    # what `keyqueue worker` does with the options given on its command line
    assert handle.with_options(timeout=1).timeout == 1 and handle.with_options(concurrency=3).timeout == 5
    q.enqueue("x")
    workers.run(handle)
    assert q.length() == 0


def test_the_decorator_works_without_parentheses(q: Queue, workers: Workers) -> None:
    @q.worker
    @workers.handler
    def handle(message) -> None:  # type: ignore[no-untyped-def]
        pass

    assert isinstance(handle, workers.kind) and handle.queues == [workers.queue(q)]


@pytest.mark.parametrize(
    "kw",
    [
        {"concurrency": 0},
        {"retry_backoff": -1},
        {"grace_period": "x"},
        {"visibility_timeout": 0},
        {"timeout": 0},
        {"timeout": -1},
        {"timeout": True},
        {"timeout": float("nan")},
        {"timeout": "1"},
    ],
)
def test_bad_worker_options(q: Queue, workers: Workers, kw: dict) -> None:
    with pytest.raises(InvalidArgument):
        workers.make(q, lambda m: None, **kw)


def test_eviction_policy_warning(
    make_queue: Callable[..., Queue], workers: Workers, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    q = make_queue()
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        with caplog.at_level(logging.WARNING, logger="keyqueue.worker"):
            workers.run(workers.make(q, lambda m: None))
    finally:
        r.config_set("maxmemory-policy", "noeviction")
    assert any("allkeys-lru" in rec.getMessage() and "noeviction" in rec.getMessage() for rec in caplog.records)


def test_log_lines_name_queue_id_and_receives(
    make_queue: Callable[..., Queue], workers: Workers, caplog: pytest.LogCaptureFixture
) -> None:
    q = make_queue("mail", max_receives=1)
    q.enqueue("fine")
    q.enqueue("bad")

    def handler(m: Message) -> None:
        if m.text == "bad":
            raise KeyError("missing field")

    with caplog.at_level(logging.DEBUG, logger="keyqueue.worker"):
        workers.run(workers.make(q, handler))
    lines = [rec.getMessage() for rec in caplog.records]
    assert "claimed queue=mail id=1 receives=1" in lines
    assert "acked queue=mail id=1 receives=1" in lines
    assert any(line.startswith("dead-lettered queue=mail id=2 receives=1 after KeyError") for line in lines)
    assert all("\n" not in line for line in lines)


def test_a_handler_error_is_kept_to_4096_bytes(make_queue: Callable[..., Queue], workers: Workers) -> None:
    q = make_queue(max_receives=1)
    q.enqueue("x")

    def handler(m: Message) -> None:
        raise RuntimeError("é" * 3000)  # 6,000 bytes

    workers.run(workers.make(q, handler))
    (dead,) = q.peek(source="dead")
    assert dead.last_error == bounded_error("RuntimeError: " + "é" * 3000)
    assert dead.last_error.startswith("RuntimeError: éé") and dead.last_error.endswith("é…")
    assert 4088 <= len(dead.last_error.encode()) <= 4096


# -- handler time limits -------------------------------------------------------------------


def test_a_handler_past_its_timeout_is_failed_and_its_late_ack_changes_nothing(
    make_queue: Callable[..., Queue], workers: Workers
) -> None:
    q = make_queue(max_receives=5)
    q.enqueue("stuck")
    started: list[float] = []
    late = threading.Event()
    acked: list[bool] = []

    def handler(m: Message) -> None:
        started.append(time.time())
        late.wait(30)
        acked.append(m.ack())

    # concurrency 2: a thread worker with one stuck thread of 2 goes on serving
    with workers.running(workers.make(q, handler, concurrency=2, timeout=1, retry_backoff=30)) as w:
        wait_until(lambda: q.stats().delayed == 1, timeout=15)
        (m,) = q.peek(source="delayed")
        assert m.last_error is not None and m.last_error.startswith("HandlerTimeout")
        assert m.receives == 1 and w.failed == 1
        # Released with its 30 s backoff at the server's time deadline - 30 (ms precision):
        # never before the timeout, and soon after it (generously: the machine may be busy).
        # The worker's clock starts when it hands the message over, the handler's a little
        # later (a thread that starts late on a busy machine): hence the 0.1 s below.
        assert m.deadline is not None
        failed_after = m.deadline - 30 - started[0]
        assert 1 - 0.1 <= failed_after < 1 + 6
        late.set()
        wait_until(lambda: acked)
    assert acked == [False]  # the late handler's ack: its delivery was over
    assert q.stats().delayed == 1 and q.peek(source="delayed")[0].receives == 1
    assert w.processed == 0 and w.failed == 1


def test_a_handler_past_its_timeout_out_of_receives_is_dead_lettered(
    make_queue: Callable[..., Queue], workers: Workers
) -> None:
    q = make_queue(max_receives=1)
    q.enqueue("stuck")
    q.enqueue("fine")
    late = threading.Event()
    done: list[str] = []

    def handler(m: Message) -> None:
        if m.text == "stuck":
            late.wait(30)
        done.append(m.text)

    try:
        with workers.running(workers.make(q, handler, concurrency=2, timeout=1)):
            wait_until(lambda: q.stats().dead == 1 and done == ["fine"], timeout=15)
    finally:
        late.set()
    (dead,) = q.peek(source="dead")
    assert dead.text == "stuck" and (dead.last_error or "").startswith("HandlerTimeout")
    assert q.stats().waiting == q.stats().processing == 0


def test_an_idle_worker_on_queues_of_two_clients_takes_from_either(
    make_queue: Callable[..., Queue], workers: Workers, redis_server: RedisServer, r: redis.Redis
) -> None:
    """One BLPOP cannot watch queues of two clients: the worker waits on both at once, and the
    connections it drops when one wakes are closed (the server's clients stay bounded)."""
    first, second = make_queue("first", url=redis_server.url), make_queue("second", url=redis_server.url)
    seen: list[str] = []
    with workers.running(workers.make([first, second], lambda m: seen.append(m.text), concurrency=1)):
        for i in range(10):
            time.sleep(0.05)  # (idle or not: either way the message is taken)
            (second if i % 2 else first).enqueue(f"m{i}")
            wait_until(lambda: len(seen) == i + 1)
        clients = len(r.client_list())
    assert seen == [f"m{i}" for i in range(10)]
    assert clients < 20
