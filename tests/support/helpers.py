"""Helpers every folder uses: the repository's root, polling with a deadline, calls in
threads at once, a snapshot of the keyspace, a clock the test moves by hand, the WATCH
commands a server ran, and a schedule's stored fields read and written as a firer sees them."""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import redis

from keyqueue.core.schedules import pack_state, score, unpack
from keyqueue.keys import QueueKeys

#: The repository's root (the working directory of the processes the tests start).
ROOT = Path(__file__).resolve().parents[2]


def wait_until(predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.01) -> Any:
    """Poll until predicate() is truthy; fail the test at the deadline. The default deadline
    only catches what never happens: on a loaded 2-core machine a process takes seconds to
    start (a test that bounds how soon something happens passes its own ``timeout``)."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def run_threads(calls: list[Callable[[], object]], timeout: float = 90.0) -> list[BaseException]:
    """Each call in a thread of its own, all at once; what they raised (the test asserts none)."""
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for t in threads:
        t.start()
    end = time.monotonic() + timeout
    for t in threads:
        t.join(max(end - time.monotonic(), 0.1))
    if any(t.is_alive() for t in threads):
        raise AssertionError(f"threads still running after {timeout}s")
    return errors


def snapshot(client: redis.Redis) -> dict[bytes, tuple[bytes, Any]]:
    """Every key with its type and full value, to show an operation changed nothing."""
    out: dict[bytes, tuple[bytes, Any]] = {}
    for key in client.keys("*"):
        kind = client.type(key)
        if kind == b"string":
            value: Any = client.get(key)
        elif kind == b"list":
            value = client.lrange(key, 0, -1)
        elif kind == b"set":
            value = sorted(client.smembers(key))
        elif kind == b"zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == b"hash":
            value = client.hgetall(key)
        else:
            value = client.dump(key)
        out[key] = (kind, value)
    return out


class FakeClock:
    """A clock the test moves by hand; passed as Queue(clock=...) it replaces Redis TIME."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextmanager
def watches(port: int, prefix: str) -> Iterator[list[list[str]]]:
    """The keys of every WATCH the server at ``port`` runs on ``prefix``'s keys inside the
    block, as the server saw them (MONITOR), filled in when the block ends."""
    seen: list[list[str]] = []
    client = redis.Redis(port=port, decode_responses=True)
    marker = f"end-of-watches-{uuid.uuid4().hex}"
    try:
        with client.monitor() as monitor:
            yield seen
            client.echo(marker)  # (another connection of the pool: the monitor sees it)
            while True:
                words = monitor.next_command()["command"].split(" ")
                if words[0].upper() == "ECHO" and words[1:] == [marker]:
                    break
                if words[0].upper() == "WATCH" and words[1].startswith(prefix):
                    seen.append(words[1:])
    finally:
        client.close()


def stored_schedule(r: redis.Redis, sid: str, name: str = "q", counted: bool = False) -> dict[bytes, bytes]:
    """A schedule's fields as stored (schedules.unpack: d, b, v, f, l, m, a, p, n; {} when
    absent); ``counted``: with the fires that moved only its index counted in, as readers see it."""
    k = QueueKeys("kq", name)
    p = r.pipeline(transaction=False)
    p.hget(k.schedule_state, sid).hget(k.schedule_defs, sid).hget(k.schedule_bodies, sid)
    if counted:
        p.zscore(k.schedules, sid)
    return unpack(*p.execute())


def write_schedule(p: Any, sid: str, raw: dict[bytes, bytes], name: str = "q") -> None:
    """Queue on ``p`` (a pipeline or client) the writes that store ``raw`` as schedule ``sid``."""
    k = QueueKeys("kq", name)
    p.hset(k.schedule_state, sid, pack_state(raw))
    p.hset(k.schedule_defs, sid, raw[b"d"])
    p.hset(k.schedule_bodies, sid, raw.get(b"b", b""))
    n = raw.get(b"n")
    p.zadd(k.schedules, {sid: score(None if n is None else int(n), raw.get(b"p") == b"1")})
