"""Replicated writes: Queue(min_replicas=N, replica_timeout=S) follows every write
with WAIT in the same round trip, on a real primary and replica started here."""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Iterator

import pytest
import redis

from keyqueue import InvalidArgument, NotReplicated, Queue, Worker
from keyqueue.server import RedisServer

from ..support.helpers import wait_until
from ..support.processes import in_process
from ..support.workers import Running


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and one replica of it, the link up."""
    with RedisServer() as primary:
        with RedisServer(["--replicaof", "127.0.0.1", str(primary.port)]) as replica:
            r = redis.Redis(port=replica.port)
            wait_until(lambda: r.info("replication")["master_link_status"] == "up", timeout=20)
            r.close()
            yield primary, replica


@pytest.fixture
def clients(pair: tuple[RedisServer, RedisServer]) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    primary, replica = pair
    p, r = redis.Redis(port=primary.port), redis.Redis(port=replica.port)
    p.flushall()
    p.wait(1, 5000)
    yield p, r
    p.close()
    r.close()


@pytest.fixture
def stopped_replica(pair: tuple[RedisServer, RedisServer]) -> Iterator[None]:
    """The replica frozen (SIGSTOP): connected, but acknowledging nothing."""
    proc = pair[1].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def test_every_operation_returns_after_a_replica_has_its_writes(clients: Any, scripting: bool) -> None:
    p, replica = clients
    q = Queue("q", client=p, scripting=scripting, min_replicas=1, visibility_timeout=0.1, max_receives=2)
    mid = q.enqueue("x")
    # WAIT returned: the replica holds the message already, no polling needed.
    assert replica.hget(f"kq:{{q}}:item:{mid}", "b") == b"x"
    assert replica.smembers("kq:{q}:items") == {mid.encode()}
    m = q.claim()
    assert m is not None and replica.smembers("kq:{q}:processing") == {mid.encode()}
    assert q.release(m, error="again")
    m = q.claim()
    assert m is not None and q.dead_letter(m, "no")
    assert replica.lrange("kq:{q}:dead", 0, -1) == [mid.encode()]
    assert q.requeue() == 1
    m = q.claim()
    assert m is not None and q.ack(m)
    assert not replica.exists(f"kq:{{q}}:item:{mid}")
    assert replica.hget("kq:{q}:counters", "acked") == b"1"
    ids = q.enqueue_many(["a", "b"])
    assert q.purge() == 2 and replica.scard("kq:{q}:items") == 0 and len(ids) == 2


def test_fewer_replicas_than_wanted_raise_not_replicated_within_the_timeout(clients: Any, scripting: bool) -> None:
    p, replica = clients
    q = Queue("q", client=p, scripting=scripting, min_replicas=2, replica_timeout=0.2)
    start = time.monotonic()
    with pytest.raises(NotReplicated, match="1 of 2 replicas") as info:
        q.enqueue("done on the primary")
    assert 0.15 < time.monotonic() - start < 3
    assert (info.value.acknowledged, info.value.wanted) == (1, 2)
    # Done on the primary (and here on the one replica there is): nothing is rolled back.
    assert q.stats().waiting == 1 and replica.scard("kq:{q}:items") == 1


def test_a_stopped_replica_makes_writes_raise_then_they_pass_again(
    clients: Any, stopped_replica: None, scripting: bool
) -> None:
    p, _ = clients
    q = Queue("q", client=p, scripting=scripting, min_replicas=1, replica_timeout=0.3)
    start = time.monotonic()
    with pytest.raises(NotReplicated, match="0 of 1"):
        q.enqueue("a")
    assert time.monotonic() - start < 3
    assert q.stats().waiting == 1  # reads need no replica
    plain = Queue("q", client=p, scripting=scripting)  # min_replicas=0: no WAIT, no wait
    assert plain.enqueue("b")


def test_a_worker_treats_not_replicated_as_transient(clients: Any, pair: Any) -> None:
    p, _ = clients
    q = Queue("q", client=p, min_replicas=1, replica_timeout=0.2, visibility_timeout=1)
    seen: list[str] = []
    q.enqueue("first")
    proc = pair[1].proc
    os.kill(proc.pid, signal.SIGSTOP)
    runner = Running(Worker(q, lambda m: seen.append(m.text)))
    try:
        with runner:
            # Its writes (a reap, a claim) are done on the primary but not acknowledged: they
            # raise, and the worker tries again (a claimed delivery comes back after its
            # visibility timeout), rather than dying or losing the message.
            wait_until(lambda: p.info("commandstats").get("cmdstat_wait", {}).get("calls", 0) >= 3)
            assert seen == [] and runner.thread.is_alive()
            os.kill(proc.pid, signal.SIGCONT)
            wait_until(lambda: seen == ["first"] and q.stats().processing == 0, timeout=15)
            assert runner.thread.is_alive()
    finally:
        os.kill(proc.pid, signal.SIGCONT)


@pytest.mark.parametrize(
    "kw",
    [
        dict(min_replicas=-1),
        dict(min_replicas="1"),
        dict(min_replicas=True),
        dict(replica_timeout=0),
        dict(replica_timeout="1"),
    ],
)
def test_bad_replication_options_fail_before_any_io(kw: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument, match=next(iter(kw))):
        Queue("q", url="redis://127.0.0.1:1/0", **kw)


def test_the_cli_reaper_and_spark_options_carry_min_replicas(clients: Any, pair: Any) -> None:
    from keyqueue import Reaper
    from keyqueue.spark.options import Options

    p, replica = clients
    url = f"redis://127.0.0.1:{pair[0].port}/0"
    run = ["--url", url]
    ok = in_process([*run, "--min-replicas", "1", "enqueue", "c", "x"])
    assert ok.returncode == 0, ok.stderr
    assert replica.scard("kq:{c}:items") == 1
    refused = in_process([*run, "--min-replicas", "2", "--replica-timeout", "0.2", "enqueue", "c", "y"])
    assert refused.returncode == 1 and "1 of 2 replicas" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    bad = in_process([*run, "--min-replicas", "-1", "stats", "c"])
    assert bad.returncode == 2 and "--min-replicas" in bad.stderr

    reaper = Reaper(["c"], url=url, min_replicas=2, replica_timeout=0.2)
    (q,) = reaper.queues()
    assert (q.min_replicas, q.replica_timeout) == (2, 0.2)
    with pytest.raises(InvalidArgument, match="min_replicas"):
        Reaper(["c"], url=url, min_replicas=-1)

    opts = Options.parse({"url": url, "queue": "c", "minReplicas": "1", "replicaTimeout": "0.5"})
    q = opts.open()
    assert (q.min_replicas, q.replica_timeout) == (1, 0.5)
    with pytest.raises(InvalidArgument, match="minReplicas"):
        Options.parse({"url": url, "queue": "c", "minReplicas": "many"})
