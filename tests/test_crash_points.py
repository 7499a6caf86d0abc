"""Crash-point fault injection: a client dies between every two Redis commands of every
operation, in both modes, and nothing is lost.

For each operation (tests/crash_scenarios.py) and each k, a fresh queue is set up by a
healthy client; then a client whose connection dies after exactly k commands runs the
operation (tests/crashing.py: the rest of its batch is never sent, an open MULTI is
discarded, the client never comes back). Then time moves past every deadline, a healthy
reaper runs, and the test checks:
- every message is in exactly one state (waiting, processing, delayed, dead), every id in a
  set or list has its item hash, and nothing is owned that has no deadline;
- a healthy consumer then receives every message exactly once with its body intact, except
  those the operation may have deleted (an ack or a purge that got that far), and messages
  the operation was enqueueing arrive at most once (exactly once if it finished);
- afterwards no key is left but seq, config, the signal, dead letters and dedup keys.

``BOUNDARIES`` lists the commands of every operation by name, as sent, in both modes;
a test checks the operations still send exactly these, so every boundary is covered.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis

from keyqueue import Queue
from keyqueue.backends.commands import PURGE_VISIBILITY_MS
from keyqueue.server import RedisServer

from .conftest import FakeClock
from .crash_scenarios import SCENARIOS, VISIBILITY
from .crashing import Budget, Crash, crashing_client
from .crash_boundaries import BOUNDARIES

NAME = "c"
#: Past the latest intent any operation writes: a claim's visibility timeout, a purge's 60 s.
RECOVERY = max(VISIBILITY, PURGE_VISIBILITY_MS / 1000) + 5
BASE = "kq:{c}:"


def _cases() -> list[Any]:
    """Every boundary; a script-free client's death is also recovered by a scripted reaper
    (reap.lua applies the same repair rules), as on a server where both modes run."""
    out = []
    for (mode, op), names in BOUNDARIES.items():
        for k in range(len(names) + 1):
            after = names[k - 1] if k else "start"
            name = f"{mode}-{op}-{k:02d}-after-{after}"
            out.append(pytest.param(mode == "scripted", op, k, mode == "scripted", id=name))
            if mode == "commands":
                out.append(pytest.param(False, op, k, True, id=name + "-scripted-reaper"))
    return out


def _queue(client: redis.Redis, scripting: bool, clock: FakeClock, **kw: Any) -> Queue:
    return Queue(NAME, client=client, scripting=scripting, clock=clock, **kw)


def run_op(port: int, r: redis.Redis, scripting: bool, op: str, limit: int | None
           ) -> tuple[Budget, bool, dict[str, Any]]:
    """Set up, then run ``op`` on a client allowed ``limit`` commands. Returns its log,
    whether it died, and what the checks need."""
    r.flushall()
    r.script_flush()
    clock = FakeClock()
    healthy = _queue(r, scripting, clock, visibility_timeout=VISIBILITY, bucket_seconds=1,
                     max_receives=3)
    scenario = SCENARIOS[op]
    ctx = scenario.setup(healthy)
    before = _bodies(r)
    waiting_before = {i.decode() for i in r.smembers(BASE + "items")}
    delayed_before = {m.id for m in healthy.peek(100, source="delayed")}
    budget = Budget()
    victim = _queue(crashing_client(port, budget), scripting, clock)
    budget.log.clear()
    budget.limit = limit
    died = False
    try:
        scenario.run(victim, ctx)
    except Crash:
        died = True
    finally:
        victim.client.close()
    deletable = scenario.may_delete(ctx)
    if "*" in deletable:
        deletable = set(before)
    elif "*waiting" in deletable:
        deletable = waiting_before
    elif "*delayed" in deletable:
        deletable = delayed_before
    return budget, died, {"clock": clock, "before": before, "deletable": deletable}


def _bodies(r: redis.Redis) -> dict[str, bytes]:
    out = {}
    for key in r.scan_iter(match=BASE + "item:*"):
        fields = r.hgetall(key)
        parts = sorted((int(f[1:]), v) for f, v in fields.items() if f[:1] == b"b" and f != b"b")
        out[key.decode()[len(BASE + "item:"):]] = fields[b"b"] + b"".join(v for _, v in parts)
    return out


def check_states(r: redis.Redis) -> dict[str, str]:
    """Each live message's one state; fails on any id in two states, in none, or referenced
    without a message. Stale list entries (ids no longer waiting) are allowed: claimers drop them."""
    queue = [i.decode() for i in r.lrange(BASE + "queue", 0, -1)]
    items = {i.decode() for i in r.smembers(BASE + "items")}
    processing = {i.decode() for i in r.smembers(BASE + "processing")}
    dead = [i.decode() for i in r.lrange(BASE + "dead", 0, -1)]
    timers: dict[str, set[int]] = {}
    buckets = {int(b) for b in r.zrange(BASE + "timers", 0, -1)}
    for key in r.scan_iter(match=BASE + "timer:*"):
        b = int(key.decode().rsplit(":", 1)[1])
        assert b in buckets, f"timer bucket {b} is not in the index"
        for i in r.smembers(key):
            timers.setdefault(i.decode(), set()).add(b)
    hashes = {k.decode()[len(BASE + "item:"):]: r.hgetall(k) for k in r.scan_iter(match=BASE + "item:*")}
    referenced = set(queue) | items | processing | set(dead) | set(timers)
    assert referenced <= set(hashes) | (set(queue) - items), f"ids without a message: {referenced - set(hashes)}"
    assert items <= set(queue), f"waiting but not in the list: {items - set(queue)}"
    states = {}
    for mid, h in hashes.items():
        d = int(h[b"d"]) if b"d" in h else None
        where = []
        if mid in items:
            where.append("waiting")
        if mid in processing:
            assert b"c" in h and d is not None and d // 1000 in timers.get(mid, set()), \
                f"{mid} owned without a deadline and its timer: {h}"
            where.append("processing")
        if mid not in items and mid not in processing and d is not None:
            assert d // 1000 in timers.get(mid, set()), f"delayed {mid} has no timer entry"
            where.append("delayed")
        where += ["dead"] * dead.count(mid)
        assert len(where) == 1, f"message {mid} is in {where or 'no state'}"
        states[mid] = where[0]
    return states


def drain(q: Queue, clock: FakeClock) -> Counter[str]:
    """Release everything (time moves on past every delay), take every message once, ack it."""
    clock.advance(1000)
    q.reap()
    got: Counter[str] = Counter()
    bodies = {}
    while True:
        msgs = q.claim_many(10)
        if not msgs:
            break
        for m in msgs:
            got[m.id] += 1
            bodies[m.id] = m.body
        assert q.ack_many(msgs) == len(msgs)
    clock.advance(RECOVERY)  # the claims' own leftovers (entries of stale ids) expire too
    q.reap()
    return got


@pytest.fixture(scope="module")
def server() -> Any:
    with RedisServer() as s:
        yield s


@pytest.mark.parametrize("scripting,op,k,scripted_recovery", _cases())
def test_a_client_dying_here_loses_nothing(server: RedisServer, scripting: bool, op: str, k: int,
                                           scripted_recovery: bool) -> None:
    r = redis.Redis(port=server.port)
    budget, died, ctx = run_op(server.port, r, scripting, op, k)
    expected = BOUNDARIES[("scripted" if scripting else "commands", op)]
    assert died == (k < len(expected)), f"{op} sent {budget.log}"
    clock: FakeClock = ctx["clock"]
    clock.advance(RECOVERY)  # past every deadline and claim intent of the dead client
    healthy = _queue(r, scripted_recovery, clock)
    healthy.reap()
    states = check_states(r)
    dead = {mid for mid, s in states.items() if s == "dead"}
    got = drain(healthy, clock)
    assert max(got.values(), default=1) == 1, f"delivered twice: {got}"
    final = _bodies(r)
    for mid, body in ctx["before"].items():
        seen = got[mid] + (mid in dead)
        if mid in ctx["deletable"]:
            assert seen <= 1, mid
        else:
            assert seen == 1, f"message {mid} lost (state before: {states.get(mid)})"
        if mid in final:
            assert final[mid] == body
    for mid in set(got) | dead:
        if mid not in ctx["before"]:  # enqueued by the operation
            assert got[mid] + (mid in dead) == 1
    new = [mid for mid in got if mid not in ctx["before"]]
    if not died and op.startswith("enqueue"):
        assert new, "a completed enqueue's message never arrived"
    # Nothing left but what outlives messages (and the dead letters with their hashes).
    keys = {k.decode()[len(BASE):] for k in r.scan_iter(match=BASE + "*")}
    leftover = {k for k in keys if k not in ("seq", "config", "signal", "dead", "counters")
                and not k.startswith("dedup:") and not (k.startswith("item:") and k[5:] in dead)}
    assert not leftover, f"orphaned keys: {sorted(leftover)}"
    r.close()


@pytest.mark.parametrize("mode,op", sorted(BOUNDARIES))
def test_the_table_lists_every_command_of_every_operation(server: RedisServer, mode: str, op: str) -> None:
    r = redis.Redis(port=server.port)
    budget, died, _ = run_op(server.port, r, mode == "scripted", op, None)
    assert not died
    assert budget.log == BOUNDARIES[(mode, op)]
    r.close()


def test_every_operation_is_covered_in_both_modes() -> None:
    assert set(BOUNDARIES) == {(m, op) for m in ("scripted", "commands") for op in SCENARIOS}
