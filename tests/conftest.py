"""Test fixtures: one real redis-server per session on a free loopback port (never 6379)."""

from __future__ import annotations

import threading
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


#: Modules whose queue contract tests also run on keyqueue.aio.Queue (through SyncFace).
FACE_MODULES = {"test_queue", "test_errors", "test_timing", "test_model", "test_self_healing", "test_counters"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """{sync, async} x {scripted, script-free} for the contract suite: its queues come from
    ``make_queue``/``q``, which build a keyqueue.aio.Queue behind a sync face when face=async."""
    if "face" in metafunc.fixturenames and metafunc.module.__name__.rsplit(".", 1)[-1] in FACE_MODULES:
        metafunc.parametrize("face", ["sync", "async"])


@pytest.fixture
def face() -> str:
    return "sync"


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[Any]:
    from .async_face import LoopThread

    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture
def make_queue(r: redis.Redis, scripting: bool, face: str, redis_server: RedisServer,
               request: pytest.FixtureRequest) -> Callable[..., Queue]:
    made: list[Any] = []

    def make(name: str = "q", **kw: Any) -> Queue:
        kw.setdefault("scripting", scripting)
        if face == "sync" or "client" in kw:
            kw.setdefault("client", r)
            return Queue(name, **kw)
        import redis.asyncio

        from keyqueue.aio import Queue as AioQueue

        from .async_face import SyncFace

        lt = request.getfixturevalue("loop_thread")
        aq = AioQueue(name, client=redis.asyncio.Redis(port=redis_server.port), **kw)
        made.append((lt, aq))
        # Constructing an async queue does no I/O; the sync Queue loads its settings when
        # made (or on first use when Redis is down), which is what these tests expect.
        try:
            lt.run(aq.load())
        except redis.ConnectionError:
            pass
        return SyncFace(aq, lt)  # type: ignore[return-value]

    yield make  # type: ignore[misc]
    for lt, aq in made:
        lt.run(aq.client.aclose())


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


@pytest.fixture
def clock() -> FakeClock:
    """A FakeClock of its own for each test."""
    return FakeClock()


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
