"""The Worker runtime, in-process: batches, failures, heartbeats, priorities, shutdown."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import pytest
import redis

from keyqueue import InvalidArgument, Message, Queue, Worker
from keyqueue.worker.rules import MAX_BACKOFF, backoff

from ..support.helpers import wait_until
from ..support.workers import Running


@pytest.fixture
def face() -> str:
    """keyqueue.Queue only, for now (the worker and fsck suites take both faces next)."""
    return "sync"


def test_backoff_doubles_and_is_capped() -> None:
    assert [backoff(1.0, r) for r in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 8.0]
    assert backoff(0.5, 1) == 0.5 and backoff(1.0, 30) == MAX_BACKOFF == 300


def test_burst_processes_every_message_once(q: Queue) -> None:
    ids = q.enqueue_many([str(i) for i in range(3000)])
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def handler(m: Message) -> None:
        with lock:
            seen[m.id] += 1

    w = Worker(q, handler, concurrency=4)
    w.run(burst=True)
    assert sorted(seen, key=int) == ids and set(seen.values()) == {1}
    assert q.stats().processing == 0 and q.length() == 0 and w.processed == 3000


def test_handlers_run_concurrently(q: Queue) -> None:
    q.enqueue_many(["x"] * 8)
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

    Worker(q, handler, concurrency=4).run(burst=True)
    assert peak[0] == 4 and q.stats().processing == 0


def test_failures_retry_with_backoff_then_dead_letter(make_queue) -> None:
    q = make_queue(max_receives=3)
    q.enqueue("poison")
    calls: list[int] = []

    def handler(m: Message) -> None:
        calls.append(m.receives)
        raise ValueError("bad payload")

    with Running(Worker(q, handler, retry_backoff=0.05)):
        wait_until(lambda: q.stats().dead == 1)
    assert calls == [1, 2, 3]
    (dead,) = q.peek(source="dead")
    assert dead.last_error == "ValueError: bad payload" and dead.receives == 3


def test_a_failed_message_waits_out_its_backoff(make_queue) -> None:
    q = make_queue()
    q.enqueue("flaky")
    failed = threading.Event()

    def handler(m: Message) -> None:
        failed.set()
        raise RuntimeError("try later")

    with Running(Worker(q, handler, retry_backoff=30)):
        failed.wait(10)
        wait_until(lambda: q.stats().delayed == 1)
    (m,) = q.peek(source="delayed")
    assert m.deadline is not None and m.deadline - time.time() > 25
    assert m.last_error == "RuntimeError: try later"


def test_heartbeat_keeps_a_long_handler_s_message(make_queue) -> None:
    q = make_queue(visibility_timeout=0.3, bucket_seconds=1)
    q.enqueue("3.0")
    calls: list[str] = []
    other: list[str] = []

    def slow(m: Message) -> None:
        calls.append(m.id)
        time.sleep(3.0)  # 10x the visibility timeout

    thief = Worker(q, lambda m: other.append(m.id))
    with Running(Worker(q, slow)):
        wait_until(lambda: calls)  # the thief starts once the slow handler holds the message
        with Running(thief):  # and it reaps every second
            wait_until(lambda: q.stats().processing == 0, timeout=15)
    assert calls == ["1"] and other == []
    assert q.stats() .waiting == 0 and q.peek(source="dead") == []


def test_without_heartbeat_the_message_is_redelivered(make_queue) -> None:
    q = make_queue(visibility_timeout=0.3, bucket_seconds=1)
    q.enqueue("x")
    started = threading.Event()
    other: list[int] = []

    def slow(m: Message) -> None:
        started.set()
        time.sleep(2.5)

    with Running(Worker(q, slow, heartbeat=False)):
        started.wait(10)
        with Running(Worker(q, lambda m: other.append(m.receives))):
            wait_until(lambda: other, timeout=10)
    assert other == [2]


def test_queues_are_served_in_priority_order(make_queue) -> None:
    high, low = make_queue("high"), make_queue("low")
    low.enqueue_many([f"low{i}" for i in range(50)])
    high.enqueue_many([f"high{i}" for i in range(50)])
    order: list[str] = []
    Worker([high, low], lambda m: order.append(m.text)).run(burst=True)
    assert order == [f"high{i}" for i in range(50)] + [f"low{i}" for i in range(50)]


def test_reap_on_start_recovers_expired_but_never_live_work(make_queue) -> None:
    q = make_queue(bucket_seconds=1)
    q.enqueue_many(["expired", "live"])
    expired = q.claim(visibility_timeout=0.05)
    live = q.claim(visibility_timeout=60)
    assert expired and live
    time.sleep(0.1)  # let the first deadline pass (nothing else polls)
    seen: list[str] = []
    Worker(q, lambda m: seen.append(m.text)).run(burst=True)
    assert seen == ["expired"]
    assert live.ack() is True  # still owned by its original holder


def test_stop_lets_in_flight_work_finish(q: Queue) -> None:
    q.enqueue_many(["a", "b", "c"])
    started, proceed = threading.Event(), threading.Event()
    done: list[str] = []

    def handler(m: Message) -> None:
        started.set()
        proceed.wait(10)
        done.append(m.text)

    w = Worker(q, handler, grace_period=10)
    t = threading.Thread(target=w.run)
    t.start()
    started.wait(10)
    w.stop()
    proceed.set()
    t.join(15)
    assert not t.is_alive() and done == ["a"]
    assert q.stats().processing == 0
    assert sorted(m.text for m in q.peek()) == ["b", "c"]  # never started: given back at once


def test_grace_period_over_releases_what_is_left(q: Queue) -> None:
    q.enqueue("stuck")
    started = threading.Event()

    def handler(m: Message) -> None:
        started.set()
        time.sleep(5)

    w = Worker(q, handler, grace_period=0.3)
    t = threading.Thread(target=w.run)
    t.start()
    started.wait(10)
    w.stop()
    t.join(4)
    assert not t.is_alive(), "run() did not return after the grace period"
    (m,) = q.peek()
    assert m.text == "stuck" and q.stats().processing == 0


def test_the_decorator_builds_a_worker(q: Queue) -> None:
    @q.worker(concurrency=2)
    def handle(m: Message) -> None:
        pass

    assert isinstance(handle, Worker) and handle.concurrency == 2 and handle.queues == [q]
    q.enqueue("x")
    handle.run(burst=True)
    assert q.length() == 0


def test_the_decorator_works_without_parentheses(q: Queue) -> None:
    @q.worker
    def handle(message) -> None:  # type: ignore[no-untyped-def]
        pass

    assert isinstance(handle, Worker) and handle.queues == [q]


def test_an_async_handler_is_refused_not_acked_unrun(q: Queue) -> None:
    async def handle(message) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("never awaited")

    with pytest.raises(InvalidArgument, match="async function"):
        Worker(q, handle)
    with pytest.raises(InvalidArgument, match="async function"):
        q.worker(concurrency=2)(handle)


@pytest.mark.parametrize("kw", [{"concurrency": 0}, {"retry_backoff": -1}, {"grace_period": "x"},
                                {"visibility_timeout": 0}])
def test_bad_worker_options(q: Queue, kw: dict) -> None:
    with pytest.raises(InvalidArgument):
        Worker(q, lambda m: None, **kw)


def test_eviction_policy_warning(make_queue, r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    q = make_queue()
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        with caplog.at_level(logging.WARNING, logger="keyqueue.worker"):
            Worker(q, lambda m: None).run(burst=True)
    finally:
        r.config_set("maxmemory-policy", "noeviction")
    assert any("allkeys-lru" in rec.getMessage() and "noeviction" in rec.getMessage()
               for rec in caplog.records)


def test_log_lines_name_queue_id_and_receives(make_queue, caplog: pytest.LogCaptureFixture) -> None:
    q = make_queue("mail", max_receives=1)
    q.enqueue("fine")
    q.enqueue("bad")

    def handler(m: Message) -> None:
        if m.text == "bad":
            raise KeyError("missing field")

    with caplog.at_level(logging.DEBUG, logger="keyqueue.worker"):
        Worker(q, handler).run(burst=True)
    lines = [rec.getMessage() for rec in caplog.records]
    assert "claimed queue=mail id=1 receives=1" in lines
    assert "acked queue=mail id=1 receives=1" in lines
    assert any(line.startswith("dead-lettered queue=mail id=2 receives=1 after KeyError")
               for line in lines)
    assert all("\n" not in line for line in lines)


def test_an_idle_worker_costs_about_one_command_a_second(q: Queue, r: redis.Redis) -> None:
    w = Worker(q, lambda m: None, reap_on_start=False)
    with Running(w):
        time.sleep(0.5)  # started and waiting
        r.config_resetstat()
        t0 = time.monotonic()
        time.sleep(6)
        stats = r.info("commandstats")
        elapsed = time.monotonic() - t0
    sent = stats.get("cmdstat_evalsha", {}).get("calls", 0) + stats.get("cmdstat_blpop", {}).get("calls", 0)
    reaps = 6  # the worker also reaps its queue every second (one script call each)
    assert sent <= elapsed + reaps + 3, f"{sent} commands in {elapsed:.1f}s"
