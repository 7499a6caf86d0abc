"""What only keyqueue.Worker (threads) does, or is held to: it refuses an ``async def``
handler, run() in the main thread holds SIGINT/SIGTERM (a second one releases what is held
at once), an idle worker sends about one command a second, and fast handlers get their next
batch claimed while they run (given back unstarted when the worker stops). The rest of the worker
contract runs on both faces: test_worker.py, test_worker_outcomes.py."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis

from keyqueue import InvalidArgument, Message, Queue, Worker
from keyqueue.worker.rules import MAX_BATCH

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


def test_fast_handlers_get_their_next_batch_claimed_while_they_run(r: redis.Redis, scripting: bool) -> None:
    """While one batch of fast handlers runs, the next is claimed already: held messages
    exceed what one claim takes. Every message is still handled and acked once."""
    q = Queue("q", client=r, scripting=scripting)
    q.enqueue_many(["x"] * 300 + ["look"] + ["x"] * 300)
    handled: list[str] = []

    def handle(m: Message) -> None:
        if m.text == "look":  # the batch it is in, plus the one claimed ahead
            wait_until(lambda: q.stats().processing > MAX_BATCH, timeout=30)
        handled.append(m.id)

    Worker(q, handle).run(burst=True)
    assert len(handled) == len(set(handled)) == 601
    s = q.stats()
    assert (s.waiting, s.processing) == (0, 0) and q.counters()["acked"] == 601


def test_messages_claimed_ahead_go_back_unstarted_when_the_worker_stops(r: redis.Redis, scripting: bool) -> None:
    q = Queue("q", client=r, scripting=scripting, visibility_timeout=60)
    q.enqueue_many(["x"] * 300 + ["stop"] + ["x"] * 300)
    handled: list[str] = []
    w: Worker

    def handle(m: Message) -> None:
        if m.text == "stop":  # once the next batch is claimed
            wait_until(lambda: q.stats().processing > MAX_BATCH, timeout=30)
            w.stop()
        handled.append(m.id)

    w = Worker(q, handle)
    w.run()
    # Right away, not after the 60 s deadline: what was claimed but not started waits again,
    # and what was handled is acked.
    s = q.stats()
    assert s.processing == 0 and len(handled) == len(set(handled))
    assert s.waiting == 601 - len(handled) and q.counters()["acked"] == len(handled)
