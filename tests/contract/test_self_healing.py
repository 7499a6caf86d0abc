"""Redis losing its data under running processes, a Queue made while Redis is down,
and a consumer that only claims getting expired and delayed messages back (claim reaps)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis

from keyqueue import MessageNotJSON, Queue, Reaper
from keyqueue.core.queue_core import RESTORE_SAMPLE
from keyqueue.server import RedisServer

from ..support.helpers import FakeClock, wait_until
from ..support.processes import Procs

REGISTRY = "kq:queues"
CONFIG = "kq:{q}:config"


@pytest.fixture(scope="module")
def volatile() -> Iterator[RedisServer]:
    """A server of this module's own (it is restarted): no persistence, so a restart empties it."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def vr(volatile: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=volatile.port)
    client.flushall()
    yield client
    client.close()


def test_a_restart_without_persistence_heals_registry_and_settings(
    volatile: RedisServer, vr: redis.Redis, scripting: bool
) -> None:
    producer = Queue("q", url=volatile.url, visibility_timeout=1, bucket_seconds=1, scripting=scripting)
    consumer = Queue("q", url=volatile.url, scripting=scripting)  # reads the settings
    reaper = Reaper(url=volatile.url, interval=0.2, scripting=scripting)  # every queue
    reaper.start()
    try:
        volatile.restart()
        assert vr.exists(CONFIG, REGISTRY) == 0  # everything is gone
        producer.enqueue("x")  # its reply says the config hash is missing: restored
        assert vr.smembers(REGISTRY) == {b"q"}
        assert vr.hgetall(CONFIG) == {b"visibility_timeout": b"1", b"bucket_seconds": b"1"}
        m = consumer.claim()
        assert m is not None and m.text == "x"  # claimed, never acked: the reaper must find it
        t0 = time.monotonic()
        wait_until(lambda: vr.sismember("kq:{q}:items", m.id), timeout=25)
        assert time.monotonic() - t0 < 25  # 1 s visibility restored, not the default 30 s
        assert Queue("q", url=volatile.url).settings.visibility_timeout == 1.0
    finally:
        reaper.shutdown()


def test_a_consumer_alone_restores_what_it_runs_with(volatile: RedisServer, vr: redis.Redis, scripting: bool) -> None:
    Queue("q", client=vr, max_receives=4, dedup_window=9)
    consumer = Queue("q", url=volatile.url, scripting=scripting)  # found the hash, holds it
    volatile.restart()
    assert consumer.claim() is None  # the empty claim's reply reports the loss
    assert vr.smembers(REGISTRY) == {b"q"}
    assert vr.hgetall(CONFIG) == {b"max_receives": b"4", b"dedup_window": b"9.0"}


def test_defaults_are_never_written_and_reads_create_nothing(r: redis.Redis, scripting: bool) -> None:
    plain = Queue("q", client=r, scripting=scripting)  # no settings given, no hash found
    assert plain.claim() is None and plain.reap().total == 0
    assert r.exists(REGISTRY, CONFIG) == 0  # a claim on a name nobody wrote creates nothing
    plain.enqueue("x")
    assert r.smembers(REGISTRY) == {b"q"} and r.exists(CONFIG) == 0
    r.flushdb()
    plain._core.restored_at = -1e9  # tests only: skip the once-a-second limit
    plain.enqueue("y")
    assert r.smembers(REGISTRY) == {b"q"}  # registration restored; defaults not written
    assert r.exists(CONFIG) == 0


def test_a_restore_reads_only_the_schedules_that_are_gone(r: redis.Redis, scripting: bool) -> None:
    """A queue without settings of its own has no config hash, so its writes restore once a
    second: the schedules its Queue upserted that are still there cost no read each."""
    q = Queue("q", client=r, scripting=scripting)
    for i in range(20):
        q.schedule(f"s{i}", every=3600, body=f"b{i}")
    for part in ("state", "defs", "bodies"):  # gone, as after a loss
        r.hdel(f"kq:{{q}}:schedule_{part}", "s7")
    r.zrem("kq:{q}:schedules", "s7")
    r.config_resetstat()
    q._core.restored_at = -1e9  # tests only: skip the once-a-second limit
    q.enqueue_many(["x", "y"])  # its reply reports the config hash missing
    assert r.info("commandstats")["cmdstat_hmget"]["calls"] == 3  # s7's read before it is written (its three parts)
    assert sorted(s.id for s in q.schedules()) == sorted(f"s{i}" for i in range(20))
    assert r.hget("kq:{q}:schedule_bodies", "s7") == b"b7"


def test_a_restore_checks_a_rotating_sample_of_many_schedules(r: redis.Redis, scripting: bool) -> None:
    """Nothing else found lost: each restore checks RESTORE_SAMPLE of the upserted schedules,
    the next ones each time, and all of them once one is gone."""
    q = Queue("q", client=r, scripting=scripting)
    total = RESTORE_SAMPLE + RESTORE_SAMPLE // 2
    for i in range(total):
        q.schedule(f"s{i}", every=3600, body=f"b{i}")
    gone = f"s{RESTORE_SAMPLE + 1}"  # outside the first sample
    for part in ("state", "defs", "bodies"):
        r.hdel(f"kq:{{q}}:schedule_{part}", gone)
    r.zrem("kq:{q}:schedules", gone)

    def restore() -> int:
        """What a write that finds the config hash missing runs; the HEXISTS it sent."""
        r.config_resetstat()
        q._core.restored_at = -1e9  # tests only: skip the once-a-second limit
        q._run(lambda: q._core.restore())
        return int(r.info("commandstats").get("cmdstat_hexists", {}).get("calls", 0))

    assert restore() == RESTORE_SAMPLE and r.hexists("kq:{q}:schedule_state", gone) == 0
    assert restore() == RESTORE_SAMPLE + total  # the sample found it: every one checked
    assert r.hget("kq:{q}:schedule_bodies", gone) == f"b{RESTORE_SAMPLE + 1}".encode()
    r.flushdb()  # the registration found lost too: every schedule checked at once
    assert restore() == total and len(q.schedules()) == total


def test_a_schedule_unscheduled_during_a_restore_is_not_written_back(r: redis.Redis, scripting: bool) -> None:
    """Another thread of the Queue unschedules one while a write restores them: the write
    goes through and that schedule stays gone."""
    q = Queue("q", client=r, scripting=scripting)
    for sid in ("s0", "s1", "s2"):
        q.schedule(sid, every=3600, body=sid)
    r.flushdb()
    core = q._core
    put = core.put_schedule

    def put_then_unschedule(sid: str, *args: Any, **kw: Any) -> Any:
        if sid == "s0":  # (as another thread would, between two round trips of the restore)
            core.upserted.pop("s2")
        return (yield from put(sid, *args, **kw))

    core.put_schedule = put_then_unschedule  # type: ignore[method-assign]
    q.enqueue("x")  # its reply reports the config hash missing: the restore runs
    assert sorted(s.id for s in q.schedules()) == ["s0", "s1"]
    assert q.length() == 1


def test_a_restore_never_overwrites_newer_settings(r: redis.Redis, scripting: bool) -> None:
    old = Queue("q", client=r, scripting=scripting, visibility_timeout=5, max_receives=2)
    r.flushdb()
    r.hset(CONFIG, "visibility_timeout", "60")  # another process set it after the loss
    old._run(lambda: old._core.restore())  # what a write that found the hash gone calls
    assert r.hgetall(CONFIG) == {b"visibility_timeout": b"60", b"max_receives": b"2"}


def test_flushdb_under_a_worker_process_restores_max_receives(
    redis_server, r: redis.Redis, tmp_path: Path, scripting: bool
) -> None:
    Queue("q", client=r, max_receives=2)
    procs = Procs(tmp_path, scripting)
    try:
        worker = procs.worker(redis_server.url, "fail")  # its handler always raises
        wait_until(lambda: r.info("clients")["blocked_clients"] >= 1, timeout=20)  # long-polling
        r.flushdb()
        producer = Queue("q", client=r, scripting=scripting)  # made after the loss: holds nothing
        producer.enqueue("poison")
        # The worker's claim restored max_receives=2, so the poison ends in dead letters
        # after two receives instead of being retried forever with the default (no limit).
        wait_until(lambda: Queue("q", client=r).stats().dead == 1, timeout=20)
        assert r.hget(CONFIG, "max_receives") == b"2" and r.smembers(REGISTRY) == {b"q"}
        assert worker.poll() is None
    finally:
        for p in procs.started:
            p.kill()
            p.wait()


def test_constructing_while_redis_is_down_defers_the_settings(scripting: bool) -> None:
    server = RedisServer()
    try:
        q = Queue("q", url=server.url, visibility_timeout=7, max_receives=3, scripting=scripting)  # no error
        with pytest.raises(redis.ConnectionError):
            q.enqueue("x")
        server.start()
        assert q.enqueue("x") == "1"  # the first operation that reaches Redis writes the settings
        r = redis.Redis(port=server.port)
        assert r.hgetall(CONFIG) == {b"visibility_timeout": b"7", b"max_receives": b"3"}
        assert r.smembers(REGISTRY) == {b"q"}
        m = q.claim()
        assert m is not None and m.deadline is not None and m.deadline - m.enqueued_at < 8
        r.close()
    finally:
        server.cleanup()


def test_explicit_settings_are_written_at_construction(r: redis.Redis) -> None:
    Queue("q", client=r, visibility_timeout=9)
    assert r.hget(CONFIG, "visibility_timeout") == b"9" and r.smembers(REGISTRY) == {b"q"}


def test_changing_a_setting_logs_what_it_changed(r: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    Queue("q", client=r, visibility_timeout=5, max_receives=3)
    with caplog.at_level(logging.INFO, logger="keyqueue.queue"):
        Queue("q", client=r, visibility_timeout=5)  # the same value: nothing to say
        assert not caplog.records
        Queue("q", client=r, visibility_timeout=6, max_receives=3)
    assert [rec.getMessage() for rec in caplog.records] == [
        "queue q: changed visibility_timeout 5 -> 6 in its config hash"
    ]


# -- a consumer that only claims and acks ----------------------------------------------------


def test_claim_alone_redelivers_expired_and_delayed_messages(make_queue) -> None:
    q = make_queue("q", bucket_seconds=60)  # wide buckets: each message's own deadline decides
    q.enqueue("a")
    first = q.claim(visibility_timeout=0.3)
    assert first is not None and first.text == "a"
    again = q.claim(wait=5)  # no Reaper, no Worker: the claim itself reaps
    assert again is not None and again.id == first.id and again.receives == 2
    assert again.release(delay=0.5, error="RuntimeError: later")
    t0 = time.monotonic()
    back = q.claim(wait=5)
    assert back is not None and back.id == first.id and time.monotonic() - t0 >= 0.45
    assert back.last_error == "RuntimeError: later" and back.ack()


def test_claim_reaps_a_backlog_in_bounded_steps(make_queue) -> None:
    clock = FakeClock()
    q = make_queue("q", clock=clock, bucket_seconds=1)
    q.enqueue_many([str(i) for i in range(1500)])
    assert len(q.claim_many(1500, visibility_timeout=10)) == 1500
    clock.advance(11)  # every delivery expired
    consumer = make_queue("q", clock=clock)
    got = consumer.claim_many(1)
    waiting = consumer.length() + len(got)
    assert 0 < waiting < 1500  # one claim reaped part of the backlog, not all of it
    for _ in range(10):
        consumer.claim_many(1)
    assert consumer.stats().processing == 11  # the following claims went on with the rest


def test_release_with_an_error_keeps_it(make_queue) -> None:
    q = make_queue("q")
    q.enqueue("x")
    m = q.claim()
    assert m is not None and m.release(delay=60, error="ValueError: bad input")
    (d,) = q.peek(source="delayed")
    assert d.last_error == "ValueError: bad input"
    q.enqueue("y")
    m2 = q.claim()
    assert m2 is not None and q.release(m2, error="TimeoutError: upstream")
    assert q.peek(source="waiting")[0].last_error == "TimeoutError: upstream"


def test_json_of_a_body_that_is_not_utf8_names_the_message(q: Queue) -> None:
    q.enqueue(b"\xff\xfe{}")
    m = q.claim()
    assert m is not None
    with pytest.raises(MessageNotJSON, match=rf"message {m.id}: the body is not UTF-8 JSON") as info:
        m.json()
    assert isinstance(info.value, ValueError)
