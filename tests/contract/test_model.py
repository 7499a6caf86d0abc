"""Model-based test: random operation sequences against a plain-Python model of one queue.

A hypothesis RuleBasedStateMachine drives enqueue, enqueue_many, claim, claim_many, ack,
ack_many, extend, release, dead_letter, reap, requeue, purge and a hand-moved clock against a
real redis-server, and checks after every step that the queue (through its API and its raw
keys) and the model agree exactly.

The model (verified against keyqueue/lua/*.lua):
- enqueue appends to the FIFO tail (ids "1", "2", ...); with a delay the message is delayed
  until a reap at now >= visible_at moves it to the tail.
- claim takes from the head: receives += 1, a fresh receipt, deadline = now + visibility; a
  message whose receives already reached max_receives goes to dead letters instead (it is not
  delivered and does not count towards ``count``).
- ack/extend/release/dead_letter only act on the current delivery (the id is in flight with
  that receipt); otherwise they return False and change nothing.
- reap: in-flight messages with deadline <= now go back to the tail, or to dead letters when
  receives >= max_receives; delayed messages with visible_at <= now go to the tail.
- requeue resets receives to 0, restarts the age (t) and puts the ids at the tail; purge deletes
  messages for good. A dead letter records when it died (x).
- a dedup_key seen before (within the window, here one hour of real time) returns the first
  id and enqueues nothing, even after that message was acked or purged.

The order in which one reap (or a requeue of every in-flight message) appends several ids is
not specified (it follows timer-bucket and set order), so the model checks that the lists keep
their old prefix and gain exactly the expected ids, then adopts the order Redis chose.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import redis
from hypothesis import HealthCheck, currently_in_test_context, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from keyqueue import Message, Queue
from keyqueue.server import RedisServer

from ..support.helpers import FakeClock

NAME = "model"
BASE = "kq:{" + NAME + "}:"
START_MS = 1_700_000_000_000
DEDUP_WINDOW = 3600.0  # real seconds: dedup keys expire on Redis' own clock, not the fake one

WAITING, PROCESSING, DELAYED, DEAD = "waiting", "processing", "delayed", "dead"


class _Auto:
    """last_error written by the library itself (text not pinned down, only 'some text')."""

    def __repr__(self) -> str:
        return "AUTO"


AUTO = _Auto()

# Durations in ms: boundaries around the bucket widths and the visibility timeouts.
DURATIONS_MS = st.one_of(
    st.sampled_from([1, 2, 250, 999, 1000, 1001, 6999, 7000, 30_000, 59_999, 60_000, 61_000]),
    st.integers(min_value=1, max_value=90_000),
)
DELAYS_MS = st.one_of(st.just(0), DURATIONS_MS)
# Short bodies mostly; some around the 64-byte chunks long bodies are stored in (b, b1, b2,
# ...), and a few around the 6,400-byte limit above which a body is one field again.
BODIES = st.one_of(
    st.binary(max_size=6),
    st.binary(min_size=60, max_size=200),
    st.builds(lambda n, c: c * n, st.sampled_from([6399, 6400, 6401]), st.binary(min_size=1, max_size=1)),
)
DEDUP_KEYS = st.sampled_from(["a", "b", "c"])


@dataclass
class Model:
    id: str
    body: bytes
    t: int  # enqueued ms
    state: str
    receives: int = 0
    deliveries: int = 0  # the item's 'n' field: never reset
    first: int | None = None  # the item's 'f' field: the first delivery's time
    receipt: str | None = None
    timer: int | None = None  # deadline while in flight, visible-at while delayed
    error: Any = None  # None, a str, or AUTO
    receipts: set[str] = field(default_factory=set)
    died: int | None = None  # the item's 'x' field: when it was dead-lettered


def make_machine(
    client: redis.Redis, scripting: bool = True, new_queue: Callable[..., Queue] | None = None
) -> type[RuleBasedStateMachine]:
    """``new_queue(name, **kw)`` builds the queue under test (default: a sync Queue on
    ``client``; the async face gives a keyqueue.aio.Queue behind tests/support/async_face.py)."""
    under_test = new_queue or (lambda name, **kw: Queue(name, client=client, **kw))

    class QueueMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            client.flushdb()
            self.r = client
            self.clock = FakeClock()
            self.now = START_MS
            self._set_clock(START_MS)
            self.q: Queue | None = None
            self.msgs: dict[str, Model] = {}  # live messages
            self.waiting: list[str] = []
            self.dead: list[str] = []
            self.gone: set[str] = set()  # acked or purged ids
            self.next_id = 1
            self.dedup: dict[str, str] = {}
            self.held: list[Message] = []  # every delivery ever handed out (most go stale)
            self.purges = 0
            self.seen: Counter[str] = Counter()  # paths taken (also hypothesis events)
            self.counts: Counter[str] = Counter()  # what the counters hash must hold
            self.max_receives: int | None = None
            self.bucket_ms = 1
            self.visibility_ms = 1

        # -- setup -----------------------------------------------------------------------

        @initialize(
            bucket_seconds=st.sampled_from([0.001, 1, 7, 60]),
            max_receives=st.sampled_from([None, 1, 2, 3]),
            visibility=st.sampled_from([0.5, 1, 5, 30]),
            bodies=st.lists(BODIES, max_size=4),
        )
        def setup(
            self, bucket_seconds: float, max_receives: int | None, visibility: float, bodies: list[bytes]
        ) -> None:
            writer = Queue(
                NAME,
                client=self.r,
                clock=self.clock,
                scripting=scripting,
                bucket_seconds=bucket_seconds,
                max_receives=max_receives,
                visibility_timeout=visibility,
                dedup_window=DEDUP_WINDOW,
            )
            # The queue under test reads its settings back from the config hash.
            self.q = under_test(NAME, clock=self.clock, scripting=scripting)
            assert self.q.settings == writer.settings
            # Reaps are explicit steps of this model; claim-time reaping (whose timing follows
            # the real clock, not this fake one) has tests of its own (test_self_healing.py).
            self.q._core.claim_reaping = False
            self.max_receives = max_receives
            self.note(f"setup max_receives={max_receives} bucket={bucket_seconds} vis={visibility}")
            self.bucket_ms = max(1, round(bucket_seconds * 1000))
            self.visibility_ms = round(visibility * 1000)
            # A few waiting messages to start from, so short runs still claim something.
            assert self.q.enqueue_many(bodies) == [self._new(b, 0) for b in bodies]

        # -- helpers -----------------------------------------------------------------------

        def note(self, what: str) -> None:
            self.seen[what] += 1
            if currently_in_test_context():
                event(what)

        def _set_clock(self, ms: int) -> None:
            """FakeClock in seconds such that the scripts see exactly ``ms``."""
            x = ms / 1000
            while int(x * 1000) < ms:
                x = math.nextafter(x, math.inf)
            while int(x * 1000) > ms:
                x = math.nextafter(x, -math.inf)
            self.clock.now = x
            self.now = ms

        def ids_in(self, state: str) -> list[str]:
            return sorted((i for i, m in self.msgs.items() if m.state == state), key=int)

        def current(self, msg: Message) -> bool:
            m = self.msgs.get(msg.id)
            return m is not None and m.state == PROCESSING and msg.receipt is not None and m.receipt == msg.receipt

        def pick(self, data: st.DataObject) -> Message:
            live = [m for m in self.held if self.current(m)]
            if live and data.draw(st.booleans(), label="prefer current"):
                return data.draw(st.sampled_from(live), label="current delivery")
            return data.draw(st.sampled_from(self.held), label="any delivery")

        def _new(self, body: bytes, delay_ms: int) -> str:
            if len(body) > 64:
                self.note("enqueue: chunked body" if len(body) <= 6400 else "enqueue: huge body")
            mid = str(self.next_id)
            self.next_id += 1
            self.counts["enqueued"] += 1
            if delay_ms > 0:
                self.msgs[mid] = Model(mid, body, self.now, DELAYED, timer=self.now + delay_ms)
            else:
                self.msgs[mid] = Model(mid, body, self.now, WAITING)
                self.waiting.append(mid)
            return mid

        def _to_waiting(self, m: Model) -> None:
            m.state, m.receipt, m.timer = WAITING, None, None
            self.waiting.append(m.id)

        def _to_dead(self, m: Model, error: Any = None) -> None:
            m.state, m.receipt, m.timer, m.died = DEAD, None, None, self.now
            self.counts["dead_lettered"] += 1
            if error is not None:
                m.error = error
            self.dead.append(m.id)

        def _delete(self, mid: str) -> None:
            m = self.msgs.pop(mid)
            if m.state == WAITING:
                self.waiting.remove(mid)
            elif m.state == DEAD:
                self.dead.remove(mid)
            self.gone.add(mid)

        def _check_error(self, got: str | None, want: Any) -> None:
            if want is AUTO:
                assert got, "expected a last_error written by the library"
            else:
                assert got == want

        def _check_message(self, msg: Message, m: Model) -> None:
            assert msg.id == m.id
            assert msg.body == m.body
            assert msg.receives == m.receives
            assert msg.enqueued_at == m.t / 1000
            assert msg.deadline == (None if m.timer is None else m.timer / 1000)
            self._check_error(msg.last_error, m.error)

        def _adopt_tail(self, key: str, model_list: list[str], added: set[str]) -> None:
            """Redis appended ``added`` to ``key`` in an unspecified order: check and adopt it."""
            actual = [x.decode() for x in self.r.lrange(key, 0, -1)]
            k = len(model_list)
            assert actual[:k] == model_list, f"{key}: old entries changed"
            tail = actual[k:]
            assert len(tail) == len(set(tail)) and set(tail) == added, (key, tail, added)
            model_list.extend(tail)

        # -- producing ---------------------------------------------------------------------

        @rule(body=BODIES, delay_ms=DELAYS_MS, dedup_key=st.one_of(st.none(), DEDUP_KEYS))
        def enqueue(self, body: bytes, delay_ms: int, dedup_key: str | None) -> None:
            assert self.q is not None
            got = self.q.enqueue(body, delay=delay_ms / 1000, dedup_key=dedup_key)
            if dedup_key is not None and dedup_key in self.dedup:
                gone = self.dedup[dedup_key] in self.gone
                self.note("enqueue: dedup hit" + (" (message gone)" if gone else ""))
                assert got == self.dedup[dedup_key]
                return
            want = self._new(body, delay_ms)
            assert got == want
            if dedup_key is not None:
                self.dedup[dedup_key] = want

        @rule(bodies=st.lists(BODIES, max_size=5), delay_ms=DELAYS_MS)
        def enqueue_many(self, bodies: list[bytes], delay_ms: int) -> None:
            assert self.q is not None
            got = self.q.enqueue_many(bodies, delay=delay_ms / 1000)
            assert got == [self._new(b, delay_ms) for b in bodies]

        # -- consuming ---------------------------------------------------------------------

        def _claim(self, count: int, vis_ms: int | None, single: bool) -> list[Message]:
            assert self.q is not None
            vis = None if vis_ms is None else vis_ms / 1000
            if single:
                one = self.q.claim(visibility_timeout=vis)
                got = [] if one is None else [one]
            else:
                got = self.q.claim_many(count, visibility_timeout=vis)
            deadline = self.now + (self.visibility_ms if vis_ms is None else vis_ms)
            delivered: list[Model] = []
            while len(delivered) < count and self.waiting:
                m = self.msgs[self.waiting.pop(0)]
                if self.max_receives is not None and m.receives >= self.max_receives:
                    self._to_dead(m, m.error if m.error is not None else AUTO)
                    self.note("claim: dead-lettered at claim time")
                else:
                    m.state, m.timer = PROCESSING, deadline
                    m.receives += 1
                    m.deliveries += 1
                    if m.first is None:
                        m.first = self.now
                    delivered.append(m)
            assert [g.id for g in got] == [m.id for m in delivered]
            for msg, m in zip(got, delivered):
                assert msg.receipt and msg.receipt not in m.receipts
                m.receipt = msg.receipt
                m.receipts.add(msg.receipt)
                self._check_message(msg, m)
                assert msg.queue is self.q
                self.held.append(msg)
            return got

        def _ack(self, msg: Message) -> None:
            assert self.q is not None
            want = self.current(msg)
            self.note(f"ack: current={want}")
            assert self.q.ack(msg) is want
            if want:
                self.counts["acked"] += 1
                self._delete(msg.id)

        def _extend(self, msg: Message, seconds_ms: int) -> None:
            assert self.q is not None
            want = self.current(msg)
            before = msg.deadline
            self.note(f"extend: current={want}")
            assert self.q.extend(msg, seconds_ms / 1000) is want
            if want:
                self.msgs[msg.id].timer = self.now + seconds_ms
                assert msg.deadline == (self.now + seconds_ms) / 1000
            else:
                assert msg.deadline == before

        def _release(self, msg: Message, delay_ms: int, error: str | None) -> None:
            assert self.q is not None
            want = self.current(msg)
            self.note(f"release: current={want}")
            assert self.q.release(msg, delay=delay_ms / 1000, error=error) is want
            if not want:
                return
            m = self.msgs[msg.id]
            if error is not None:
                m.error = error
            if delay_ms > 0:
                m.state, m.receipt, m.timer = DELAYED, None, self.now + delay_ms
            else:
                self._to_waiting(m)

        def _dead_letter(self, msg: Message, reason: str) -> None:
            assert self.q is not None
            want = self.current(msg)
            self.note(f"dead_letter: current={want}")
            assert self.q.dead_letter(msg, reason) is want
            if want:
                self._to_dead(self.msgs[msg.id], reason or None)

        @rule()
        def claim(self) -> None:
            self._claim(1, None, single=True)

        @rule(count=st.integers(1, 5), vis_ms=st.one_of(st.none(), DURATIONS_MS), single=st.booleans())
        def claim_with(self, count: int, vis_ms: int | None, single: bool) -> None:
            """claim(visibility_timeout=...) or claim_many(count, visibility_timeout=...)."""
            self._claim(1 if single else count, vis_ms, single=single)

        @rule(
            outcome=st.sampled_from(["ack", "retry", "retry later", "give up", "crash"]),
            vis_ms=st.one_of(st.none(), DURATIONS_MS),
        )
        def worker(self, outcome: str, vis_ms: int | None) -> None:
            """A worker's cycle: claim one message, then handle it (a crash leaves it in flight)."""
            for msg in self._claim(1, vis_ms, single=True):
                if outcome == "ack":
                    self._ack(msg)
                elif outcome == "retry":
                    self._release(msg, 0, "failed")
                elif outcome == "retry later":
                    self._release(msg, 1000, None)
                elif outcome == "give up":
                    self._dead_letter(msg, "poison")

        @precondition(lambda self: self.held)
        @rule(data=st.data())
        def ack(self, data: st.DataObject) -> None:
            self._ack(self.pick(data))

        @precondition(lambda self: self.held)
        @rule(data=st.data())
        def ack_many(self, data: st.DataObject) -> None:
            assert self.q is not None
            n = data.draw(st.integers(0, 4), label="how many")
            batch = [self.pick(data) for _ in range(n)]
            # A delivery listed twice is acknowledged (and counted) once.
            want = {m.id for m in batch if self.current(m)}
            if len(want) < len([m for m in batch if self.current(m)]):
                self.note("ack_many: a current delivery listed twice")
            assert self.q.ack_many(batch) == len(want)
            self.counts["acked"] += len(want)
            for mid in want:
                self._delete(mid)

        @precondition(lambda self: self.held)
        @rule(data=st.data(), seconds_ms=st.one_of(st.just(0), DURATIONS_MS))
        def extend(self, data: st.DataObject, seconds_ms: int) -> None:
            self._extend(self.pick(data), seconds_ms)

        @precondition(lambda self: self.held)
        @rule(data=st.data(), delay_ms=DELAYS_MS, error=st.one_of(st.none(), st.sampled_from(["", "oops"])))
        def release(self, data: st.DataObject, delay_ms: int, error: str | None) -> None:
            self._release(self.pick(data), delay_ms, error)

        @precondition(lambda self: self.held)
        @rule(data=st.data(), reason=st.sampled_from(["", "bad input"]))
        def dead_letter(self, data: st.DataObject, reason: str) -> None:
            self._dead_letter(self.pick(data), reason)

        @rule()
        def receiptless_messages_change_nothing(self) -> None:
            """Messages from peek carry no receipt: every receipt operation returns False."""
            assert self.q is not None
            for source in (PROCESSING, WAITING, DEAD):
                for msg in self.q.peek(3, source=source):
                    assert msg.receipt is None
                    assert self.q.ack(msg) is False
                    assert self.q.ack_many([msg]) == 0
                    assert self.q.extend(msg, 5) is False
                    assert self.q.release(msg) is False
                    assert self.q.dead_letter(msg, "x") is False

        # -- maintenance -------------------------------------------------------------------

        @rule()
        def reap(self) -> None:
            assert self.q is not None
            res = self.q.reap()
            to_waiting: set[str] = set()
            to_dead: set[str] = set()
            released = 0
            for m in self.msgs.values():
                if m.timer is None or m.timer > self.now:
                    continue
                if m.state == DELAYED:
                    released += 1
                    to_waiting.add(m.id)
                elif self.max_receives is not None and m.receives >= self.max_receives:
                    self.note("reap: dead-lettered an expired delivery")
                    to_dead.add(m.id)
                    if m.error is None:
                        m.error = AUTO
                else:
                    to_waiting.add(m.id)
                m.state = DEAD if m.id in to_dead else WAITING
                m.receipt, m.timer = None, None
                if m.id in to_dead:
                    m.died = self.now
            self.note(f"reap: moved {min(res.total, 3)}{'+' if res.total >= 3 else ''}")
            assert (res.requeued, res.dead_lettered, res.delayed_released) == (
                len(to_waiting) - released,
                len(to_dead),
                released,
            )
            self.counts["redelivered"] += len(to_waiting) - released
            self.counts["dead_lettered"] += len(to_dead)
            self._adopt_tail(BASE + "queue", self.waiting, to_waiting)
            self._adopt_tail(BASE + "dead", self.dead, to_dead)

        @rule(source=st.sampled_from([DEAD, PROCESSING]), data=st.data())
        def requeue_ids(self, source: str, data: st.DataObject) -> None:
            assert self.q is not None
            known = [str(i) for i in range(1, self.next_id + 2)]  # includes never-issued ids
            in_source = self.dead if source == DEAD else self.ids_in(PROCESSING)
            choice = st.sampled_from(known)
            if in_source:
                choice = st.one_of(st.sampled_from(in_source), choice)
            ids = data.draw(st.lists(choice, max_size=4), label="ids")
            n = self.q.requeue(ids, source=source)  # type: ignore[arg-type]
            want = 0
            for mid in ids:
                m = self.msgs.get(mid)
                if m is None or m.state != source:
                    continue
                if source == DEAD:
                    self.dead.remove(mid)
                m.receives, m.t, m.died = 0, self.now, None  # the age restarts
                self._to_waiting(m)
                want += 1
            self.note(f"requeue {source} by ids: {'some' if want else 'none'} requeued")
            assert n == want

        @rule(source=st.sampled_from([DEAD, PROCESSING]))
        def requeue_all(self, source: str) -> None:
            assert self.q is not None
            n = self.q.requeue(source=source)  # type: ignore[arg-type]
            if source == DEAD:
                ids = list(self.dead)
                self.dead.clear()
                for mid in ids:
                    m = self.msgs[mid]
                    m.receives, m.t, m.died = 0, self.now, None
                    self._to_waiting(m)
            else:
                ids = self.ids_in(PROCESSING)
                for mid in ids:
                    m = self.msgs[mid]
                    m.state, m.receipt, m.timer, m.receives, m.t = WAITING, None, None, 0, self.now
                self._adopt_tail(BASE + "queue", self.waiting, set(ids))
            assert n == len(ids)

        @precondition(lambda self: self.purges < 2)  # rare: it wipes the state the rest builds
        @rule(source=st.sampled_from([WAITING, DELAYED, DEAD, "all"]))
        def purge(self, source: str) -> None:
            assert self.q is not None
            self.purges += 1
            n = self.q.purge(source=source)  # type: ignore[arg-type]
            doomed = [i for i, m in self.msgs.items() if source == "all" or m.state == source]
            for mid in doomed:
                self._delete(mid)
            assert n == len(doomed)

        # -- time ----------------------------------------------------------------------------

        @rule(ms=st.one_of(st.sampled_from([0, 1, 499, 1000]), DURATIONS_MS), then_reap=st.booleans())
        def advance(self, ms: int, then_reap: bool) -> None:
            self._set_clock(self.now + ms)
            if then_reap:
                self.reap()

        @precondition(lambda self: any(m.timer is not None and m.timer > self.now for m in self.msgs.values()))
        @rule(offset=st.sampled_from([-1, 0, 1]), then_reap=st.booleans(), data=st.data())
        def advance_to_a_timer(self, offset: int, then_reap: bool, data: st.DataObject) -> None:
            """Land exactly on (or 1 ms around) a pending deadline / visible-at."""
            timers = sorted({m.timer for m in self.msgs.values() if m.timer is not None and m.timer > self.now})
            target = data.draw(st.sampled_from(timers), label="timer")
            self._set_clock(max(self.now, target + offset))
            if then_reap:
                self.reap()

        # -- checks ----------------------------------------------------------------------------

        @invariant()
        def api_agrees(self) -> None:
            if self.q is None:
                return
            q = self.q
            processing, delayed = self.ids_in(PROCESSING), self.ids_in(DELAYED)
            want_delayed = sorted(delayed, key=lambda i: (self.msgs[i].timer, int(i)))
            stats = q.stats()
            head = self.msgs[self.waiting[0]] if self.waiting else None
            age = None if head is None else max(0.0, (self.now - head.t) / 1000)
            assert (stats.waiting, stats.processing, stats.delayed, stats.dead, stats.oldest_age) == (
                len(self.waiting),
                len(processing),
                len(delayed),
                len(self.dead),
                age,
            )
            assert len(q) == len(self.waiting)
            # A short peek of the delayed ones stops early (bucket by bucket): still the first.
            assert [m.id for m in q.peek(2, source=DELAYED)] == want_delayed[:2]
            for source, want in (
                (WAITING, self.waiting),
                (DEAD, self.dead),
                (PROCESSING, processing),
                (DELAYED, want_delayed),
            ):
                got = q.peek(1000, source=source)  # type: ignore[arg-type]
                assert [m.id for m in got] == want, source
                for msg in got:
                    assert msg.receipt is None
                    self._check_message(msg, self.msgs[msg.id])

        @invariant()
        def redis_agrees(self) -> None:
            if self.q is None:
                return
            r = self.r
            keys = {k.decode() for k in r.scan_iter(match=BASE + "*", count=1000)}
            pipe = r.pipeline(transaction=False)
            pipe.get(BASE + "seq")
            pipe.lrange(BASE + "queue", 0, -1)
            pipe.smembers(BASE + "items")
            pipe.smembers(BASE + "processing")
            pipe.lrange(BASE + "dead", 0, -1)
            pipe.zrange(BASE + "timers", 0, -1, withscores=True)
            pipe.llen(BASE + "signal")
            timer_keys = sorted(k for k in keys if k.startswith(BASE + "timer:"))
            for k in timer_keys:
                pipe.smembers(k)
            item_keys = sorted(k for k in keys if k.startswith(BASE + "item:"))
            for k in item_keys:
                pipe.hgetall(k)
            dedup_keys = sorted(k for k in keys if k.startswith(BASE + "dedup:"))
            for k in dedup_keys:
                pipe.get(k)
            out = pipe.execute()
            seq, queue, items, proc, dead, timers, signal = out[:7]
            rest = out[7:]
            sets = dict(zip(timer_keys, rest[: len(timer_keys)]))
            hashes = dict(zip(item_keys, rest[len(timer_keys) : len(timer_keys) + len(item_keys)]))
            dedups = dict(zip(dedup_keys, rest[len(timer_keys) + len(item_keys) :]))

            def dec(xs: Any) -> Any:
                return [x.decode() for x in xs]

            assert int(seq or 0) == self.next_id - 1
            assert dec(queue) == self.waiting
            assert set(dec(items)) == set(self.waiting)  # items == ids in the list
            assert len(queue) == len(set(queue))
            assert set(dec(proc)) == set(self.ids_in(PROCESSING))
            assert dec(dead) == self.dead
            assert signal <= 1
            assert {k[len(BASE + "dedup:") :]: v.decode() for k, v in dedups.items()} == self.dedup

            # Every live id has an item hash; no acked/purged id does.
            assert {k[len(BASE + "item:") :] for k in item_keys} == set(self.msgs)
            for k, h in hashes.items():
                m = self.msgs[k[len(BASE + "item:") :]]
                fields = {f.decode(): v for f, v in h.items()}
                if "c" in fields and "r" not in fields:  # a first delivery stored lean
                    first = re.fullmatch(rb"1-(\d+)", fields["c"])
                    assert first is not None and "n" not in fields and "f" not in fields, fields
                    fields.update(r=b"1", n=b"1", f=first.group(1))
                parts = sorted(int(f[1:]) for f in fields if f[0] == "b" and f != "b")
                assert parts == list(range(1, len(parts) + 1)), fields.keys()  # b, b1, b2, ...
                others = set(fields) - {f"b{i}" for i in parts}
                assert others <= {"b", "t", "r", "n", "c", "d", "e", "f", "x"}, others
                body = fields["b"] + b"".join(fields[f"b{i}"] for i in parts)
                assert body == m.body
                assert int(fields["t"]) == m.t
                assert (int(fields["x"]) if "x" in fields else None) == m.died
                assert int(fields.get("r", b"0")) == m.receives
                assert int(fields.get("n", b"0")) == m.deliveries
                assert (int(fields["f"]) if "f" in fields else None) == m.first
                assert (fields["c"].decode() if "c" in fields else None) == m.receipt
                assert (int(fields["d"]) if "d" in fields else None) == m.timer
                e = fields.get("e")
                self._check_error(None if e is None else e.decode(), m.error)
                # Exactly one place for every live id.
                places = [m.id in self.waiting, m.state == PROCESSING, m.state == DELAYED, m.id in self.dead]
                assert sum(places) == 1 and self.dead.count(m.id) <= 1

            # Timer sets hold exactly the in-flight and delayed ids, each in its own bucket,
            # and the index lists exactly the non-empty buckets, scored no later than their
            # earliest timer (else the reaper would look too late).
            where: dict[str, int] = {}
            for k, members in sets.items():
                b = int(k[len(BASE + "timer:") :])
                for mid in dec(members):
                    assert mid not in where, f"id {mid} in two timer sets"
                    where[mid] = b
            want_where = {
                i: m.timer // self.bucket_ms for i, m in self.msgs.items() if m.state in (PROCESSING, DELAYED)
            }
            assert all(m.timer is not None for m in self.msgs.values() if m.state in (PROCESSING, DELAYED))
            assert where == want_where
            index = {int(b): score for b, score in timers}
            assert set(index) == {int(k[len(BASE + "timer:") :]) for k in timer_keys}
            for b, score in index.items():
                earliest = min(self.msgs[i].timer for i, bb in where.items() if bb == b)
                assert score <= earliest, (b, score, earliest)

            # The counters moved by exactly what happened (a dedup hit, a delayed message
            # becoming visible, a stale ack count nothing).
            counters = {k.decode(): int(v) for k, v in self.r.hgetall(BASE + "counters").items()}
            assert counters.pop("item_format", 2) == 2  # (the queue's mark, no counter)
            assert counters == {k: v for k, v in self.counts.items() if v}
            assert self.q is not None and self.q.counters() == {
                **{
                    name: self.counts[name] for name in ("enqueued", "acked", "redelivered", "dead_lettered", "expired")
                },
                "scheduled": 0,
                "throttled": 0,
            }

            # Nothing but the documented keys.
            expected = {BASE + "config"} | set(timer_keys) | set(item_keys) | set(dedup_keys)
            for key, present in (
                ("seq", self.next_id > 1),
                ("queue", self.waiting),
                ("items", self.waiting),
                ("processing", proc),
                ("dead", self.dead),
                ("timers", timers),
                ("signal", signal),
                ("counters", counters),
            ):
                if present:
                    expected.add(BASE + key)
            assert keys == expected, keys ^ expected

    return QueueMachine


# Passes in ~10 s on an idle machine, several minutes beside the rest of the suite on a slow
# one (its examples are the suite's largest share of CPU); a failure needs time to shrink.
# The async face sends what the sync one does through the same core, so it runs fewer
# examples: what it can get wrong (the awaiting, the Message's methods) shows in any run.
EXAMPLES = {("sync", True): 50, ("sync", False): 30, ("async", True): 20, ("async", False): 12}


@pytest.mark.timeout(600)
def test_queue_agrees_with_model(
    redis_server: RedisServer, scripting: bool, face: str, make_queue: Callable[..., Queue]
) -> None:
    client = redis.Redis(port=redis_server.port)
    try:
        run_state_machine_as_test(
            make_machine(client, scripting, make_queue),
            settings=settings(
                max_examples=EXAMPLES[face, scripting],
                stateful_step_count=40,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
    finally:
        client.close()


def test_model_walks_both_dead_letter_paths(redis_server: RedisServer, scripting: bool) -> None:
    """A fixed run through the machine (random runs reach these paths only now and then):
    claim-time dead-lettering, reap-time dead-lettering, a stale receipt after redelivery,
    delayed release, requeue, and an exact-deadline expiry."""
    client = redis.Redis(port=redis_server.port)
    try:
        m = make_machine(client, scripting)()

        def check() -> None:
            m.api_agrees()
            m.redis_agrees()

        m.setup(bucket_seconds=7, max_receives=2, visibility=5, bodies=[b"a", b"b", b"c"])
        check()
        first = m._claim(1, None, single=True)[0]  # "1": receives 1
        m._release(first, 0, "failed")  # back to the tail
        check()
        m._claim(2, None, single=False)  # "2", "3"
        second = m._claim(1, 1000, single=True)[0]  # "1" again: receives 2 = max_receives
        m._release(second, 0, None)
        check()
        assert m._claim(1, None, single=True) == []  # "1" goes to dead letters at claim time
        assert m.dead == ["1"]
        check()
        m.advance(4999, then_reap=True)  # 1 ms before the deadline of "2" and "3"
        assert m.ids_in(PROCESSING) == ["2", "3"]
        m.advance(1, then_reap=True)  # exactly on it: both back to the tail
        assert sorted(m.waiting) == ["2", "3"]
        check()
        third = m._claim(1, None, single=True)[0]
        m._ack(first)  # stale receipt: nothing happens
        m._extend(first, 60_000)
        m._dead_letter(first, "x")
        check()
        m.advance(5000, then_reap=True)  # receives 2 = max_receives: dead at reap time
        assert third.id in m.dead and m.msgs[third.id].error is AUTO
        check()
        assert m.seen["claim: dead-lettered at claim time"] == 1
        assert m.seen["reap: dead-lettered an expired delivery"] == 1
        m.requeue_all(DEAD)
        assert m.dead == [] and m.waiting[-2:] == ["1", third.id]
        assert m.msgs["1"].receives == m.msgs[third.id].receives == 0
        check()
        late = m._claim(1, None, single=True)[0]
        m._release(late, 1500, None)
        m.advance(1499, then_reap=True)
        assert m.msgs[late.id].state == DELAYED
        m.advance(1, then_reap=True)
        assert m.msgs[late.id].state == WAITING
        check()
    finally:
        client.close()


def test_ack_many_counts_a_repeated_delivery_once(redis_server: RedisServer, scripting: bool) -> None:
    client = redis.Redis(port=redis_server.port)
    try:
        client.flushdb()
        q = Queue("dup", client=client, scripting=scripting)
        q.enqueue("x")
        msg = q.claim()
        assert msg is not None
        assert q.ack_many([msg, msg]) == 1  # one message acknowledged (it was 2 before cedba23)
        assert q.stats().processing == 0 and q.ack_many([msg, msg]) == 0
    finally:
        client.close()
