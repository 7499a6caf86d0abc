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


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--dist loadgroup``: xdist sends the tests of one ``xdist_group`` (Spark, the browser)
    to one worker by the ``@group`` it appends to their node ids; xdist 3.8 writes that to
    ``item._nodeid``, which pytest 9 no longer reads (ids live in ``item._id``), so do it
    here where it is missing."""
    if not config.getoption("loadgroup", default=False):  # (set on xdist's workers)
        return
    for item in items:
        groups = sorted(
            {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
        )
        node_id = getattr(item, "_id", None)
        if groups and node_id is not None and "@" not in item.nodeid.rpartition("]")[2]:
            item._id = type(node_id).parse(f"{item.nodeid}@{'_'.join(groups)}")


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
    r.acl_setuser(
        "noscript",
        enabled=True,
        passwords=["+s3cret-pw"],
        keys=["~*"],
        channels=["&*"],
        commands=["+@all", "-@scripting"],
    )
    yield f"redis://noscript:s3cret-pw@127.0.0.1:{redis_server.port}/0"
    r.acl_deluser("noscript")


@pytest.fixture
def clock() -> FakeClock:
    """A FakeClock of its own for each test."""
    return FakeClock()
