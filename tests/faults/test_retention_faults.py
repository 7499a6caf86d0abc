"""Retention under faults: worker processes SIGKILLed while sweeps run, and Redis restarted
without persistence in the middle of a sweep. Expiry may delete only what reached its
retention; everything else is handled, and the queue, its workers and reapers go on."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Iterator

import pytest
import redis

from keyqueue import Queue, Reaper, Worker
from keyqueue.server import RedisServer

from ..support.handlers import DONE, PIDS, STARTED
from ..support.helpers import wait_until
from ..support.processes import Procs
from ..support.workers import Running
from .test_processes import ONE_MODE

RETENTION = 2.0


@ONE_MODE
def test_workers_sigkilled_every_second_lose_nothing_younger_than_retention(
    redis_server: RedisServer, r: redis.Redis, procs: Procs, scripting: bool
) -> None:
    """A steady producer, a reaper sweeping, and every second the worker process that began
    the latest message SIGKILLed (its supervisor starts another). A message held past its
    retention by a killed worker expires at its deadline, one left waiting that long (no
    process up) at a claim or sweep; the rest is handled. Each id
    is watched: one gone without being handled must have gone at an age of retention or
    more (its enqueue time is taken before the call, so the bound never errs)."""
    q = Queue("q", client=r, scripting=scripting, retention=RETENTION, visibility_timeout=3, bucket_seconds=1)
    supervisor = procs.worker(redis_server.url, "in_process", "-c", "2", "--processes", "2", "--grace", "5")
    reaper = procs.spawn(redis_server.url, "reaper", "q", "--interval", "0.2")
    enqueued: dict[str, float] = {}  # id -> time.time() just before its enqueue
    gone: dict[str, float] = {}  # id -> when it was first seen without its item hash
    producing, watching = threading.Event(), threading.Event()
    producing.set()
    watching.set()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def produce() -> None:
        mine = Queue("q", client=redis.Redis(port=redis_server.port), scripting=scripting)
        i = 0
        while producing.is_set():
            t = time.time()
            m = mine.enqueue(f"0.{3 + i % 3}")  # handlers of 0.3 to 0.5 s
            with lock:
                enqueued[m] = t
            i += 1
            time.sleep(0.1)

    def watch() -> None:
        client = redis.Redis(port=redis_server.port)
        while watching.is_set():
            with lock:
                ids = [i for i in enqueued if i not in gone]
            with client.pipeline(transaction=False) as pipe:
                for i in ids:
                    pipe.exists(f"kq:{{q}}:item:{i}")
                found = pipe.execute()
            now = time.time()
            gone.update((i, now) for i, there in zip(ids, found) if not there)
            time.sleep(0.05)

    def guarded(fn):  # type: ignore[no-untyped-def]
        def run() -> None:
            try:
                fn()
            except BaseException as e:  # reported by the test
                errors.append(e)

        return run

    threads = [threading.Thread(target=guarded(f), daemon=True) for f in (produce, watch)]
    for t in threads:
        t.start()
    killed: set[int] = set()
    try:
        wait_until(lambda: r.llen(STARTED) >= 1, timeout=30)
        for _ in range(6):
            victim = int(r.hget(PIDS, r.lindex(STARTED, -1)))  # one that began a message lately
            if victim not in killed:
                killed.add(victim)
                try:
                    os.kill(victim, signal.SIGKILL)
                except ProcessLookupError:  # (it ended meanwhile)
                    pass
            time.sleep(1)
        producing.clear()
        threads[0].join(10)
        # what the victims held comes back or expires at its deadline; the rest is handled
        wait_until(lambda: (s := q.stats()).waiting + s.processing + s.delayed == 0, timeout=40)
        wait_until(lambda: set(enqueued) <= set(gone))
    finally:
        producing.clear()
        watching.clear()
        for t in threads:
            t.join(10)
    assert not errors, errors
    assert len(killed) >= 3 and len(enqueued) >= 40
    handled = {i.decode() for i in r.hkeys(DONE)}
    # (less a millisecond or so: the age is counted in whole ms)
    lost = {i: gone[i] - enqueued[i] for i in enqueued if i not in handled and gone[i] - enqueued[i] < RETENTION - 0.01}
    assert not lost, f"gone unhandled before their retention (id: age): {lost}"
    expired = q.counters()["expired"]
    assert len(set(enqueued) - handled) <= expired  # each unhandled one was expired, not lost
    assert handled and expired > 0  # both happened: the sweeps ran against the kills
    for p in (supervisor, reaper):
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0, procs.log(p)
    assert q.check().consistent


@pytest.fixture
def volatile() -> Iterator[RedisServer]:
    """A server of this test's own (it is restarted): no persistence, so a restart empties it."""
    with RedisServer() as server:
        yield server


def test_redis_restarted_without_persistence_mid_sweep(
    volatile: RedisServer, scripting: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A backlog expiring under a Worker and a Reaper when Redis restarts empty: neither
    raises nor stops, the queue's settings come back with its next enqueue, and afterwards
    young messages are handled and expiring ones swept as before."""
    r = redis.Redis(port=volatile.port)
    q = Queue("q", url=volatile.url, scripting=scripting, retention=2, bucket_seconds=1)
    backlog = 30_000
    for _ in range(backlog // 5000):
        q.enqueue_many(["old"] * 5000)
    first = time.time()
    wait_until(lambda: time.time() - first > 2.2, timeout=5)  # the backlog has expired
    handled: list[str] = []
    reaper = Reaper(["q"], url=volatile.url, interval=0.2, scripting=scripting)
    raised: list[threading.ExceptHookArgs] = []
    hook, threading.excepthook = threading.excepthook, raised.append
    consumer = Queue("q", url=volatile.url, scripting=scripting)  # its settings from the hash
    worker = Worker(consumer, lambda m: handled.append(m.text), concurrency=2)
    try:
        reaper.start()
        with Running(worker):
            wait_until(lambda: int(r.hget("kq:{q}:counters", "expired") or 0) > 0, timeout=20)
            volatile.restart()  # in the middle of the sweep (or just after it, on a slow machine)
            assert r.llen("kq:{q}:queue") == 0  # the backlog is gone with it

            def served() -> bool:  # (the worker may still be backing off from the outage)
                q.enqueue("probe")  # (the settings are restored by whichever process comes first)
                return "probe" in handled

            wait_until(served, timeout=30, interval=0.3)
            assert float(r.hget("kq:{q}:config", "retention") or 0) == 2
            young = q.enqueue_many(["young"] * 50)
            for _ in range(5):
                q.enqueue("late", delay=8)  # expires before its delay ends
            wait_until(lambda: handled.count("young") == len(young), timeout=30)
            wait_until(lambda: q.stats().delayed == 0 and q.counters()["expired"] >= 5, timeout=30)
            passes = reaper.passes
            wait_until(lambda: reaper.passes > passes + 2, timeout=15)  # still reaping
        assert "late" not in handled and "old" not in handled  # expired before the worker began
        s = q.stats()
        assert s.waiting + s.processing + s.delayed == 0
        assert q.check().consistent
    finally:
        reaper.shutdown()
        threading.excepthook = hook
        r.close()
    assert not raised, [f"{a.exc_type.__name__}: {a.exc_value}" for a in raised]
    escaped = [rec for rec in caplog.records if rec.name.startswith("apscheduler") and rec.levelno >= 40]
    assert not escaped, [rec.getMessage() for rec in escaped]  # a reap pass that raised
