"""The script-free mode: every operation with plain commands, for servers that deny EVAL.

It follows the ownership protocol of the "Redis Queue System (ex Amazon SQS)" thread: a
claimer reads the head of the list (LINDEX, LRANGE for a batch), SADDs the id to
``processing`` (1 = no other claimer holds it), SREMs it from ``items`` (1 = it was still
waiting: we own it), then writes the delivery and LREMs the list entry. Each later state
change of a message (ack, extend, release, dead letter, reap, requeue) is one MULTI/EXEC,
made conditional on the message's hash by WATCH, so it applies whole or not at all.

What makes it safe when a client dies between two commands: before an operation takes an
id from one state towards another, the id is in a timer set (a claim adds its *intent*
first), so the reaper meets it again and settles it by the rules of ``repair.py``. A round
trip is a batch of commands; every operation costs a fixed number of them.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence

from redis.exceptions import ResponseError

from .core.replies import body_fields, error_for, fields_of, int_or as _int, item_fields, raise_errors
from .core.replies import text as _text, zscore_pair
from .core.results import Claimed, Counts, Enqueued, Fields, Purged, ReapPosition, ReapStep, Requeued
from .core.roundtrip import Command, Op, one, transaction
from .errors import CorruptQueue
from .keys import QueueKeys
from .message import ReapResult
from .repair import Act, Decision, Seen, decide

#: WATCH/EXEC attempts before an operation gives up on a message that keeps changing.
ATTEMPTS = 3
#: Claim passes when the head is contested (each looks further down the list).
CLAIM_ATTEMPTS = 6
#: How long a purge of waiting messages holds them (only matters if the purge dies midway).
PURGE_VISIBILITY_MS = 60_000


def fields_list(ids: Sequence[str], hashes: Sequence[Any]) -> list[Fields]:
    """HGETALL replies of ``ids`` as Fields (missing messages left out)."""
    return [fields_of(i, item_fields(raw)) for i, raw in zip(ids, hashes) if raw]


def _signal(key: str) -> list[Command]:
    """Wake one long-poll waiter; the list keeps at most one token."""
    return [("RPUSH", key, 1), ("LTRIM", key, 0, 0)]


class _Claim:
    """What the passes of one claim gathered."""

    def __init__(self) -> None:
        self.messages: list[Fields] = []
        self.dead = 0
        self.missing = False
        self.next_timer: int | None = None


class CommandOps:
    """The operations of one queue with plain commands (same methods as ScriptOps)."""

    def __init__(self, keys: QueueKeys, clock: Callable[[], float] | None = None):
        self.keys = keys
        self.clock = clock
        k = keys
        self.kinds = {k.seq: "string", k.queue: "list", k.items: "set", k.processing: "set",
                      k.timers: "zset", k.dead: "list", k.signal: "list"}
        self.state_keys = (k.queue, k.items, k.processing, k.timers, k.dead)
        self.waking_keys = (*self.state_keys, k.signal)

    # -- the first round trip of every operation: clock, key types, reads ------------------

    def _open(self, typed: Sequence[str], reads: Sequence[Command] = (),
              watch: Sequence[str] = ()) -> Op[tuple[int, list[Any]]]:
        """Server time (ms), a type check of ``typed`` and of every key read, and the reads."""
        head: list[Command] = [] if self.clock is not None else [("TIME",)]
        head += [("TYPE", key) for key in typed]
        if watch:
            head.append(("WATCH", *watch))
        out = (yield [*head, *reads])
        if self.clock is not None:
            now = round(self.clock() * 1000)
        else:
            sec, usec = out[0]
            now = int(sec) * 1000 + int(usec) // 1000
        self._check_kinds(typed, out[len(head) - len(typed) - (1 if watch else 0):])
        replies = out[len(head):]
        self._raise_errors(reads, replies)
        return now, replies

    def kind(self, key: str) -> str:
        if key in self.kinds:
            return self.kinds[key]
        rest = key[len(self.keys.base):]
        return "hash" if rest.startswith("item:") else "set" if rest.startswith("timer:") else "string"

    def _check_kinds(self, keys: Sequence[str], kinds: Sequence[Any]) -> None:
        """Raise CorruptQueue for the first key whose TYPE reply is neither absent nor its own."""
        for key, kind in zip(keys, kinds):
            if _text(kind) not in ("none", self.kind(key)):
                raise CorruptQueue(key)

    def _types(self, keys: Sequence[str]) -> Op[None]:
        """A round trip that only checks types (keys known after the first one)."""
        self._check_kinds(keys, (yield [("TYPE", k) for k in keys]))

    def _raise_errors(self, cmds: Sequence[Command], replies: Sequence[Any]) -> None:
        raise_errors(cmds, replies, self.keys.base)

    def _commit(self, cmds: Sequence[Command]) -> Op[list[Any] | None]:
        """MULTI/EXEC; None when a watched key changed. An error inside is raised after the
        fact (the types were checked first, so it means a key was overwritten meanwhile).

        A timer set the transaction removes ids from is counted in it too; one left empty
        loses its index entry, in a WATCHed transaction of its own so that a claimer adding
        to it meanwhile keeps it (if we die first, the reaper drops the entry instead)."""
        timer_prefix = self.keys.base + "timer:"
        emptied = list(dict.fromkeys(str(c[1]) for c in cmds
                                     if c[0] == "SREM" and str(c[1]).startswith(timer_prefix)))
        res = yield from transaction([*cmds, *(("SCARD", tk) for tk in emptied)])
        if res is None:
            return None
        self._raise_errors(cmds, res)
        empty = [tk for tk, n in zip(emptied, res[len(cmds):]) if n == 0]
        if empty:
            left = (yield [("WATCH", *empty), *(("EXISTS", tk) for tk in empty)])[1:]
            gone = [tk[len(timer_prefix):] for tk, n in zip(empty, left) if n == 0]
            if gone:
                yield from transaction([("ZREM", self.keys.timers, *gone)])
            else:
                (yield from one(("UNWATCH",)))
        return res[: len(cmds)]

    def _tk(self, t: int, bucket_ms: int) -> tuple[str, int]:
        b = t // bucket_ms
        return self.keys.timer(b), b

    # -- producing ---------------------------------------------------------------------------

    def enqueue_one(self, body: bytes, delay_ms: int, bucket_ms: int,
                    dedup_key: str | None, dedup_ms: int) -> Op[Enqueued]:
        return (yield from self._enqueue([body], delay_ms, bucket_ms, dedup_key, dedup_ms))

    def enqueue(self, bodies: Sequence[bytes], delay_ms: int, bucket_ms: int) -> Op[Enqueued]:
        return (yield from self._enqueue(bodies, delay_ms, bucket_ms, None, 0))

    def enqueue_each(self, bodies: Sequence[bytes], delays_ms: Sequence[int],
                     dedup_keys: Sequence[str | None], bucket_ms: int, dedup_ms: int) -> Op[Enqueued]:
        """Messages with their own delay and dedup key: one enqueue each."""
        ids: list[str] = []
        missing = False
        for body, delay, key in zip(bodies, delays_ms, dedup_keys):
            one_ = yield from self._enqueue([body], delay, bucket_ms, key, dedup_ms)
            ids += one_.ids
            missing = one_.config_missing
        return Enqueued(ids, missing)

    def _enqueue(self, bodies: Sequence[bytes], delay_ms: int, bucket_ms: int,
                 dedup_key: str | None, dedup_ms: int) -> Op[Enqueued]:
        k = self.keys
        typed = [k.seq, k.queue, k.items, k.signal, *([k.timers] if delay_ms else [])]
        dedup = None if dedup_key is None else k.dedup(dedup_key)
        # WATCH the dedup key before reading it: a second producer with the same key
        # between our read and our EXEC makes the EXEC fail, and we return its id.
        reads: list[Command] = [("EXISTS", k.config)]
        if dedup is not None:
            reads.append(("GET", dedup))
        now, got = yield from self._open(typed, reads, watch=[dedup] if dedup else [])
        missing = got[0] == 0
        if dedup is not None and got[1] is not None:
            (yield from one(("UNWATCH",)))
            return Enqueued([_text(got[1])], missing)
        at = now + delay_ms
        tk, b = self._tk(at, bucket_ms)
        if delay_ms:
            yield from self._types([tk])
        last = (yield from one(("INCRBY", k.seq, len(bodies),)))
        if isinstance(last, ResponseError):
            raise CorruptQueue(k.seq)
        first = int(last) - len(bodies) + 1
        ids = [str(first + i) for i in range(len(bodies))]
        now_s = str(now)
        tx: list[Command] = []
        if dedup is not None:
            tx.append(("SET", dedup, ids[0], "PX", dedup_ms))
        for mid, body in zip(ids, bodies):
            extra = ["d", str(at)] if delay_ms else []
            tx.append(("HSET", k.item(mid), "t", now_s, *extra, *body_fields(body)))
        if delay_ms:
            tx += [("SADD", tk, *ids), ("ZADD", k.timers, "LT", at, b)]
        else:
            tx += [("RPUSH", k.queue, *ids), ("SADD", k.items, *ids), *_signal(k.signal)]
        if (yield from self._commit(tx)) is None:  # the dedup key was set meanwhile
            return Enqueued([_text((yield from one(("GET", dedup,))))], missing)
        return Enqueued(ids, missing)

    # -- claiming ----------------------------------------------------------------------------

    def claim(self, count: int, visibility_ms: int, bucket_ms: int, max_receives: int | None) -> Op[Claimed]:
        """Up to ``count`` messages. When every head entry it tried was held by another
        claimer, it looks again (a few times), so a claim does not come back empty while
        messages wait behind a contested head."""
        out = _Claim()
        offset = 0
        wanted = count
        for attempt in range(CLAIM_ATTEMPTS):
            dead_before = out.dead
            got, _, busy = yield from self._claim_once(wanted, visibility_ms, bucket_ms, max_receives, out, offset)
            wanted -= len(got)
            if not wanted or not (busy or out.dead > dead_before):
                break
            # Dead letters do not count towards ``count`` (as in the script): go on.
            # Other claimers are taking some: look behind them, a little apart from
            # each other so that a crowd of claimers does not meet on one entry again.
            if busy:
                offset += busy + random.randrange(wanted * (attempt + 1))
        return Claimed(out.messages, out.dead, out.missing, out.next_timer)

    def _claim_once(self, count: int, visibility_ms: int, bucket_ms: int, max_receives: int | None,
                    out: _Claim, offset: int = 0) -> Op[tuple[list[str], int, int]]:
        """One pass of the thread's protocol over the list from ``offset``. Adds the
        delivered messages and dead letters to ``out``; returns their ids, their deadline, and
        how many entries another claimer was in the middle of taking."""
        k = self.keys
        read: Command = (("LINDEX", k.queue, offset) if count == 1
                         else ("LRANGE", k.queue, offset, offset + count - 1))
        # An empty queue costs one round trip of three commands (an idle long-poll does this).
        now, (heads, waiting_len, config, first) = yield from self._open(
            (), [read, ("LLEN", k.queue), ("EXISTS", k.config), ("ZRANGE", k.timers, 0, 0, "WITHSCORES")])
        out.missing = config == 0
        score = zscore_pair(first)
        if score is not None:  # the earliest timer (ours, set below, is later than any due one)
            out.next_timer = int(score) - now
        if count == 1:
            heads = [] if heads is None else [heads]
        ids = list(dict.fromkeys(_text(h) for h in heads))
        deadline = now + visibility_ms
        if not ids:
            return [], deadline, 0
        tk, b = self._tk(deadline, bucket_ms)
        # Reads and type checks first: a wrong type fails here, before anything is written.
        typed = [*self.waking_keys[1:], tk]
        # WATCH the hashes: dropping a stale list entry is only safe while its message has
        # not become waiting again (every way back to waiting writes the hash).
        got = (yield [("WATCH", *(k.item(i) for i in ids)), *(("TYPE", key) for key in typed),
                      *(("HGETALL", k.item(i)) for i in ids)])[1:]
        self._check_kinds(typed, got)
        fields: dict[str, dict[bytes, bytes]] = {}
        for i, raw in zip(ids, got[len(typed):]):
            if isinstance(raw, ResponseError):
                if not fields:
                    raise CorruptQueue(k.item(i))
                ids = ids[: len(fields)]  # claim what precedes it; the next claim reports it
                break
            fields[i] = item_fields(raw)
        # The intent (a timer entry at our deadline), then the ownership steps of the thread.
        # (Index first: a bucket must never hold an id the index does not point to.)
        got = (yield [("ZADD", k.timers, "LT", deadline, b), ("SADD", tk, *ids),
                      *(("SADD", k.processing, i) for i in ids)])
        self._raise_errors([("ZADD", k.timers), ("SADD", tk)], got[:2])
        won = [i for i, a in zip(ids, got[2:]) if a == 1]
        contested = [i for i, a in zip(ids, got[2:]) if a != 1]
        got = (yield [*(("SREM", k.items, i) for i in won),
                      *(("SISMEMBER", k.items, i) for i in contested)])
        owned = [i for i, x in zip(won, got) if x == 1 and fields[i]]
        # Not waiting (or no message behind it): the list entry was stale; give back our SADD.
        stale = [i for i, x in zip(won, got) if not (x == 1 and fields[i])]
        # Held by another claimer but not waiting: a live delivery's stale entry.
        stale += [i for i, x in zip(contested, got[len(won):]) if x != 1]
        busy = len(contested)

        limit = max_receives
        now_s, deadline_s = str(now), str(deadline)
        tx: list[Command] = []
        delivered: list[str] = []
        for i in owned:
            f = fields[i]
            r = _int(f.get(b"r"))
            if limit is not None and r >= limit:
                if b"e" not in f:
                    tx.append(("HSET", k.item(i), "e", f"exceeded max_receives ({max_receives})"))
                tx += [("RPUSH", k.dead, i), ("SREM", k.processing, i), ("SREM", tk, i),
                       ("LREM", k.queue, 1, i)]
                out.dead += 1
                continue
            n = _int(f.get(b"n")) + 1
            f[b"r"], f[b"c"], f[b"d"] = str(r + 1).encode(), f"{n}-{now_s}".encode(), deadline_s.encode()
            tx += [("HSET", k.item(i), "r", r + 1, "n", n, "c", f[b"c"], "d", deadline_s),
                   ("LREM", k.queue, 1, i)]
            delivered.append(i)
            out.messages.append(fields_of(i, f))
        drops: list[Command] = []
        for i in stale:
            if i in won:
                tx.append(("SREM", k.processing, i))
            drops.append(("LREM", k.queue, 1, i))
        if delivered:
            # Re-assert the timer: a reaper may have dropped an older entry for the same id.
            tx += [("SADD", tk, *delivered), ("ZADD", k.timers, "LT", deadline, b)]
            if int(waiting_len) > offset + len(heads):
                tx += _signal(k.signal)
            out.next_timer = visibility_ms if out.next_timer is None else min(out.next_timer, visibility_ms)
        # What we own needs no WATCH; if a stale id's message changed, keep its entry.
        if not (tx or drops):
            (yield from one(("UNWATCH",)))
        elif (yield from self._commit([*tx, *drops])) is None and tx:
            yield from self._commit(tx)
        return delivered, deadline, busy

    def wait_then_claim(self, signals: Sequence[str], timeout: float, count: int,
                        visibility_ms: int, bucket_ms: int, max_receives: int | None) -> Op[Claimed]:
        woken = (yield from one(("BLPOP", *signals, timeout,)))
        if isinstance(woken, ResponseError):
            raise error_for(woken, signals[0])
        return (yield from self.claim(count, visibility_ms, bucket_ms, max_receives))

    # -- one delivery: ack, extend, release, dead letter ---------------------------------------

    def _current(self, typed: Sequence[str], pairs: Sequence[tuple[str, str]]
                 ) -> Op[tuple[int, list[tuple[str, int]]]]:
        """WATCH the items, then which (id, timer) pairs are current deliveries (receipt
        matches and the id is still in processing)."""
        k = self.keys
        item_keys = [k.item(mid) for mid, _ in pairs]
        reads: list[Command] = [("HMGET", key, "c", "d") for key in item_keys]
        reads.append(("SMISMEMBER", k.processing, *(mid for mid, _ in pairs)))
        now, got = yield from self._open(typed, reads, watch=item_keys)
        held = got[-1]
        current, seen = [], set()
        for (mid, receipt), (c, d), h in zip(pairs, got[:-1], held):
            if c is not None and _text(c) == receipt and h == 1 and mid not in seen:
                seen.add(mid)
                current.append((mid, _int(d)))
        return now, current

    def _drop_timer(self, mid: str, d: int, bucket_ms: int) -> list[Command]:
        return [("SREM", self.keys.timer(d // bucket_ms), mid)] if d > 0 else []

    def ack(self, pairs: Sequence[tuple[str, str]], bucket_ms: int) -> Op[int]:
        k = self.keys
        for _ in range(ATTEMPTS):
            _, current = yield from self._current([k.processing, k.timers], pairs)
            if not current:
                (yield from one(("UNWATCH",)))
                return 0
            tx: list[Command] = [("SREM", k.processing, *(mid for mid, _ in current))]
            for mid, d in current:
                tx += self._drop_timer(mid, d, bucket_ms)
            tx.append(("DEL", *(k.item(mid) for mid, _ in current)))
            if (yield from self._commit(tx)) is not None:
                return len(current)
        return 0

    def _one(self, msg_id: str, receipt: str, typed: Sequence[str], bucket_ms: int,
             change: Callable[[int, int], Op[list[Command]]]) -> Op[int | None]:
        """Apply the commands of ``change(now, timer)`` to a current delivery, atomically:
        the server time it applied at, None when the delivery is not current."""
        k = self.keys
        for _ in range(ATTEMPTS):
            now, current = yield from self._current([*typed, k.item(msg_id)], [(msg_id, receipt)])
            if not current:
                (yield from one(("UNWATCH",)))
                return None
            d = current[0][1]
            tx = [*self._drop_timer(msg_id, d, bucket_ms), *(yield from change(now, d))]
            if (yield from self._commit(tx)) is not None:
                return now
        return None

    def _to_timer(self, mid: str, at: int, bucket_ms: int) -> Op[list[Command]]:
        tk, b = self._tk(at, bucket_ms)
        yield from self._types([tk])
        return [("HSET", self.keys.item(mid), "d", at), ("SADD", tk, mid),
                ("ZADD", self.keys.timers, "LT", at, b)]

    def extend(self, msg_id: str, receipt: str, ms: int, bucket_ms: int) -> Op[int | None]:
        """The new deadline in ms, None when the delivery is not current."""
        k = self.keys

        def change(now: int, d: int) -> Op[list[Command]]:
            return (yield from self._to_timer(msg_id, now + ms, bucket_ms))

        at = yield from self._one(msg_id, receipt, [k.processing, k.timers], bucket_ms, change)
        return None if at is None else at + ms

    def release(self, msg_id: str, receipt: str, delay_ms: int, bucket_ms: int,
                error: str | None) -> Op[bool]:
        k = self.keys
        ik = k.item(msg_id)

        def change(now: int, d: int) -> Op[list[Command]]:
            tx: list[Command] = [("SREM", k.processing, msg_id)]
            if error is not None:
                tx.append(("HSET", ik, "e", error))
            if delay_ms > 0:
                timer = yield from self._to_timer(msg_id, now + delay_ms, bucket_ms)
                return [*tx, ("HDEL", ik, "c"), *timer]
            return [*tx, ("HDEL", ik, "c", "d"), ("RPUSH", k.queue, msg_id),
                    ("SADD", k.items, msg_id), *_signal(k.signal)]

        typed = [k.processing, k.timers, k.queue, k.items, k.signal]
        return (yield from self._one(msg_id, receipt, typed, bucket_ms, change)) is not None

    def dead_letter(self, msg_id: str, receipt: str, reason: str, bucket_ms: int) -> Op[bool]:
        k = self.keys
        ik = k.item(msg_id)

        def change(now: int, d: int) -> Op[list[Command]]:
            tx: list[Command] = [("SREM", k.processing, msg_id), ("HDEL", ik, "c", "d"),
                                 ("RPUSH", k.dead, msg_id)]
            return [*tx, ("HSET", ik, "e", reason)] if reason else tx
            yield  # a generator, as change() must be

        return (yield from self._one(msg_id, receipt, [k.processing, k.timers, k.dead], bucket_ms,
                                     change)) is not None

    # -- the reaper ------------------------------------------------------------------------------

    def reap_step(self, bucket_ms: int, max_receives: int | None, limit: int,
                  position: ReapPosition) -> Op[ReapStep]:
        """One due bucket (or one chunk of a large one), by the rules of repair.py."""
        k = self.keys
        bucket, cursor, skip = position
        res = [0, 0, 0]
        broken: list[str] = []
        now, (config,) = yield from self._open(self.waking_keys, [("EXISTS", k.config)])
        missing = config == 0
        if bucket == "":
            due = (yield from one(("ZRANGEBYSCORE", k.timers, "-inf", now, "LIMIT", skip, 1,)))
            if not due:
                return ReapStep(ReapResult(*res), ("", "0", skip), True, missing)
            bucket, cursor = _text(due[0]), "0"
        tk = k.timer(bucket)
        kind, card, scan = (yield [("TYPE", tk), ("SCARD", tk), ("SSCAN", tk, cursor, "COUNT", limit)])
        if _text(kind) not in ("none", "set"):
            return ReapStep(ReapResult(*res), ("", "0", skip + 1), False, missing, [tk])
        whole = cursor == "0" and int(card) <= limit
        if whole:
            members = yield from one(("SMEMBERS", tk))
            ids = [_text(x) for x in members]
            cursor = "0"
        else:
            cursor, ids = _text(scan[0]), [_text(x) for x in scan[1]]
        end = (int(bucket) + 1) * bucket_ms
        earliest, kept = yield from self._settle(tk, ids, now, end, bucket_ms, max_receives, res, broken)
        if whole or cursor == "0":
            # Rescore a bucket examined whole; a large one stays due until it shrinks.
            if not (yield from self._rescore(tk, bucket, earliest if whole else None,
                                             kept if whole else -1, now)):
                skip += 1  # still due: the next step looks past it
            bucket, cursor = "", "0"
        return ReapStep(ReapResult(*res), (bucket, cursor, skip), False, missing, broken)

    def _settle(self, tk: str, ids: list[str], now: int, end: int, bucket_ms: int,
                max_receives: int | None, res: list[int], broken: list[str]) -> Op[tuple[int | None, int]]:
        """Decide and apply each id's rule in one WATCHed transaction. Returns the earliest
        time to look at this bucket again (None when nothing stays) and how many ids stay."""
        k = self.keys
        if not ids:
            return None, 0
        limit = max_receives
        start = len(broken)
        for _ in range(ATTEMPTS):
            del broken[start:]
            item_keys = [k.item(i) for i in ids]
            got = (yield [("WATCH", *item_keys),
                          *(("HMGET", key, "c", "d", "r", "e") for key in item_keys),
                          ("SMISMEMBER", k.processing, *ids), ("SMISMEMBER", k.items, *ids),
                          *(("EXISTS", key) for key in item_keys)])
            n = len(ids)
            hashes, held, waiting, exists = got[1 : n + 1], got[n + 1], got[n + 2], got[n + 3 :]
            plan: dict[str, tuple[Decision, Seen, list[Any]]] = {}
            for i, h, p, w, e in zip(ids, hashes, held, waiting, exists):
                if isinstance(h, ResponseError):
                    broken.append(k.item(i))
                    continue
                seen = Seen(exists=e == 1, receipt=h[0] is not None, timer=None if h[1] is None else int(h[1]),
                            processing=p == 1, waiting=w == 1)
                plan[i] = (decide(seen, now, end), seen, h)
            asks = [i for i, (dec, _, _) in plan.items() if dec.act is Act.ASK_DEAD]
            if asks:
                positions = yield [("LPOS", k.dead, i) for i in asks]
                for i, pos in zip(asks, positions):
                    seen = plan[i][1]
                    seen = Seen(seen.exists, seen.receipt, seen.timer, seen.processing, seen.waiting,
                                dead=pos is not None)
                    plan[i] = (decide(seen, now, end), seen, plan[i][2])
            tx: list[Command] = []
            counts = [0, 0, 0]
            earliest: int | None = None
            kept = len(ids) - len(plan)  # broken items stay
            moved = False
            for i, (dec, seen, h) in plan.items():
                ik = k.item(i)
                if dec.unclaim:
                    tx.append(("SREM", k.processing, i))
                if dec.act is Act.KEEP:
                    assert dec.timer is not None
                    earliest = dec.timer if earliest is None else min(earliest, dec.timer)
                    kept += 1
                    continue
                tx.append(("SREM", tk, i))
                if seen.timer is not None and self.keys.timer(seen.timer // bucket_ms) != tk:
                    tx.append(("SREM", self.keys.timer(seen.timer // bucket_ms), i))
                if dec.act is Act.FORGET:
                    tx += [("SREM", k.processing, i), ("SREM", k.items, i)]
                elif dec.act is Act.EXPIRE:
                    tx += [("SREM", k.processing, i), ("HDEL", ik, "c", "d")]
                    r = _int(h[2])
                    if limit is not None and r >= limit:
                        if h[3] is None:
                            tx.append(("HSET", ik, "e", f"visibility timeout expired on receive {r} of {limit}"))
                        tx.append(("RPUSH", k.dead, i))
                        counts[1] += 1
                    else:
                        tx += [("RPUSH", k.queue, i), ("SADD", k.items, i)]
                        counts[0] += 1
                        moved = True
                elif dec.act is Act.RELEASE:
                    tx += [("HDEL", ik, "c", "d"), ("RPUSH", k.queue, i), ("SADD", k.items, i)]
                    if not seen.receipt and seen.timer is None:
                        tx.append(("HINCRBY", ik, "n", 0))  # a write, so a claimer's WATCH sees it
                    counts[2 if seen.timer is not None and not dec.unclaim else 0] += 1
                    moved = True
                elif dec.act is Act.DROP and seen.waiting and (seen.receipt or seen.timer is not None):
                    tx.append(("HDEL", ik, "c", "d"))
            if moved:
                tx += _signal(k.signal)
            if broken and earliest is None:
                earliest = now  # a corrupt item stays due, like reap.lua
            if not tx:
                (yield from one(("UNWATCH",)))
                return earliest, kept
            if (yield from self._commit(tx)) is not None:
                for j in range(3):
                    res[j] += counts[j]
                return earliest, kept
        return now, -1  # kept changing under us: look again on the next pass

    def _rescore(self, tk: str, bucket: str, earliest: int | None, kept: int,
                 now: int) -> Op[bool]:
        """Point the index at the bucket's earliest remaining timer, or drop an empty bucket,
        unless the bucket holds other ids than those we judged (a claimer added one): then
        the old, earlier score stays. Whether the bucket is no longer due."""
        k = self.keys
        card = (yield [("WATCH", tk), ("SCARD", tk)])[1]
        if int(card) == 0:
            return (yield from self._commit([("ZREM", k.timers, bucket)])) is not None
        if earliest is not None and earliest > now and int(card) == kept:
            return (yield from self._commit([("ZADD", k.timers, earliest, bucket)])) is not None
        (yield from one(("UNWATCH",)))
        return False

    # -- requeue and purge ----------------------------------------------------------------------

    def requeue(self, source: str, ids: Sequence[str], limit: int, bucket_ms: int,
                cursor: str = "0") -> Op[Requeued]:
        k = self.keys
        for _ in range(ATTEMPTS):
            watch = [k.dead] if source == "dead" else []
            reads: list[Command] = []
            if not ids:
                reads.append(("LRANGE", k.dead, 0, limit - 1) if source == "dead"
                             else ("SSCAN", k.processing, cursor, "COUNT", limit))
            _, got = yield from self._open(self.waking_keys, reads, watch=watch)
            next_cursor = "0"
            if ids:
                todo = list(dict.fromkeys(ids))
            elif source == "dead":
                todo = [_text(x) for x in got[0]]
            else:
                next_cursor, todo = _text(got[0][0]), [_text(x) for x in got[0][1]]
            if not todo:
                (yield from one(("UNWATCH",)))
                return Requeued(0, 0, next_cursor)
            item_keys = [k.item(i) for i in todo]
            check: list[Command] = [("WATCH", *item_keys), *(("HMGET", key, "t", "d") for key in item_keys)]
            if source == "dead" and ids:
                check += [("LPOS", k.dead, i) for i in todo]
            elif source == "processing":
                check.append(("SMISMEMBER", k.processing, *todo))
            got = (yield check)
            self._raise_errors(check, got)
            fields = got[1 : len(todo) + 1]
            if source == "dead":
                present = [p is not None for p in got[len(todo) + 1 :]] if ids else [True] * len(todo)
            else:
                present = [p == 1 for p in got[-1]]
            tx: list[Command] = []
            moved: list[str] = []
            for i, f, p in zip(todo, fields, present):
                if not p:
                    continue
                if source == "dead" and ids:
                    tx.append(("LREM", k.dead, 1, i))
                if source == "processing":
                    tx.append(("SREM", k.processing, i))
                    tx += self._drop_timer(i, _int(f[1]), bucket_ms)
                if f[0] is not None and i not in moved:
                    moved.append(i)
                    tx.append(("HDEL", k.item(i), "r", "c", "d"))
            if source == "dead" and not ids:
                tx.insert(0, ("LTRIM", k.dead, len(todo), -1))
            if moved:
                tx += [("RPUSH", k.queue, *moved), ("SADD", k.items, *moved), *_signal(k.signal)]
            if not tx:
                (yield from one(("UNWATCH",)))
                return Requeued(0, len(todo), next_cursor)
            if (yield from self._commit(tx)) is not None:
                return Requeued(len(moved), len(todo), next_cursor)
        return Requeued(0, 0, cursor)

    def purge_step(self, source: str, limit: int, position: tuple[int, str], bucket_ms: int) -> Op[Purged]:
        for _ in range(ATTEMPTS):
            result = yield from self._purge_once(source, limit, position, bucket_ms)
            if result is not None:
                return result
        return Purged(0, position, False)

    def _purge_once(self, source: str, limit: int, position: tuple[int, str],
                    bucket_ms: int) -> Op[Purged | None]:
        k = self.keys
        if source == "waiting":
            # Take the ids as a claim does (so no claimer gets a message being deleted), then
            # delete what we own; a purge that dies midway leaves them in flight, not lost.
            got, deadline, _ = yield from self._claim_once(limit, PURGE_VISIBILITY_MS, bucket_ms, None, _Claim())
            if got:
                yield from self._commit([("SREM", k.processing, *got), ("SREM", k.timer(deadline // bucket_ms), *got),
                                         ("DEL", *(k.item(i) for i in got))])
            done = not got or (len(got) < limit and int((yield from one(("SCARD", k.items)))) == 0)
            return Purged(len(got), (0, "0"), done)
        if source == "dead":
            _, (ids,) = yield from self._open(self.state_keys, [("LRANGE", k.dead, 0, limit - 1)], watch=[k.dead])
            if not ids:
                (yield from one(("UNWATCH",)))
                return Purged(0, (0, "0"), True)
            tx: list[Command] = [("LTRIM", k.dead, len(ids), -1), ("DEL", *(k.item(_text(i)) for i in ids))]
            if (yield from self._commit(tx)) is None:
                return None
            return Purged(len(ids), (0, "0"), len(ids) < limit)
        if source == "processing":
            _, (ids,) = yield from self._open(self.state_keys, [("SRANDMEMBER", k.processing, limit)])
            todo = [_text(i) for i in ids]
            if not todo:
                return Purged(0, (0, "0"), True)
            item_keys = [k.item(i) for i in todo]
            got = (yield [("WATCH", *item_keys), *(("HGET", key, "d") for key in item_keys)])
            tx = [("SREM", k.processing, *todo), ("DEL", *item_keys)]
            for i, d in zip(todo, got[1:]):
                tx += self._drop_timer(i, _int(d), bucket_ms)
            if (yield from self._commit(tx)) is None:
                return None
            return Purged(len(todo), (0, "0"), len(todo) < limit)
        # delayed: ids in timer sets that are neither owned nor waiting, bucket by bucket
        offset, cursor = position
        _, (z,) = yield from self._open(self.state_keys, [("ZRANGE", k.timers, offset, offset)])
        if not z:
            return Purged(0, (offset, "0"), True)
        tk = k.timer(_text(z[0]))
        yield from self._types([tk])
        cur, members = (yield from one(("SSCAN", tk, cursor, "COUNT", min(limit, 1000),)))
        todo = [_text(i) for i in members]
        n = 0
        if todo:
            item_keys = [k.item(i) for i in todo]
            rep = (yield [("WATCH", *item_keys), *(("HEXISTS", key, "d") for key in item_keys),
                          ("SMISMEMBER", k.processing, *todo), ("SMISMEMBER", k.items, *todo)])
            has_d, held, waiting = rep[1 : len(todo) + 1], rep[-2], rep[-1]
            gone = [mid for mid, flags in zip(todo, zip(has_d, held, waiting)) if flags == (1, 0, 0)]
            if gone:
                if (yield from self._commit([("SREM", tk, *gone), ("DEL", *(k.item(i) for i in gone))])) is None:
                    return None
                n = len(gone)
            else:
                (yield from one(("UNWATCH",)))
        cursor = _text(cur)
        if cursor == "0" and not (yield from self._rescore(tk, _text(z[0]), None, -1, 0)):
            offset += 1  # the bucket still holds timers of messages in flight
        return Purged(n, (offset, cursor), False)

    # -- reading ---------------------------------------------------------------------------------

    def peek(self, source: str, count: int) -> Op[list[Fields]]:
        k = self.keys
        if count <= 0:
            yield from self._types(self.state_keys)
            return []
        if source in ("waiting", "dead"):
            key = k.queue if source == "waiting" else k.dead
            _, (ids,) = yield from self._open(self.state_keys, [("LRANGE", key, 0, count - 1)])
            ids = [_text(i) for i in ids]
            if source == "waiting" and ids:  # stale entries are not waiting messages
                flags = yield from one(("SMISMEMBER", k.items, *ids))
                ids = [i for i, w in zip(ids, flags) if w == 1]
        elif source == "processing":
            _, (ids,) = yield from self._open(self.state_keys, [("SORT", k.processing, "LIMIT", 0, count)])
            ids = [_text(i) for i in ids]
        else:
            ids = yield from self._delayed_ids(count)
        reads: list[Command] = [("HGETALL", k.item(i)) for i in ids]
        got = (yield reads)
        self._raise_errors(reads, got)
        return fields_list(ids, got)

    def _delayed_ids(self, count: int) -> Op[list[str]]:
        k = self.keys
        _, (buckets,) = yield from self._open(self.state_keys, [("ZRANGE", k.timers, 0, -1)])
        buckets = sorted(buckets, key=int)
        found: list[tuple[int, int, str]] = []
        for b in buckets:
            if len(found) >= count:
                break
            tk = k.timer(_text(b))
            yield from self._types([tk])
            members = yield from one(("SMEMBERS", tk))
            ids = [_text(i) for i in members]
            if not ids:
                continue
            got = (yield [*(("HGET", k.item(i), "d") for i in ids),
                          ("SMISMEMBER", k.processing, *ids), ("SMISMEMBER", k.items, *ids)])
            for i, d, p, w in zip(ids, got[: len(ids)], got[-2], got[-1]):
                if d is not None and not isinstance(d, ResponseError) and p == 0 and w == 0:
                    found.append((int(d), int(i), i))
        return [i for _, _, i in sorted(set(found))[:count]]

    def stats(self) -> Op[Counts]:
        k = self.keys
        now, (waiting, processing, buckets, head, dead) = yield from self._open(self.state_keys, [
            ("SCARD", k.items), ("SCARD", k.processing), ("ZRANGE", k.timers, 0, -1),
            ("LINDEX", k.queue, 0), ("LLEN", k.dead)])
        tks = [k.timer(_text(b)) for b in buckets]
        yield from self._types(tks)
        reads: list[Command] = [("SMEMBERS", tk) for tk in tks]
        if head is not None:
            reads.append(("HGET", k.item(_text(head)), "t"))
        got = (yield reads)
        self._raise_errors(reads, got)
        # Timer sets may hold stale entries here: count only ids that really are delayed.
        ids = sorted({_text(i) for members in got[: len(tks)] for i in members})
        delayed = 0
        if ids:
            flags = (yield [*(("HEXISTS", k.item(i), "d") for i in ids),
                            ("SMISMEMBER", k.processing, *ids), ("SMISMEMBER", k.items, *ids)])
            delayed = sum(1 for has, p, w in zip(flags[: len(ids)], flags[-2], flags[-1])
                          if has == 1 and p == 0 and w == 0)
        oldest = got[-1] if head is not None else None
        return Counts(int(waiting), int(processing), delayed, int(dead),
                      None if oldest is None else _int(oldest), now)
