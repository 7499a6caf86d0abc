"""The operations the crash-point test kills a client in, each with the state it starts from.

``setup(q)`` builds the state with a healthy client and returns what the operation needs;
``run(q, ctx)`` is the operation, run by the client that dies. Times come from a FakeClock
shared by every client, so recovery can move past every deadline at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from keyqueue import ConfigurationError, Queue

VISIBILITY = 30.0


@dataclass(frozen=True)
class Scenario:
    setup: Callable[[Queue], dict[str, Any]]
    run: Callable[[Queue, dict[str, Any]], Any]
    #: ids the operation may delete for good (so they may be missing afterwards)
    may_delete: Callable[[dict[str, Any]], set[str]] = lambda ctx: set()


def _waiting(q: Queue) -> dict[str, Any]:
    return {"ids": q.enqueue_many(["w1", "w2", "w3"])}


def _held(q: Queue) -> dict[str, Any]:
    ids = q.enqueue_many(["h1", "h2", "w3"])
    held = q.claim_many(2)
    return {"ids": ids, "held": held}


def _mixed(q: Queue) -> dict[str, Any]:
    """Waiting, in flight (some expired), delayed (some due) and dead messages."""
    ctx = _held(q)
    q.dead_letter(q.claim_many(1)[0], "bad")  # w3 -> dead
    q.enqueue_many(["w4", "w5"])
    q.enqueue("d1", delay=5)
    q.enqueue("d2", delay=500)
    clock = q._ops.clock
    assert clock is not None
    clock.advance(VISIBILITY + 1)  # type: ignore[attr-defined]  # held ones expired, d1 due
    q.claim()  # w4: a fresh delivery, not expired
    return ctx


#: Long enough that nothing the recovery does (it moves time on by about 1,100 s) expires.
RETENTION = 2000.0


def _retained(q: Queue, **settings: float) -> None:
    """Write retention settings for the dying client to read (the setup's own queue loaded before)."""
    Queue(q.name, client=q.client, scripting=q.scripting, clock=q._ops.clock, **settings)


def _expired_heads(q: Queue) -> dict[str, Any]:
    """Waiting messages past retention ahead of a young one."""
    old = q.enqueue_many(["o1", "o2", "o3"])
    q._ops.clock.advance(RETENTION + 1)
    q.enqueue("young")
    _retained(q, retention=RETENTION)
    return {"old": set(old)}


def _expiring(q: Queue) -> dict[str, Any]:
    """One of each state past retention (in flight past its deadline, waiting, delayed, a
    dead letter past dead_retention), and young ones."""
    held = q.enqueue("held")
    assert q.claim() is not None
    dead = q.enqueue("dead")
    m = q.claim()
    assert m is not None and m.dead_letter("bad")
    old = [held, dead, q.enqueue("waiting"), q.enqueue("delayed", delay=RETENTION * 2)]
    q._ops.clock.advance(RETENTION + 1)
    q.enqueue_many(["y1", "y2"])
    q.enqueue("y3", delay=10)
    _retained(q, retention=RETENTION, dead_retention=RETENTION)
    return {"old": set(old)}


def _scheduled(q: Queue) -> dict[str, Any]:
    """Waiting messages and a schedule two fire times behind (catch_up all: a fire enqueues two)."""
    ctx = _waiting(q)
    q.schedule("s", every=10, catch_up="all", body="tick")
    clock = q._ops.clock
    assert clock is not None
    clock.advance(25)  # type: ignore[attr-defined]
    return ctx


def _scheduled_many(q: Queue) -> dict[str, Any]:
    """Waiting messages and three schedules behind, with fire times of their own and bodies
    of their own: one reap fires them in one call (catch_up all: one of them enqueues two)."""
    ctx = _waiting(q)
    q.schedule("s", every=10, catch_up="all", body="tick")
    q.schedule("s7", every=7, body="seven")
    q.schedule("s9", every=9, catch_up="all", body="nine")
    q._ops.clock.advance(25)
    return ctx


def _scheduled_plain(q: Queue) -> dict[str, Any]:
    """Waiting messages and three ``every`` schedules with one fire time due each (bodies of
    their own): the look that finds them fires them all, in the call that reads them."""
    ctx = _waiting(q)
    q.schedule("s", every=10, body="tick")
    q.schedule("s7", every=7, body="seven")
    q.schedule("s9", every=9, catch_up="none", body="nine")
    q._ops.clock.advance(12)
    return ctx


def _limited(**settings: Any) -> Callable[[Queue], dict[str, Any]]:
    """Flow-control settings for the dying client to read, two messages claimed under them
    and three waiting (its claims take what the limits leave)."""

    def setup(q: Queue) -> dict[str, Any]:
        Queue(q.name, client=q.client, scripting=q.scripting, clock=q._ops.clock, **settings)
        ctx = _held(q)
        ctx["ids"] += q.enqueue_many(["w4", "w5"])
        return ctx

    return setup


def _raised(q: Queue, **settings: Any) -> Queue:
    """The dying client writes ``settings`` (a Queue made on its connection, as a restarted
    process or ``config --set`` would)."""
    return Queue(q.name, client=q.client, scripting=q.scripting, clock=q._ops.clock, **settings)


def _throttled(q: Queue) -> dict[str, Any]:
    ctx = _waiting(q)
    q.throttle(5)
    return ctx


def _held_ctx(ctx: dict[str, Any]) -> Any:
    return ctx["held"][0]


def _held_ids(ctx: dict[str, Any]) -> set[str]:
    return {m.id for m in ctx.get("held", ())}


def _chunked(run: Callable[[Queue, dict[str, Any]], Any]) -> Callable[[Queue, dict[str, Any]], Any]:
    """``run`` with the script-free mode WATCHing one item key at a time, so that a few ids
    cross chunk boundaries (the scripted mode has no chunks: it runs as is)."""

    def chunked(q: Queue, ctx: dict[str, Any]) -> Any:
        if hasattr(q._ops, "watch_chunk"):
            q._ops.watch_chunk = 1
        return run(q, ctx)

    return chunked


def _grouped(q: Queue) -> dict[str, Any]:
    """Groups a (one in flight, two held), b (one waiting, one held, one delayed), c (one in
    flight expired, one held), a grouped dead letter and an ungrouped message. In the
    script-free mode, which refuses groups, nothing: its grouped scenarios are the refusal."""
    if not q.scripting:
        return {"refused": True}
    clock = q._ops.clock
    assert clock is not None
    c = q.enqueue_many(["c1", "c2"], group="c")
    assert q.claim() is not None  # c1: expires below
    clock.advance(VISIBILITY + 1)  # type: ignore[attr-defined]
    a = q.enqueue_many(["a1", "a2", "a3"], group="a")
    b = q.enqueue_many(["b1", "b2"], group="b")
    b.append(q.enqueue("b3", group="b", delay=5))
    d = q.enqueue("d1", group="d")
    plain = q.enqueue("plain")
    got = {m.id: m for m in q.claim_many(3)}  # a1, b1, d1 (c1 waits for its reap)
    assert set(got) == {a[0], b[0], d}
    assert got[d].dead_letter("bad")
    got[b[0]].release()
    q._ops.clock.advance(6)  # type: ignore[union-attr]  # b3 due
    return {"ids": a + b + c + [d, plain], "held": [got[a[0]]], "groups": {"a": a, "b": b, "c": c}}


def _grouped_op(run: Callable[[Queue, dict[str, Any]], Any]) -> Callable[[Queue, dict[str, Any]], Any]:
    """``run`` on a grouped queue; in the script-free mode, the refusal of ``group=`` (nothing sent)."""

    def op(q: Queue, ctx: dict[str, Any]) -> Any:
        if ctx.get("refused"):
            try:
                q.enqueue("x", group="g")
            except ConfigurationError:
                return None
            raise AssertionError("the script-free mode took group=")
        return run(q, ctx)

    return op


SCENARIOS: dict[str, Scenario] = {
    "enqueue": Scenario(_waiting, lambda q, c: q.enqueue("new")),
    "enqueue_dedup": Scenario(_waiting, lambda q, c: q.enqueue("new", dedup_key="k")),
    "enqueue_many": Scenario(_waiting, lambda q, c: q.enqueue_many(["n1", "n2", "n3"])),
    # a queue's first write: its name and id counter, under the WATCH of the shard count
    "enqueue_new": Scenario(lambda q: (q.destroy(), {})[1], lambda q, c: q.enqueue("new")),
    "enqueue_delayed": Scenario(_waiting, lambda q, c: q.enqueue("later", delay=10)),
    "claim": Scenario(_waiting, lambda q, c: q.claim()),
    "claim_many": Scenario(_waiting, lambda q, c: q.claim_many(3)),
    "claim_wait": Scenario(lambda q: {}, lambda q, c: (q.enqueue("late"), q.claim(wait=0.5))),
    "ack": Scenario(_held, lambda q, c: q.ack(_held_ctx(c)), lambda c: {_held_ctx(c).id}),
    "ack_many": Scenario(_held, lambda q, c: q.ack_many(c["held"]), _held_ids),
    "extend": Scenario(_held, lambda q, c: q.extend(_held_ctx(c), 60)),
    "release": Scenario(_held, lambda q, c: q.release(_held_ctx(c))),
    "release_delayed": Scenario(_held, lambda q, c: q.release(_held_ctx(c), delay=5)),
    "dead_letter": Scenario(_held, lambda q, c: q.dead_letter(_held_ctx(c), "bad")),
    "reap": Scenario(_mixed, lambda q, c: q.reap()),
    "requeue_dead": Scenario(_mixed, lambda q, c: q.requeue()),
    "requeue_processing": Scenario(_mixed, lambda q, c: q.requeue(source="processing")),
    "requeue_dead_ids": Scenario(_mixed, lambda q, c: q.requeue([c["ids"][2], "999"])),
    "requeue_processing_ids": Scenario(_mixed, lambda q, c: q.requeue([m.id for m in c["held"]], source="processing")),
    "peek_delayed": Scenario(_mixed, lambda q, c: q.peek(10, source="delayed")),
    "stats": Scenario(_mixed, lambda q, c: q.stats()),
    "purge_waiting": Scenario(_mixed, lambda q, c: q.purge(), lambda c: {"*waiting"}),
    "purge_dead": Scenario(_mixed, lambda q, c: q.purge(source="dead"), lambda c: {c["ids"][2]}),
    "purge_delayed": Scenario(_mixed, lambda q, c: q.purge(source="delayed"), lambda c: {"*delayed"}),
    "purge_all": Scenario(_mixed, lambda q, c: q.purge(source="all"), lambda c: {"*"}),
    # (claim-time reaping off: the claim itself meets the expired heads, not a sweep before it)
    "claim_expiring": Scenario(
        _expired_heads, lambda q, c: (setattr(q._core, "claim_reaping", False), q.claim()), lambda c: c["old"]
    ),
    "reap_expiring": Scenario(_expiring, lambda q, c: q.reap(), lambda c: c["old"]),
    "schedule": Scenario(_waiting, lambda q, c: q.schedule("s", every=10, body="tick")),
    "schedule_change": Scenario(_scheduled, lambda q, c: q.schedule("s", every=5, body="tock")),
    "schedule_pause": Scenario(_scheduled, lambda q, c: q.pause_schedule("s")),
    "schedule_fire_due": Scenario(_scheduled, lambda q, c: q.reap()),
    "schedule_fire_many": Scenario(_scheduled_many, lambda q, c: q.reap()),
    "schedule_fire_plain": Scenario(_scheduled_plain, lambda q, c: q.reap()),
    "schedule_fire_now": Scenario(_scheduled, lambda q, c: q.fire_schedule("s")),
    "claim_rate_limited": Scenario(_limited(rate_limit="3/1000"), lambda q, c: q.claim_many(3)),
    "claim_in_flight_capped": Scenario(_limited(max_in_flight=3), lambda q, c: q.claim_many(3)),
    "claim_throttled": Scenario(_throttled, lambda q, c: q.claim()),
    "throttle": Scenario(_waiting, lambda q, c: q.throttle(5)),
    "release_throttled": Scenario(_held, lambda q, c: q.release_throttled(_held_ctx(c), 5)),
    "claim_many_chunked": Scenario(_waiting, _chunked(lambda q, c: q.claim_many(3))),
    "ack_many_chunked": Scenario(_held, _chunked(lambda q, c: q.ack_many(c["held"])), _held_ids),
    "reap_chunked": Scenario(_mixed, _chunked(lambda q, c: q.reap())),
    "requeue_processing_chunked": Scenario(_mixed, _chunked(lambda q, c: q.requeue(source="processing"))),
    "purge_all_chunked": Scenario(_mixed, _chunked(lambda q, c: q.purge(source="all")), lambda c: {"*"}),
    "enqueue_grouped": Scenario(_grouped, _grouped_op(lambda q, c: q.enqueue("a4", group="a"))),
    "enqueue_many_grouped": Scenario(_grouped, _grouped_op(lambda q, c: q.enqueue_many(["e1", "e2"], group="e"))),
    "enqueue_grouped_delayed": Scenario(_grouped, _grouped_op(lambda q, c: q.enqueue("e1", group="a", delay=5))),
    "claim_grouped": Scenario(_grouped, _grouped_op(lambda q, c: q.claim_many(10))),
    "ack_grouped": Scenario(_grouped, _grouped_op(lambda q, c: q.ack(_held_ctx(c))), _held_ids),
    "dead_letter_grouped": Scenario(_grouped, _grouped_op(lambda q, c: q.dead_letter(_held_ctx(c), "bad"))),
    "release_grouped_delayed": Scenario(_grouped, _grouped_op(lambda q, c: q.release(_held_ctx(c), delay=5))),
    "reap_grouped": Scenario(_grouped, _grouped_op(lambda q, c: q.reap())),
    "requeue_grouped": Scenario(_grouped, _grouped_op(lambda q, c: q.requeue())),
    "purge_grouped": Scenario(_grouped, _grouped_op(lambda q, c: q.purge()), lambda c: {"*waiting"}),
    "purge_grouped_all": Scenario(_grouped, _grouped_op(lambda q, c: q.purge(source="all")), lambda c: {"*"}),
    "group_concurrency_raise": Scenario(_grouped, _grouped_op(lambda q, c: _raised(q, group_concurrency=3))),
}
