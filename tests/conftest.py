"""Test fixtures: one real redis-server per session on a free loopback port (never 6379)."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator

import pytest
import redis

from keyqueue import Queue
from keyqueue.server import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def r(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis(port=redis_server.port)
    client.flushall()
    yield client
    client.close()


@pytest.fixture(params=[True, False], ids=["scripted", "commands"])
def scripting(request: pytest.FixtureRequest) -> bool:
    """Both modes: every test that builds its queues through this runs twice."""
    return bool(request.param)


@pytest.fixture
def make_queue(r: redis.Redis, scripting: bool) -> Callable[..., Queue]:
    def make(name: str = "q", **kw: Any) -> Queue:
        kw.setdefault("client", r)
        kw.setdefault("scripting", scripting)
        return Queue(name, **kw)

    return make


@pytest.fixture
def q(make_queue: Callable[..., Queue]) -> Queue:
    return make_queue("q")


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01) -> Any:
    """Poll until predicate() is truthy; fail the test at the deadline."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


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


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for every Spark test (UI off, driver on 127.0.0.1); its
    Python workers run this interpreter, so they import this checkout of keyqueue."""
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from keyqueue.spark import register

    session = (SparkSession.builder.master("local[2]").appName("keyqueue-tests")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
