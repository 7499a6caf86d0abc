"""Crash points of a sharded queue's own steps: a client dies between every two commands of
making a sharded queue and of the operations that span shards (a batch split over them, a
claim and an ack over several), in both modes. Each shard's part is one per-shard operation
(whose own crash points tests/faults/test_crash_points.py covers); here the checks are that
the shards stay consistent, that a healthy consumer then gets every message exactly once
(those being enqueued at most once, exactly once if the batch finished), and that the queue
can be made again with its count."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterator

import pytest
import redis

from keyqueue import Queue
from keyqueue.queue import list_queues
from keyqueue.server import RedisServer

from ..support.crashing import Budget, Crash, crashing_client
from ..support.helpers import FakeClock

NAME = "s"
SHARDS = 3
RECOVERY = 200.0


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    with RedisServer() as s:
        yield s


def _queue(client: redis.Redis, scripting: bool, clock: FakeClock, **kw: Any) -> Queue:
    return Queue(NAME, client=client, scripting=scripting, clock=clock, **kw)


def _made(q: Queue) -> dict[str, Any]:
    """Nothing but the queue (made with its count by the healthy client)."""
    return {}


def _waiting(q: Queue) -> dict[str, Any]:
    return {"ids": q.enqueue_many([f"w{i}" for i in range(6)])}


def _deduped(q: Queue) -> dict[str, Any]:
    """A message with dedup key "k", routed by a shard key to another shard than "k"'s."""
    return {"ids": [q.enqueue("first", dedup_key="k", shard_key="a")]}


def _rated(q: Queue) -> dict[str, Any]:
    """Waiting messages under a rate limit (whose window counter every shard shares)."""
    Queue(NAME, client=q.client, scripting=q.scripting, clock=q._ops.clock, rate_limit="100/1000")
    return _waiting(q)


def _held(q: Queue) -> dict[str, Any]:
    ctx = _waiting(q)
    ctx["held"] = q.claim_many(6)
    assert len({m.id.split("#")[0] for m in ctx["held"]}) == SHARDS
    return ctx


#: op -> (setup by a healthy client, the operation of the dying one's queue, whether it may
#: delete messages). "make" is the dying client's making of the sharded queue itself.
OPS: dict[str, tuple[Callable[[Queue], dict[str, Any]], Callable[[Queue, dict[str, Any]], Any], bool]] = {
    "make": (_made, lambda q, c: q, False),
    "enqueue_many": (_made, lambda q, c: q.enqueue_many([f"n{i}" for i in range(6)]), False),
    # a dedup key's record on its shard, then the enqueue where the record says
    "enqueue_dedup": (_made, lambda q, c: q.enqueue("new", dedup_key="k", shard_key="b"), False),
    "enqueue_dedup_repeat": (_deduped, lambda q, c: q.enqueue("again", dedup_key="k", shard_key="b"), False),
    "claim_many": (_waiting, lambda q, c: q.claim_many(6), False),
    "claim_many_rated": (_rated, lambda q, c: q.claim_many(6), False),
    "ack_many": (_held, lambda q, c: q.ack_many(c["held"]), True),
}


def run(port: int, r: redis.Redis, scripting: bool, op: str, limit: int | None) -> tuple[Budget, bool, dict[str, Any]]:
    """Set up, then run ``op`` on a client allowed ``limit`` commands: its log, whether it
    died, and what the checks need."""
    r.flushall()
    r.script_flush()
    clock = FakeClock()
    setup, operation, _ = OPS[op]
    ctx: dict[str, Any] = {"clock": clock, "before": {}}
    if op != "make":
        healthy = _queue(r, scripting, clock, shards=SHARDS, visibility_timeout=30)
        ctx.update(setup(healthy))
        ctx["before"] = {m.id: m.body for m in healthy.get(ctx.get("ids", []))}
    budget = Budget()
    client = crashing_client(port, budget)
    died = False
    try:
        # The operations' queue is made before the limit (making it is an operation of its own).
        q = None if op == "make" else _queue(client, scripting, clock)
        budget.log.clear()
        budget.limit = limit
        operation(q if q is not None else _queue(client, scripting, clock, shards=SHARDS), ctx)
    except Crash:
        died = True
    finally:
        client.close()
    return budget, died, ctx


def lengths(port: int, r: redis.Redis, scripting: bool) -> dict[str, int]:
    """Commands each operation sends when nothing dies."""
    out = {}
    for op in OPS:
        budget, died, _ = run(port, r, scripting, op, None)
        assert not died
        out[op] = len(budget.log)
    return out


def drain(q: Queue, clock: FakeClock) -> Counter[str]:
    clock.advance(RECOVERY)
    q.reap()
    got: Counter[str] = Counter()
    while msgs := q.claim_many(10):
        got.update(m.id for m in msgs)
        assert q.ack_many(msgs) == len(msgs)
    return got


@pytest.mark.timeout(300)  # a client killed at every step: 40 s on one starved core
@pytest.mark.parametrize("op", sorted(OPS))
def test_a_client_dying_in_a_sharded_step_loses_nothing(server: RedisServer, scripting: bool, op: str) -> None:
    r = redis.Redis(port=server.port)
    total = lengths(server.port, r, scripting)[op]
    assert total > 0
    for k in range(total + 1):
        budget, died, ctx = run(server.port, r, scripting, op, k)
        assert died == (k < total), f"{op} at {k}: sent {budget.log}"
        clock: FakeClock = ctx["clock"]
        # Made again (with its count) by a healthy client, whatever the dying one left.
        healthy = _queue(r, scripting, clock, shards=SHARDS)
        assert healthy.shards == SHARDS
        report = healthy.check(repair=True, settle=0)
        assert healthy.check(settle=0).consistent, f"{op} at {k}: {report.problems}"
        for key in r.scan_iter(match=f"kq:{{{NAME}*:rate:*"):  # (a window counter expires with its window)
            assert r.pttl(key) >= 0, f"{op} at {k}: {key!r} never expires"
        if op.startswith("enqueue_dedup"):  # the producer sends it again: once in all, whatever died
            healthy.enqueue("retry", dedup_key="k", shard_key="c")
        got = drain(healthy, clock)
        assert max(got.values(), default=1) == 1, f"{op} at {k}: delivered twice: {got}"
        may_delete = OPS[op][2]
        for mid in ctx["before"]:
            assert got[mid] <= 1 if may_delete else got[mid] == 1, f"{op} at {k}: {mid} lost"
        new = [mid for mid in got if mid not in ctx["before"]]
        if op == "enqueue_many" and not died:
            assert len(new) == 6
        if op.startswith("enqueue_dedup"):
            assert len(new) == (op == "enqueue_dedup"), f"{op} at {k}: {got}"
        healthy.enqueue("after")
        assert list_queues(r) == [NAME]
    r.close()
