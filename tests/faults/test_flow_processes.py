"""Rate limits and in-flight caps across real `keyqueue worker` processes (threads and
asyncio side by side), in both modes: they hold for the whole queue, a killed worker's
slots come back, and `keyqueue config` changes them under running workers. Kept small: the
machine running the suite may have two cores."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter

import redis

from keyqueue import Queue

from ..support.handlers import CLAIMS, DONE, PEAK, STARTED
from ..support.helpers import ROOT, wait_until
from ..support.processes import Procs

VISIBILITY = 30.0


def claim_windows(r: redis.Redis, window_ms: int) -> Counter[int]:
    """Claims per rate-limit window of the server's clock (a claim's time is its deadline
    minus the visibility timeout)."""
    out: Counter[int] = Counter()
    for entry in r.lrange(CLAIMS, 0, -1):
        deadline = float(entry.split()[1])
        out[round((deadline - VISIBILITY) * 1000) // window_ms] += 1
    return out


def stop(procs: Procs, *ps: subprocess.Popen[bytes]) -> None:
    """SIGTERM, once each has its signal handlers (it logged its options: on a busy machine
    one may still be starting when the others have done the work), and exit 0."""
    for p in ps:
        wait_until(lambda p=p: "worker options:" in procs.log(p), timeout=60)
    for p in ps:
        p.send_signal(signal.SIGTERM)
    for p in ps:
        assert p.wait(30) == 0, procs.log(p)


def test_a_rate_limit_holds_across_sync_and_async_worker_processes(redis_server, r: redis.Redis, procs) -> None:
    q = Queue("q", client=r, scripting=procs.mode == [], rate_limit="20/1", visibility_timeout=VISIBILITY)
    q.enqueue_many([f"m{i}" for i in range(70)])
    started = time.monotonic()
    workers = [
        procs.worker(redis_server.url, "tests.support.handlers:stamp", "-c", "4"),
        procs.worker(redis_server.url, "tests.support.handlers:stamp", "-c", "4"),
        procs.worker(redis_server.url, "tests.support.aio_handlers:stamp", "-c", "8"),
    ]
    wait_until(lambda: r.hlen(DONE) == 70, timeout=60)
    took = time.monotonic() - started
    stop(procs, *workers)
    windows = claim_windows(r, 1000)
    assert sum(windows.values()) == 70 and max(windows.values()) <= 20, sorted(windows.items())
    assert len(windows) >= 4  # 70 claims need four windows at least
    # About 3.5 s of windows once the processes run; generous for their start on a busy machine.
    assert took < 45
    assert q.counters()["throttled"] > 0


def test_max_in_flight_holds_across_six_busy_processes(redis_server, r: redis.Redis, procs) -> None:
    q = Queue("q", client=r, scripting=procs.mode == [], max_in_flight=3)
    q.enqueue_many([f"m{i}" for i in range(40)])
    workers = [
        procs.worker(redis_server.url, f"tests.support.{kind}:busy", "-c", "2")
        for kind in ("handlers", "aio_handlers") * 3
    ]
    wait_until(lambda: r.hlen(DONE) == 40, timeout=90)
    stop(procs, *workers)
    peaks = [int(x) for x in r.lrange(PEAK, 0, -1)]
    assert len(peaks) == 40 and max(peaks) <= 3, peaks
    assert max(peaks) >= 2  # (the cap, not a lone worker, kept it there)


def test_a_killed_workers_slots_come_back_after_its_visibility_timeout(redis_server, r: redis.Redis, procs) -> None:
    # (6 s: the victim's heartbeats, due every 2 s, keep both held until the kill even when a
    # busy machine runs its loop seconds late; an expired one would be taken back before)
    q = Queue("q", client=r, scripting=procs.mode == [], max_in_flight=2, visibility_timeout=6, bucket_seconds=1)
    q.enqueue_many(["60", "60", "0", "0"])  # the victim hangs on the first two
    victim = procs.worker(redis_server.url, "slow", "-c", "2")
    # (both claims over: the script-free mode counts a claim half-way in processing already,
    # before it writes the deadline)
    wait_until(
        lambda: r.llen(STARTED) >= 1 and [m.deadline is not None for m in q.peek(source="processing")] == [True, True]
    )
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    held = q.peek(source="processing")
    assert len(held) == 2  # both slots are the dead worker's
    got = q.claim(wait=20)
    assert got is not None
    assert got.deadline - 6 >= max(m.deadline for m in held)  # not before they expired


def test_a_limit_changed_with_keyqueue_config_applies_to_running_workers(redis_server, r: redis.Redis, procs) -> None:
    q = Queue("q", client=r, scripting=procs.mode == [], rate_limit="1/3600", visibility_timeout=VISIBILITY)
    q.enqueue_many([f"m{i}" for i in range(5)])
    worker = procs.worker(redis_server.url, "tests.support.handlers:stamp", "-c", "2")
    wait_until(lambda: r.hlen(DONE) == 1, timeout=30)
    wait_until(lambda: q.counters()["throttled"] >= 2, timeout=30)  # its claims were refused since
    assert r.hlen(DONE) == 1  # (a window of an hour)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "keyqueue",
            "--url",
            redis_server.url,
            *procs.mode,
            "config",
            "q",
            "--set",
            "rate_limit=",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    changed = time.monotonic()
    wait_until(lambda: r.hlen(DONE) == 5, timeout=30)
    assert time.monotonic() - changed < 2 + 3  # within about 2 s (3 more for a busy machine)
    stop(procs, worker)
