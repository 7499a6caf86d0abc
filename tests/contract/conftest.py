"""Both faces for the whole contract: every test in this folder whose queues come from
``make_queue`` or ``q`` runs on keyqueue.Queue and on keyqueue.aio.Queue (through
tests/support/async_face.py's SyncFace), in both modes: {sync, async} x {scripted,
script-free}. A test that only one face can run builds its own queues instead."""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest
import redis

from keyqueue import Queue
from keyqueue.server import RedisServer

from ..support.workers import Workers


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per round trip the blocking transport makes from now on."""
    from keyqueue.transport import sync

    sent: list[int] = []
    round_trip = sync.Pinned.round_trip
    monkeypatch.setattr(sync.Pinned, "round_trip", lambda self, cmds: (sent.append(1), round_trip(self, cmds))[1])
    return sent


@pytest.fixture(params=["sync", "async"])
def face(request: pytest.FixtureRequest) -> str:
    """Which face ``make_queue`` builds its queues on."""
    return str(request.param)


@pytest.fixture(scope="session")
def loop_thread() -> Iterator[Any]:
    from ..support.async_face import LoopThread

    lt = LoopThread()
    yield lt
    lt.close()


@pytest.fixture
def make_queue(
    r: redis.Redis, scripting: bool, face: str, redis_server: RedisServer, request: pytest.FixtureRequest
) -> Callable[..., Queue]:
    made: list[Any] = []
    own: list[redis.Redis] = []  # sync clients made here

    def make(name: str = "q", **kw: Any) -> Queue:
        """Queue ``name`` on the face, on the session's server (or at ``url=``);
        ``reply_timeout``: a client of its own that waits that long for a reply."""
        kw.setdefault("scripting", scripting)
        reply_timeout = kw.pop("reply_timeout", None)
        if face == "sync" or "client" in kw:
            if "url" not in kw and reply_timeout is not None:
                kw["client"] = redis.Redis(port=redis_server.port, socket_timeout=reply_timeout)
                own.append(kw["client"])
            if "url" not in kw:
                kw.setdefault("client", r)
            return Queue(name, **kw)
        from redis.asyncio import Redis as AsyncRedis

        from keyqueue.aio import Queue as AioQueue

        from ..support.async_face import SyncFace

        lt = request.getfixturevalue("loop_thread")
        if "url" not in kw:
            timeout = {} if reply_timeout is None else {"socket_timeout": reply_timeout}
            kw["client"] = AsyncRedis(port=redis_server.port, **timeout)
        aq = AioQueue(name, **kw)
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
    for client in own:
        client.close()


@pytest.fixture
def q(make_queue: Callable[..., Queue]) -> Queue:
    return make_queue("q")


@pytest.fixture
def workers(face: str, request: pytest.FixtureRequest) -> Workers:
    """The face's worker: keyqueue.Worker over ``make_queue``'s queues, or keyqueue.aio.Worker
    on the loop of their SyncFaces; handlers are plain functions either way."""
    return Workers(face, request.getfixturevalue("loop_thread") if face == "async" else None)
