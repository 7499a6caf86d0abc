"""Schedules fired by many processes at once: reapers and workers, one of them SIGKILLed
again and again, give one message per fire time and miss none."""

from __future__ import annotations

import signal
import time

import pytest
import redis

from keyqueue import Queue
from keyqueue.server import RedisServer

from ..support.handlers import SCHEDULED
from ..support.helpers import wait_until
from ..support.processes import Procs

pytestmark = pytest.mark.slow


def test_reapers_and_workers_fire_each_fire_time_once(
    redis_server: RedisServer, r: redis.Redis, procs: Procs, scripting: bool
) -> None:
    q = Queue("q", client=r, scripting=scripting)
    made = q.schedule("tick", every=1, catch_up="all", body="tick")
    assert made.next_fire is not None
    reapers = [procs.spawn(redis_server.url, "reaper", "--interval", "1") for _ in range(3)]
    workers = [procs.worker(redis_server.url, "scheduled") for _ in range(2)]
    for p in [*reapers, *workers]:  # running, with their signal handlers in place
        wait_until(lambda: " INFO " in procs.log(p), timeout=60, interval=0.2)
    # One more reaper, SIGKILLed every two seconds and started again.
    victim = procs.spawn(redis_server.url, "reaper", "--interval", "0.3")
    end = time.monotonic() + 10
    while time.monotonic() < end:
        time.sleep(2)
        victim.kill()
        victim.wait(10)
        victim = procs.spawn(redis_server.url, "reaper", "--interval", "0.3")
    victim.kill()
    victim.wait(10)
    for p in [*reapers, *workers]:
        p.send_signal(signal.SIGTERM)
    codes = [p.wait(30) for p in [*reapers, *workers]]
    assert codes == [0] * 5, [procs.log(p) for p in [*reapers, *workers]]
    fired = q.schedules()[0].fired
    wait_until(lambda: r.llen(SCHEDULED) + q.length() == fired, timeout=30)
    times = sorted([float(t) for t in r.lrange(SCHEDULED, 0, -1)] + [m.scheduled_for or 0 for m in q.peek(1000)])
    assert len(times) == len(set(times)) == fired >= 8
    assert times[0] == made.next_fire
    assert [round(b - a, 3) for a, b in zip(times, times[1:])] == [1.0] * (len(times) - 1)  # none missed


def test_script_free_fires_go_on_through_a_burst_of_other_schedules_writes(redis_server, r: redis.Redis) -> None:
    """In the script-free mode every fire WATCHes the hashes all the queue's schedules share,
    so each write of another schedule undoes it: a look tries again rather than leave its
    fires to the next look, and fires go on while a deploy upserts schedules back to back."""
    import threading

    q = Queue("burst", client=r, scripting=False)
    start = time.time() + 1
    for i in range(20):
        q.schedule(f"tick{i}", every=1, body="t", start=start)
    writing = threading.Event()
    done = threading.Event()

    def deploy() -> None:
        writer = Queue("burst", url=redis_server.url, scripting=False)
        writing.set()
        n = 0
        while not done.is_set() or n < 500:
            writer.schedule(f"hourly{n}", every=3600, body="h")
            n += 1
        writer.client.close()

    t = threading.Thread(target=deploy)
    t.start()
    writing.wait()
    while time.time() < start + 0.5:
        time.sleep(0.05)
    firer = Queue("burst", url=redis_server.url, scripting=False)
    try:
        before = q.stats().waiting
        deadline = time.monotonic() + 30
        while q.stats().waiting == before and time.monotonic() < deadline:
            firer.reap()  # (each look's MULTI meets the deploy's writes)
            time.sleep(0.05)
        assert t.is_alive() and q.stats().waiting > before  # fired while the deploy went on
    finally:
        done.set()
        t.join()
        firer.client.close()
