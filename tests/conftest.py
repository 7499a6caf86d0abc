"""Fixtures of the whole suite: one real redis-server per session (per xdist worker) on a free
loopback port (never 6379), a flushed client, both modes, a clock moved by hand.

The folders: contract/ (what the queues, workers and fsck promise, on both faces), faults/
(crashes, processes, signals, replication, Sentinel, TLS, ACL, Cluster, races, pools),
surfaces/ (CLI, dashboard, SQS, Spark, examples, benchmarks, layers), support/ (helpers and
the handler modules worker processes import), data/ (golden data the tests read)."""

from __future__ import annotations

from typing import Iterator

import pytest
import redis

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


@pytest.fixture
def no_scripting_url(redis_server: RedisServer, r: redis.Redis) -> Iterator[str]:
    """A user who may not run scripts: what a server that denies EVAL looks like."""
    r.acl_setuser("noscript", enabled=True, passwords=["+s3cret-pw"], keys=["~*"],
                  channels=["&*"], commands=["+@all", "-@scripting"])
    yield f"redis://noscript:s3cret-pw@127.0.0.1:{redis_server.port}/0"
    r.acl_deluser("noscript")


@pytest.fixture
def clock() -> FakeClock:
    """A FakeClock of its own for each test."""
    return FakeClock()
