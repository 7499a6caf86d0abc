"""Bad input and overwritten keys get a clear error and change nothing."""

from __future__ import annotations

import re
from typing import Callable

import pytest
import redis

import keyqueue
from keyqueue import (
    ConfigurationError,
    CorruptQueue,
    InvalidArgument,
    InvalidQueueName,
    KeyQueueError,
    MessageTooLarge,
    Queue,
)
from keyqueue.queue import list_queues
from keyqueue.server import free_port

from ..support.helpers import snapshot


def test_every_error_is_a_keyqueue_error() -> None:
    for name in keyqueue.__all__:
        obj = getattr(keyqueue, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, KeyQueueError)
    assert issubclass(InvalidQueueName, ValueError) and issubclass(MessageTooLarge, ValueError)


def test_invalid_name_is_refused_before_any_connection() -> None:
    dead_url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(InvalidQueueName, match="invalid queue name 'no spaces'"):
        Queue("no spaces", url=dead_url)


def test_too_large_body_changes_nothing(make_queue, r: redis.Redis) -> None:
    q = make_queue(max_body_bytes=10)
    q.enqueue("0123456789")
    before = snapshot(r)
    with pytest.raises(MessageTooLarge, match="12 bytes exceeds max_body_bytes=10"):
        q.enqueue("é" * 6)  # 6 characters, 12 UTF-8 bytes
    with pytest.raises(MessageTooLarge):
        q.enqueue_many(["ok", "x" * 11])
    assert snapshot(r) == before


@pytest.mark.parametrize("body", [123, None, {"a": 1}, ["x"], 1.5])
def test_non_bytes_bodies_raise_plain_type_error(q: Queue, r: redis.Redis, body: object) -> None:
    before = snapshot(r)
    with pytest.raises(TypeError) as info:
        q.enqueue(body)  # type: ignore[arg-type]
    assert type(info.value) is TypeError and "bytes or str" in str(info.value)
    with pytest.raises(TypeError):
        q.enqueue_many([b"fine", body])  # type: ignore[list-item]
    assert snapshot(r) == before


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.enqueue("x", delay=-1),
        lambda q: q.enqueue("x", delay=float("nan")),
        lambda q: q.enqueue("x", dedup_key=""),
        lambda q: q.enqueue("x", dedup_key=5),
        lambda q: q.claim_many(0),
        lambda q: q.claim(visibility_timeout=0),
        lambda q: q.claim(wait=-1),
        lambda q: q.peek(source="everything"),
        lambda q: q.peek(-1),
        lambda q: q.purge(source="processing"),
        lambda q: q.requeue(source="waiting"),
    ],
)
def test_bad_arguments(q: Queue, r: redis.Redis, call: Callable[[Queue], object]) -> None:
    q.enqueue("keep")
    before = snapshot(r)
    with pytest.raises(InvalidArgument):
        call(q)
    assert snapshot(r) == before


def test_bad_settings_are_refused_before_writing(make_queue, r: redis.Redis) -> None:
    with pytest.raises(InvalidArgument, match="visibility_timeout"):
        make_queue(visibility_timeout=-5)
    assert r.keys("*") == []


def test_connection_errors() -> None:
    with pytest.raises(ConfigurationError, match="either client= or url="):
        Queue("q", client=redis.Redis(), url="redis://localhost")
    with pytest.raises(ConfigurationError) as info:
        Queue("q", url="http://admin:hunter2@example.com:6379/0")
    assert "hunter2" not in str(info.value) and "***" in str(info.value)
    # Constructing never fails on an unreachable Redis (a module-level Queue must import);
    # the first operation raises.
    q = Queue("q", url=f"redis://127.0.0.1:{free_port()}/0", visibility_timeout=5)
    for op in (lambda: q.enqueue("x"), q.claim, q.stats, q.length):
        with pytest.raises(redis.ConnectionError):
            op()


def test_a_decoding_client_still_gets_bytes(redis_server) -> None:
    q = Queue("dec", client=redis.Redis(port=redis_server.port, decode_responses=True))
    q.enqueue(b"\xff\x00")
    m = q.claim()
    assert m is not None and m.body == b"\xff\x00" and m.ack()


# -- keys overwritten with the wrong type -----------------------------------------------------

OPS: dict[str, Callable] = {
    "enqueue": lambda q, s: q.enqueue("new"),
    "enqueue_many": lambda q, s: q.enqueue_many(["n1", "n2"]),
    "enqueue_delayed": lambda q, s: q.enqueue("later", delay=5),
    "claim": lambda q, s: q.claim(),
    "ack": lambda q, s: q.ack(s["held"]),
    "extend": lambda q, s: q.extend(s["held"], 60),
    "release": lambda q, s: q.release(s["held"]),
    "release_delayed": lambda q, s: q.release(s["held"], delay=5),
    "dead_letter": lambda q, s: q.dead_letter(s["held"], "x"),
    "reap": lambda q, s: q.reap(),
    "requeue_dead": lambda q, s: q.requeue(),
    "requeue_processing": lambda q, s: q.requeue(source="processing"),
    "purge_waiting": lambda q, s: q.purge(),
    "purge_all": lambda q, s: q.purge(source="all"),
    "peek_waiting": lambda q, s: q.peek(),
    "peek_delayed": lambda q, s: q.peek(source="delayed"),
    "stats": lambda q, s: q.stats(),
    "length": lambda q, s: q.length(),
}
ALL_BUT = lambda *names: set(OPS) - set(names)  # noqa: E731
MESSAGE_OPS = {"ack", "extend", "release", "release_delayed", "dead_letter"}
# Which operations read or write each key: each of them must refuse a wrong type.
USERS = {
    "queue": ALL_BUT("length", *MESSAGE_OPS - {"release"}),
    "items": ALL_BUT(*MESSAGE_OPS - {"release"}),
    "processing": ALL_BUT("enqueue", "enqueue_many", "enqueue_delayed", "length"),
    "timers": ALL_BUT("length", "enqueue", "enqueue_many"),
    "dead": {
        "dead_letter",
        "reap",
        "requeue_dead",
        "requeue_processing",
        "purge_waiting",
        "purge_all",
        "peek_waiting",
        "peek_delayed",
        "stats",
    },
    "seq": {"enqueue", "enqueue_many", "enqueue_delayed"},
    "signal": {
        "enqueue",
        "enqueue_many",
        "claim",
        "release",
        "release_delayed",
        "reap",
        "requeue_dead",
        "requeue_processing",
    },
    "item:3": MESSAGE_OPS | {"requeue_processing"},
    # the counters are written by what they count (a claim and a reap may dead-letter)
    # (a claim writes the dead letters and the counters only with max_receives: see below)
    "counters": {"enqueue", "enqueue_many", "enqueue_delayed", "ack", "dead_letter", "reap"},
}


def _setup(make_queue) -> tuple[Queue, dict]:
    q = make_queue("q", visibility_timeout=100)
    q.enqueue_many(["dead", "w1", "w2"])
    q.dead_letter(q.claim())
    q.enqueue("p")  # id 4 ... the held one is id 2 after the next claim: keep ids simple
    held = q.claim()  # id 2
    q.enqueue("delayed", delay=50)
    return q, {"held": held}


@pytest.mark.parametrize("key", sorted(USERS))
def test_overwritten_key_raises_corrupt_queue_and_changes_nothing(make_queue, r: redis.Redis, key: str) -> None:
    q, state = _setup(make_queue)
    held = state["held"]
    if key == "item:3":
        key = f"item:{held.id}"
    full = f"kq:{{q}}:{key}"
    r.delete(full)
    if key == "seq":
        r.rpush(full, "x")
    else:
        r.set(full, "overwritten")
    users = USERS["item:3"] if key.startswith("item:") else USERS[key]
    for name in sorted(users):
        before = snapshot(r)
        with pytest.raises(CorruptQueue) as info:
            OPS[name](q, state)
        assert full in str(info.value), f"{name}: {info.value}"
        assert snapshot(r) == before, f"{name} changed data on a corrupt {key}"


@pytest.mark.parametrize("key", ["dead", "counters", "timers", "signal", "queue", "items", "processing"])
def test_a_claim_that_may_dead_letter_refuses_every_corrupt_key(make_queue, r: redis.Redis, key: str) -> None:
    q = make_queue("q", max_receives=1)
    q.enqueue_many(["a", "b"])
    m = q.claim()
    assert m is not None and q.release(m)  # "a" is out of receives: the next claim dead-letters it
    full = f"kq:{{q}}:{key}"
    r.delete(full)
    r.set(full, "overwritten")
    before = snapshot(r)
    with pytest.raises(CorruptQueue, match=re.escape(full)):
        q.claim()
    assert snapshot(r) == before


def test_overwritten_item_of_a_waiting_message_blocks_claim_without_loss(q: Queue, r: redis.Redis) -> None:
    q.enqueue_many(["a", "b"])
    r.delete("kq:{q}:item:1")
    r.set("kq:{q}:item:1", "junk")
    before = snapshot(r)
    with pytest.raises(CorruptQueue, match=r"kq:\{q\}:item:1"):
        q.claim()
    assert snapshot(r) == before


def test_corrupt_seq_value_and_config(make_queue, r: redis.Redis) -> None:
    q = make_queue()
    r.set("kq:{q}:seq", "not-a-number")
    with pytest.raises(CorruptQueue, match="seq"):
        q.enqueue("x")
    assert r.llen("kq:{q}:queue") == 0
    r.hset("kq:{q}:config", "visibility_timeout", "soon")
    with pytest.raises(CorruptQueue, match="config.*visibility_timeout"):
        make_queue()
    r.delete("kq:{q}:config")
    r.set("kq:{q}:config", "x")
    with pytest.raises(CorruptQueue, match="config"):
        make_queue()
    r.delete("kq:{q}:config")
    r.delete("kq:queues")
    r.set("kq:queues", "x")
    # The registry is shared by every queue: a broken one is reported where it is read
    # (ls, reapers of every queue), and logged, but never stops a queue from working.
    with pytest.raises(CorruptQueue, match="kq:queues"):
        list_queues(r)
    r.delete("kq:{q}:seq")
    assert make_queue(visibility_timeout=3).enqueue("y")
    assert r.get("kq:queues") == b"x"


def test_reap_skips_a_corrupt_item_reaps_the_rest_and_reports_it(make_queue, r: redis.Redis) -> None:
    from ..support.helpers import FakeClock

    clock = FakeClock()
    q = make_queue(visibility_timeout=1, clock=clock)
    q.enqueue_many(["a", "b"])
    q.claim_many(2)
    r.delete("kq:{q}:item:1")
    r.set("kq:{q}:item:1", "junk")
    clock.advance(2)
    with pytest.raises(CorruptQueue, match=r"item:1"):
        q.reap()
    assert r.get("kq:{q}:item:1") == b"junk"
    assert [m.text for m in q.peek()] == ["b"]
