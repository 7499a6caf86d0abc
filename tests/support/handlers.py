"""Handlers for worker processes started by the tests (``keyqueue worker tests.support.handlers:...``).
Each records what it did in Redis, so the test can see it from outside the process."""

from __future__ import annotations

import os
import random
import time

import redis

from keyqueue import Message

STARTED = "test:started"  # list of ids whose handler began
DONE = "test:done"  # hash id -> completed deliveries
PIDS = "test:pids"  # hash id -> the pid of the process whose handler began it


def _client(m: Message):  # type: ignore[no-untyped-def]
    assert m.queue is not None
    return m.queue.client


def record(m: Message) -> None:
    _client(m).hincrby(DONE, m.id, 1)


def slow(m: Message) -> None:
    """Sleeps for the number of seconds in the body."""
    _client(m).rpush(STARTED, m.id)
    time.sleep(float(m.text))
    _client(m).hincrby(DONE, m.id, 1)


def fail(m: Message) -> None:
    raise RuntimeError(f"cannot handle {m.text}")


def exits(m: Message) -> None:
    """A body "exit" raises SystemExit(3); any other is a number of seconds to sleep, as slow."""
    if m.text == "exit":
        raise SystemExit(3)
    slow(m)


def in_process(m: Message) -> None:
    """Records its process's pid, then sleeps as slow."""
    _client(m).hset(PIDS, m.id, os.getpid())
    slow(m)


SCHEDULED = "test:scheduled"  # list of the fire times (epoch s) of the messages handled


def scheduled(m: Message) -> None:
    _client(m).rpush(SCHEDULED, repr(m.scheduled_for))


CLAIMS = "test:claims"  # list of "<id> <deadline>" (epoch s), one per delivery handled
RUNNING = "test:running"  # handlers running now, across every process
PEAK = "test:peak"  # list of RUNNING as each handler began


def stamp(m: Message) -> None:
    """Records its delivery's deadline (the claim's server time is it minus the visibility timeout)."""
    _client(m).rpush(CLAIMS, f"{m.id} {m.deadline!r}")
    _client(m).hincrby(DONE, m.id, 1)


def busy(m: Message) -> None:
    """Counts the handlers running at once (as each begins), busy for 0.1 s."""
    client = _client(m)
    client.rpush(PEAK, client.incr(RUNNING))
    time.sleep(0.1)
    client.decr(RUNNING)
    client.hincrby(DONE, m.id, 1)


GROUP_LOG = "test:group-log"  # list of "start|end <group> <id> <pid> <epoch s>", in the server's order


#: Where ``grouped`` logs, when not to the message's own Redis (which a test restarts).
LOG_URL = "KQ_TEST_LOG_URL"
_log_clients: dict[str, redis.Redis] = {}


def grouped(m: Message) -> None:
    """Logs its start and end around a random 1-10 ms of work; a body "hang" on its first
    delivery hangs (the test kills its process there)."""
    url = os.environ.get(LOG_URL)
    client = _client(m) if url is None else _log_clients.setdefault(url, redis.Redis.from_url(url))
    client.rpush(GROUP_LOG, f"start {m.group} {m.id} {os.getpid()} {time.time()!r}")
    time.sleep(3600 if m.text == "hang" and m.receives == 1 else random.uniform(0.001, 0.01))
    client.rpush(GROUP_LOG, f"end {m.group} {m.id} {os.getpid()} {time.time()!r}")
    client.hincrby(DONE, m.id, 1)
