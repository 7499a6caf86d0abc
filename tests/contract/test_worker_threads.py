"""What only keyqueue.Worker (threads) does, or is held to: it refuses an ``async def``
handler, run() in the main thread holds SIGINT/SIGTERM (a second one releases what is held
at once), and an idle worker sends about one command a second. The rest of the worker
contract runs on both faces: test_worker.py, test_worker_outcomes.py."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis

from keyqueue import InvalidArgument, Queue, Worker

from ..support.helpers import wait_until
from ..support.workers import Running


def test_an_async_handler_is_refused_not_acked_unrun(r: redis.Redis, scripting: bool) -> None:
    q = Queue("q", client=r, scripting=scripting)

    async def handle(message) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("never awaited")

    with pytest.raises(InvalidArgument, match="async function"):
        Worker(q, handle)
    with pytest.raises(InvalidArgument, match="async function"):
        q.worker(concurrency=2)(handle)


@pytest.mark.parametrize(
    "sig, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, SystemExit)], ids=["SIGINT", "SIGTERM"]
)
def test_a_second_signal_releases_what_is_held_at_once(
    r: redis.Redis, scripting: bool, sig: signal.Signals, raised: type
) -> None:
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=60)
    q.enqueue_many(["a", "b", "c"])
    proceed = threading.Event()
    started: list[str] = []
    w = Worker(q, lambda m: (started.append(m.id), proceed.wait(30)), concurrency=2, grace_period=60)

    def signal_twice() -> None:
        try:  # run() holds the signal handlers from before the handlers start until it returns
            wait_until(lambda: len(started) == 2)
            os.kill(os.getpid(), sig)
            wait_until(w._stopping.is_set)
            os.kill(os.getpid(), sig)
        except BaseException:
            w.stop()
            proceed.set()
            raise

    threading.Thread(target=signal_twice, daemon=True).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(raised) as info:
            w.run()  # in the main thread, so it installs its signal handlers
    finally:
        proceed.set()
    assert time.monotonic() - t0 < 10
    if sig == signal.SIGTERM:
        assert info.value.code == 143
    s = q.stats()  # both held messages back at once, not after their 60 s deadline
    assert (s.waiting, s.processing, s.delayed) == (3, 0, 0)
    assert sorted(m.receives for m in q.peek()) == [0, 1, 1]


def test_an_idle_worker_costs_about_one_command_a_second(r: redis.Redis, scripting: bool) -> None:
    q = Queue("q", client=r, scripting=scripting)
    with Running(Worker(q, lambda m: None, reap_on_start=False)):
        wait_until(lambda: r.info("clients")["blocked_clients"] >= 1)  # started and waiting
        r.config_resetstat()
        t0 = time.monotonic()
        time.sleep(6)
        stats = r.info("commandstats")
        elapsed = time.monotonic() - t0
    sent = stats.get("cmdstat_evalsha", {}).get("calls", 0) + stats.get("cmdstat_blpop", {}).get("calls", 0)
    reaps = 6  # the worker also reaps its queue every second (one script call each)
    assert sent <= elapsed + reaps + 3, f"{sent} commands in {elapsed:.1f}s"


def run_in_thread(w: Worker) -> tuple[threading.Thread, list[BaseException]]:
    """w.run() in a thread; what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            w.run()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised


def test_stuck_threads_are_replaced_until_every_thread_is_stuck_then_run_exits_3(
    r: redis.Redis, scripting: bool
) -> None:
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=60, max_receives=5)
    q.enqueue("stuck")
    started: list[str] = []
    late = threading.Event()

    def handler(m) -> None:  # type: ignore[no-untyped-def]
        started.append(m.text)
        if m.text.startswith("stuck"):
            late.wait(60)

    w = Worker(q, handler, concurrency=2, timeout=1, retry_backoff=60)
    thread, raised = run_in_thread(w)
    try:
        wait_until(lambda: q.stats().delayed == 1, timeout=15)  # the first stuck handler, failed
        q.enqueue_many([f"fast{i}" for i in range(5)])
        wait_until(lambda: sum(t.startswith("fast") for t in started) == 5 and q.stats().processing == 0)
        assert thread.is_alive() and q.length() == 0  # served on: by the other thread and a new one
        q.enqueue("stuck again")  # a second stuck thread: every thread (2) is stuck
        thread.join(20)
        assert not thread.is_alive()
    finally:
        late.set()
    assert len(raised) == 1 and isinstance(raised[0], SystemExit) and raised[0].code == 3
    s = q.stats()
    assert (s.waiting, s.processing, s.delayed) == (0, 0, 2)
    assert all((m.last_error or "").startswith("HandlerTimeout") for m in q.peek(source="delayed"))
    assert w.processed == 5 and w.failed == 2


def test_a_stuck_thread_s_batch_is_acked_and_given_back(r: redis.Redis, scripting: bool) -> None:
    """Fast handlers are claimed in batches (one claim takes all five of one enqueue_many):
    when the third one's thread is stuck, the two it finished are acked and the two it did
    not start go back at once; with concurrency 1, run() then raises SystemExit(3)."""
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=60)
    late = threading.Event()
    seen: list[str] = []

    def handler(m) -> None:  # type: ignore[no-untyped-def]
        seen.append(m.text)
        if m.text == "stuck":
            late.wait(60)

    w = Worker(q, handler, timeout=1, retry_backoff=60)
    q.enqueue_many(["warm"] * 20)  # (fast handlers: claims of many at once from then on)
    thread, raised = run_in_thread(w)
    try:
        wait_until(lambda: w.processed == 20)
        q.enqueue_many(["a", "b", "stuck", "c", "d"])
        thread.join(20)
        assert not thread.is_alive()
    finally:
        late.set()
    assert len(raised) == 1 and isinstance(raised[0], SystemExit) and raised[0].code == 3
    assert seen[20:] == ["a", "b", "stuck"] and w.processed == 22
    s = q.stats()
    assert (s.processing, s.delayed) == (0, 1)
    (stuck,) = q.peek(source="delayed")
    assert stuck.text == "stuck" and (stuck.last_error or "").startswith("HandlerTimeout")
    assert [(m.text, m.receives) for m in q.peek()] == [("c", 1), ("d", 1)]  # claimed, given back
