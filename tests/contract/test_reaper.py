"""The Reaper daemon: APScheduler job over named queues or every queue under a prefix."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import redis

from keyqueue import InvalidArgument, Queue, Reaper
from keyqueue.server import free_port

from ..support.helpers import FakeClock, wait_until


def test_background_reaper_recovers_every_registered_queue(redis_server, r: redis.Redis, scripting: bool) -> None:
    a = Queue("a", client=r, scripting=scripting, bucket_seconds=1)
    b = Queue("b", client=r, scripting=scripting, bucket_seconds=1)
    for q in (a, b):
        q.enqueue("x")
        assert q.claim(visibility_timeout=0.2)
    b.enqueue("later", delay=0.3)
    reaper = Reaper(url=redis_server.url, scripting=scripting, interval=0.1)
    reaper.start()
    try:
        wait_until(lambda: a.length() == 1 and b.length() == 2)
    finally:
        reaper.shutdown()
    assert reaper.passes >= 1 and {q.name for q in reaper.queues()} == {"a", "b"}


def test_named_queues_and_queue_objects(redis_server, r: redis.Redis, scripting: bool) -> None:
    clock = FakeClock()
    mine = Queue("mine", client=r, scripting=scripting, clock=clock)
    other = Queue("other", client=r, scripting=scripting, clock=clock)
    for q in (mine, other):
        q.enqueue("x")
        q.claim(visibility_timeout=1)
    clock.advance(2)
    results = Reaper([mine], interval=1).reap_once()
    assert set(results) == {"mine"} and results["mine"].requeued == 1
    assert other.stats().processing == 1
    by_name = Reaper(["other"], client=r, scripting=scripting).reap_once()
    assert set(by_name) == {"other"}


def test_each_pass_reads_the_settings_again(redis_server, r: redis.Redis, scripting: bool) -> None:
    clock = FakeClock()
    q = Queue("q", client=r, scripting=scripting, clock=clock, max_receives=5)
    q.enqueue("x")
    q.claim(visibility_timeout=1)
    reaper = Reaper([q])
    Queue("q", client=r, scripting=scripting, max_receives=1)  # another process lowers the limit
    clock.advance(2)
    assert reaper.reap_once()["q"].dead_lettered == 1


def test_several_reapers_never_deliver_twice(redis_server, r: redis.Redis, scripting: bool) -> None:
    clock = FakeClock()
    q = Queue("q", client=r, scripting=scripting, clock=clock, bucket_seconds=1)
    q.enqueue_many([str(i) for i in range(3000)])
    q.claim_many(3000, visibility_timeout=1)
    clock.advance(5)
    totals: list[int] = []
    lock = threading.Lock()

    def reap() -> None:
        res = Reaper([Queue("q", url=redis_server.url, scripting=scripting, clock=clock)]).reap_once()["q"]
        with lock:
            totals.append(res.requeued)

    threads = [threading.Thread(target=reap) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sum(totals) == 3000 and q.length() == 3000
    assert r.llen("kq:{q}:queue") == 3000 and q.stats().processing == 0


def test_run_blocks_until_shutdown(redis_server, scripting: bool) -> None:
    reaper = Reaper(url=redis_server.url, scripting=scripting, interval=0.05)
    t = threading.Thread(target=reaper.run)
    t.start()
    wait_until(lambda: reaper.passes >= 3)
    reaper.shutdown()
    t.join(10)
    assert not t.is_alive()


def test_an_unreachable_redis_is_retried_with_the_outage_waits(caplog: pytest.LogCaptureFixture) -> None:
    reaper = Reaper(url=f"redis://:sekret@127.0.0.1:{free_port()}/0")
    with caplog.at_level(logging.WARNING, logger="keyqueue.reaper"):
        for _ in range(8):
            assert reaper.reap_once() == {}
    lines = [rec.getMessage() for rec in caplog.records]
    assert [float(line.rsplit("retrying in ", 1)[1].rstrip("s")) for line in lines] == [
        0.1,
        0.2,
        0.4,
        0.8,
        1.6,
        3.2,
        5.0,
        5.0,
    ]
    assert all(rec.levelno == logging.WARNING for rec in caplog.records) and not any("sekret" in x for x in lines)
    assert reaper.refused is None


def test_a_refusal_before_the_first_pass_stops_run(redis_server, r: redis.Redis) -> None:
    """A wrong password or a user the ACL denies is a configuration error: run() raises it
    at once, where an unreachable Redis is waited for."""
    r.acl_setuser("app", enabled=True, passwords=["+right"], keys=["other:*"], commands=["+@all"])
    Queue("q", client=r).enqueue("x")
    try:
        for user, error in (
            ("app:wrong", redis.AuthenticationError),
            ("app:right", redis.exceptions.NoPermissionError),
        ):
            reaper = Reaper(url=f"redis://{user}@127.0.0.1:{redis_server.port}/0", interval=0.05)
            outcome: list[BaseException] = []
            t = threading.Thread(target=lambda: outcome.append(pytest.raises(error, reaper.run).value))
            t.start()
            t.join(30)
            assert not t.is_alive() and isinstance(outcome[0], error) and reaper.passes == 0
    finally:
        r.acl_deluser("app")


def test_bad_interval() -> None:
    with pytest.raises(InvalidArgument):
        Reaper(interval=0)


def test_reaper_warns_about_eviction(
    redis_server, r: redis.Redis, caplog: pytest.LogCaptureFixture, scripting: bool
) -> None:
    import logging

    Queue("q", client=r, scripting=scripting).enqueue("x")
    r.config_set("maxmemory-policy", "volatile-lru")
    try:
        with caplog.at_level(logging.WARNING, logger="keyqueue.reaper"):
            Reaper(url=redis_server.url, scripting=scripting).reap_once()
    finally:
        r.config_set("maxmemory-policy", "noeviction")
    assert any("volatile-lru" in rec.getMessage() for rec in caplog.records)


def test_a_corrupt_queue_does_not_stop_the_pass(
    redis_server, r: redis.Redis, caplog: pytest.LogCaptureFixture, scripting: bool
) -> None:
    import logging

    good = Queue("good", client=r, scripting=scripting, bucket_seconds=1)
    good.enqueue("x")
    assert good.claim(visibility_timeout=0.05)
    Queue("bad", client=r, scripting=scripting).enqueue("x")
    r.hset("kq:{bad}:config", "visibility_timeout", "soon")
    wait_until(lambda: time.time() > good.peek(source="processing")[0].deadline)  # type: ignore[operator]
    with caplog.at_level(logging.ERROR, logger="keyqueue.reaper"):
        every = Reaper(client=r, scripting=scripting).reap_once()  # finds both through the registry
    assert "bad" not in every and every["good"].requeued == 1
    bad = Queue("good", client=r, scripting=scripting)  # a Queue object whose config turns bad between passes
    r.hset("kq:{good}:config", "max_receives", "many")
    assert Reaper([bad]).reap_once() == {}
    messages = [rec.getMessage() for rec in caplog.records]
    assert any("queue=bad" in m and "kq:{bad}:config" in m for m in messages)


def test_an_idle_reaper_is_quiet_and_logs_what_passes_move(
    redis_server, r: redis.Redis, scripting: bool, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    q = Queue("q", client=r, scripting=scripting, bucket_seconds=1)
    q.enqueue("x")
    reaper = Reaper([q], interval=0.05)
    caplog.set_level(logging.DEBUG)

    def lines() -> list[str]:
        return [
            rec.getMessage()
            for rec in caplog.records
            if rec.levelno >= logging.INFO and rec.name.startswith(("keyqueue.reaper", "apscheduler"))
        ]

    reaper.start()
    try:
        wait_until(lambda: reaper.passes >= 5)
        assert lines() == []  # no APScheduler "Running job ..." / "executed successfully"
        assert q.claim(visibility_timeout=0.05)
        wait_until(lambda: q.length() == 1)
        reaper.summary_interval = 0  # the next pass logs the summary
        wait_until(lambda: len(lines()) >= 2)
    finally:
        reaper.shutdown()
    assert lines()[0] == "reaped queue=q requeued=1 dead_lettered=0 delayed_released=0 expired=0"
    assert lines()[1].startswith("reaper: ") and "passes in the last" in lines()[1]
    assert lines()[1].endswith("requeued=1 dead_lettered=0 delayed_released=0 expired=0")


def test_a_pass_longer_than_the_interval_is_coalesced_without_a_warning(
    redis_server, r: redis.Redis, scripting: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A busy machine can make a pass outlast the interval: the passes that fell due
    meanwhile are skipped (the next covers them), not warned about every interval."""
    Queue("q", client=r, scripting=scripting).enqueue("x")
    reaper = Reaper(["q"], url=redis_server.url, scripting=scripting, interval=0.05)
    listed = reaper.queues

    def slow_queues() -> list[Queue]:
        time.sleep(0.3)  # a pass of six intervals
        return listed()

    reaper.queues = slow_queues  # type: ignore[method-assign]
    caplog.set_level(logging.WARNING)
    reaper.start()
    try:
        wait_until(lambda: reaper.passes >= 3, timeout=30)
    finally:
        reaper.shutdown()
    assert not [rec.getMessage() for rec in caplog.records if rec.name.startswith("apscheduler")]
