"""Fixtures of the whole suite: one real redis-server per session (per xdist worker) on a free
loopback port (never 6379), a flushed client, both modes, and queues on either face.

The folders: contract/ (what the queues, workers and fsck promise, on both faces), faults/
(crashes, processes, signals, replication, Sentinel, TLS, ACL, Cluster, races, pools),
surfaces/ (CLI, dashboard, SQS, Spark, examples, benchmarks, layers), support/ (helpers and
the handler modules worker processes import), data/ (golden data the tests read)."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest
import redis

from keyqueue import Queue
from keyqueue.server import RedisServer

from .support.helpers import FakeClock


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
    from .support.async_face import LoopThread

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

        from .support.async_face import SyncFace

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


@pytest.fixture
def clock() -> FakeClock:
    """A FakeClock of its own for each test."""
    return FakeClock()
